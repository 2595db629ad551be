// Package worker runs the tasks of cost jobs: it takes events.CostTask
// messages from the JetStream work queue (any replica takes a task; one
// not acknowledged within AckWait is delivered again), streams the task's
// Cost.get_data from the data source's plugin, and stores each cost row
// stamped with its job, task, data source and tenancy after the data
// source's rules changed it.
//
// What a task stores shows only once its job succeeds (package job,
// rows.go): a task that is cancelled, timed out, superseded or failed
// deletes its rows, a job that ends otherwise than SUCCESS has all its
// rows deleted, and every attempt starts by deleting what an earlier
// attempt of the task stored.
// Row ids are derived from the task and the row's position, so even two
// attempts running at once (a worker presumed dead that was only slow)
// never store a row twice. A watcher checks every second (Poll) that the
// job still runs and that the task is still this attempt's; what it finds
// stops the stream between two chunks, and cuts a stream that sends
// nothing.
//
// It holds no operation of the API.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/datasourcerule"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/job"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/rows"
)

// Config bounds the workers.
type Config struct {
	// Concurrency is how many tasks one replica runs at once.
	Concurrency int
	// AckWait is how long a task may go without a sign of life before
	// JetStream gives it to another worker (the worker signals progress
	// every AckWait/3 while it runs).
	AckWait time.Duration
	// MaxDeliver is how many times a task is tried when its plugin cannot
	// be reached; then the task fails.
	MaxDeliver int
	// Backoff is the delay before a retry of a task whose plugin could not
	// be reached.
	Backoff time.Duration
	// Poll is how often a running task checks its job between chunks that
	// do not come.
	Poll time.Duration
	// Progress is how often a running task's created_count is written
	// while rows come: at most once a Progress, never per chunk (each
	// write queues behind the store's writer; SUCCESS writes the count).
	Progress time.Duration
	// PurgeEvery is how often the ended leases of cost_locks are purged,
	// and KeepLocks how long after its end a lease is kept (see Run).
	PurgeEvery, KeepLocks time.Duration
}

// DefaultConfig: 4 tasks at once, 30 s without a sign of life.
func DefaultConfig() Config {
	return Config{Concurrency: 4, AckWait: 30 * time.Second, MaxDeliver: 5, Backoff: 5 * time.Second, Poll: time.Second,
		Progress: 2 * time.Second, PurgeEvery: time.Minute, KeepLocks: time.Hour}
}

// Worker consumes cost tasks.
type Worker struct {
	bus     *events.Bus
	db      *mongo.Database
	tasks   *mongo.Collection
	rows    *rows.Rows
	sources *mongo.Collection
	jobs    *job.Jobs
	rules   *datasourcerule.Rules
	plugins *plugin.Client
	keys    *seal.Keyring
	cfg     Config
	log     *slog.Logger
}

// New builds a worker.
func New(db *mongo.Database, bus *events.Bus, jobs *job.Jobs, rules *datasourcerule.Rules, plugins *plugin.Client, keys *seal.Keyring, cfg Config, log *slog.Logger) *Worker {
	d := DefaultConfig()
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = d.Concurrency
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = d.AckWait
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = d.MaxDeliver
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = d.Backoff
	}
	if cfg.Poll <= 0 {
		cfg.Poll = d.Poll
	}
	if cfg.Progress <= 0 {
		cfg.Progress = d.Progress
	}
	if cfg.PurgeEvery <= 0 {
		cfg.PurgeEvery = d.PurgeEvery
	}
	if cfg.KeepLocks <= 0 {
		cfg.KeepLocks = d.KeepLocks
	}
	return &Worker{bus: bus, db: db, tasks: db.Collection(core.TasksCollection), rows: rows.New(db),
		sources: db.Collection(core.DataSourcesCollection), jobs: jobs, rules: rules, plugins: plugins, keys: keys, cfg: cfg, log: log}
}

