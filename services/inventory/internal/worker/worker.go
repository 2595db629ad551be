// Package worker runs inventory job tasks from the JetStream work queue
// (events.InventoryTaskStream): any replica takes the next message; a
// message is acknowledged only once its outcome is stored, and one that
// is not (a worker killed, a store outage) comes back to any replica
// after AckWait, while a long task keeps its message with in-progress
// heartbeats.
//
// A task message asks the plugin for sub-tasks (Job.get_tasks) and
// queues one message per sub-task; a sub-task message runs one collect
// (package collectrun) and records what it counted. The last record of a
// task that succeeded runs its garbage collection (package garbage).
//
// Nothing counts twice when a message is delivered again: a sub-task's
// counts are stored once, as a record keyed by <job_task_id>-<n> (the
// first insert wins); task and job counters are computed from those
// records and the tasks' statuses, never incremented, and written under
// leases (pkg/lease, safe on MongoDB and FerretDB alike). At most the
// plugin's init concurrency of a job's sub-tasks run at once, across
// replicas (slots in the leases collection). A job past its timeout
// becomes FAILURE.
//
// It serves no operation and never logs secret data.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/services/inventory/internal/collectrun"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
	"github.com/nubes-io/nubes/services/inventory/internal/garbage"
)

// Config tunes the workers.
type Config struct {
	// Workers is how many messages one replica handles at once.
	Workers int
	// AckWait is when JetStream gives an unacknowledged message to another
	// worker; a running sub-task sends a heartbeat every AckWait/3.
	AckWait time.Duration
	// JobTimeout is how long a job may stay IN_PROGRESS before it becomes
	// FAILURE.
	JobTimeout time.Duration
	// SlotRetry is when a sub-task that found no free concurrency slot of
	// its job is tried again.
	SlotRetry time.Duration
	// Batch is how many streamed resources are matched and written
	// together.
	Batch int
	// MaxErrors is how many errors one sub-task keeps (the rest are
	// counted, not kept).
	MaxErrors int
	// SweepEvery is how often jobs past their timeout are looked for.
	SweepEvery time.Duration
	// Notify records the notification of a failed job for the domain's
	// admins (events.Outbox.Notify); nil: none.
	Notify *events.Outbox
}

// DefaultConfig: four messages at once, a minute of AckWait, jobs of two
// hours at most (upstream JOB_TIMEOUT).
func DefaultConfig() Config {
	return Config{Workers: 4, AckWait: time.Minute, JobTimeout: 2 * time.Hour, SlotRetry: 5 * time.Second, Batch: 200,
		MaxErrors: 100, SweepEvery: time.Minute}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.AckWait <= 0 {
		c.AckWait = d.AckWait
	}
	if c.JobTimeout <= 0 {
		c.JobTimeout = d.JobTimeout
	}
	if c.SlotRetry <= 0 {
		c.SlotRetry = d.SlotRetry
	}
	if c.Batch <= 0 {
		c.Batch = d.Batch
	}
	if c.MaxErrors <= 0 {
		c.MaxErrors = d.MaxErrors
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = d.SweepEvery
	}
	return c
}

// Worker runs job tasks.
type Worker struct {
	bus        *events.Bus
	jobs       *mongo.Collection
	tasks      *mongo.Collection
	collectors *mongo.Collection
	records    *mongo.Collection
	leases     *mongo.Collection
	dead       *mongo.Collection // the task messages given up on
	collect    *collectrun.Runner
	garbage    *garbage.Rosters
	identity   core.Identity
	plugins    *plugin.Client
	cfg        Config
	log        *slog.Logger
	holder     string // this replica's name in slots
}

// New builds a worker on db.
func New(db *mongo.Database, bus *events.Bus, identity core.Identity, plugins *plugin.Client, cfg Config, log *slog.Logger) *Worker {
	cfg = cfg.withDefaults()
	return &Worker{bus: bus, jobs: db.Collection(core.JobsCollection), tasks: db.Collection(core.JobTasksCollection),
		collectors: db.Collection(core.CollectorsCollection), records: db.Collection(core.RecordsCollection),
		leases: db.Collection(core.LeasesCollection), dead: db.Collection(core.DeadLettersCollection), collect: collectrun.New(db, plugins, collectrun.Config{Batch: cfg.Batch, MaxErrors: cfg.MaxErrors}),
		garbage: garbage.New(db), identity: identity, plugins: plugins, cfg: cfg, log: log, holder: holderName()}
}

// Run consumes task messages until ctx is done, Workers at once, each
// taking one message at a time so that a busy replica leaves the next
// message to an idle one. NATS being down at start or later only pauses
// it.
func (w *Worker) Run(ctx context.Context) error {
	return events.Consume(ctx, w.bus, events.ConsumerSpec{Stream: events.InventoryTaskStream, Consumer: jetstream.ConsumerConfig{
		Durable:       events.InventoryTaskConsumer,
		FilterSubject: events.InventoryTaskSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		MaxAckPending: 10000,
	},
		// Deliveries are not bounded: a sub-task waiting for a slot comes
		// back many times, and the job's timeout ends every task.
		MaxDeliver: events.Unbounded,
		DeadLetter: events.DeadRecords(w.dead),
		// The message stays this worker's while it runs, however long the
		// plugin streams or a task takes to finish.
		Heartbeat: true,
	}, w.cfg.Workers, w.handle)
}

// retries is the tasks' policy: a plugin that cannot answer
// (plugin.Retryable) is tried three times before its sub-task fails; the
// wait after each failure, the store's or the plugin's, doubles from 2 s
// up to a minute (±20%).
var retries = plugin.Policy{Attempts: 3, Base: 2 * time.Second, Max: time.Minute, Jitter: 0.2}

// errWait: the sub-task waits for a concurrency slot of its job.
var errWait = errors.New("no free concurrency slot")

func (w *Worker) handle(ctx context.Context, d events.Delivery) events.Outcome {
	var t events.InventoryTask
	if err := json.Unmarshal(d.Data, &t); err != nil || t.JobID == "" || t.JobTaskID == "" {
		return events.Poison("malformed inventory task")
	}
	err := w.run(ctx, t, d.Attempt)
	switch {
	case err == nil:
		return events.Done()
	case errors.Is(err, errWait):
		return events.RetryAfter(w.cfg.SlotRetry, err)
	default:
		w.log.Warn("inventory task failed; retried", "id", t.ID, "job_id", t.JobID, "delivery", d.Attempt, "error", err.Error())
		return events.RetryAfter(retries.Delay(d.Attempt), err)
	}
}
