package mailer

// The worker, and why each mail is delivered once.
//
// Upstream is at least once: the outbox relay publishes a record until
// JetStream acks it, and JetStream redelivers a message until it is acked.
// Duplicates therefore reach the mailer as (a) a redelivery of the same
// stream message, or (b) a second stream message with the same mail id,
// when the relay published again after the stream's duplicate window.
// Both carry the same mail id, and the mailer gates every send on it in
// the events.MailSentBucket key-value bucket:
//
//  1. claim: Create(id, "sending"). Create succeeds only when the key is
//     absent (or deleted), atomically on the server. If the key says
//     "sent", the mail went out: ack, send nothing. If it says "sending"
//     and is younger than ClaimTimeout, another delivery is sending it
//     right now: retry later. If it is older, its sender died mid-send:
//     take it over with a revision-checked Update.
//  2. send: return only when the SMTP server answered 250 to the end of
//     DATA (or the .eml file is synced in place).
//  3. record: Put(id, "sent"), retried while NATS is briefly away.
//  4. ack.
//
// A failed send deletes the claim (revision-checked) and naks with a
// delay; the next delivery claims again. A crash after 2 and before 3
// leaves a "sending" claim that is taken over after ClaimTimeout, and the
// mail is sent a second time: that window (an SMTP 250 to a KV put, a few
// milliseconds, or NATS unreachable for longer than the record retries) is
// the one case of a duplicate, which no protocol can close because the
// SMTP server and the bucket cannot commit together. Such a duplicate
// carries the same Message-ID, which mail clients use to fold it.
// A crash after 3 and before 4 only causes a redelivery that is acked.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/mail"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/mailer/internal/mailrender"
	"github.com/nubes-io/nubes/services/mailer/internal/mailsend"
)

// sentTTL is how long the bucket remembers an id: beyond the mail
// stream's retention, so no redelivery outlives its record.
const sentTTL = 30 * 24 * time.Hour

type worker struct {
	cfg    Config
	bus    *events.Bus
	sender mailsend.Sender
	render *mailrender.Renderer
	from   *mail.Address
	log    *slog.Logger
	keys   *seal.Keyring // open a mail's sealed link or code; nil: none configured
}

// Run consumes mail events until ctx is done, Concurrency at once. While
// NATS is down it waits for it; it returns nil on cancellation, after the
// sends in flight are finished.
func (w *worker) Run(ctx context.Context) error {
	var kv jetstream.KeyValue // set by Setup before any handler runs
	// Sends in flight finish even after ctx is cancelled: an accepted mail
	// must still be recorded and acked. They are bounded by their timeouts.
	hctx := context.WithoutCancel(ctx)
	return events.Consume(ctx, w.bus, events.ConsumerSpec{
		Stream: events.MailStream,
		Consumer: jetstream.ConsumerConfig{
			Durable:       events.MailConsumer,
			Description:   "mailer: renders and sends mail events",
			FilterSubject: events.MailSubject,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       w.cfg.AckWait,
			MaxAckPending: max(256, 4*w.cfg.Concurrency),
		},
		Setup: func(ctx context.Context) error {
			var err error
			kv, err = w.bus.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket: events.MailSentBucket, Description: "mail ids the mailer sent (exactly-once record)",
				History: 1, TTL: sentTTL, Storage: jetstream.FileStorage,
			})
			if err != nil {
				return fmt.Errorf("bucket %s: %w", events.MailSentBucket, err)
			}
			return nil
		},
		// The bound is the kit's: a retry at the last delivery is
		// dead-lettered (w.dead), and a mail done with leaves an old
		// stream (w.forget).
		MaxDeliver: w.cfg.MaxDeliver,
		DeadLetter: w.dead,
		Settled:    func(ctx context.Context, d events.Delivery) { w.forget(ctx, d.StreamSeq) },
	}, w.cfg.Concurrency, func(runCtx context.Context, d events.Delivery) events.Outcome {
		return w.handle(hctx, runCtx, d, kv)
	})
}

// claim states.
type claimState int

