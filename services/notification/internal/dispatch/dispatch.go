// Package dispatch delivers notification events (events.NotificationDispatch
// on events.NotificationStream) through their protocol's plugin
// (Notification.dispatch), with the protocol's secret data unsealed for
// the call only.
//
// Each event ID is handled once: its outcome is recorded in
// core.DispatchesCollection before the message is acknowledged, and a
// redelivered or republished event with a recorded outcome is acknowledged
// without a second dispatch. A plugin failure that may pass (the plugin
// unreachable, slow or failing on its side: 5xx) is retried with a growing
// delay up to MaxDeliver deliveries; a refusal (4xx: bad channel data or
// message) or the last failure goes to events.NotificationDeadSubject.
// A DISABLED or deleted protocol dispatches nothing: the event is
// recorded as skipped. The built-in INTERNAL protocol has no plugin: an
// event whose channel data names an e-mail address is handed to the
// mailer (events.Mail, sealed), anything else is skipped. A SECRET
// channel's data arrives sealed (SealedChannelData) and is opened for
// the call only.
//
// It holds no operation of the API.
package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/notification/internal/core"
)

// Outcomes recorded per event.
const (
	Sent    = "SENT"
	Skipped = "SKIPPED"
	Dead    = "DEAD"
)

// Config bounds the deliveries.
type Config struct {
	// MaxDeliver is how many deliveries an event gets before it is
	// dead-lettered.
	MaxDeliver int
	// Backoff is the delay before the second delivery; it doubles after
	// each failure up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// CallTimeout bounds one Notification.dispatch.
	CallTimeout time.Duration
	// AckWait is when JetStream redelivers a message not acknowledged
	// (must exceed CallTimeout).
	AckWait time.Duration
}

// DefaultConfig: 6 deliveries over about 5 minutes.
func DefaultConfig() Config {
	return Config{MaxDeliver: 6, Backoff: 10 * time.Second, MaxBackoff: 2 * time.Minute, CallTimeout: 60 * time.Second, AckWait: 2 * time.Minute}
}

// StopGrace is how long a dispatch under way at the stop, and the record
// of its outcome, may go on; with the server's drain it fits a pod's 30 s
// termination grace. A call still running then is cut and its event
// handed back, so it may reach the channel twice.
const StopGrace = 15 * time.Second

// Record is an event's recorded outcome (_id = the event's ID).
type Record struct {
	ID         string    `bson:"_id"`
	ProtocolID string    `bson:"protocol_id"`
	DomainID   string    `bson:"domain_id"`
	Outcome    string    `bson:"outcome"`
	Reason     string    `bson:"reason,omitempty"`
	Deliveries int       `bson:"deliveries"`
	At         wire.Time `bson:"at"`
}

// Dispatcher consumes notification events.
type Dispatcher struct {
	bus       *events.Bus
	protocols *mongo.Collection
	records   *mongo.Collection
	counters  core.Counters
	plugins   *plugin.Client
	keys      *seal.Keyring
	cfg       Config
	log       *slog.Logger
}

// New builds the dispatcher and its collection's indexes.
func New(ctx context.Context, db *mongo.Database, bus *events.Bus, plugins *plugin.Client, keys *seal.Keyring, cfg Config, log *slog.Logger) (*Dispatcher, error) {
	d := &Dispatcher{bus: bus, protocols: db.Collection(core.ProtocolsCollection), records: db.Collection(core.DispatchesCollection),
		counters: core.Counters{C: db.Collection(core.UsageCollection)}, plugins: plugins, keys: keys, cfg: cfg, log: log}
	return d, store.EnsureIndexes(ctx, d.records, store.Index{Keys: bson.D{{Key: "protocol_id", Value: 1}, {Key: "at", Value: -1}}})
}

// Run consumes until ctx is done, Workers events at a time. NATS being
// down, at start or later, only pauses it.
func (d *Dispatcher) Run(ctx context.Context) error {
	return events.Consume(ctx, d.bus, events.ConsumerSpec{Stream: events.NotificationStream, Consumer: jetstream.ConsumerConfig{
		Durable:       events.NotificationConsumer,
		FilterSubject: events.NotificationDispatchSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.cfg.AckWait,
		MaxAckPending: 256,
	}, MaxDeliver: d.cfg.MaxDeliver, DeadLetter: d.dead}, Workers, d.handle)
}

// Workers is how many events a replica dispatches at once: each is
// recorded under its own id before it is acknowledged (never twice), and
// one channel's slow plugin does not hold the others back. The order of
// two notices is not kept (it never was across redeliveries).
const Workers = 4

