package costanalysis

// Scheduled syncs: a data source whose schedule is ENABLED syncs by itself
// at each of its hours (UTC), once across replicas, on no caller's behalf,
// as upstream's hourly cost-analysis scheduler does. The timing is the
// kit's (pkg/schedule): the replica that inserts the lease
// schedule#<data_source_id>#<hour> into cost_locks starts the job, through
// the same job.Jobs.Start as data-source/sync.

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/schedule"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/job"
)

// SyncSchedule configures the scheduled syncs.
type SyncSchedule struct {
	// Tick is how often the schedules are looked at.
	Tick time.Duration
	// Now is the clock (time.Now when nil); tests move it.
	Now func() time.Time
}

// DefaultSyncScheduleTick is how often schedules are looked at by default.
const DefaultSyncScheduleTick = schedule.DefaultEvery

// syncScheduler starts the scheduled syncs. A data source that is
// disabled, or whose previous job still runs, is skipped until its next
// hour with an info line; any other refusal is logged as a failure.
func syncScheduler(db *mongo.Database, jobs *job.Jobs, cfg SyncSchedule, log *slog.Logger) *schedule.Scheduler[core.DataSource] {
	s := schedule.New(schedule.Config[core.DataSource]{
		Records: db.Collection(core.DataSourcesCollection),
		Leases:  db.Collection(core.LocksCollection), Kind: "sync-schedule", LeasePrefix: "schedule#",
		ID: func(ds *core.DataSource) string { return ds.DataSourceID },
		Fire: func(ctx context.Context, ds *core.DataSource) error {
			if ds.Deleting {
				return nil // being deregistered
			}
			// No caller: Start takes no principal for anything, and calls
			// to identity go with the service credential.
			_, err := jobs.Start(ctx, ds, "")
			if errs.Is(err, errs.DuplicateJob) || errs.Is(err, errs.DataSourceState) {
				return schedule.Skip(err)
			}
			return err
		},
		Every: cfg.Tick, Log: log,
	})
	if cfg.Now != nil {
		s.Now = cfg.Now
	}
	return s
}
