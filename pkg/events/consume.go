package events

// The consumer side: one way for every worker to take messages from a
// durable JetStream consumer, and one place that settles them.
//
// Consume waits for NATS and the streams, creates (or updates) the
// durable consumer the caller describes, and runs workers that each pull
// one message at a time (so a busy replica leaves the next message to an
// idle one) and hand it to the caller's handler as a Delivery: the data
// and where it stands, never the message itself. The handler answers
// what happened (an Outcome) and Consume alone acts on it:
//
//   - Done: acked (and confirmed by the server).
//   - RetryAfter(d, cause): a passing failure, delivered again after d
//     (NakWithDelay). At the spec's MaxDeliver the message is dead-lettered
//     instead ("gave up after N deliveries: cause"); during a shutdown it
//     is handed back at once (Nak), to this or another replica.
//   - Poison(reason): it never will succeed: dead-lettered now.
//
// A dead letter is written by the spec's DeadLetter (DeadRecords: a
// record in the service's own database; the mailer and notification
// write their own dead-letter streams) and the message is terminated
// only once it is kept; a dead letter that cannot be written yet is tried
// again after a pause, so nothing given up on is lost. JetStream's own
// MaxDeliver is unbounded: the bound is Consume's, counted on the
// server's delivery count, so a redelivery after AckWait counts too.
// While a handler runs, Consume beats (InProgress every AckWait/3) when
// the spec asks for it, so long work keeps its message.
//
// Nothing makes it spin: a failed pull pauses a second (less when NATS
// reconnects), a failed setup backs off up to 5 s, and both wake at once
// on a reconnect. A consumer that disappears under it (deleted, or lost
// with its stream) is set up again.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerSpec describes the durable consumer Consume reads.
type ConsumerSpec struct {
	// Stream is the stream the consumer belongs to (one of StreamConfigs).
	Stream string
	// Consumer is created or updated as given, but for MaxDeliver, which
	// is Consume's (leave it 0: the server's is set unbounded). Durable
	// is required; DeliverPolicy, AckPolicy, AckWait and MaxAckPending
	// are the caller's.
	Consumer jetstream.ConsumerConfig
	// MaxDeliver is how many deliveries a message gets: a RetryAfter on
	// the last one dead-letters it. Unbounded for work whose own deadline
	// ends it (a job's timeout) or that must finish (a deletion); 0 is
	// refused, so that every consumer says which it is.
	MaxDeliver int
	// DeadLetter keeps a message given up on (required).
	DeadLetter DeadLetter
	// Heartbeat: while a handler runs, tell JetStream every AckWait/3
	// that its message is being worked on, so a handler that runs past
	// AckWait keeps it.
	Heartbeat bool
	// Settled, when set, runs after a message was acked or terminated
	// (not after a retry): what the service does once it is done with a
	// message (the mailer deletes a sent mail from an old stream).
	Settled func(ctx context.Context, d Delivery)
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

// Unbounded is a ConsumerSpec.MaxDeliver without bound.
const Unbounded = -1

// Delivery is one message in hand, as a handler sees it: its payload and
// where it stands, never the means to settle it.
type Delivery struct {
	Data    []byte
	Subject string
	MsgID   string // its Nats-Msg-Id
	// Attempt counts this message's deliveries, 1 on the first (a
	// redelivery after AckWait counts too).
	Attempt int
	// Last: the bound allows no further delivery, so a RetryAfter now
	// dead-letters the message (never true when Unbounded).
	Last      bool
	StreamSeq uint64    // its sequence in the stream
	Published time.Time // when the stream stored it
}

// Handler handles one delivery and says what happened. ctx is the ctx
// given to Consume: once it is done the worker is shutting down, and a
// handler that stops early answers RetryAfter (Consume hands the
// message back at once).
type Handler func(ctx context.Context, d Delivery) Outcome

// Outcome is what became of a delivery: Done, RetryAfter or Poison.
type Outcome struct {
	kind   outcomeKind
	delay  time.Duration
	cause  error
	reason string
}

type outcomeKind int

const (
	done outcomeKind = iota
	retry
	poison
)

// Done: the message is handled (or there is nothing to do): acked.
func Done() Outcome { return Outcome{kind: done} }

// RetryAfter: a passing failure (cause); the message comes again after d,
// unless this was its last delivery (then it is dead-lettered).
func RetryAfter(d time.Duration, cause error) Outcome {
	if cause == nil {
		cause = errors.New("retried")
	}
	return Outcome{kind: retry, delay: max(d, 0), cause: cause}
}

// Poison: the message can never succeed (it does not decode, it breaks
// the contract, its target refuses it for good): dead-lettered now.
func Poison(reason string) Outcome { return Outcome{kind: poison, reason: reason} }

// Dead is a message given up on, as a DeadLetter keeps it.
type Dead struct {
	Delivery
	Stream, Consumer string
	Reason           string
}

// DeadLetter keeps d where an operator finds it (and may replay it). It
// must be safe to call twice for one message (a dead letter kept whose
// terminate was lost comes again): key what it writes by the message.
type DeadLetter func(ctx context.Context, d Dead) error

// deadLetterPause is the wait before a dead letter that could not be
// kept is tried again (its message is delivered again for it).
const deadLetterPause = 2 * time.Second

// Consume consumes spec's durable consumer with workers goroutines (1
// when fewer), each pulling one message at a time and calling handle,
// until ctx is done. NATS being down, at start or later, only pauses it.
// It returns nil on shutdown, after every handler in progress returned
// and its message was settled, and an error only for a spec it cannot
// use.
func Consume(ctx context.Context, bus *Bus, spec ConsumerSpec, workers int, handle Handler) error {
	switch {
	case bus == nil || spec.Stream == "" || spec.Consumer.Durable == "" || handle == nil:
		return errors.New("events: Consume needs a bus, a stream, a durable consumer name and a handler")
	case spec.MaxDeliver == 0 || spec.MaxDeliver < Unbounded:
		return fmt.Errorf("events: consumer %s: MaxDeliver must be a bound or Unbounded", spec.Consumer.Durable)
	case spec.Consumer.MaxDeliver != 0:
		return fmt.Errorf("events: consumer %s: the delivery bound is ConsumerSpec.MaxDeliver, not the server's", spec.Consumer.Durable)
	case spec.DeadLetter == nil:
		return fmt.Errorf("events: consumer %s: no dead letter", spec.Consumer.Durable)
	}
	spec.Consumer.MaxDeliver = -1
	workers = max(workers, 1)
	if spec.FetchWait <= 0 {
		spec.FetchWait = 2 * time.Second
	}
	log := bus.log.With("stream", spec.Stream, "consumer", spec.Consumer.Durable)
	s := &settler{spec: spec, handle: handle, log: log}
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
		lost := runWorkers(ctx, bus, cons, spec.FetchWait, workers, s.run, log.Debug)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("consumer lost; setting it up again", "error", lost.Error())
	}
}

