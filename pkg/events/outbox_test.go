package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// patience bounds every wait: generous, for the race detector on a busy
// machine (in-process FerretDB is instrumented too); a passing run takes
// a fraction of it.
const patience = 60 * time.Second

// Each test runs its own NATS server (testkit.StartNATS): the streams have
// fixed names, and a test counts what is in them.

func connect(t *testing.T, url string) *events.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := events.Connect(ctx, url, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.NC.Close)
	return b
}

func newOutbox(t *testing.T, bus *events.Bus, coll string) *events.Outbox {
	t.Helper()
	o, err := events.NewOutboxWith(context.Background(), testkit.Get().Database(t), coll, bus,
		slog.New(slog.DiscardHandler), events.OutboxOptions{Poll: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// runRelay runs o.Run until the test ends.
func runRelay(t *testing.T, o *events.Outbox) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
}

// streamMails returns the mails stored in MailStream, by Nats-Msg-Id.
func streamMails(t *testing.T, b *events.Bus) map[string][]events.Mail {
	t.Helper()
	out := map[string][]events.Mail{}
	for _, msg := range streamMsgs(t, b, events.MailStream) {
		var m events.Mail
		if err := json.Unmarshal(msg.Data, &m); err != nil {
			t.Fatal(err)
		}
		id := msg.Header.Get(jetstream.MsgIDHeader)
		if id != m.ID {
			t.Fatalf("Nats-Msg-Id %q, mail id %q", id, m.ID)
		}
		out[id] = append(out[id], m)
	}
	return out
}

// streamMsgs returns every message of a stream, in order.
func streamMsgs(t *testing.T, b *events.Bus, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := b.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		msg, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, msg)
	}
	return out
}

