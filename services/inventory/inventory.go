// Package inventory is the inventory service: collectors, cloud service
// types, jobs and job tasks (spec part 2, /inventory/v1), the workers that
// run collection jobs against collector plugins, the hourly schedules,
// and read access to what was collected (cloud-service list, get, stat:
// Nubes' addition).
//
// New, Build and FromEnv are its public surface; everything else is
// internal. It calls identity (workspaces, trusted accounts and, with the
// service credential, their secret data) and repository (plugins)
// through service_urls and never reads their collections.
package inventory

import (
	"context"
	"log/slog"
	"time"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/trusted"
	"github.com/nubes-io/nubes/services/inventory/internal/cloudservice"
	"github.com/nubes-io/nubes/services/inventory/internal/cloudservicetype"
	"github.com/nubes-io/nubes/services/inventory/internal/collector"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
	"github.com/nubes-io/nubes/services/inventory/internal/job"
	"github.com/nubes-io/nubes/services/inventory/internal/jobtask"
	"github.com/nubes-io/nubes/services/inventory/internal/worker"
)

// Name is the service name.
const Name = "inventory"

// Config configures the inventory rules and workers.
type Config struct {
	// Workers is how many task messages one replica runs at once.
	Workers int
	// AckWait is when an unacknowledged task message goes to another
	// worker (a running task sends heartbeats every AckWait/3).
	AckWait time.Duration
	// JobTimeout is how long a job may run before it becomes FAILURE.
	JobTimeout time.Duration
	// SlotRetry is when a task waiting for a concurrency slot of its job
	// is tried again.
	SlotRetry time.Duration
	// ScheduleTick is how often schedules are looked at.
	ScheduleTick time.Duration
	// SweepEvery is how often jobs past their timeout are ended.
	SweepEvery time.Duration
	// Batch is how many streamed resources are written together.
	Batch int
	// NoWorkers builds the API without workers, schedules or sweeps
	// (tests that drive the workers themselves).
	NoWorkers bool
}

// DefaultConfig is the configuration with every default.
func DefaultConfig() Config {
	w := worker.DefaultConfig()
	return Config{Workers: w.Workers, AckWait: w.AckWait, JobTimeout: w.JobTimeout, SlotRetry: w.SlotRetry,
		ScheduleTick: 30 * time.Second, SweepEvery: w.SweepEvery, Batch: w.Batch}
}

// Settings are inventory's keys on top of config.Base.
type Settings struct {
	config.Base  `mapstructure:",squash"`
	Workers      int           `mapstructure:"inventory_workers"`
	AckWait      time.Duration `mapstructure:"inventory_ack_wait"`
	JobTimeout   time.Duration `mapstructure:"inventory_job_timeout"`
	SlotRetry    time.Duration `mapstructure:"inventory_slot_retry"`
	ScheduleTick time.Duration `mapstructure:"inventory_schedule_tick"`
	Batch        int           `mapstructure:"inventory_batch"`
}

// Defaults are the defaults of Settings.
func Defaults() map[string]any {
	d := config.BaseDefaults()
	c := DefaultConfig()
	for k, v := range map[string]any{
		"inventory_workers": c.Workers, "inventory_ack_wait": c.AckWait.String(), "inventory_job_timeout": c.JobTimeout.String(),
		"inventory_slot_retry": c.SlotRetry.String(), "inventory_schedule_tick": c.ScheduleTick.String(), "inventory_batch": c.Batch,
	} {
		d[k] = v
	}
	return d
}

// FromEnv is the constructor of the inventory binary: it reads Settings
// from NUBES_* and the config file.
func FromEnv(ctx context.Context, d app.Deps) (*app.Service, error) {
	var st Settings
	if err := config.Load(&st, Defaults()); err != nil {
		return nil, err
	}
	cfg := DefaultConfig()
	cfg.Workers, cfg.AckWait, cfg.JobTimeout, cfg.SlotRetry, cfg.ScheduleTick, cfg.Batch =
		st.Workers, st.AckWait, st.JobTimeout, st.SlotRetry, st.ScheduleTick, st.Batch
	return Build(ctx, d, cfg)
}

// New builds the service with the default configuration.
func New(ctx context.Context, d app.Deps) (*app.Service, error) {
	return Build(ctx, d, DefaultConfig())
}

// Build builds the inventory service on d.DB, creating its indexes.
func Build(ctx context.Context, d app.Deps, cfg Config) (*app.Service, error) {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	plugins := d.Plugins
	if plugins == nil {
		// No plugin_endpoints: every plugin call answers ERROR_NO_PLUGIN_ENDPOINT.
		var err error
		if plugins, err = plugin.New(nil, plugin.Options{Log: log}); err != nil {
			return nil, err
		}
	}
	// The secret service's secrets collect too, where one is configured
	// (issue 36: general service accounts' keys).
	ids := trusted.Identity{Client: d.Services.Client("identity")}
	if d.Services.URL("secret") != "" {
		ids.Secrets = d.Services.Client("secret")
	}
	identity := core.Identity{Identity: ids}
	repo := pluginref.Repository{Client: d.Services.Client("repository"), Kind: core.CollectorKind, Log: log}
	var workers []func(context.Context) error
	var outbox *events.Outbox
	if d.Events != nil {
		var err error
		if outbox, err = events.NewOutbox(ctx, d.DB, core.OutboxCollection, d.Events, log); err != nil {
			return nil, err
		}
		workers = append(workers, outbox.Run)
	} else {
		log.Warn("inventory runs without an event bus: collect answers 503")
	}
	collectors, err := collector.New(ctx, d.DB, repo, identity, plugins, outbox, log)
	if err != nil {
		return nil, err
	}
	types, err := cloudservicetype.New(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	jobs, err := job.New(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	tasks, err := jobtask.New(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	services, err := cloudservice.New(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	if d.Events != nil && !cfg.NoWorkers {
		w := worker.New(d.DB, d.Events, identity, plugins, worker.Config{Workers: cfg.Workers, AckWait: cfg.AckWait,
			JobTimeout: cfg.JobTimeout, SlotRetry: cfg.SlotRetry, Batch: cfg.Batch, SweepEvery: cfg.SweepEvery, Notify: outbox}, log)
		sched := collector.NewScheduler(d.DB, func(ctx context.Context, c *core.Collector) error {
			_, err := collectors.Collect(ctx, c, "", "")
			return err
		}, cfg.ScheduleTick, log)
		workers = append(workers, w.Run, w.Sweep, sched.Run)
	}
	workers = append(workers, events.DeletionWorkers(d.Events, Name, events.DeadRecords(d.DB.Collection(core.DeadLettersCollection)), log, cleanup(d.DB))...)
	var routes []api.Route
	routes = append(routes, collectors.Routes()...)
	routes = append(routes, types.Routes()...)
	routes = append(routes, jobs.Routes()...)
	routes = append(routes, tasks.Routes()...)
	routes = append(routes, services.Routes()...)
	routes = append(routes, api.PendingRoutes(Name)...) // 2.x metrics, regions, query sets: 501 (pkg/api NotBuilt)
	return &app.Service{Name: Name, Routes: routes, Workers: workers}, nil
}
