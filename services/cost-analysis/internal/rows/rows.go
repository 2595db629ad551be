// Package rows is the one room of a sync's cost rows and of the rule that
// a job's rows are shown whole or not at all (docs/decisions.md, "Cost
// visibility, deletes and bounds"). The store has no multi-document
// transaction, so the job record is the marker the reads go by:
//
//	Stage    a task stores its rows, stamped with its job: while the job
//	         is Pending and not SUCCESS, reads leave them out
//	Discard  a task's (or a job's) rows go: an attempt run again, a task
//	         failed or stopped
//	Publish  the write that makes a job SUCCESS records its swap windows
//	         (SwapWindows), whose rows of other jobs reads leave out from
//	         then on; Publish deletes those rows, after which the job's
//	         Pending mark is cleared (the job package's Tidy)
//	Visible  a read leaves out what the marks hide, and runs again when
//	         they changed while it ran
//
// It must not decide a job's or a task's state: that is the job and
// worker packages'.
package rows

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// Rows reads and writes the cost rows of syncs.
type Rows struct {
	costs, jobs, sources *mongo.Collection
}

// New is the rows of db.
func New(db *mongo.Database) *Rows {
	return &Rows{costs: db.Collection(core.CostsCollection), jobs: db.Collection(core.JobsCollection),
		sources: db.Collection(core.DataSourcesCollection)}
}

// Stage stores rows of a task; a row stored already (the same _id, from
// a write whose answer was lost) is no error.
func (r *Rows) Stage(ctx context.Context, docs []any) error {
	if len(docs) == 0 {
		return nil
	}
	if _, err := r.costs.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil && !store.OnlyDuplicates(err) {
		return store.Wrap(err)
	}
	return nil
}

// Discard deletes the rows of the tasks taskIDs.
func (r *Rows) Discard(ctx context.Context, taskIDs ...string) error {
	if len(taskIDs) == 0 {
		return nil
	}
	_, err := r.costs.DeleteMany(ctx, bson.D{{Key: "job_task_id", Value: bson.D{{Key: "$in", Value: taskIDs}}}})
	return store.Wrap(err)
}

// Publish deletes the rows a SUCCESS job's swap windows replace (the
// reads leave them out already).
func (r *Rows) Publish(ctx context.Context, j *core.Job) error {
	for _, c := range j.Swap {
		f, ok := WindowFilter(j.DataSourceID, j.DomainID, j.JobID, c)
		if !ok {
			continue
		}
		if _, err := r.costs.DeleteMany(ctx, f); err != nil {
			return store.Wrap(err)
		}
	}
	return nil
}

// SwapWindows are the windows a succeeding job replaces: the job's
// changed windows and those of its succeeded tasks, except the windows of
// a trusted account whose task failed (nothing came to replace its old
// costs; accountKey names the account in a window's filter).
func SwapWindows(j *core.Job, tasks []core.Task, accountKey string, failedAccounts map[string]bool) []core.Changed {
	out := []core.Changed{}
	add := func(c core.Changed) {
		if a, _ := c.Filter[accountKey].(string); a != "" && failedAccounts[a] {
			return
		}
		if _, ok := WindowFilter(j.DataSourceID, j.DomainID, j.JobID, c); ok {
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
