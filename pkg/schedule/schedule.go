// Package schedule fires records at the hours of their schedule (UTC),
// once per hour across any number of replicas. A record is due when its
// schedule.state is ENABLED and schedule.hours holds the current UTC hour
// (plus any filter of the caller's), and its delete has not begun
// (tenancy.MarkField); the replica that inserts the lease
// <prefix><id>#<YYYY-MM-DDTHH> into the leases collection fires it. The
// insert of a new _id is atomic on MongoDB and FerretDB alike, so exactly
// one replica does, however many tick in the same hour. Leases of the
// scheduler's kind older than 48 hours are purged on every tick.
//
// It is the timing only: what firing means (start a collect, record a
// sync) is the caller's Fire. It must not retry a fire that failed (the
// lease is taken: the record fires again at its next hour), catch up on
// hours no replica was running in, or know any service's records.
package schedule

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

// Enabled is the schedule state of a record that fires.
const Enabled = "ENABLED"

// DefaultEvery is how often a scheduler looks at the clock by default.
const DefaultEvery = 30 * time.Second

// KeepLeases is how long leases are kept before they are purged: longer
// than an hour, so that no replica fires an hour again.
const KeepLeases = 48 * time.Hour

// Config says what a Scheduler fires. Records, Leases, Kind, ID and Fire
// are required.
type Config[T any] struct {
	// Records holds the scheduled records, decoded as T.
	Records *mongo.Collection
	// Filter is ANDed with the schedule's condition (e.g. only enabled
	// records); nil for none.
	Filter bson.D
	// Leases holds the leases; it may hold other documents, which carry
	// no kind field or another kind.
	Leases *mongo.Collection
	// Kind tells this scheduler's leases from other documents of Leases:
	// only those are purged.
	Kind string
	// LeasePrefix starts every lease _id, so that ids of different kinds
	// in one collection never meet.
	LeasePrefix string
	// ID is a record's id: the lease is <LeasePrefix><ID>#<hour>.
	ID func(rec *T) string
	// Fire runs a due record. An error is logged and the other due
	// records still fire; an error wrapped by Skip is logged as a skip.
	Fire func(ctx context.Context, rec *T) error
	// Every is the tick (DefaultEvery when 0).
	Every time.Duration
	// Log receives the failures and fires (slog.Default when nil).
	Log *slog.Logger
}

// Scheduler fires the due records of one Config.
type Scheduler[T any] struct {
	cfg Config[T]
	// Now is the clock; tests move it.
	Now func() time.Time
}

// New builds a scheduler.
func New[T any](cfg Config[T]) *Scheduler[T] {
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Scheduler[T]{cfg: cfg, Now: time.Now}
}

type skipped struct{ err error }

func (s skipped) Error() string { return s.err.Error() }
func (s skipped) Unwrap() error { return s.err }

// Skip marks a fire that did not run for an expected reason (the record
// was disabled meanwhile, a run is still going): it is logged at info
// level, not as a failure.
func Skip(err error) error { return skipped{err} }

type marker struct {
	ID       string    `bson:"_id"`
	Kind     string    `bson:"kind"`
	RecordID string    `bson:"record_id"`
	At       time.Time `bson:"at"`
}

// Run fires on every tick until ctx is done; a failed tick is logged and
// the next one tries again.
func (s *Scheduler[T]) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		if err := s.Fire(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("schedule tick failed", "kind", s.cfg.Kind, "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Fire fires the records due in the hour of Now that no replica fired yet.
func (s *Scheduler[T]) Fire(ctx context.Context) error { return s.FireAt(ctx, s.Now()) }

// FireAt fires the records due in the hour of now that no replica fired
// yet, then purges the old leases. An error is the store's: the records
// not reached yet fire on a later tick of the same hour.
func (s *Scheduler[T]) FireAt(ctx context.Context, now time.Time) error {
	hour := now.UTC().Truncate(time.Hour)
	filter := bson.D{{Key: "schedule.state", Value: Enabled}, {Key: "schedule.hours", Value: hour.Hour()},
		// A record whose delete has begun (store.Teardown) fires no more.
		{Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}}
	filter = append(filter, s.cfg.Filter...)
	cur, err := s.cfg.Records.Find(ctx, filter)
	if err != nil {
		return store.Wrap(err)
	}
	var due []T
	if err := cur.All(ctx, &due); err != nil {
		return store.Wrap(err)
	}
	stamp := hour.Format("2006-01-02T15")
	for i := range due {
		rec := &due[i]
		id := s.cfg.ID(rec)
		l := marker{ID: s.cfg.LeasePrefix + id + "#" + stamp, Kind: s.cfg.Kind, RecordID: id, At: hour}
		if _, err := s.cfg.Leases.InsertOne(ctx, l); err != nil {
			if mongo.IsDuplicateKeyError(err) {
				continue // fired by this or another replica
			}
			return store.Wrap(err)
		}
		err := s.cfg.Fire(ctx, rec)
		var skip skipped
		switch {
		case errors.As(err, &skip):
			s.cfg.Log.Info("scheduled run skipped", "kind", s.cfg.Kind, "id", id, "hour", hour.Hour(), "reason", skip.err.Error())
		case err != nil:
			s.cfg.Log.Warn("scheduled run failed", "kind", s.cfg.Kind, "id", id, "hour", hour.Hour(), "error", err.Error())
		default:
			s.cfg.Log.Info("scheduled run", "kind", s.cfg.Kind, "id", id, "hour", hour.Hour())
		}
	}
	_, err = s.cfg.Leases.DeleteMany(ctx, bson.D{{Key: "kind", Value: s.cfg.Kind}, {Key: "at", Value: bson.D{{Key: "$lt", Value: hour.Add(-KeepLeases)}}}})
	if err != nil {
		return store.Wrap(err)
	}
	// The collection holds the service's other leases (pkg/lease) too:
	// those of finished jobs and tasks go the same way.
	return lease.Purge(ctx, s.cfg.Leases, KeepLeases)
}