// Run consumes until ctx is done, Concurrency tasks at once. It waits for
// NATS when it is down. Meanwhile it purges cost_locks every PurgeEvery.
func (w *Worker) Run(ctx context.Context) error {
	// The schedule's fires take leases here (pkg/lease); an hour
	// (KeepLocks) is far above their TTL, as lease.Purge requires. The
	// scheduler's fire-once markers (schedule#<id>#<hour>) are no claims
	// and stay: pkg/schedule purges them after 48 h, so an hour never
	// fires twice.
	defer lease.PurgeEvery(ctx, w.db.Collection(core.LocksCollection), w.cfg.PurgeEvery, w.cfg.KeepLocks, w.log)()
	return events.Consume(ctx, w.bus, events.ConsumerSpec{Stream: events.JobStream, Consumer: jetstream.ConsumerConfig{
		Durable:       events.CostTaskConsumer,
		FilterSubject: events.CostTaskSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		MaxAckPending: 1024,
	},
		// A plugin that cannot be reached fails the task after MaxDeliver
		// tries (run reads the attempt); the store or the broker down is
		// tried until it returns or the job's timeout ends the task.
		MaxDeliver: events.Unbounded,
		DeadLetter: events.DeadRecords(w.db.Collection(core.DeadLettersCollection)),
		// The task's life shows from the message's receipt, not from its
		// stream's start: what comes before the stream (the task's lease,
		// waited for up to LockWait, the deletes of an earlier attempt's
		// rows, the reads of the data source, its secret and rules) can
		// take longer than AckWait on a loaded store, and the task was
		// then delivered again while this attempt went on: two attempts,
		// two get_data calls (TestSyncStoresCosts at load 14).
		Heartbeat: true,
	}, w.cfg.Concurrency, w.Handle)
}

// errStop ends a stream whose task must stop: the job no longer runs, or
// a newer attempt owns the task.
var errStop = errors.New("task stopped")

// Handle runs one task message to an outcome: done (the task done,
// failed or cancelled), or retried.
func (w *Worker) Handle(ctx context.Context, d events.Delivery) events.Outcome {
	var m events.CostTask
	if err := json.Unmarshal(d.Data, &m); err != nil || m.JobTaskID == "" {
		return events.Poison("malformed cost task")
	}
	if err := w.run(ctx, m, d.Attempt); err != nil {
		return events.RetryAfter(w.retries().Delay(d.Attempt), err)
	}
	return events.Done()
}

// run returns nil when the message is done with, an error to retry it.
func (w *Worker) run(ctx context.Context, m events.CostTask, attempt int) error {
	task, err := store.Get[core.Task](ctx, w.tasks, "job_task_id", m.JobTaskID)
	if errs.Is(err, errs.NotFoundCode) {
		return nil // deregistered
	}
	if err != nil {
		return err
	}
	if core.Finished(task.Status) {
		// A redelivery of a finished task: the settling may not have
		// happened (the worker died or the store failed after the task's
		// status was written); settling again is harmless.
		return w.jobs.Settle(ctx, task.JobID)
	}
	j, err := w.jobs.Load(ctx, task.JobID)
	if err != nil || j == nil {
		return err
	}
	if j.Status == core.InProgress {
		if _, err := w.jobs.Expire(ctx, j.JobID); err != nil {
			return err
		}
		if j, err = w.jobs.Load(ctx, j.JobID); err != nil || j == nil {
			return err
		}
	}
	if j.Status != core.InProgress {
		return w.abandon(ctx, task, core.Canceled, "", "The job is "+j.Status+".")
	}
	now := wire.T(wire.Now())
	owned, err := w.decide(ctx, task.ID, func(cur *core.Task) bson.D {
		if core.Finished(cur.Status) {
			return nil // an earlier attempt finished it meanwhile
		}
		return bson.D{{Key: "status", Value: core.InProgress}, {Key: "attempt", Value: attempt},
			{Key: "started_at", Value: now}, {Key: "created_count", Value: 0}}
	})
	if errs.Is(err, errs.NotFoundCode) {
		return nil // deregistered
	}
	if err != nil {
		return err
	}
	if !owned {
		return w.jobs.Settle(ctx, task.JobID)
	}
	task.Attempt = attempt
	// What an earlier attempt stored goes: this attempt stores it all again.
	if err := w.rows.Discard(ctx, task.ID); err != nil {
		return err
	}
	n, keys, err := w.stream(ctx, task, j)
	switch {
	case errors.Is(err, errStop):
		return w.stopped(ctx, task)
	case err != nil && ctx.Err() != nil:
		return err
	case err != nil:
		code, message := failure(err)
		if w.retries().Again(attempt, err) {
			_ = w.rows.Discard(context.WithoutCancel(ctx), task.ID)
			return err
		}
		// The task's rows go first, so a job seen FAILURE shows none; then
		// a MANUAL job fails at once, naming the task: its other tasks
		// stop (a USE_SERVICE_ACCOUNT_SECRET job goes on: job.TaskFailed).
		if err := w.rows.Discard(context.WithoutCancel(ctx), task.ID); err != nil {
			return err
		}
		if err := w.jobs.TaskFailed(ctx, j, "Task "+task.ID+" failed: "+code+": "+message); err != nil {
			return err
		}
		return w.abandon(ctx, task, core.Failure, code, message)
	}
	// The job may have been cancelled after the last chunk: the task then
	// keeps nothing either.
	if ok, err := w.current(ctx, task); err != nil {
		return err
	} else if !ok {
		return w.stopped(ctx, task)
	}
	done := wire.T(wire.Now())
	owned, err = w.decide(ctx, task.ID, func(cur *core.Task) bson.D {
		if cur.Attempt != task.Attempt || core.Finished(cur.Status) {
			return nil // a newer attempt took the task over: its rows are its own
		}
		return bson.D{{Key: "status", Value: core.Success}, {Key: "created_count", Value: n},
			{Key: "finished_at", Value: done}, {Key: "tag_keys", Value: keys[0]}, {Key: "additional_info_keys", Value: keys[1]},
			{Key: "data_keys", Value: keys[2]}}
	})
	if err != nil || !owned {
		return err
	}
	return w.jobs.Settle(ctx, j.JobID)
}

