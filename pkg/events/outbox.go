package events

// The outbox: the producer side of "an operation that returned success
// leads to exactly one e-mail".
//
// Enqueue inserts the event into a collection of the database the
// operation writes to, keyed by the event id in _id. Once it returns, the
// event is durable whether or not NATS is up. There is no transaction
// (FerretDB has none): an operation that must not lose its mail calls
// Enqueue before it answers, and a retried operation that enqueues the same
// id again is a no-op (duplicate _id).
//
// Run is the relay. It publishes pending records to JetStream with the
// event id as Nats-Msg-Id and deletes a record only after JetStream acked
// it, so a record is published at least once. Duplicates are harmless by
// construction: the stream drops a Nats-Msg-Id it saw within
// DuplicateWindow, and the consumer (the mailer) keeps its own record of
// sent ids beyond that window.
//
// Several replicas may run the relay on the same collection. A pass reads
// the ids of the due records (lease_until <= now), claims them with one
// conditional update (still due: set lease_until = now + lease and a fresh
// claim token), reads back the records carrying its token, publishes
// them, and deletes the published ones with one statement: a handful of
// store round trips per batch, not per record. On MongoDB each
// document's claim is atomic, so one replica owns each record. FerretDB
// 1.24 on SQLite runs an update as a read and then a write by _id, so two
// replicas can both win a claim there (measured: 50 concurrent
// conditional updates of one record, up to 10 winners); the token keeps
// ownership mostly disjoint (the last write wins the token), and
// correctness never depends on it: a record published twice, by two
// winners or after a lease expired under a slow holder, carries the same
// Nats-Msg-Id and is deduplicated downstream. The lease only saves work.
//
// The relay wakes at once after Enqueue in the same process, when NATS
// reconnects, and otherwise polls (every second by default) for records
// written by other replicas or left behind by a failure. While NATS is
// down it leaves the records alone and waits for the reconnect. Published
// records are deleted, so the collection holds only the backlog: a filter
// on lease_until scans it on FerretDB/SQLite (only _id-only filters are
// pushed down there), which is cheap while the backlog is small.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
)

// MaxEventSize bounds an event's JSON payload. NATS refuses messages over
// its max_payload (1 MiB by default); refusing early at Enqueue keeps a
// record that can never be published out of the outbox.
const MaxEventSize = 256 << 10

// idPattern is what an event id may look like: it becomes a Nats-Msg-Id, a
// key-value key, a Message-ID and a file name.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// ValidID reports whether id can serve as an event id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// OutboxOptions tune the relay. Zero values take the defaults.
type OutboxOptions struct {
	Poll           time.Duration // how often to look for records of other replicas (1s)
	Lease          time.Duration // how long a claim keeps other replicas off a record (30s)
	Batch          int           // records read per pass (100)
	PublishTimeout time.Duration // per publish (5s)
}

// Outbox records events in a collection and relays them to JetStream.
type Outbox struct {
	coll  *mongo.Collection
	bus   *Bus
	log   *slog.Logger
	opts  OutboxOptions
	owner string
	wake  chan struct{}
}

// outboxRecord is one pending event.
type outboxRecord struct {
	ID         string    `bson:"_id"`
	Subject    string    `bson:"subject"`
	Data       string    `bson:"data"` // the JSON payload
	CreatedAt  time.Time `bson:"created_at"`
	LeaseUntil time.Time `bson:"lease_until"`
	Owner      string    `bson:"owner,omitempty"` // the relay that claimed it last
	Claim      string    `bson:"claim,omitempty"` // the claim pass that owns it
	Attempts   int       `bson:"attempts"`
	LastError  string    `bson:"last_error,omitempty"`
}

// NewOutbox returns the outbox kept in db.collection (creating its
// indexes) that relays through bus.
func NewOutbox(ctx context.Context, db *mongo.Database, collection string, bus *Bus, log *slog.Logger) (*Outbox, error) {
	return NewOutboxWith(ctx, db, collection, bus, log, OutboxOptions{})
}

