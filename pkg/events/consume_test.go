package events_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
)

const testSubject = "nubes.job.test" // on JobStream

func testSpec(ackWait time.Duration) events.ConsumerSpec {
	return events.ConsumerSpec{Stream: events.JobStream, Consumer: jetstream.ConsumerConfig{
		Durable: "test", FilterSubject: testSubject, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	}, MaxDeliver: events.Unbounded, DeadLetter: func(context.Context, events.Dead) error { return nil }}
}

// startConsume runs events.Consume until the test ends (or stop is
// called) and fails the test when it returns an error.
func startConsume(t *testing.T, bus *events.Bus, spec events.ConsumerSpec, workers int, h events.Handler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- events.Consume(ctx, bus, spec, workers, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Consume: %v", err)
				}
			case <-time.After(patience):
				t.Errorf("Consume did not return %s after its context ended", patience)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func publish(t *testing.T, bus *events.Bus, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := bus.Publish(ctx, testSubject, id, map[string]string{"id": id}); err != nil {
			t.Fatal(err)
		}
	}
}

// deliveries counts the deliveries of each message id (Nats-Msg-Id).
type deliveries struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *deliveries) add(msg events.Delivery) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	id := msg.MsgID
	d.n[id]++
	return d.n[id]
}

func (d *deliveries) get() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.n))
	for k, v := range d.n {
		out[k] = v
	}
	return out
}

// Four workers hold four messages at once; each message is handled once.
func TestConsumeRunsWorkersAtOnce(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	const workers = 4
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	var seen deliveries
	startConsume(t, bus, testSpec(time.Minute), workers, func(ctx context.Context, msg events.Delivery) events.Outcome {
		seen.add(msg)
		cur := inFlight.Add(1)
		for {
			m := most.Load()
			if cur <= m || most.CompareAndSwap(m, cur) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
		return events.Done()
	})
	ids := make([]string, 2*workers)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d", i)
	}
	publish(t, bus, ids...)
	testkit.Eventually(t, patience, "4 messages handled at once", func() bool { return most.Load() == workers })
	close(release)
	testkit.Eventually(t, patience, "every message handled", func() bool { return len(seen.get()) == len(ids) })
	testkit.Eventually(t, patience, "every message acked", func() bool { return numAckPending(t, bus) == 0 && numPending(t, bus) == 0 })
	for id, k := range seen.get() {
		if k != 1 {
			t.Errorf("%s handled %d times", id, k)
		}
	}
	if got := most.Load(); got > workers {
		t.Errorf("%d handlers at once, more than %d workers", got, workers)
	}
}

func consumerInfo(t *testing.T, bus *events.Bus) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := bus.JS.Consumer(ctx, events.JobStream, "test")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func numAckPending(t *testing.T, bus *events.Bus) int { return consumerInfo(t, bus).NumAckPending }
func numPending(t *testing.T, bus *events.Bus) uint64 { return consumerInfo(t, bus).NumPending }

// NATS is down when Consume starts (so neither the streams nor the
// consumer exist yet): it waits, sets everything up once NATS comes, and
// rides out a restart of the server.
func TestConsumeWaitsForNATS(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	n.Stop()
	bus := connect(t, n.URL())
	if bus.Connected() {
		t.Fatal("connected to a stopped server")
	}
	var seen deliveries
	spec := testSpec(time.Minute)
	var setups atomic.Int32
	spec.Setup = func(context.Context) error { setups.Add(1); return nil }
	startConsume(t, bus, spec, 2, func(_ context.Context, msg events.Delivery) events.Outcome {
		seen.add(msg)
		return events.Done()
	})
	if got := setups.Load(); got != 0 {
		t.Fatalf("Setup ran %d times with NATS down", got)
	}
	n.Start()
	testkit.Eventually(t, patience, "bus connected", bus.Connected)
	testkit.Eventually(t, patience, "setup done", func() bool { return setups.Load() > 0 })
	publish(t, bus, "early")
	testkit.Eventually(t, patience, "message handled", func() bool { return seen.get()["early"] == 1 })
	if info := consumerInfo(t, bus); info.Config.FilterSubject != testSubject || info.Config.AckWait != time.Minute {
		t.Fatalf("consumer config %+v", info.Config)
	}

	n.Stop()
	testkit.Eventually(t, patience, "bus disconnected", func() bool { return !bus.Connected() })
	n.Start()
	testkit.Eventually(t, patience, "bus connected again", bus.Connected)
	testkit.Eventually(t, patience, "message published after the restart", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return bus.Publish(ctx, testSubject, "late", map[string]string{"id": "late"}) == nil
	})
	testkit.Eventually(t, patience, "message handled after the restart", func() bool { return seen.get()["late"] == 1 })
}

// A failing Setup is retried; the consumer is created only once it passes.
func TestConsumeRetriesSetup(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	var calls atomic.Int32
	spec := testSpec(time.Minute)
	spec.Setup = func(context.Context) error {
		if calls.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	}
	var seen deliveries
	startConsume(t, bus, spec, 1, func(_ context.Context, msg events.Delivery) events.Outcome {
		seen.add(msg)
		return events.Done()
	})
	publish(t, bus, "a")
	testkit.Eventually(t, patience, "message handled", func() bool { return seen.get()["a"] == 1 })
	if got := calls.Load(); got != 3 {
		t.Fatalf("Setup called %d times, want 3", got)
	}
}