// settler hands each message to the handler and settles it by the
// outcome: the one place that acks, naks, terms and dead-letters.
type settler struct {
	spec   ConsumerSpec
	handle Handler
	log    *slog.Logger
}

func (s *settler) run(ctx context.Context, msg jetstream.Msg) {
	d := Delivery{Data: msg.Data(), Subject: msg.Subject(), Attempt: 1}
	if h := msg.Headers(); h != nil {
		d.MsgID = h.Get(jetstream.MsgIDHeader)
	}
	if md, err := msg.Metadata(); err == nil {
		d.Attempt, d.StreamSeq, d.Published = int(md.NumDelivered), md.Sequence.Stream, md.Timestamp
	}
	d.Last = s.spec.MaxDeliver != Unbounded && d.Attempt >= s.spec.MaxDeliver
	if ctx.Err() != nil {
		// Pulled while shutting down: not started, so handed back at once.
		_ = msg.Nak()
		return
	}
	stop := func() {}
	if s.spec.Heartbeat {
		stop = Heartbeat(ctx, msg, s.spec.Consumer.AckWait/3)
	}
	out := s.handle(ctx, d)
	stop()
	// Settling outlives the shutdown: a message handled is acked even so.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch out.kind {
	case done:
		if err := msg.DoubleAck(sctx); err != nil {
			s.log.Warn("message handled, ack failed; its redelivery is handled again", "msg_id", d.MsgID, "error", err.Error())
		}
		s.settled(sctx, d)
	case poison:
		s.dead(ctx, sctx, msg, d, out.reason)
	default:
		switch {
		case ctx.Err() != nil:
			_ = msg.Nak() // shutting down: another replica takes it now
		case d.Last:
			s.dead(ctx, sctx, msg, d, fmt.Sprintf("gave up after %d deliveries: %v", d.Attempt, out.cause))
		default:
			s.log.Info("message retried", "msg_id", d.MsgID, "delivery", d.Attempt, "retry_in", out.delay.String(), "error", out.cause.Error())
			_ = msg.NakWithDelay(out.delay)
		}
	}
}

// dead keeps d's dead letter, then terminates the message; a dead letter
// not kept is tried again with the message's next delivery.
func (s *settler) dead(ctx, sctx context.Context, msg jetstream.Msg, d Delivery, reason string) {
	dl := Dead{Delivery: d, Stream: s.spec.Stream, Consumer: s.spec.Consumer.Durable, Reason: reason}
	if err := s.spec.DeadLetter(sctx, dl); err != nil {
		s.log.Warn("dead letter not kept; tried again", "msg_id", d.MsgID, "reason", reason, "error", err.Error())
		if ctx.Err() != nil {
			_ = msg.Nak()
			return
		}
		_ = msg.NakWithDelay(deadLetterPause)
		return
	}
	s.log.Warn("message dead-lettered", "msg_id", d.MsgID, "stream_seq", d.StreamSeq, "deliveries", d.Attempt, "reason", reason)
	if len(reason) > 200 {
		reason = reason[:200]
	}
	if err := msg.TermWithReason(reason); err != nil {
		s.log.Warn("dead letter kept, terminate failed; its redelivery is dead-lettered again", "msg_id", d.MsgID, "error", err.Error())
	}
	s.settled(sctx, d)
}

func (s *settler) settled(ctx context.Context, d Delivery) {
	if s.spec.Settled != nil {
		s.spec.Settled(ctx, d)
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
func runWorkers(ctx context.Context, bus *Bus, cons jetstream.Consumer, wait time.Duration, workers int, handle func(context.Context, jetstream.Msg),
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
// still being worked on (msg.InProgress), so work that runs longer than
// the consumer's AckWait keeps its message; AckWait/3 leaves room for a
// late beat. It beats until stop is called or ctx is done. stop returns
// once no beat can follow, so it is called before the message is acked
// or naked; calling it again does nothing. Consume runs it around the
// handler of a spec with Heartbeat; no handler holds a message to beat.
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
