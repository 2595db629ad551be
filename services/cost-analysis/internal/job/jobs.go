// Package job holds the cost jobs of the cost-analysis service (spec part
// 2, /cost-analysis/v1/job; plugin-protocols.md section 5): a sync of a
// data source creates a job, the plugin's Job.get_tasks splits it into
// tasks, the tasks go through the outbox to the JetStream work queue, and
// the workers (package worker) report back here.
//
// A job's record changes by compare-and-set on its version (change), so
// cancel, timeout, a failing task and the settling of the counters never
// overwrite one another. Its
// counters are recomputed from its tasks' records, each written by the
// one worker that owns the task, so no task is ever counted twice.
//
// It must not stream costs (package worker does).
package job

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/trusted"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/datasourcerule"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/rows"
)

// Error codes a job or task keeps (upstream's names).
const (
	GetJobTasksFailed = "ERROR_GET_JOB_TASKS"
	JobTaskFailed     = "ERROR_JOB_TASK"
	JobTimeout        = "ERROR_JOB_TIMEOUT"
)

// Job is the JobInfo sent.
type Job = core.Job

var resource = query.Resource{
	KeywordFields: []string{"job_id", "data_source_id"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"job_id", "status", "total_tasks", "remained_tasks", "data_source_id", "created_at", "finished_at"},
	Fields:        query.FieldsOf[Job](),
	Tenancy:       core.DataSourceTenancy,
	Maps:          freeform.FieldsOf[Job](),
}

