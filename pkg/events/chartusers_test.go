package events_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nubes-io/nubes/pkg/events"
)

// TestChartNATSUsers runs each service's NATS work (streams, its
// publishes, its durable consumers with acks and heartbeats, the mailer's
// key-value bucket) as the NATS user the Helm chart renders for it, on a
// server configured with the chart's authorization block
// (testdata/chart-nats-users.conf, which test/helm keeps equal to the
// render), and checks that one service cannot read another's inbox, pull
// another's consumer, delete a stream or publish another's subject.
func TestChartNATSUsers(t *testing.T) {
	dir := t.TempDir()
	conf, err := os.ReadFile("testdata/chart-nats-users.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	main := "listen: 127.0.0.1:-1\njetstream {store_dir: \"" + filepath.Join(dir, "js") + "\"}\ninclude ./users.conf\n"
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	svcs := []string{"identity", "inventory", "monitoring", "cost-analysis", "notification", "mailer"}
	for _, s := range svcs {
		t.Setenv("NUBES_NATS_PASSWORD_"+strings.ToUpper(strings.ReplaceAll(s, "-", "_")), "pw-"+s)
	}
	opts, err := natsserver.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats did not start")
	}
	ctx := context.Background()
	bus := map[string]*events.Bus{}
	for _, s := range svcs {
		b, err := events.Connect(ctx, srv.ClientURL(), s, nil, events.WithUser("nubes-"+s, "pw-"+s))
		if err != nil || !b.Connected() {
			t.Fatalf("%s: %v", s, err)
		}
		defer b.Close()
		bus[s] = b
	}
	pubs := map[string][]string{"identity": {events.MailSubject, events.IdentityJobSubject},
		"inventory":     {events.InventoryTaskSubject, events.NotificationRequestSubject},
		"cost-analysis": {events.CostTaskSubject, events.NotificationRequestSubject},
		"monitoring":    {events.MonitoringEventSubject, events.NotificationRequestSubject},
		"notification":  {events.NotificationDeadSubject, events.NotificationDispatchSubject, events.MailSubject},
		"mailer":        {events.MailDeadSubject}}
	for s, subs := range pubs {
		for _, sub := range subs {
			if err := bus[s].Publish(ctx, sub, "id-"+s+sub, map[string]string{"x": "y"}); err != nil {
				t.Fatalf("%s publish %s: %v", s, sub, err)
			}
		}
	}
	type cons struct{ svc, stream, durable, filter string }
	for _, c := range []cons{{"identity", events.JobStream, events.IdentitySyncConsumer, events.IdentityJobSubject},
		{"inventory", events.InventoryTaskStream, events.InventoryTaskConsumer, events.InventoryTaskSubject},
		{"cost-analysis", events.JobStream, events.CostTaskConsumer, events.CostTaskSubject},
		{"notification", events.NotificationStream, events.NotificationConsumer, events.NotificationDispatchSubject},
		{"notification", events.NotificationStream, events.NotificationRequestConsumer, events.NotificationRequestSubject},
		{"mailer", events.MailStream, events.MailConsumer, events.MailSubject}} {
		got := make(chan struct{}, 1)
		cctx, cancel := context.WithCancel(ctx)
		spec := events.ConsumerSpec{Stream: c.stream, Consumer: jetstream.ConsumerConfig{Durable: c.durable, FilterSubject: c.filter, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second}}
		if c.svc == "mailer" {
			spec.Setup = func(ctx context.Context) error {
				kv, err := bus["mailer"].JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.MailSentBucket, History: 1, TTL: time.Hour, Storage: jetstream.FileStorage})
				if err != nil {
					return err
				}
				rev, err := kv.Create(ctx, "k1", []byte("sending"))
				if err != nil {
					return err
				}
				if _, err := kv.Get(ctx, "k1"); err != nil {
					return err
				}
				if rev, err = kv.Update(ctx, "k1", []byte("sending"), rev); err != nil {
					return err
				}
				if err := kv.Delete(ctx, "k1", jetstream.LastRevision(rev)); err != nil {
					return err
				}
				_, err = kv.Put(ctx, "k2", []byte("sent"))
				return err
			}
		}
		done := make(chan error, 1)
		go func() {
			done <- events.Consume(cctx, bus[c.svc], spec, 1, func(ctx context.Context, m jetstream.Msg) {
				if err := m.InProgress(); err != nil { // what Heartbeat sends
					t.Errorf("%s in progress: %v", c.svc, err)
				}
				if err := m.Ack(); err != nil {
					t.Errorf("%s ack: %v", c.svc, err)
				}
				select {
				case got <- struct{}{}:
				default:
				}
			})
		}()
		select {
		case <-got:
		case <-time.After(15 * time.Second): // bounds a failing test only
			t.Fatalf("%s %s got nothing", c.svc, c.durable)
		}
		cancel()
		<-done
	}
	// Negative: identity cannot read the mailer's inbox, nor pull the mailer's consumer.
	errs := make(chan error, 10)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("nubes-identity", "pw-identity"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, _ = nc.Subscribe(events.InboxPrefix("nubes-mailer")+".>", func(*nats.Msg) {})
	_ = nc.Publish("$JS.API.CONSUMER.MSG.NEXT.NUBES_MAIL.mailer", []byte(`{"batch":1}`))
	_ = nc.Publish("$JS.API.STREAM.DELETE.NUBES_MAIL", nil)
	_ = nc.Publish(events.InventoryTaskSubject, nil)
	_ = nc.Publish(events.NotificationDispatchSubject, nil)
	_ = nc.Publish("$JS.API.CONSUMER.MSG.NEXT.NUBES_NOTIFICATION.notification-request", []byte(`{"batch":1}`))
	_ = nc.Flush()
	for _, want := range []string{"Subscription to \"_INBOX.nubes-mailer.>\"", "Publish to \"$JS.API.CONSUMER.MSG.NEXT.NUBES_MAIL.mailer\"",
		"Publish to \"$JS.API.STREAM.DELETE.NUBES_MAIL\"", "Publish to \"nubes.inventory.task\"", "Publish to \"nubes.notification.dispatch\"",
		"Publish to \"$JS.API.CONSUMER.MSG.NEXT.NUBES_NOTIFICATION.notification-request\""} {
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), "Permissions Violation for "+want) {
				t.Fatalf("got %v, want a violation for %s", err, want)
			}
		case <-time.After(10 * time.Second): // bounds a failing test only
			t.Fatalf("identity was not refused: %s", want)
		}
	}
}