// decide reads the task and writes what set returns from it (nothing
// when nil) by a compare-and-set on what set read: the attempt and the
// status. A task redelivered while its first attempt still runs (the
// worker was only slow to show life) has two attempts at once; the newer
// must not claim a task the first just made SUCCESS, nor the first make
// SUCCESS a task the newer claimed and emptied (either way a job shown
// SUCCESS lost rows: TestSyncStoresCosts stored 8 of 10 at load 25). A
// lost set reads the task again and decides anew. It reports whether it
// wrote.
func (w *Worker) decide(ctx context.Context, taskID string, set func(cur *core.Task) bson.D) (bool, error) {
	for range maxDecideTries {
		cur, err := store.Get[core.Task](ctx, w.tasks, "job_task_id", taskID)
		if err != nil {
			return false, err
		}
		d := set(cur)
		if d == nil {
			return false, nil
		}
		res, err := w.tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: taskID}, {Key: "attempt", Value: cur.Attempt}, {Key: "status", Value: cur.Status}},
			bson.D{{Key: "$set", Value: d}})
		if err != nil {
			return false, store.Wrap(err)
		}
		if res.MatchedCount == 1 {
			return true, nil
		}
	}
	return false, errs.Down("the job task "+taskID, store.ErrConflict)
}

// maxDecideTries bounds decide's rounds: each lost one means another
// attempt moved the task on, which happens a few times at most.
const maxDecideTries = 10

// stopped ends a task that must stop: if a newer attempt owns it, that
// attempt's rows are not ours to touch; else its rows go and it is
// CANCELED. A task gone with its data source (deregister) has its rows
// deleted too: the chunks stored between deregister's delete of the costs
// and the worker noticing would otherwise stay, shown, for good.
func (w *Worker) stopped(ctx context.Context, task *core.Task) error {
	cur, err := store.Get[core.Task](ctx, w.tasks, "job_task_id", task.ID)
	if errs.Is(err, errs.NotFoundCode) {
		return w.rows.Discard(context.WithoutCancel(ctx), task.ID)
	}
	if err != nil {
		return err
	}
	if cur.Attempt != task.Attempt || core.Finished(cur.Status) {
		return nil
	}
	return w.abandon(ctx, task, core.Canceled, "", "The job stopped.")
}

// abandon deletes a task's rows and gives it a final status.
func (w *Worker) abandon(ctx context.Context, task *core.Task, status, code, message string) error {
	ctx = context.WithoutCancel(ctx)
	if err := w.rows.Discard(ctx, task.ID); err != nil {
		return err
	}
	if err := w.set(ctx, task.ID, bson.D{{Key: "status", Value: status}, {Key: "created_count", Value: 0},
		{Key: "error_code", Value: code}, {Key: "error_message", Value: message}, {Key: "finished_at", Value: wire.T(wire.Now())}}); err != nil {
		return err
	}
	return w.jobs.Settle(ctx, task.JobID)
}

func (w *Worker) set(ctx context.Context, id string, set bson.D) error {
	_, err := w.tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}})
	return store.Wrap(err)
}

