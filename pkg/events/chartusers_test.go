package events_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
	svcs := []string{"identity", "inventory", "monitoring", "cost-analysis", "notification", "mailer", "secret", "dashboard", "config"}
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
	// A mail stream made before it was a work queue (limits retention):
	// the mailer deletes each mail it is done with from it.
	old, err := nats.Connect(srv.ClientURL(), nats.UserInfo("nubes-identity", "pw-identity"), nats.CustomInboxPrefix(events.InboxPrefix("nubes-identity")))
	if err != nil {
		t.Fatal(err)
	}
	oldJS, _ := jetstream.New(old)
	if _, err := oldJS.CreateStream(ctx, jetstream.StreamConfig{Name: events.MailStream, Subjects: []string{events.MailSubject}}); err != nil {
		t.Fatalf("the pre-existing mail stream: %v", err)
	}
	old.Close()
	bus := map[string]*events.Bus{}
	for _, s := range svcs {
		// As the binaries connect (pkg/app): creating and updating only
		// the streams the service owns.
		owned, ok := events.OwnedStreams(s)
		if !ok {
			t.Fatalf("%s owns no stream", s)
		}
		b, err := events.Connect(ctx, srv.ClientURL(), s, nil, events.WithUser("nubes-"+s, "pw-"+s), events.WithStreams(owned...))
		if err != nil || !b.Connected() {
			t.Fatalf("%s: %v", s, err)
		}
		defer b.Close()
		bus[s] = b
	}
	pubs := map[string][]string{"identity": {events.MailSubject, events.IdentityJobSubject, events.DeletedSubject},
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
	deletions := []cons{}
	for _, s := range []string{"inventory", "cost-analysis", "monitoring", "notification", "secret", "dashboard", "config"} {
		deletions = append(deletions, cons{s, events.DeletedStream, events.DeletedConsumer(s), events.DeletedSubject})
	}
	for _, c := range append(deletions, []cons{{"identity", events.JobStream, events.IdentitySyncConsumer, events.IdentityJobSubject},
		{"inventory", events.InventoryTaskStream, events.InventoryTaskConsumer, events.InventoryTaskSubject},
		{"cost-analysis", events.JobStream, events.CostTaskConsumer, events.CostTaskSubject},
		{"notification", events.NotificationStream, events.NotificationConsumer, events.NotificationDispatchSubject},
		{"notification", events.NotificationStream, events.NotificationRequestConsumer, events.NotificationRequestSubject},
		{"mailer", events.MailStream, events.MailConsumer, events.MailSubject}}...) {
		// Each consumer waits for every message published on its
		// subject: the mailer's check below needs each mail deleted, not
		// the first (two services publish mail).
		want := 0
		for _, subs := range pubs {
			if slices.Contains(subs, c.filter) {
				want++
			}
		}
		got := make(chan struct{}, 16)
		cctx, cancel := context.WithCancel(ctx)
		// Heartbeat: the kit's InProgress goes through the same ack subject.
		spec := events.ConsumerSpec{Stream: c.stream, Consumer: jetstream.ConsumerConfig{Durable: c.durable, FilterSubject: c.filter, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second},
			MaxDeliver: 3, Heartbeat: true, DeadLetter: func(_ context.Context, d events.Dead) error {
				t.Errorf("%s dead-lettered %s: %s", c.svc, d.MsgID, d.Reason)
				return nil
			}}
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
		if c.svc == "mailer" { // as the mailer's forget does, once the mail is acked
			spec.Settled = func(ctx context.Context, m events.Delivery) {
				st, err := bus["mailer"].JS.Stream(ctx, events.MailStream)
				if err != nil {
					t.Errorf("mailer binds to the mail stream: %v", err)
					return
				}
				if err := st.DeleteMsg(ctx, m.StreamSeq); err != nil {
					t.Errorf("mailer deletes a sent mail: %v", err)
				}
			}
		}
		done := make(chan error, 1)
		go func() {
			done <- events.Consume(cctx, bus[c.svc], spec, 1, func(ctx context.Context, m events.Delivery) events.Outcome {
				select {
				case got <- struct{}{}:
				default:
				}
				return events.Done()
			})
		}()
		bound := time.After(15 * time.Second) // bounds a failing test only
		for n := range want {
			select {
			case <-got:
			case <-bound:
				t.Fatalf("%s %s got %d of %d", c.svc, c.durable, n, want)
			}
		}
		cancel()
		<-done
	}
	st, err := bus["mailer"].JS.Stream(ctx, events.MailStream)
	if err != nil {
		t.Fatal(err)
	}
	// A limits stream keeps acked messages: none left means the mailer
	// deleted each.
	if info, err := st.Info(ctx); err != nil || info.State.LastSeq == 0 || info.State.Msgs != 0 {
		t.Fatalf("sent mails left in the pre-existing mail stream: %v %+v", err, info.State)
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
	_ = nc.Publish("$JS.API.STREAM.UPDATE.NUBES_INVENTORY_TASKS", nil)
	_ = nc.Publish("$JS.API.STREAM.MSG.DELETE.NUBES_MAIL", nil)
	_ = nc.Publish(events.InventoryTaskSubject, nil)
	_ = nc.Publish(events.NotificationDispatchSubject, nil)
	_ = nc.Publish("$JS.API.CONSUMER.MSG.NEXT.NUBES_NOTIFICATION.notification-request", []byte(`{"batch":1}`))
	_ = nc.Flush()
	for _, want := range []string{"Subscription to \"_INBOX.nubes-mailer.>\"", "Publish to \"$JS.API.CONSUMER.MSG.NEXT.NUBES_MAIL.mailer\"",
		"Publish to \"$JS.API.STREAM.DELETE.NUBES_MAIL\"", "Publish to \"$JS.API.STREAM.UPDATE.NUBES_INVENTORY_TASKS\"",
		"Publish to \"$JS.API.STREAM.MSG.DELETE.NUBES_MAIL\"", "Publish to \"nubes.inventory.task\"", "Publish to \"nubes.notification.dispatch\"",
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

// TestChartStreamOwners: in the chart's NATS users, a user may create and
// update exactly the streams its service owns in code (OwnedStreams),
// read every stream's info, and delete single messages only where the
// mailer must (the mail stream).
func TestChartStreamOwners(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile("testdata/chart-nats-users.conf")
	if err != nil {
		t.Fatal(err)
	}
	users := regexp.MustCompile(`user:\s*"nubes-([^"]+)"[\s\S]*?publish:\s*\{allow:\s*\[([^\]]*)\]`).FindAllStringSubmatch(string(conf), -1)
	if len(users) != 9 {
		t.Fatalf("%d users read", len(users))
	}
	var all []string
	for _, sc := range events.StreamConfigs(1) {
		all = append(all, sc.Name)
	}
	for _, u := range users {
		svc, allow := u[1], u[2]
		var changes, infos, deletes []string
		for _, m := range regexp.MustCompile(`"\$JS\.API\.STREAM\.([A-Z.]+)\.([A-Z_]+)"`).FindAllStringSubmatch(allow, -1) {
			switch m[1] {
			case "CREATE":
				changes = append(changes, m[2])
			case "UPDATE":
				if !slices.Contains(changes, m[2]) {
					t.Errorf("%s may update %s without creating it", svc, m[2])
				}
			case "INFO":
				infos = append(infos, m[2])
			case "MSG.DELETE":
				deletes = append(deletes, m[2])
			default:
				t.Errorf("%s may %s %s", svc, m[1], m[2])
			}
		}
		owned, _ := events.OwnedStreams(svc)
		if !slices.Equal(sorted(changes), sorted(owned)) {
			t.Errorf("%s may create %v; it owns %v", svc, changes, owned)
		}
		if !slices.Equal(sorted(infos), sorted(all)) {
			t.Errorf("%s may read the info of %v, want every stream", svc, infos)
		}
		if want := map[string][]string{"mailer": {events.MailStream}}[svc]; !slices.Equal(deletes, want) {
			t.Errorf("%s may delete messages of %v, want %v", svc, deletes, want)
		}
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
