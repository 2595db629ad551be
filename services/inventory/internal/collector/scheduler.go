// The scheduler fires collectors at the hours of their schedule
// (UTC), once per hour across every replica, with the kit's hourly
// scheduler (pkg/schedule): the replica that inserts the lease
// <collector_id>#<hour> (kind "schedule") into the leases collection runs
// the collect.
//
// It holds no operation; collecting itself is collect.go's.

package collector

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	kit "github.com/nubes-io/nubes/pkg/schedule"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// Collect starts a job of a collector on no caller's behalf.
type Collect func(ctx context.Context, c *core.Collector) error

// Scheduler fires scheduled collectors; its Now is the clock (tests move
// it).
type Scheduler struct {
	*kit.Scheduler[core.Collector]
}

// NewScheduler builds a scheduler looking at now (time.Now when nil)
// every tick (30 s when 0).
func NewScheduler(db *mongo.Database, collect Collect, every time.Duration, now func() time.Time, log *slog.Logger) *Scheduler {
	s := &Scheduler{kit.New(kit.Config[core.Collector]{
		Records: db.Collection(core.CollectorsCollection), Leases: db.Collection(core.LeasesCollection), Kind: "schedule",
		ID: func(c *core.Collector) string { return c.CollectorID }, Fire: collect,
		Every: every, Log: log,
	})}
	if now != nil {
		s.Now = now
	}
	return s
}