type (
	jobRequest struct {
		JobID string `json:"job_id" v:"required,max=64"`
	}
	jobQuery struct {
		Query        *query.Query `json:"query"`
		JobID        string       `json:"job_id"`
		Status       string       `json:"status" v:"enum=IN_PROGRESS|SUCCESS|FAILURE|TIMEOUT|CANCELED"`
		WorkspaceID  string       `json:"workspace_id"`
		DataSourceID string       `json:"data_source_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Config bounds the jobs.
type Config struct {
	// Timeout is how long a job may run before it becomes TIMEOUT.
	Timeout time.Duration
	// SweepEvery is how often running jobs are checked for the timeout.
	SweepEvery time.Duration
	// Hook, for tests only (nil otherwise), is called where a test forces
	// an interleaving: "settle" as Settle is about to change a job,
	// "settle:final" once it found the job done, before its write,
	// "settle:done" after its SUCCESS landed, and "cancel" as a cancel is
	// about to change it.
	Hook func(point, jobID string)
}

func (c Config) hook(point, jobID string) {
	if c.Hook != nil {
		c.Hook(point, jobID)
	}
}

// DefaultConfig: upstream's 600 s.
func DefaultConfig() Config { return Config{Timeout: 600 * time.Second, SweepEvery: 10 * time.Second} }

// Jobs serves the job operations and runs the jobs' bookkeeping.
type Jobs struct {
	db                                *mongo.Database
	jobs, tasks, costs, sources, dirs *mongo.Collection
	rows                              *rows.Rows
	plugins                           *plugin.Client
	keys                              *seal.Keyring
	rules                             *datasourcerule.Rules
	identity                          *call.Client
	trusted                           trusted.Identity
	outbox                            *events.Outbox
	cfg                               Config
	log                               *slog.Logger
}

// New creates the collections' indexes (the cost rows' where the store
// reads them: costIndexes, store.EnsureIndexes). Without an outbox (no event bus)
// a sync answers 503.
func New(ctx context.Context, db *mongo.Database, plugins *plugin.Client, keys *seal.Keyring, rules *datasourcerule.Rules,
	identity, secrets *call.Client, outbox *events.Outbox, cfg Config, log *slog.Logger) (*Jobs, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultConfig().Timeout
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = min(DefaultConfig().SweepEvery, cfg.Timeout/2)
	}
	js := &Jobs{db: db, jobs: db.Collection(core.JobsCollection), tasks: db.Collection(core.TasksCollection),
		costs: db.Collection(core.CostsCollection), rows: rows.New(db), sources: db.Collection(core.DataSourcesCollection),
		dirs: db.Collection(core.DirectoriesCollection), plugins: plugins, keys: keys, rules: rules,
		identity: identity, trusted: trusted.Identity{Client: identity, Secrets: secrets}, outbox: outbox, cfg: cfg, log: log}
	if err := store.EnsureIndexes(ctx, js.jobs,
		store.Index{Keys: bson.D{{Key: "data_source_id", Value: 1}, {Key: "status", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "status", Value: 1}, {Key: "created_at", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "pending", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "pending", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "failure_notice", Value: 1}}},
	); err != nil {
		return nil, err
	}
	if err := store.EnsureIndexes(ctx, js.tasks, store.Index{Keys: bson.D{{Key: "job_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "data_source_id", Value: 1}}}); err != nil {
		return nil, err
	}
	return js, store.EnsureIndexes(ctx, js.costs, costIndexes...)
}

// Timeout is how long a job may run.
func (js *Jobs) Timeout() time.Duration { return js.cfg.Timeout }

// Routes are the operations.
func (js *Jobs) Routes() []api.Route {
	const base = "/cost-analysis/v1/job/"
	return []api.Route{
		api.Op[jobRequest, Job]{Path: base + "cancel", Access: core.Readers, Summary: "Cancel a running job: it is CANCELED at once; its workers stop between two chunks; none of its rows shows, and they are deleted.", Handle: js.cancel},
		api.Op[jobRequest, Job]{Path: base + "get", Access: core.Readers, Summary: "Get a cost job.", Handle: js.get},
		api.Op[jobQuery, api.List[Job]]{Path: base + "list", Access: core.Readers, Summary: "List the cost jobs the caller may see.", Handle: js.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the cost jobs the caller may see.", Handle: js.stat},
	}
}

// Load reads a job by id (nil when it is gone).
func (js *Jobs) Load(ctx context.Context, id string) (*Job, error) {
	j, err := store.Get[Job](ctx, js.jobs, "job_id", id)
	if errs.Is(err, errs.NotFoundCode) {
		return nil, nil
	}
	return j, err
}

func (js *Jobs) load(ctx context.Context, p *auth.Principal, id string) (*Job, error) {
	return store.GetFor[Job](ctx, js.jobs, resource, p, "job_id", id)
}

func (js *Jobs) get(ctx context.Context, p *auth.Principal, r *jobRequest) (*Job, error) {
	return js.load(ctx, p, r.JobID)
}

func (js *Jobs) list(ctx context.Context, p *auth.Principal, r *jobQuery) (*api.List[Job], error) {
	q := query.With(r.Query, query.Params("job_id", r.JobID, "status", r.Status, "workspace_id", r.WorkspaceID, "data_source_id", r.DataSourceID)...)
	return store.SearchFor[Job](ctx, js.jobs, q, resource, p)
}

func (js *Jobs) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, js.jobs, p, resource, r.Query)
	return &res, err
}

// cancel: only an IN_PROGRESS job (409 ERROR_JOB_STATE otherwise).
// Workspace members may cancel (semantics.md §4.4); a job of a DOMAIN
// data source stays the domain admin's (store.GetToChange: 403).
func (js *Jobs) cancel(ctx context.Context, p *auth.Principal, r *jobRequest) (*Job, error) {
	j, err := store.GetToChange[Job](ctx, js.jobs, resource, p, "job_id", r.JobID)
	if err != nil {
		return nil, err
	}
	js.cfg.hook("cancel", j.JobID)
	ch, err := js.change(ctx, j.JobID, func(j *Job) error {
		if j.Status != core.InProgress {
			return errs.New(errs.JobState, "Only running jobs can be canceled. (job_id = %s, status = %s)", j.JobID, j.Status)
		}
		finish(j, core.Canceled, "", "")
		return nil
	})
	return ch.After, err
}

// finish sets a job's final status.
func finish(j *Job, status, code, message string) {
	now := wire.T(wire.Now())
	j.Status, j.ErrorCode, j.ErrorMessage, j.UpdatedAt, j.FinishedAt = status, code, message, now, &now
}

// notifyFailure asks for a notification of the domain's admins that the
// job failed (one per job: its id is the job's).
func (js *Jobs) notifyFailure(ctx context.Context, j *Job) error {
	if js.outbox == nil {
		return nil
	}
	err := js.outbox.Notify(ctx, events.NotificationRequest{ID: "failed-" + j.JobID, DomainID: j.DomainID, WorkspaceID: j.WorkspaceID,
		DomainAdmins: true, Topic: "cost_analysis.Job", NotificationType: events.NotifyError, Level: events.LevelAll,
		Message: events.NotificationMessage{Title: "[Cost Analysis] Data source sync failed", Description: strings.TrimSpace(j.ErrorCode + " " + j.ErrorMessage),
			Tags:       []events.MessageTag{{Key: "Job", Value: j.JobID}, {Key: "Data Source", Value: j.DataSourceID}},
			OccurredAt: wire.FormatTime(wire.Now())}})
	return store.Wrap(err)
}

// change runs fn on the fresh job and writes what it changed if nobody
// wrote the job since it was read (store.Change: a compare-and-set on its
// version; fn runs again on a lost race, so a cancel and a SUCCESS never
// land over each other). What follows a job's end is decided from the job
// before and after the write, and done after it: the data source may
// start its next job (claim.go), and a job that turned FAILURE has its
// notice sent, marked pending in the same write (failure_notice) so that
// the sweep sends one a crash cut off.
func (js *Jobs) change(ctx context.Context, jobID string, fn func(j *Job) error) (store.Changed[Job], error) {
	ch, err := store.Change(ctx, js.jobs, "job_id", jobID, func(j *Job) error {
		was := j.Status
		if err := fn(j); err != nil {
			return err
		}
		if was != core.Failure && j.Status == core.Failure {
			j.FailureNotice = true
		}
		return nil
	})
	if err != nil || !ch.Wrote {
		return ch, err
	}
	if ch.Before.Status == core.InProgress && ch.After.Status != core.InProgress {
		if err := js.releaseSource(ctx, ch.After.DataSourceID, ch.After.JobID); err != nil {
			js.log.Warn("data source's running job not cleared", "job_id", ch.After.JobID, "error", err.Error())
		}
	}
	if ch.After.FailureNotice && !ch.Before.FailureNotice {
		if err := js.sendFailureNotice(ctx, ch.After); err != nil {
			js.log.Warn("cost job failure notice left to the sweep", "job_id", ch.After.JobID, "error", err.Error())
		}
	}
	return ch, nil
}

// noticeGrace is how long a failed job's notice is left to the write
// that failed it before the sweep sends it.
const noticeGrace = time.Minute

// sendLeftNotices sends the failure notices that a crash between a job's
// failing write and its notice left pending.
func (js *Jobs) sendLeftNotices(ctx context.Context) {
	cur, err := js.jobs.Find(ctx, bson.D{{Key: "failure_notice", Value: true},
		{Key: "finished_at", Value: bson.D{{Key: "$lt", Value: wire.Now().Add(-noticeGrace)}}}})
	if err != nil {
		js.log.Warn("cost job sweep", "error", err.Error())
		return
	}
	var left []Job
	if err := cur.All(ctx, &left); err != nil {
		js.log.Warn("cost job sweep", "error", err.Error())
		return
	}
	for i := range left {
		if err := js.sendFailureNotice(ctx, &left[i]); err != nil && ctx.Err() == nil {
			js.log.Warn("cost job failure notice not sent", "job_id", left[i].JobID, "error", err.Error())
		}
	}
}

// sendFailureNotice records the notice of a failed job in the outbox (its
// id is the job's: sent twice, it is one notice) and clears the job's
// pending mark.
func (js *Jobs) sendFailureNotice(ctx context.Context, j *Job) error {
	if err := js.notifyFailure(ctx, j); err != nil {
		return err
	}
	_, err := js.jobs.UpdateOne(ctx, bson.D{{Key: "_id", Value: j.ID}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "failure_notice", Value: ""}}}})
	return store.Wrap(err)
}

// Fail makes a running job FAILURE at once (a task failed): its other
// tasks stop at their next chunk.
func (js *Jobs) Fail(ctx context.Context, jobID, code, message string) error {
	_, err := js.change(ctx, jobID, func(j *Job) error {
		if j.Status == core.InProgress {
			finish(j, core.Failure, code, message)
		}
		return nil
	})
	return err
}

// TaskFailed is what a failed task does to its running job
// (plugin-protocols.md 5: "job → ERROR_JOB_TASK unless
// USE_SERVICE_ACCOUNT_SECRET"): a MANUAL job fails at once, so its other
// tasks stop; a USE_SERVICE_ACCOUNT_SECRET job goes on with its other
// accounts and the task alone is FAILURE (Settle).
func (js *Jobs) TaskFailed(ctx context.Context, j *Job, message string) error {
	if j.SecretType == core.UseServiceAccountSecret {
		return nil
	}
	return js.Fail(ctx, j.JobID, JobTaskFailed, message)
}

// Expire makes a running job past its timeout TIMEOUT; it reports whether
// the job is (now) finished.
func (js *Jobs) Expire(ctx context.Context, jobID string) (bool, error) {
	ch, err := js.change(ctx, jobID, func(j *Job) error {
		if j.Status == core.InProgress && time.Since(j.CreatedAt.Time) >= js.cfg.Timeout {
			finish(j, core.Timeout, JobTimeout, "The job ran longer than "+js.cfg.Timeout.String()+".")
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return ch.After.Status != core.InProgress, nil
}

// Sweep makes running jobs past their timeout TIMEOUT and tidies finished
// jobs whose rows are not settled (Tidy), every SweepEvery, until ctx is
// done (a worker of every replica; each change is idempotent).
func (js *Jobs) Sweep(ctx context.Context) error {
	t := time.NewTicker(js.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := js.jobs.Find(ctx, bson.D{{Key: "status", Value: core.InProgress},
			{Key: "created_at", Value: bson.D{{Key: "$lt", Value: wire.Now().Add(-js.cfg.Timeout)}}}})
		if err != nil {
			js.log.Warn("cost job sweep", "error", err.Error())
			continue
		}
		var late []Job
		if err := cur.All(ctx, &late); err != nil {
			js.log.Warn("cost job sweep", "error", err.Error())
			continue
		}
		for _, j := range late {
			if _, err := js.Expire(ctx, j.JobID); err != nil && ctx.Err() == nil {
				js.log.Warn("cost job not expired", "job_id", j.JobID, "error", err.Error())
			}
		}
		js.sendLeftNotices(ctx)
		js.tidyAll(ctx)
	}
}

// Settle recounts a job's remaining tasks from its tasks' records and
// finishes a running job whose tasks are all done: SUCCESS (the data
// source's last sync and cost keys updated) or FAILURE when a task
// failed. A USE_SERVICE_ACCOUNT_SECRET job is SUCCESS even then
// (TaskFailed), and the windows of an account whose task failed are not
// swapped: nothing came to replace its old costs. The write that makes
// the job SUCCESS swaps its windows (rows.go); a finished job whose tasks
// are all done is then tidied.
func (js *Jobs) Settle(ctx context.Context, jobID string) error {
	var keys [3][]string
	js.cfg.hook("settle", jobID)
	ch, err := js.change(ctx, jobID, func(j *Job) error {
		// Decided again from scratch when another write came first.
		keys = [3][]string{}
		tasks, err := js.TasksOf(ctx, j)
		if err != nil {
			return err
		}
		remained, failed, canceled := 0, 0, 0
		failedAccounts := map[string]bool{}
		for _, t := range tasks {
			switch t.Status {
			case core.Pending, core.InProgress:
				remained++
			case core.Canceled:
				canceled++
			case core.Failure:
				failed++
				if t.TrustedAccountID != "" {
					failedAccounts[t.TrustedAccountID] = true
				}
			}
			keys[0], keys[1], keys[2] = union(keys[0], t.TagKeys), union(keys[1], t.AdditionalInfoKeys), union(keys[2], t.DataKeys)
		}
		j.RemainedTasks = remained
		if j.Status != core.InProgress || remained > 0 {
			j.UpdatedAt = wire.T(wire.Now())
			return nil
		}
		js.cfg.hook("settle:final", j.JobID)
		if canceled > 0 {
			// A task is CANCELED under a running job when its worker saw
			// the job's time up before the sweeper did (worker.current):
			// its rows are gone, so the job ends TIMEOUT, never SUCCESS.
			// Seen otherwise (another replica's clock), the sweeper ends it.
			if time.Since(j.CreatedAt.Time) >= js.cfg.Timeout {
				finish(j, core.Timeout, JobTimeout, "The job ran longer than "+js.cfg.Timeout.String()+".")
			} else {
				j.UpdatedAt = wire.T(wire.Now())
			}
			return nil
		}
		if failed > 0 && j.SecretType != core.UseServiceAccountSecret {
			finish(j, core.Failure, JobTaskFailed, "A task of the job failed.")
			return nil
		}
		if failed > 0 {
			js.log.Info("cost job succeeded with failed tasks (USE_SERVICE_ACCOUNT_SECRET)", "job_id", j.JobID, "failed_tasks", failed)
		}
		// Two workers settling the last two tasks at once: the one whose
		// write comes second decides again and sees both finished.
		j.Swap = rows.SwapWindows(j, tasks, WindowAccountKey, failedAccounts)
		finish(j, core.Success, "", "")
		return nil
	})
	if err != nil {
		return err
	}
	after := ch.After
	if ch.Wrote && ch.Before.Status == core.InProgress && after.Status == core.Success {
		js.cfg.hook("settle:done", after.JobID)
		if err := js.synced(ctx, after.DataSourceID, keys); err != nil {
			return err
		}
	}
	if after.Pending && after.Status != core.InProgress && after.RemainedTasks == 0 {
		return js.Tidy(ctx, after)
	}
	return nil
}

func union(a, b []string) []string {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	return a
}

// synced records a finished sync on the data source: last_synchronized_at
// and the cost keys seen.
func (js *Jobs) synced(ctx context.Context, dataSourceID string, keys [3][]string) error {
	_, err := store.Change(ctx, js.sources, "data_source_id", dataSourceID, func(ds *core.DataSource) error {
		now := wire.T(wire.Now())
		ds.LastSynchronizedAt = &now
		ds.CostTagKeys = sorted(union(ds.CostTagKeys, keys[0]))
		ds.CostAdditionalInfoKeys = sorted(union(ds.CostAdditionalInfoKeys, keys[1]))
		ds.CostDataKeys = sorted(union(ds.CostDataKeys, keys[2]))
		return nil
	})
	if errs.Is(err, errs.NotFoundCode) {
		return nil // deregistered meanwhile
	}
	return err
}

func sorted(s []string) []string {
	if s == nil {
		return []string{}
	}
	slices.Sort(s)
	return s
}

// TasksOf reads a job's tasks by _id.
func (js *Jobs) TasksOf(ctx context.Context, j *Job) ([]core.Task, error) {
	if len(j.TaskIDs) == 0 {
		return nil, nil
	}
	cur, err := js.tasks.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: j.TaskIDs}}}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	var out []core.Task
	return out, store.Wrap(cur.All(ctx, &out))
}

// OpenSecret unseals a data source's secret data ({} when it has none).
func OpenSecret(keys *seal.Keyring, ds *core.DataSource) (map[string]any, error) {
	secret := map[string]any{}
	if ds.Sealed == nil {
		return secret, nil
	}
	if keys == nil {
		return nil, errs.Down("The data source's secret data", errors.New("no encryption keys configured"))
	}
	if err := keys.OpenJSON(*ds.Sealed, core.AD(ds.ID, ds.DomainID), &secret); err != nil {
		return nil, errs.Down("The data source's secret data", err)
	}
	return secret, nil
}

// PluginOptions are the options sent to the plugin: the data source's,
// with secret_type added as upstream does.
func PluginOptions(ds *core.DataSource) map[string]any {
	out := map[string]any{}
	for k, v := range ds.PluginInfo.Options {
		out[k] = v
	}
	st := ds.SecretType
	if st == "" {
		st = "MANUAL"
	}
	out["secret_type"] = st
	return out
}