// current reports whether the task may go on: its job runs and the task
// is still this attempt's.
func (w *Worker) current(ctx context.Context, task *core.Task) (bool, error) {
	j, err := w.jobs.Load(ctx, task.JobID)
	if err != nil || j == nil {
		return false, err
	}
	if j.Status != core.InProgress || time.Since(j.CreatedAt.Time) >= w.jobs.Timeout() {
		return false, nil
	}
	cur, err := store.Get[core.Task](ctx, w.tasks, "job_task_id", task.ID)
	if errs.Is(err, errs.NotFoundCode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return cur.Attempt == task.Attempt, nil
}

// stream runs Cost.get_data for the task and stores each chunk. It
// returns the rows stored and the tag, additional_info and data keys seen.
func (w *Worker) stream(ctx context.Context, task *core.Task, j *core.Job) (int, [3][]string, error) {
	var keys [3][]string
	ds, err := store.Get[core.DataSource](ctx, w.sources, "data_source_id", task.DataSourceID)
	if err != nil {
		if errs.Is(err, errs.NotFoundCode) {
			return 0, keys, errStop
		}
		return 0, keys, err
	}
	secret, err := w.jobs.TaskSecret(ctx, ds, task) // read again at each run, never kept
	if err != nil {
		return 0, keys, err
	}
	rules, err := w.rules.Of(ctx, ds.DataSourceID)
	if err != nil {
		return 0, keys, err
	}
	dir, err := w.jobs.Directory(ctx, j.JobID)
	if err != nil {
		return 0, keys, err
	}
	engine := datasourcerule.NewEngine(rules, dir, ds.WorkspaceID)
	currency, _ := ds.PluginInfo.Metadata["currency"].(string)
	if currency == "" {
		currency = "USD"
	}

	sctx, cancel := context.WithDeadline(ctx, j.CreatedAt.Add(w.jobs.Timeout()))
	defer cancel()
	wctx := context.WithoutCancel(sctx) // the chunk writes (see below)
	stopped := make(chan struct{})
	var watchErr error
	var halt atomic.Bool    // set by the watcher; read between two chunks
	var stored atomic.Int64 // rows stored so far, for the watcher's progress
	go func() {             // a stream that sends nothing still stops (the task's life is Handle's heartbeat)
		defer close(stopped)
		t := time.NewTicker(min(w.cfg.Poll, w.cfg.Progress))
		defer t.Stop()
		var written int64
		last := time.Now()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			// created_count while rows come, at most once a Progress: a
			// write per chunk waited behind the store's single writer
			// (SQLite) for each of a 100,000-row sync's ~100 chunks.
			// On wctx, as the chunk writes, and done before stream
			// returns (stopped), so it never lands after the final one.
			if n := stored.Load(); n != written && time.Since(last) >= w.cfg.Progress {
				if err := w.set(wctx, task.ID, bson.D{{Key: "created_count", Value: n}}); err == nil {
					written, last = n, time.Now()
				}
			}
			if ok, err := w.current(sctx, task); err == nil && !ok {
				watchErr = errStop
				halt.Store(true)
				cancel()
				return
			}
		}
	}()
	n := 0
	seen := [3]map[string]bool{{}, {}, {}}
	err = plugin.CostDataSource{Target: w.plugins.Plugin(ds.PluginInfo.PluginID, ds.PluginInfo.Version)}.GetData(sctx, plugin.CostDataRequest{
		Options: job.PluginOptions(ds), SecretData: secret, TaskOptions: task.Options, DomainID: ds.DomainID,
	}, func(chunk []map[string]any) error {
		// The watcher reads the job and the task every Poll; between two
		// chunks the worker only looks at what it found.
		if halt.Load() {
			return errStop
		}
		docs := make([]any, 0, len(chunk))
		for _, row := range chunk {
			c, err := Build(row, engine, ds, j, task, n+len(docs), currency)
			if err != nil {
				return err
			}
			for i, m := range []map[string]any{c.Tags, c.AdditionalInfo, c.Data} {
				for k := range m {
					seen[i][k] = true
				}
			}
			docs = append(docs, c)
		}
		if len(docs) > 0 {
			// Not cancelled with the stream: a write whose connection is
			// cut may still land after the cleanup that follows a stop
			// and leave its rows for good. It ends within the store's
			// operation timeout, and the next chunk sees halt.
			if err := w.rows.Stage(wctx, docs); err != nil {
				return err
			}
		}
		n += len(docs)
		stored.Store(int64(n))
		return nil
	})
	cancel()
	<-stopped
	if watchErr != nil && err != nil {
		err = errStop
	}
	if err != nil && errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = errStop // the job's time is up: the sweeper or the next check makes it TIMEOUT
		_, _ = w.jobs.Expire(context.WithoutCancel(ctx), j.JobID)
	}
	for i := range seen {
		for k := range seen[i] {
			keys[i] = append(keys[i], k)
		}
		slices.Sort(keys[i])
	}
	return n, keys, err
}