const (
	claimed claimState = iota // this delivery sends
	alreadySent
	busy // another delivery holds a live claim
)

// record is a value of the sent bucket.
type record struct {
	State string `json:"state"` // sending | sent
	By    string `json:"by"`
	At    string `json:"at"`
}

var instance = func() string {
	h, _ := os.Hostname()
	return h + "/" + strconv.Itoa(os.Getpid())
}()

func recordValue(state string) []byte {
	b, _ := json.Marshal(record{State: state, By: instance, At: time.Now().UTC().Format(wire.TimeLayout)})
	return b
}

// claim takes the right to send id (see the comment at the top).
func (w *worker) claim(ctx context.Context, kv jetstream.KeyValue, id string) (claimState, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for range 3 {
		rev, err := kv.Create(ctx, id, recordValue("sending"))
		if err == nil {
			return claimed, rev, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, 0, err
		}
		e, err := kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released meanwhile: claim again
		}
		if err != nil {
			return 0, 0, err
		}
		var r record
		_ = json.Unmarshal(e.Value(), &r)
		if r.State == "sent" {
			return alreadySent, 0, nil
		}
		if time.Since(e.Created()) < w.cfg.ClaimTimeout {
			return busy, 0, nil
		}
		rev, err = kv.Update(ctx, id, recordValue("sending"), e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		w.log.Warn("mail: taking over an abandoned send; it may arrive twice", "mail_id", id, "claimed_by", r.By, "claimed_at", r.At)
		return claimed, rev, nil
	}
	return busy, 0, nil
}

// release gives a claim back after a failed send.
func (w *worker) release(ctx context.Context, kv jetstream.KeyValue, id string, rev uint64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := kv.Delete(ctx, id, jetstream.LastRevision(rev)); err != nil {
		w.log.Debug("mail: claim not released; it expires", "mail_id", id, "error", err.Error())
	}
}