// NewOutboxWith is NewOutbox with options.
func NewOutboxWith(ctx context.Context, db *mongo.Database, collection string, bus *Bus, log *slog.Logger, opts OutboxOptions) (*Outbox, error) {
	if bus == nil {
		return nil, errors.New("outbox: no event bus")
	}
	if log == nil {
		log = slog.Default()
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = 5 * time.Second
	}
	coll := db.Collection(collection)
	if err := store.EnsureIndexes(ctx, coll,
		store.Index{Keys: bson.D{{Key: "lease_until", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "created_at", Value: 1}}},
	); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &Outbox{
		coll: coll, bus: bus, log: log.With("outbox", collection), opts: opts,
		owner: host + "/" + strconv.Itoa(os.Getpid()) + "/" + wire.NewID("relay"),
		wake:  make(chan struct{}, 1),
	}, nil
}

// Enqueue records m for the mailer. An empty m.ID is generated
// (wire.NewID("mail")); the id is the Nats-Msg-Id, the dedupe key and the
// e-mail's Message-ID. When Enqueue returns nil the mail is durable; a
// second Enqueue with the same id is a no-op.
func (o *Outbox) Enqueue(ctx context.Context, m Mail) error {
	if m.ID == "" {
		m.ID = wire.NewID("mail")
	}
	return o.Add(ctx, MailSubject, m.ID, m)
}

// Add records any event: payload (JSON) to be published on subject with
// id as Nats-Msg-Id.
func (o *Outbox) Add(ctx context.Context, subject, id string, payload any) error {
	data, err := encode(id, payload)
	if err != nil {
		return err
	}
	return o.record(ctx, subject, id, data)
}

// directTimeout bounds Publish's own try: past it the event is recorded
// for the relay rather than holding the caller.
const directTimeout = time.Second

// Publish is Add for an event wanted downstream at once (an alert's
// notification, a webhook's event): it is published straight to
// JetStream when the bus takes it, and recorded for the relay, as Add
// does, when the bus is down or does not answer within a second. Either
// way nil means JetStream has it or will: a store write and the relay's
// pass are saved on the hot path. Unlike Add, it may overtake events
// recorded before it. A publish whose answer was lost and that is then
// recorded is published twice with one id, which the stream drops.
func (o *Outbox) Publish(ctx context.Context, subject, id string, payload any) error {
	data, err := encode(id, payload)
	if err != nil {
		return err
	}
	if o.bus.Connected() {
		pctx, cancel := context.WithTimeout(ctx, min(directTimeout, o.opts.PublishTimeout))
		err := o.bus.PublishData(pctx, subject, id, data)
		cancel()
		if err == nil {
			return nil
		}
		o.log.Debug("outbox: published later", "id", id, "error", err.Error())
	}
	return o.record(ctx, subject, id, data)
}

// encode checks an event's id and size and returns its payload's JSON.
func encode(id string, payload any) ([]byte, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("outbox: invalid event id %q", id)
	}
	data, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	if len(data) > MaxEventSize {
		return nil, fmt.Errorf("outbox: event %s is %d bytes, over %d", id, len(data), MaxEventSize)
	}
	return data, nil
}

// record stores an event for the relay.
func (o *Outbox) record(ctx context.Context, subject, id string, data []byte) error {
	now := time.Now().UTC()
	_, err := o.coll.InsertOne(ctx, outboxRecord{ID: id, Subject: subject, Data: string(data), CreatedAt: now, LeaseUntil: now})
	if mongo.IsDuplicateKeyError(err) {
		return nil // the same event, enqueued again
	}
	if err != nil {
		return store.Wrap(err)
	}
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return nil
}

// Pending counts the records not published yet.
func (o *Outbox) Pending(ctx context.Context) (int64, error) {
	return o.coll.CountDocuments(ctx, bson.D{})
}

