// Package schedule fires collectors at the hours of their schedule
// (UTC), once per hour across every replica: the replica that inserts
// the lease <collector_id>#<hour> into the leases collection runs the
// collect; an insert of a new _id is atomic on MongoDB and FerretDB
// alike, so exactly one does.
//
// It holds no operation; collecting itself is package collector's.
package schedule

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/inventory/internal/inv"
)

// Collect starts a job of a collector on no caller's behalf.
type Collect func(ctx context.Context, c *inv.Collector) error

// Scheduler fires scheduled collectors.
type Scheduler struct {
	collectors *mongo.Collection
	leases     *mongo.Collection
	collect    Collect
	every      time.Duration
	log        *slog.Logger
	// Now is the clock (tests move it).
	Now func() time.Time
}

// New builds a scheduler looking at the clock every tick.
func New(db *mongo.Database, collect Collect, every time.Duration, log *slog.Logger) *Scheduler {
	if every <= 0 {
		every = 30 * time.Second
	}
	return &Scheduler{collectors: db.Collection(inv.CollectorsCollection), leases: db.Collection(inv.LeasesCollection),
		collect: collect, every: every, log: log, Now: time.Now}
}

type lease struct {
	ID          string    `bson:"_id"`
	Kind        string    `bson:"kind"`
	CollectorID string    `bson:"collector_id"`
	At          time.Time `bson:"at"`
}

// keepLeases is how long firing leases are kept (then purged).
const keepLeases = 48 * time.Hour

// Run fires until ctx is done.
func (s *Scheduler) Run(ctx context.Context) error {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		if err := s.Fire(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("collector schedule", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Fire runs the collectors due this hour that no replica ran yet.
func (s *Scheduler) Fire(ctx context.Context) error {
	hour := s.Now().UTC().Truncate(time.Hour)
	cur, err := s.collectors.Find(ctx, bson.D{{Key: "schedule.state", Value: inv.Enabled}, {Key: "schedule.hours", Value: hour.Hour()}})
	if err != nil {
		return store.Wrap(err)
	}
	var due []inv.Collector
	if err := cur.All(ctx, &due); err != nil {
		return store.Wrap(err)
	}
	for i := range due {
		c := &due[i]
		id := c.CollectorID + "#" + hour.Format("2006-01-02T15")
		if _, err := s.leases.InsertOne(ctx, lease{ID: id, Kind: "schedule", CollectorID: c.CollectorID, At: hour}); err != nil {
			if mongo.IsDuplicateKeyError(err) {
				continue // fired by this or another replica
			}
			return store.Wrap(err)
		}
		if err := s.collect(ctx, c); err != nil {
			s.log.Warn("scheduled collect failed", "collector_id", c.CollectorID, "domain_id", c.DomainID, "error", err.Error())
			continue
		}
		s.log.Info("scheduled collect", "collector_id", c.CollectorID, "domain_id", c.DomainID, "hour", hour.Hour())
	}
	_, err = s.leases.DeleteMany(ctx, bson.D{{Key: "kind", Value: "schedule"}, {Key: "at", Value: bson.D{{Key: "$lt", Value: hour.Add(-keepLeases)}}}})
	return store.Wrap(err)
}
