// Package schedule fires collectors at the hours of their schedule
// (UTC), once per hour across every replica, with the kit's hourly
// scheduler (pkg/schedule): the replica that inserts the lease
// <collector_id>#<hour> (kind "schedule") into the leases collection runs
// the collect.
//
// It holds no operation; collecting itself is package collector's.
package schedule

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	kit "github.com/nubes-io/nubes/pkg/schedule"
	"github.com/nubes-io/nubes/services/inventory/internal/inv"
)

// Collect starts a job of a collector on no caller's behalf.
type Collect func(ctx context.Context, c *inv.Collector) error

// Scheduler fires scheduled collectors; its Now is the clock (tests move
// it).
type Scheduler struct {
	*kit.Scheduler[inv.Collector]
}

// New builds a scheduler looking at the clock every tick (30 s when 0).
func New(db *mongo.Database, collect Collect, every time.Duration, log *slog.Logger) *Scheduler {
	return &Scheduler{kit.New(kit.Config[inv.Collector]{
		Records: db.Collection(inv.CollectorsCollection), Leases: db.Collection(inv.LeasesCollection), Kind: "schedule",
		ID: func(c *inv.Collector) string { return c.CollectorID }, Fire: collect,
		Every: every, Log: log,
	})}
}