// Run relays records to JetStream until ctx is done (an app.Service
// worker). It returns nil on cancellation.
func (o *Outbox) Run(ctx context.Context) error {
	const minBackoff, maxBackoff = 200 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	failing := false
	for {
		var wait time.Duration
		n, err := o.relayOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if !failing {
				o.log.Warn("outbox relay failing; retrying", "error", err.Error())
				failing = true
			}
			wait, backoff = backoff, min(2*backoff, maxBackoff)
			if !o.bus.Connected() {
				wait = o.opts.Poll // the reconnect wakes the relay earlier
			}
		default:
			if failing {
				o.log.Info("outbox relay recovered")
				failing = false
			}
			backoff = minBackoff
			if n == o.opts.Batch {
				continue // more may be waiting
			}
			wait = o.opts.Poll
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-o.wake:
		case <-o.bus.Reconnected():
		case <-t.C:
		}
		t.Stop()
	}
}

// relayOnce claims and publishes one batch of due records and returns how
// many it read. It stops at the first publish failure. The store work is
// a few statements per batch, not per record: find the due records, claim
// them together under a fresh token, read back the ones this pass owns,
// and delete the published ones together.
func (o *Outbox) relayOnce(ctx context.Context) (int, error) {
	if !o.bus.Connected() {
		return 0, errors.New("nats not connected")
	}
	now := time.Now().UTC()
	due := bson.D{{Key: "lease_until", Value: bson.D{{Key: "$lte", Value: now}}}}
	cur, err := o.coll.Find(ctx, due, options.Find().
		SetSort(bson.D{{Key: "created_at", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(int64(o.opts.Batch)).
		SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("outbox read: %w", err)
	}
	var heads []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &heads); err != nil {
		return 0, fmt.Errorf("outbox read: %w", err)
	}
	if len(heads) == 0 {
		return 0, nil
	}
	ids := make([]string, len(heads))
	for i, h := range heads {
		ids[i] = h.ID
	}

	token := wire.NewID("claim")
	claim := append(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, due...)
	if _, err := o.coll.UpdateMany(ctx, claim, bson.D{{Key: "$set", Value: bson.D{
		{Key: "lease_until", Value: time.Now().UTC().Add(o.opts.Lease)},
		{Key: "owner", Value: o.owner}, {Key: "claim", Value: token},
	}}}); err != nil {
		return 0, fmt.Errorf("outbox claim: %w", err)
	}
	cur, err = o.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "claim", Value: token}},
		options.Find().SetSort(bson.D{{Key: "created_at", Value: 1}, {Key: "_id", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("outbox read: %w", err)
	}
	var recs []outboxRecord
	if err := cur.All(ctx, &recs); err != nil {
		return 0, fmt.Errorf("outbox read: %w", err)
	}

	var published []string
	var perr error
	for i, r := range recs {
		pctx, cancel := context.WithTimeout(ctx, o.opts.PublishTimeout)
		perr = o.bus.PublishData(pctx, r.Subject, r.ID, []byte(r.Data))
		cancel()
		if perr != nil {
			o.giveBack(ctx, r, recs[i+1:], perr)
			break
		}
		published = append(published, r.ID)
	}
	if len(published) > 0 {
		// Published: done. If this delete fails the records are published
		// again after their lease, and deduplicated downstream.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, err := o.coll.DeleteMany(dctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: published}}}})
		cancel()
		if err != nil {
			o.log.Warn("outbox: published but not deleted; they will be published again and deduplicated",
				"count", len(published), "error", err.Error())
		}
	}
	return len(heads), perr
}

// giveBack releases the records of a pass that failed at failed: the rest
// at once; failed itself at once when NATS is down (the reconnect wakes
// the relay), or after a growing delay when NATS refused it.
func (o *Outbox) giveBack(ctx context.Context, failed outboxRecord, rest []outboxRecord, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	now := time.Now().UTC()
	delay := time.Duration(0)
	if o.bus.Connected() {
		delay = min(time.Duration(1)<<min(failed.Attempts, 9)*time.Second, 5*time.Minute)
	}
	_, _ = o.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: failed.ID}}, bson.D{
		{Key: "$set", Value: bson.D{{Key: "lease_until", Value: now.Add(delay)}, {Key: "last_error", Value: cause.Error()}}},
		{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}},
	})
	if len(rest) == 0 {
		return
	}
	ids := make([]string, len(rest))
	for i, r := range rest {
		ids[i] = r.ID
	}
	_, _ = o.coll.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lease_until", Value: now}}}})
}