// retries is the tasks' policy for a plugin that cannot answer
// (plugin.Retryable): MaxDeliver tries, Backoff (±20%) apart.
func (w *Worker) retries() plugin.Policy {
	return plugin.Policy{Attempts: w.cfg.MaxDeliver, Base: w.cfg.Backoff, Max: w.cfg.Backoff, Jitter: 0.2}
}

// failure is the error_code and error_message a failed task keeps: the
// plugin's own code when it gave one.
func failure(err error) (string, string) {
	if f, ok := plugin.FailureOf(err); ok {
		if f.Code != "" {
			return f.Code, f.Message
		}
		return errs.PluginFailed, f.Message
	}
	if e, ok := errs.As(err); ok {
		return e.Code, e.Message
	}
	return errs.Unknown, err.Error()
}

// MissingBilledDate is the failure of a row without billed_date.
func MissingBilledDate(index int) error {
	return errs.New(errs.RequiredParameter, "Required parameter. (key = plugin_cost_data.billed_date, row = %d)", index)
}

// CostID is the id of the index-th row of a task: the same row of the
// same task always has the same id.
func CostID(taskID string, index int) string {
	return fmt.Sprintf("cost-%s-%d", strings.TrimPrefix(taskID, "job-task-"), index)
}

// Build turns one streamed CostInfo into the cost row stored: defaults
// filled, stamped with the task's job, data source, tenancy and trusted
// account (USE_SERVICE_ACCOUNT_SECRET), then changed by the rules. A row
// without billed_date (YYYY-MM-DD) fails the task. row is the caller's
// to give up: it is changed in place (a streamed row is decoded for this
// one use, and a copy per row is a sync's cost for nothing).
func Build(row map[string]any, engine *datasourcerule.Engine, ds *core.DataSource, j *core.Job, task *core.Task, index int, currency string) (*core.Cost, error) {
	bd, _ := row["billed_date"].(string)
	if bd == "" {
		return nil, MissingBilledDate(index)
	}
	if len(bd) < 10 || bd[4] != '-' || bd[7] != '-' {
		return nil, errs.Invalid("plugin_cost_data.billed_date", fmt.Sprintf("row %d: %q is not YYYY-MM-DD", index, bd))
	}
	bd = bd[:10]
	r := row
	r["workspace_id"] = ds.WorkspaceID
	if task.TrustedAccountID != "" {
		// The trusted account the task synced with, before the rules (as
		// upstream stamps the secret's service account); its workspace
		// when it has one and the data source is domain-wide.
		r["service_account_id"] = task.TrustedAccountID
		if ds.WorkspaceID == core.Global && task.AccountWorkspaceID != "" && task.AccountWorkspaceID != core.Global {
			r["workspace_id"] = task.AccountWorkspaceID
		}
	}
	engine.Run(r)
	str := func(k string) string { s, _ := r[k].(string); return s }
	num := func(k string) float64 { f, _ := r[k].(float64); return f }
	obj := func(k string) map[string]any { m, _ := r[k].(map[string]any); return wire.Object(m) }
	id := CostID(task.ID, index)
	ws := str("workspace_id")
	if ws == "" {
		ws = ds.WorkspaceID
	}
	if ds.WorkspaceID != core.Global {
		ws = ds.WorkspaceID // a WORKSPACE data source's costs stay in its workspace
	}
	return &core.Cost{ID: id, CostID: id, Cost: num("cost"), UsageQuantity: num("usage_quantity"), UsageUnit: str("usage_unit"),
		Provider: str("provider"), RegionCode: str("region_code"), Product: str("product"), UsageType: str("usage_type"),
		Resource: str("resource"), Tags: obj("tags"), AdditionalInfo: obj("additional_info"), Data: obj("data"),
		Currency: currency, BilledDate: bd, BilledMonth: bd[:7], BilledYear: bd[:4], ProjectID: str("project_id"),
		ServiceAccountID: str("service_account_id"), TrustedAccountID: task.TrustedAccountID, DataSourceID: ds.DataSourceID, JobID: j.JobID, JobTaskID: task.ID,
		WorkspaceID: ws, DomainID: ds.DomainID, CreatedAt: wire.T(wire.Now())}, nil
}
