package job

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// A job's rows are shown whole or not at all (docs/decisions.md, "Cost
// visibility, deletes and bounds"). FerretDB has no multi-document
// transaction, so the job record is the marker the cost reads go by
// (package cost): a job is created Pending; while it is Pending and not
// SUCCESS its rows are left out; the write that makes it SUCCESS also
// records its Swap windows, whose rows of other jobs are left out from
// that write on. Tidy then deletes what the readers already leave out and
// clears Pending, the last write.

// swapWindows are the windows a succeeding job replaces: the job's
// changed windows and those of its succeeded tasks, except the windows of
// a trusted account whose task failed (nothing came to replace its old
// costs).
func swapWindows(j *Job, tasks []core.Task, failedAccounts map[string]bool) []core.Changed {
	out := []core.Changed{}
	add := func(c core.Changed) {
		if a, _ := c.Filter[WindowAccountKey].(string); a != "" && failedAccounts[a] {
			return
		}
		if _, ok := core.WindowFilter(j.DataSourceID, j.DomainID, j.JobID, c); ok {
			out = append(out, c)
		}
	}
	for _, c := range j.Changed {
		add(c)
	}
	for _, t := range tasks {
		if t.Status == core.Success && t.Changed != nil {
			add(*t.Changed)
		}
	}
	return out
}

// Tidy settles the rows of a finished Pending job and clears Pending: a
// SUCCESS job's swapped-out rows are deleted; another job's own rows are
// deleted once none of its tasks can still store any (every task
// finished, or the job finished longer than the timeout ago). It is
// idempotent: a failed Tidy is run again by the next Settle of the job,
// the sweeper or the data source's next sync.
func (js *Jobs) Tidy(ctx context.Context, j *Job) error {
	if !j.Pending || j.Status == core.InProgress {
		return nil
	}
	if j.Status == core.Success {
		for _, c := range j.Swap {
			f, ok := core.WindowFilter(j.DataSourceID, j.DomainID, j.JobID, c)
			if !ok {
				continue
			}
			if _, err := js.costs.DeleteMany(ctx, f); err != nil {
				return store.Wrap(err)
			}
		}
	} else {
		tasks, err := js.TasksOf(ctx, j)
		if err != nil {
			return err
		}
		late := j.FinishedAt != nil && time.Since(j.FinishedAt.Time) > js.cfg.Timeout
		for _, t := range tasks {
			if !core.Finished(t.Status) && !late {
				return nil // its worker may still store rows: the last task's Settle tidies
			}
		}
		if len(j.TaskIDs) > 0 {
			if _, err := js.costs.DeleteMany(ctx, bson.D{{Key: "job_task_id", Value: bson.D{{Key: "$in", Value: j.TaskIDs}}}}); err != nil {
				return store.Wrap(err)
			}
		}
	}
	return js.change(ctx, j.JobID, func(cur *Job) (bson.D, error) {
		if !cur.Pending {
			return nil, nil
		}
		return bson.D{{Key: "pending", Value: false}, {Key: "swap", Value: bson.A{}}}, nil
	}, nil)
}

// tidySource tidies the finished Pending jobs of a data source; a SUCCESS
// one left Pending means its swapped-out rows are not all deleted yet,
// and Start must not begin a job whose rows that swap would hide.
func (js *Jobs) tidySource(ctx context.Context, dataSourceID string) error {
	pending, err := js.pendingOf(ctx, bson.D{{Key: "data_source_id", Value: dataSourceID}, {Key: "pending", Value: true}})
	if err != nil {
		return err
	}
	for i := range pending {
		if err := js.Tidy(ctx, &pending[i]); err != nil {
			return err
		}
	}
	return nil
}

// swapPending reports whether a data source has a SUCCESS job whose
// swapped-out rows are not all deleted.
func (js *Jobs) swapPending(ctx context.Context, dataSourceID string) (bool, error) {
	pending, err := js.pendingOf(ctx, bson.D{{Key: "data_source_id", Value: dataSourceID}, {Key: "pending", Value: true}})
	if err != nil {
		return false, err
	}
	for _, j := range pending {
		if j.Status == core.Success {
			return true, nil
		}
	}
	return false, nil
}

func (js *Jobs) pendingOf(ctx context.Context, filter bson.D) ([]Job, error) {
	cur, err := js.jobs.Find(ctx, filter)
	if err != nil {
		return nil, store.Wrap(err)
	}
	var out []Job
	return out, store.Wrap(cur.All(ctx, &out))
}

// tidyAll is the sweeper's pass: every finished Pending job is tidied.
func (js *Jobs) tidyAll(ctx context.Context) {
	pending, err := js.pendingOf(ctx, bson.D{{Key: "pending", Value: true}})
	if err != nil {
		js.log.Warn("cost job tidy", "error", err.Error())
		return
	}
	for i := range pending {
		if err := js.Tidy(ctx, &pending[i]); err != nil && ctx.Err() == nil {
			if errs.Is(err, errs.NotFoundCode) {
				continue // deregistered meanwhile
			}
			js.log.Warn("cost job not tidied", "job_id", pending[i].JobID, "error", err.Error())
		}
	}
}
