package events

// The consumer side: one way for every worker to take messages from a
// durable JetStream consumer.
//
// Consume owns the plumbing and nothing else. It waits for NATS and the
// streams, creates (or updates) the durable consumer the caller
// describes, and runs workers that each pull one message at a time (so a
// busy replica leaves the next message to an idle one) and hand it to the
// caller's handler. Whether a message is acked, naked, termed or left to
// AckWait is the handler's decision, as are the consumer's policies
// (deliver, ack, max deliver), which the caller sets in ConsumerSpec.
//
// Nothing makes it spin: a failed pull pauses a second (less when NATS
// reconnects), a failed setup backs off up to 5 s, and both wake at once
// on a reconnect. A consumer that disappears under it (deleted, or lost
// with its stream) is set up again.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerSpec describes the durable consumer Consume reads.
type ConsumerSpec struct {
	// Stream is the stream the consumer belongs to (one of StreamConfigs).
	Stream string
	// Consumer is created or updated as given. Durable is required; the
	// policies (DeliverPolicy, AckPolicy, AckWait, MaxDeliver,
	// MaxAckPending) are the caller's.
	Consumer jetstream.ConsumerConfig
	// FetchWait bounds one pull (2 s when zero); a shutdown waits for the
	// pulls in flight, so it is also how long Consume may take to return
	// after ctx is done, besides the handlers still running.
	FetchWait time.Duration
	// Setup, when set, creates what the handler needs besides the consumer
	// (a key-value bucket). It runs after the streams and before the
	// consumer, every time the consumer is set up, and never while a
	// worker runs, so what it assigns is safe for the handler to read.
	Setup func(ctx context.Context) error
}

// Handler handles one message. ctx is the ctx given to Consume: once it
// is done the worker is shutting down, and a message the handler does not
// start should be handed back (msg.Nak) or left to AckWait.
type Handler func(ctx context.Context, msg jetstream.Msg)

// Consume consumes spec's durable consumer with workers goroutines (1
// when fewer), each pulling one message at a time and calling handle,
// until ctx is done. NATS being down, at start or later, only pauses it.
// It returns nil on shutdown, after every handler in progress returned,
// and an error only for a spec it cannot use.
func Consume(ctx context.Context, bus *Bus, spec ConsumerSpec, workers int, handle Handler) error {
	if bus == nil || spec.Stream == "" || spec.Consumer.Durable == "" || handle == nil {
		return errors.New("events: Consume needs a bus, a stream, a durable consumer name and a handler")
	}
	workers = max(workers, 1)
	if spec.FetchWait <= 0 {
		spec.FetchWait = 2 * time.Second
	}
	log := bus.log.With("stream", spec.Stream, "consumer", spec.Consumer.Durable)
	const minBackoff, maxBackoff = 200 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	failing := ""
	for {
		cons, err := bus.setupConsumer(ctx, spec)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if msg := err.Error(); msg != failing {
				log.Warn("consumer not ready; retrying", "error", msg)
				failing = msg
			}
			if !pause(ctx, backoff, bus) {
				return nil
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		if failing != "" {
			log.Info("consumer ready")
			failing = ""
		}
		backoff = minBackoff
		lost := runWorkers(ctx, bus, cons, spec.FetchWait, workers, handle, log.Debug)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("consumer lost; setting it up again", "error", lost.Error())
	}
}

// setupConsumer creates the streams, what spec.Setup creates, and the
// consumer, bounded by 10 s.
func (b *Bus) setupConsumer(ctx context.Context, spec ConsumerSpec) (jetstream.Consumer, error) {
	if !b.Connected() {
		return nil, errors.New("nats not connected")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.EnsureStreams(ctx); err != nil {
		return nil, err
	}
	if spec.Setup != nil {
		if err := spec.Setup(ctx); err != nil {
			return nil, err
		}
	}
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, spec.Stream, spec.Consumer)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		b.streamsOK.Store(false) // the stream vanished: create it on the next try
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", spec.Consumer.Durable, err)
	}
	return cons, nil
}

// runWorkers runs the pull loops until ctx is done (nil) or one of them
// finds the consumer gone (that error). Either way it returns once every
// loop, and so every handler, has returned.
func runWorkers(ctx context.Context, bus *Bus, cons jetstream.Consumer, wait time.Duration, workers int, handle Handler,
	debug func(string, ...any)) error {
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	var once sync.Once
	var lost error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for lctx.Err() == nil {
				batch, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
				if err == nil {
					// A message that arrives while shutting down still goes
					// to the handler, which decides what becomes of it.
					for msg := range batch.Messages() {
						handle(ctx, msg)
					}
					err = batch.Error()
				}
				if err == nil {
					continue
				}
				if consumerGone(err) {
					once.Do(func() { lost = err; stop() })
					return
				}
				debug("fetch failed", "error", err.Error())
				pause(lctx, time.Second, bus)
			}
		})
	}
	wg.Wait()
	return lost
}

// consumerGone reports whether a pull failed because the consumer is not
// there any more: nothing answers its pull subject, or the server says so.
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, nats.ErrNoResponders)
}

// pause waits d, less when NATS reconnects; false when ctx is done.
func pause(ctx context.Context, d time.Duration, bus *Bus) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-bus.Reconnected():
	case <-t.C:
	}
	return true
}

// Heartbeat tells JetStream every `every` (at least 10 ms) that msg is
// still being worked on (msg.InProgress), so a handler that runs longer
// than the consumer's AckWait keeps its message; AckWait/3 leaves room
// for a late beat. It beats until stop is called or ctx is done. stop
// returns once no beat can follow, so a handler calls it before it acks
// or naks; calling it again does nothing.
func Heartbeat(ctx context.Context, msg jetstream.Msg, every time.Duration) (stop func()) {
	every = max(every, 10*time.Millisecond)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-exited
	}
}