func pending(t *testing.T, o *events.Outbox) int64 {
	t.Helper()
	n, err := o.Pending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOutboxRelaysEachMailOnce(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	o := newOutbox(t, bus, "outbox")
	ctx := context.Background()

	if err := o.Enqueue(ctx, events.Mail{ID: "mail-000000000001", To: "a@example.com", Template: "invite", Data: map[string]string{"link": "x"}}); err != nil {
		t.Fatal(err)
	}
	// The same id again (a retried operation) is a no-op.
	if err := o.Enqueue(ctx, events.Mail{ID: "mail-000000000001", To: "a@example.com", Template: "invite"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Enqueue(ctx, events.Mail{To: "b@example.com", Template: "mfa_code", Data: map[string]string{"code": "123456"}}); err != nil {
		t.Fatal(err)
	}
	if got := pending(t, o); got != 2 {
		t.Fatalf("pending %d, want 2", got)
	}
	runRelay(t, o)
	testkit.Eventually(t, patience, "outbox drained", func() bool { return pending(t, o) == 0 })

	mails := streamMails(t, bus)
	if len(mails) != 2 {
		t.Fatalf("stream holds %d ids, want 2: %v", len(mails), mails)
	}
	for id, ms := range mails {
		if len(ms) != 1 {
			t.Errorf("%s stored %d times", id, len(ms))
		}
		if !events.ValidID(id) {
			t.Errorf("bad id %q", id)
		}
	}
	if m := mails["mail-000000000001"]; len(m) != 1 || m[0].Data["link"] != "x" {
		t.Errorf("first enqueue not kept: %+v", m)
	}
}

func TestOutboxRefusesBadEvents(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	o := newOutbox(t, connect(t, n.URL()), "outbox")
	ctx := context.Background()
	for _, id := range []string{"../etc/passwd", "a b", "mail.1", "-x", string(make([]byte, 200))} {
		if err := o.Enqueue(ctx, events.Mail{ID: id, To: "a@example.com"}); err == nil {
			t.Errorf("id %q accepted", id)
		}
	}
	big := map[string]string{"body": string(make([]byte, events.MaxEventSize))}
	if err := o.Enqueue(ctx, events.Mail{To: "a@example.com", Data: big}); err == nil {
		t.Error("oversized event accepted")
	}
	if got := pending(t, o); got != 0 {
		t.Fatalf("pending %d, want 0", got)
	}
}

// NATS goes away after start: Enqueue still succeeds (the operation does),
// and the mails go out once NATS is back on the same port.
func TestOutboxRelayWaitsForNATS(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	o := newOutbox(t, bus, "outbox")
	runRelay(t, o)
	ctx := context.Background()

	if err := o.Enqueue(ctx, events.Mail{ID: "mail-before", To: "a@example.com"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, patience, "first mail relayed", func() bool { return pending(t, o) == 0 })

	n.Stop()
	testkit.Eventually(t, patience, "bus disconnected", func() bool { return !bus.Connected() })
	for i := range 5 {
		if err := o.Enqueue(ctx, events.Mail{ID: fmt.Sprintf("mail-down-%d", i), To: "a@example.com"}); err != nil {
			t.Fatalf("enqueue with NATS down: %v", err)
		}
	}
	if got := pending(t, o); got != 5 {
		t.Fatalf("pending %d with NATS down, want 5", got)
	}

	n.Start()
	testkit.Eventually(t, patience, "outbox drained after NATS returned", func() bool { return pending(t, o) == 0 })
	mails := streamMails(t, bus)
	if len(mails) != 6 {
		t.Fatalf("stream holds %d ids, want 6: %v", len(mails), mails)
	}
	for id, ms := range mails {
		if len(ms) != 1 {
			t.Errorf("%s stored %d times", id, len(ms))
		}
	}
}

// NATS is down when the service starts: Connect does not fail, and the
// streams are created once NATS comes up.
func TestConnectWhileNATSIsDown(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	n.Stop()
	bus := connect(t, n.URL())
	if bus.Connected() {
		t.Fatal("connected to a stopped server")
	}
	o := newOutbox(t, bus, "outbox")
	if err := o.Enqueue(context.Background(), events.Mail{ID: "mail-early", To: "a@example.com"}); err != nil {
		t.Fatal(err)
	}
	runRelay(t, o)
	n.Start()
	testkit.Eventually(t, patience, "outbox drained", func() bool { return pending(t, o) == 0 })
	if mails := streamMails(t, bus); len(mails["mail-early"]) != 1 {
		t.Fatalf("stream: %v", mails)
	}
}

// Several replicas relay the same collection: every mail is stored once.
func TestOutboxReplicas(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	db := testkit.Get().Database(t)
	var outboxes []*events.Outbox
	var buses []*events.Bus
	for range 3 {
		buses = append(buses, connect(t, n.URL()))
		o, err := events.NewOutboxWith(context.Background(), db, "outbox", buses[len(buses)-1],
			slog.New(slog.DiscardHandler), events.OutboxOptions{Poll: 50 * time.Millisecond, Batch: 7})
		if err != nil {
			t.Fatal(err)
		}
		outboxes = append(outboxes, o)
	}
	const total = 40
	var wg sync.WaitGroup
	for i := range total {
		wg.Go(func() {
			o := outboxes[i%len(outboxes)]
			if err := o.Enqueue(context.Background(), events.Mail{ID: fmt.Sprintf("mail-r%03d", i), To: "a@example.com"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, o := range outboxes {
		runRelay(t, o)
	}
	testkit.Eventually(t, patience, "outbox drained", func() bool { return pending(t, outboxes[0]) == 0 })
	mails := streamMails(t, buses[0])
	if len(mails) != total {
		t.Fatalf("stream holds %d ids, want %d", len(mails), total)
	}
	for id, ms := range mails {
		if len(ms) != 1 {
			t.Errorf("%s stored %d times", id, len(ms))
		}
	}
}

func TestBusPublishDedupes(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	ctx := context.Background()
	m := events.Mail{ID: "mail-dup", To: "a@example.com"}
	for range 3 {
		if err := bus.Publish(ctx, events.MailSubject, m.ID, m); err != nil {
			t.Fatal(err)
		}
	}
	if mails := streamMails(t, bus); len(mails["mail-dup"]) != 1 {
		t.Fatalf("stream: %v", mails)
	}
}

// TestStreamReplicas: the configured replica count reaches the server. A
// single server stores each stream once and refuses more.
func TestStreamReplicas(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{events.MailStream, events.MailDeadStream, events.JobStream} {
		s, err := bus.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 1 {
			t.Fatalf("%s has %d replicas, want 1", name, r)
		}
	}
	if b, err := events.Connect(ctx, n.URL(), "test", slog.New(slog.DiscardHandler), events.WithReplicas(3)); err == nil {
		b.NC.Close()
		t.Fatal("a single NATS server accepted streams with 3 replicas")
	}
}