// handle says what became of one event: done once an outcome is
// recorded, retried after a delay growing with the deliveries, or
// dead-lettered (malformed, refused, or still failing at the bound).
func (d *Dispatcher) handle(ctx context.Context, m events.Delivery) events.Outcome {
	var ev events.NotificationDispatch
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.ID == "" {
		return events.Poison("malformed event")
	}
	var rec Record
	err := d.records.FindOne(ctx, bson.D{{Key: "_id", Value: ev.ID}}).Decode(&rec)
	switch {
	case err == nil: // handled before: never twice
		return events.Done()
	case !errors.Is(err, mongo.ErrNoDocuments):
		return events.RetryAfter(d.delay(m.Attempt), store.Wrap(err))
	}
	if ctx.Err() != nil {
		// shutting down before the dispatch: another replica takes it
		return events.RetryAfter(0, ctx.Err())
	}
	// A dispatch under way at the stop is not cut at once: cut, its answer
	// lost, it would go to another replica and reach the channel twice
	// (a rolling update doubled a page). It and its record get StopGrace.
	sctx, cancel := app.AfterStop(ctx, StopGrace)
	defer cancel()
	outcome, reason, err := d.dispatch(sctx, ev)
	if err != nil {
		if ctx.Err() != nil {
			// cut by the stop: another replica takes it, perhaps dispatching it again
			return events.RetryAfter(0, err)
		}
		if e, ok := errs.As(err); ok && e.Status() < 500 {
			return events.Poison(err.Error())
		}
		d.log.Info("notification dispatch failed; retried", "id", ev.ID, "protocol_id", ev.ProtocolID, "delivery", m.Attempt, "error", err.Error())
		return events.RetryAfter(d.delay(m.Attempt), err)
	}
	if err := d.record(sctx, ev, outcome, reason, m.Attempt); err != nil {
		return events.RetryAfter(d.delay(m.Attempt), err)
	}
	return events.Done()
}

