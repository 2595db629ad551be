package user_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
)

// deletionsOf reads every deletion of userID in domainID the stream
// holds.
func deletionsOf(t *testing.T, h *identitytest.Harness, domainID, userID string) []events.Deleted {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Deps.Bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err := h.Deps.Bus.JS.OrderedConsumer(ctx, events.DeletedStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Deleted
	for range info.NumPending {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var d events.Deleted
		if err := json.Unmarshal(msg.Data(), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == events.DeletedUser && d.DomainID == domainID && d.UserID == userID {
			out = append(out, d)
		}
	}
	return out
}

// TestUserDeletePublishesOnce: a user's delete publishes its deletion
// (events.Deleted) for the other services, once, even when the delete
// failed half-way and was retried; the same id created again and deleted
// again is a second deletion (issue 38).
func TestUserDeletePublishesOnce(t *testing.T) {
	h := identitytest.New(t, grants)
	const uid = "published"
	create := func() {
		h.Admin.Call("/identity/v2/user/create", map[string]any{"user_id": uid, "auth_type": "LOCAL", "password": "Publish-Passw0rd1"}).OK(nil)
		h.Admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": uid, "domain_id": h.Domain}).OK(nil)
	}
	create()
	restore := store.FailChildDeletes(core.APIKeysCollection)
	h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": uid}).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	restore()
	h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": uid}).OK(nil)
	wait := func(n int) []events.Deleted {
		var got []events.Deleted
		// Fewer than n at the bound: the caller's check says so.
		_ = testkit.Within(time.Minute, func() bool { got = deletionsOf(t, h, h.Domain, uid); return len(got) >= n })
		return got
	}
	first := wait(1)
	if len(first) != 1 || first[0].Check() != nil {
		t.Fatalf("deletions after a delete retried once: %+v, want one", first)
	}
	create()
	h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": uid}).OK(nil)
	both := wait(2)
	if len(both) != 2 || both[0].ID == both[1].ID {
		t.Fatalf("deletions of two lives of %s: %+v, want two with their own ids", uid, both)
	}
}
