package events_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// deadLetters keeps the dead letters of a test; fail makes the first
// fail writes fail.
type deadLetters struct {
	mu    sync.Mutex
	fail  int
	tries int
	kept  []events.Dead
}

func (l *deadLetters) keep(_ context.Context, d events.Dead) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tries++
	if l.tries <= l.fail {
		return errors.New("the dead letter's store is down")
	}
	l.kept = append(l.kept, d)
	return nil
}

func (l *deadLetters) get() []events.Dead {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]events.Dead(nil), l.kept...)
}

// outcomeSpec bounds deliveries at 3 and keeps dead letters in l.
func outcomeSpec(l *deadLetters) events.ConsumerSpec {
	spec := testSpec(time.Minute)
	spec.MaxDeliver, spec.DeadLetter = 3, l.keep
	return spec
}

// idle: nothing pending or unacknowledged on the test consumer.
func idle(t *testing.T, bus *events.Bus) func() bool {
	return func() bool { return numAckPending(t, bus) == 0 && numPending(t, bus) == 0 }
}

// Each outcome as the kit acts on it: Done acks; RetryAfter delivers
// again after its delay and counts the attempt; Poison dead-letters at
// once; a RetryAfter on the last delivery the bound allows dead-letters
// with the cause. A dead-lettered message is settled: nothing pending.
func TestConsumeOutcomes(t *testing.T) {
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	var l deadLetters
	var seen deliveries
	var mu sync.Mutex
	attempts := map[string][]events.Delivery{}
	startConsume(t, bus, outcomeSpec(&l), 2, func(_ context.Context, d events.Delivery) events.Outcome {
		seen.add(d)
		mu.Lock()
		attempts[d.MsgID] = append(attempts[d.MsgID], d)
		mu.Unlock()
		switch d.MsgID {
		case "done":
			return events.Done()
		case "flaky": // fails once, then passes
			if d.Attempt == 1 {
				return events.RetryAfter(50*time.Millisecond, errors.New("store down"))
			}
			return events.Done()
		case "poison":
			return events.Poison("does not decode")
		default: // "hopeless": always a passing failure
			return events.RetryAfter(10*time.Millisecond, errors.New("plugin unreachable"))
		}
	})
	publish(t, bus, "done", "flaky", "poison", "hopeless")
	testkit.Eventually(t, patience, "two dead letters", func() bool { return len(l.get()) == 2 })
	testkit.Eventually(t, patience, "every message settled", idle(t, bus))
	got := seen.get()
	if got["done"] != 1 || got["flaky"] != 2 || got["poison"] != 1 || got["hopeless"] != 3 {
		t.Fatalf("deliveries %v: want done 1, flaky 2, poison 1, hopeless 3 (the bound)", got)
	}
	dead := map[string]events.Dead{}
	for _, d := range l.get() {
		dead[d.MsgID] = d
	}
	if d := dead["poison"]; d.Reason != "does not decode" || d.Attempt != 1 || d.Consumer != "test" || d.Stream != events.JobStream || !strings.Contains(string(d.Data), "poison") {
		t.Errorf("poison's dead letter %+v", d)
	}
	if d := dead["hopeless"]; d.Reason != "gave up after 3 deliveries: plugin unreachable" || d.Attempt != 3 || d.StreamSeq == 0 {
		t.Errorf("the bound's dead letter %+v", d)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, d := range attempts["hopeless"] {
		if d.Attempt != i+1 || d.Last != (i == 2) {
			t.Errorf("hopeless delivery %d: attempt %d, last %v", i+1, d.Attempt, d.Last)
		}
	}
	if f := attempts["flaky"]; f[1].Attempt != 2 || f[1].Last {
		t.Errorf("flaky's second delivery %+v", f[1])
	}
}

// A dead letter that cannot be kept yet is not lost: the message comes
// again, past the bound, until its dead letter is kept.
func TestDeadLetterKeptEventually(t *testing.T) {
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	l := deadLetters{fail: 2}
	var seen deliveries
	startConsume(t, bus, outcomeSpec(&l), 1, func(_ context.Context, d events.Delivery) events.Outcome {
		seen.add(d)
		return events.Poison("refused for good")
	})
	publish(t, bus, "doomed")
	testkit.Eventually(t, patience, "the dead letter kept", func() bool { return len(l.get()) == 1 })
	testkit.Eventually(t, patience, "the message settled", idle(t, bus))
	if got := seen.get()["doomed"]; got != 3 {
		t.Fatalf("%d deliveries, want 3 (two dead letters not kept, the third kept)", got)
	}
	if d := l.get()[0]; d.Attempt != 3 || d.Reason != "refused for good" {
		t.Fatalf("dead letter %+v", d)
	}
}

// A consumer must say its bound and where its dead letters go, and the
// bound is the kit's alone.
func TestConsumeRefusesUnsettledSpecs(t *testing.T) {
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	var l deadLetters
	noBound, serverBound, noDead := outcomeSpec(&l), outcomeSpec(&l), outcomeSpec(&l)
	noBound.MaxDeliver = 0
	serverBound.Consumer.MaxDeliver = 5
	noDead.DeadLetter = nil
	h := func(context.Context, events.Delivery) events.Outcome { return events.Done() }
	for name, spec := range map[string]events.ConsumerSpec{"no bound": noBound, "the server's bound": serverBound, "no dead letter": noDead} {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		err := events.Consume(ctx, bus, spec, 1, h)
		cancel()
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// DeadRecords keeps one document per message, however often it is
// written (a terminate lost after the record was kept).
func TestDeadRecords(t *testing.T) {
	c := testkit.Get().Database(t).Collection("svc_dead_letters")
	keep := events.DeadRecords(c)
	d := events.Dead{Delivery: events.Delivery{Data: []byte(`{"x":1}`), Subject: "nubes.job.test", MsgID: "m-1", Attempt: 4, StreamSeq: 17,
		Published: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, Stream: events.JobStream, Consumer: "svc-test", Reason: "gave up"}
	ctx := context.Background()
	for range 2 {
		if err := keep(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	var recs []events.DeadRecord
	cur, err := c.Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(ctx, &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	if r.ID != "svc-test:"+events.JobStream+":17" || r.MsgID != "m-1" || r.Deliveries != 4 || r.Reason != "gave up" || r.Data != `{"x":1}` ||
		r.Subject != "nubes.job.test" || !r.Published.Equal(d.Published) || r.FailedAt.IsZero() {
		t.Fatalf("record %+v", r)
	}
}
