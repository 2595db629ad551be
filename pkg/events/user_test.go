package events_test

import (
	"context"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/nubes-io/nubes/pkg/events"
)

// TestWithUser: against a NATS server that requires a user, the bus
// connects and creates its streams with the right password (their
// answers reach it although the user may subscribe only to its own
// inbox prefix), and is
// refused with a wrong one or none (Connect's bus then stays
// disconnected, retrying, as when NATS is down).
func TestWithUser(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		// Replies only under the user's own inbox prefix.
		Users: []*natsserver.User{{Username: "nubes-test", Password: "right", Permissions: &natsserver.Permissions{
			Publish:   &natsserver.SubjectPermission{Allow: []string{"$JS.API.STREAM.>"}},
			Subscribe: &natsserver.SubjectPermission{Allow: []string{events.InboxPrefix("nubes-test") + ".>"}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats did not start")
	}
	ctx := context.Background()
	bus, err := events.Connect(ctx, srv.ClientURL(), "test", nil, events.WithUser("nubes-test", "right"))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	if !bus.Connected() {
		t.Fatal("not connected with the right password")
	}
	if _, err := bus.JS.Stream(ctx, events.MailStream); err != nil {
		t.Fatalf("streams not created: %v", err)
	}

	for name, opt := range map[string]events.Option{
		"wrong password": events.WithUser("nubes-test", "wrong"),
		"no user":        events.WithUser("", ""),
	} {
		t.Run(name, func(t *testing.T) {
			bad, err := events.Connect(ctx, srv.ClientURL(), "test", nil, opt)
			if err == nil {
				defer bad.Close()
				if bad.Connected() {
					t.Fatal("connected")
				}
				return
			}
			if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
				t.Fatalf("want an authorization error, got %v", err)
			}
		})
	}
}
