package job

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// A job's rows are shown whole or not at all (package rows): a job is
// created Pending; the write that makes it SUCCESS records its Swap
// windows (rows.SwapWindows); Tidy then has the rows deleted that the
// reads already leave out (rows.Publish, rows.Discard) and clears
// Pending, the last write.

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
		if err := js.rows.Publish(ctx, j); err != nil {
			return err
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
		if err := js.rows.Discard(ctx, j.TaskIDs...); err != nil {
			return err
		}
	}
	_, err := js.change(ctx, j.JobID, func(cur *Job) error {
		cur.Pending, cur.Swap = false, nil
		return nil
	})
	return err
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