// recordSent marks id sent, retrying while NATS is away: until half the
// claim timeout has passed (after that another delivery may take the
// claim over anyway), and for at most a few seconds once the worker stops.
func (w *worker) recordSent(ctx, runCtx context.Context, kv jetstream.KeyValue, id string) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.ClaimTimeout/2)
	defer cancel()
	stop := context.AfterFunc(runCtx, func() {
		time.AfterFunc(5*time.Second, cancel)
	})
	defer stop()
	wait := 100 * time.Millisecond
	for {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := kv.Put(pctx, id, recordValue("sent"))
		pcancel()
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// handle processes one delivery. ctx outlives the worker's cancellation
// (runCtx) so that a send in flight is finished, recorded and acked.
func (w *worker) handle(ctx, runCtx context.Context, d events.Delivery, kv jetstream.KeyValue) events.Outcome {
	var m events.Mail
	if err := json.Unmarshal(d.Data, &m); err != nil {
		return events.Poison("undecodable payload: " + err.Error())
	}
	if m.ID == "" {
		m.ID = d.MsgID
	}
	if !events.ValidID(m.ID) {
		return events.Poison(fmt.Sprintf("invalid mail id %q", m.ID))
	}
	// m stays sealed (a dead letter keeps it so); the opened copy lives
	// only here, for the send.
	opened, err := events.OpenMail(w.keys, m)
	if err != nil {
		return events.Poison("sealed part does not open: " + err.Error())
	}
	out, err := w.compose(opened, d.Published)
	if err != nil {
		return events.Poison("unrenderable: " + err.Error())
	}
	state, rev, err := w.claim(ctx, kv, m.ID)
	switch {
	case err != nil:
		return w.retry(d, m.ID, fmt.Errorf("sent record unavailable: %w", err))
	case state == alreadySent:
		w.log.Info("mail already sent; duplicate acked", "mail_id", m.ID, "deliveries", d.Attempt)
		return events.Done()
	case state == busy:
		// At the last delivery the mail is dead-lettered: the sender that
		// holds the claim may still send it, or have died with it.
		return w.retry(d, m.ID, errors.New("another delivery holds the claim"))
	}

	if err := w.sender.Send(ctx, out.Message); err != nil {
		w.release(ctx, kv, m.ID, rev)
		if mailsend.IsPermanent(err) {
			return events.Poison("refused: " + err.Error())
		}
		return w.retry(d, m.ID, err)
	}
	if err := w.recordSent(ctx, runCtx, kv, m.ID); err != nil {
		w.log.Error("mail sent but not recorded; a redelivery after the claim timeout would send it again",
			"mail_id", m.ID, "error", err.Error())
	}
	w.log.Info("mail sent", "mail_id", m.ID, "token_id", m.TokenID, "template", m.Template, "language", out.language, "deliveries", d.Attempt)
	return events.Done()
}

// forget deletes a mail the mailer is done with from MailStream. A work
// queue has dropped it at the ack already; a stream made before the mail
// stream was one keeps its messages until MaxAge, and a mail must not
// outlive its delivery there (events.EnsureStreams).
func (w *worker) forget(ctx context.Context, seq uint64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := w.bus.JS.Stream(ctx, events.MailStream)
	if err != nil {
		return
	}
	if info := s.CachedInfo(); info != nil && info.Config.Retention == jetstream.WorkQueuePolicy {
		return
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		w.log.Debug("mail: delivered message not deleted from the stream", "stream_seq", seq, "error", err.Error())
	}
}

// compose renders m into a message. An error means it never will be.
func (w *worker) compose(m events.Mail, date time.Time) (*composed, error) {
	to, err := mail.ParseAddress(m.To)
	if err != nil {
		return nil, fmt.Errorf("recipient %q: %w", m.To, err)
	}
	c, err := w.render.Render(m.Template, m.Language, m.Data)
	if err != nil {
		return nil, err
	}
	msg, err := mailsend.Build(mailsend.Letter{
		ID: m.ID, From: w.from, To: to, Date: date,
		Subject: c.Subject, Body: c.Body, Language: c.Language, Template: m.Template,
	})
	if err != nil {
		return nil, err
	}
	return &composed{Message: msg, language: c.Language}, nil
}

// composed is a message ready to send and the language it is in.
type composed struct {
	*mailsend.Message
	language string
}

// delay is the wait before delivery n+1: Backoff doubled per delivery,
// capped, with ±20% jitter so retries of a burst spread out.
func (w *worker) delay(n uint64) time.Duration {
	d := w.cfg.Backoff
	for i := uint64(1); i < n && d < w.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, w.cfg.MaxBackoff)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// retry asks for the next delivery after w.delay (the kit dead-letters
// the mail at the bound).
func (w *worker) retry(d events.Delivery, id string, cause error) events.Outcome {
	delay := w.delay(uint64(d.Attempt))
	if !d.Last {
		w.log.Warn("mail not sent; will retry", "mail_id", id, "deliveries", d.Attempt, "retry_in", delay.Round(time.Millisecond).String(), "error", cause.Error())
	}
	return events.RetryAfter(delay, cause)
}

// dead publishes the mail on the dead-letter subject (DeadMail); an error
// leaves it to be tried again with its next delivery.
func (w *worker) dead(ctx context.Context, d events.Dead) error {
	dm := events.DeadMail{Reason: d.Reason, Deliveries: uint64(d.Attempt), StreamSeq: d.StreamSeq, FailedAt: time.Now().UTC().Format(wire.TimeLayout)}
	var m events.Mail
	if err := json.Unmarshal(d.Data, &m); err != nil {
		dm.Raw = string(d.Data)
	} else {
		if m.ID == "" {
			m.ID = d.MsgID
		}
		dm.ID, dm.Mail = m.ID, &m
	}
	key := "dead-seq-" + strconv.FormatUint(d.StreamSeq, 10)
	if events.ValidID(dm.ID) {
		key = "dead-" + dm.ID
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := w.bus.Publish(pctx, events.MailDeadSubject, key, dm); err != nil {
		return fmt.Errorf("mail: dead-letter publish: %w", err)
	}
	w.log.Error("mail dead-lettered", "mail_id", dm.ID, "subject", events.MailDeadSubject, "reason", d.Reason, "deliveries", d.Attempt)
	return nil
}