// The consumer is deleted under Consume: it creates it again and goes on.
func TestConsumeRecreatesLostConsumer(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	var seen deliveries
	startConsume(t, bus, testSpec(time.Minute), 2, func(_ context.Context, msg events.Delivery) events.Outcome {
		seen.add(msg)
		return events.Done()
	})
	publish(t, bus, "before")
	testkit.Eventually(t, patience, "first message handled", func() bool { return seen.get()["before"] == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := bus.JS.DeleteConsumer(ctx, events.JobStream, "test"); err != nil {
		t.Fatal(err)
	}
	publish(t, bus, "after")
	testkit.Eventually(t, patience, "message handled by the new consumer", func() bool { return seen.get()["after"] == 1 })
}

// holdPastAckWait handles one message for three AckWaits on one of two
// workers (so a redelivery would reach the other one at once), with or
// without a heartbeat, and returns how many times it was delivered while
// held.
func holdPastAckWait(t *testing.T, heartbeat bool) int {
	const ackWait = time.Second
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	var seen deliveries
	held := make(chan struct{})
	redelivered := make(chan struct{}, 1)
	spec := testSpec(ackWait)
	spec.Heartbeat = heartbeat
	startConsume(t, bus, spec, 2, func(ctx context.Context, msg events.Delivery) events.Outcome {
		if seen.add(msg) > 1 {
			select {
			case redelivered <- struct{}{}:
			default:
			}
			return events.RetryAfter(time.Minute, errors.New("the first delivery still holds it"))
		}
		select {
		case <-time.After(3 * ackWait):
		case <-redelivered:
		}
		close(held)
		return events.Done()
	})
	publish(t, bus, "slow")
	select {
	case <-held:
	case <-time.After(patience):
		t.Fatal("the slow handler never ended")
	}
	return seen.get()["slow"]
}

func TestHeartbeatKeepsSlowMessage(t *testing.T) {
	if got := holdPastAckWait(t, true); got != 1 {
		t.Fatalf("delivered %d times while its handler ran with a heartbeat, want 1", got)
	}
}

// The control: without the heartbeat the same handler loses its message.
func TestWithoutHeartbeatSlowMessageIsRedelivered(t *testing.T) {
	if got := holdPastAckWait(t, false); got < 2 {
		t.Fatalf("delivered %d times while its handler ran past AckWait without a heartbeat, want 2 or more", got)
	}
}

// Heartbeat's stop returns once no beat can follow and may be called twice.
func TestHeartbeatStops(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	// The message pulled by hand, as Consume pulls it.
	cons, err := bus.JS.CreateOrUpdateConsumer(ctx, events.JobStream, testSpec(time.Minute).Consumer)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, bus, "beat")
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(patience))
	if err != nil {
		t.Fatal(err)
	}
	msg, ok := <-batch.Messages()
	if !ok {
		t.Fatalf("no message: %v", batch.Error())
	}
	stop := events.Heartbeat(context.Background(), msg, 10*time.Millisecond)
	stop()
	stop()
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, patience, "message acked", func() bool { return numAckPending(t, bus) == 0 })
}

// Cancelling ctx ends Consume with nil, after the handler in progress
// returned; the handler sees its ctx done.
func TestConsumeShutdown(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	started := make(chan struct{})
	var first sync.Once
	var finished, sawCancel atomic.Bool
	stop := startConsume(t, bus, testSpec(time.Minute), 3, func(ctx context.Context, msg events.Delivery) events.Outcome {
		// The nak below may reach another worker whose pull was in flight.
		first.Do(func() { close(started) })
		<-ctx.Done()
		sawCancel.Store(true)
		time.Sleep(100 * time.Millisecond) // still running when Consume is asked to stop
		finished.Store(true)
		return events.RetryAfter(0, ctx.Err())
	})
	publish(t, bus, "in-flight")
	select {
	case <-started:
	case <-time.After(patience):
		t.Fatal("handler not started")
	}
	stop() // fails the test unless Consume returns nil
	if !sawCancel.Load() || !finished.Load() {
		t.Fatalf("Consume returned before its handler: saw cancel %v, finished %v", sawCancel.Load(), finished.Load())
	}
}

// A spec Consume cannot use is refused at once, and no consumer is made.
func TestConsumeRefusesBadSpec(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	ok := testSpec(time.Minute)
	noStream, noDurable := ok, ok
	noStream.Stream = ""
	noDurable.Consumer.Durable = ""
	h := func(context.Context, events.Delivery) events.Outcome { return events.Done() }
	for name, c := range map[string]struct {
		bus  *events.Bus
		spec events.ConsumerSpec
		h    events.Handler
	}{
		"no bus": {nil, ok, h}, "no stream": {bus, noStream, h}, "no durable": {bus, noDurable, h}, "no handler": {bus, ok, nil},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		err := events.Consume(ctx, c.bus, c.spec, 1, c.h)
		cancel()
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := bus.JS.Stream(ctx, events.JobStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Consumers != 0 {
		t.Fatalf("consumers after refused specs: %v, %v", info, err)
	}
}