// dispatch delivers one event, or says why it is skipped.
func (d *Dispatcher) dispatch(ctx context.Context, ev events.NotificationDispatch) (outcome, reason string, err error) {
	var pr core.Protocol
	raw, err := d.protocols.FindOne(ctx, bson.D{{Key: "_id", Value: ev.ProtocolID}}).Raw()
	if err == nil {
		err = bson.Unmarshal(raw, &pr)
	}
	switch {
	// One whose delete has begun (store.Teardown) is gone already.
	case errors.Is(err, mongo.ErrNoDocuments) || (err == nil && (pr.DomainID != ev.DomainID || tenancy.IsMarked(raw))):
		return Skipped, "no such protocol", nil
	case err != nil:
		return "", "", store.Wrap(err)
	case pr.State != core.Enabled:
		return Skipped, "protocol disabled", nil
	}
	channel := ev.ChannelData
	if ev.SealedChannelData != nil {
		// A SECRET protocol's channel data, as its channel keeps it.
		channel = map[string]any{}
		if err := d.keys.OpenJSON(*ev.SealedChannelData, core.ChannelAD(ev.ChannelID, ev.DomainID), &channel); err != nil {
			return "", "", errs.Down("The channel's sealed data", err)
		}
	}
	if pr.ProtocolType == core.Internal {
		// The built-in protocol: an e-mail channel goes through the
		// mailer; users' inboxes were filled when the request was
		// fanned out, so anything else has nothing left to deliver.
		to, _ := channel["email"].(string)
		if to == "" {
			return Skipped, "INTERNAL protocol: no e-mail address", nil
		}
		if err := d.mail(ctx, ev, to); err != nil {
			return "", "", err
		}
		return Sent, "", nil
	}
	secret := map[string]any{}
	if pr.Sealed != nil {
		if err := d.keys.OpenJSON(*pr.Sealed, core.AD(pr.ID, pr.DomainID), &secret); err != nil {
			// A key withdrawn from the keyring: an operator's matter, not
			// the plugin's; retried until dead-lettered.
			return "", "", errs.Down("The protocol's secret data", err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, d.cfg.CallTimeout)
	defer cancel()
	err = plugin.Protocol{Target: d.plugins.Plugin(pr.PluginInfo.PluginID, pr.PluginInfo.Version)}.Dispatch(cctx, plugin.DispatchRequest{
		Options: pr.PluginInfo.Options, Message: ev.Message, NotificationType: ev.NotificationType, SecretData: secret, ChannelData: channel,
	})
	if err != nil {
		return "", "", err
	}
	return Sent, "", nil
}

// mail hands a notification to the mailer (events.Mail, template
// notification), its link and callback URL sealed as the mailer expects.
// Its id follows from the dispatch id, so a retry is the same mail.
func (d *Dispatcher) mail(ctx context.Context, ev events.NotificationDispatch, to string) error {
	str := func(v any) string { s, _ := v.(string); return s }
	data := map[string]string{"title": str(ev.Message["title"]), "description": str(ev.Message["description"]), "link": str(ev.Message["link"])}
	var tags []string
	for _, t := range asList(ev.Message["tags"]) {
		tags = append(tags, str(t["key"])+": "+str(t["value"]))
	}
	data["tags"] = strings.Join(tags, "\n")
	if cbs := asList(ev.Message["callbacks"]); len(cbs) > 0 {
		data["callback_label"], data["callback_url"] = str(cbs[0]["label"]), str(cbs[0]["url"])
	}
	for k, v := range data {
		if v == "" {
			delete(data, k)
		}
	}
	m := events.Mail{ID: "mail-" + ev.ID, To: to, Language: "en", Template: events.MailNotification, Data: data}
	if err := events.SealMail(d.keys, &m); err != nil {
		return errs.Down("Sealing the mail", err)
	}
	if err := d.bus.Publish(ctx, events.MailSubject, m.ID, m); err != nil {
		return errs.Down("The event bus", err)
	}
	return nil
}

func asList(v any) []map[string]any {
	var out []map[string]any
	l, _ := v.([]any)
	for _, x := range l {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// record keeps the outcome and counts it; a record already there (a
// concurrent delivery of the same event) counts nothing more.
func (d *Dispatcher) record(ctx context.Context, ev events.NotificationDispatch, outcome, reason string, deliveries int) error {
	_, err := d.records.InsertOne(ctx, Record{ID: ev.ID, ProtocolID: ev.ProtocolID, DomainID: ev.DomainID, Outcome: outcome,
		Reason: reason, Deliveries: deliveries, At: wire.T(wire.Now())})
	if mongo.IsDuplicateKeyError(err) {
		return nil
	}
	if err != nil {
		return store.Wrap(err)
	}
	u := core.Usage{}
	switch outcome {
	case Sent:
		u.Sent = 1
	case Skipped:
		u.Skipped = 1
	case Dead:
		u.Failed = 1
	}
	if ev.ProtocolID != "" && (outcome != Skipped || reason != "no such protocol") {
		if err := d.counters.Add(ctx, ev.ProtocolID, u); err != nil {
			d.log.Warn("notification usage not counted", "protocol_id", ev.ProtocolID, "outcome", outcome, "error", err.Error())
		}
	}
	return nil
}

// dead publishes the event on the dead-letter subject and records it
// (counted as failed); an error leaves it to be tried again.
func (d *Dispatcher) dead(ctx context.Context, m events.Dead) error {
	var ev events.NotificationDispatch
	_ = json.Unmarshal(m.Data, &ev)
	id := ev.ID
	if id == "" {
		id = fmt.Sprintf("seq-%d", m.StreamSeq)
	}
	dn := events.DeadNotification{Notification: ev, Reason: m.Reason, Deliveries: m.Attempt, FailedAt: wire.FormatTime(wire.Now())}
	if err := d.bus.Publish(ctx, events.NotificationDeadSubject, "dead-"+id, dn); err != nil {
		return err
	}
	ev.ID = id
	if err := d.record(ctx, ev, Dead, m.Reason, m.Attempt); err != nil {
		return err
	}
	d.log.Warn("notification dead-lettered", "id", id, "protocol_id", ev.ProtocolID, "deliveries", m.Attempt, "reason", m.Reason)
	return nil
}

// delay is the wait before delivery n+1: Backoff doubled per delivery,
// up to MaxBackoff.
func (d *Dispatcher) delay(deliveries int) time.Duration {
	delay := d.cfg.Backoff
	for i := 1; i < deliveries && delay < d.cfg.MaxBackoff; i++ {
		delay *= 2
	}
	return min(delay, d.cfg.MaxBackoff)
}

// Outcome reads an event's recorded outcome ("" when none yet).
func Outcome(ctx context.Context, db *mongo.Database, id string) (Record, error) {
	var rec Record
	err := db.Collection(core.DispatchesCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne()).Decode(&rec)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Record{}, nil
	}
	return rec, store.Wrap(err)
}
