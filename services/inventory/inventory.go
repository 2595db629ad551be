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

// Settings are inventory's keys on top of config.Base, declared once
// (pkg/config: key, default, bound and meaning in the tags);
// docs/configuration.md "Inventory" lists them (TestConfigurationDoc).
type Settings struct {
	// Workers is how many task messages one replica runs at once.
	Workers int `mapstructure:"inventory_workers" default:"4" min:"1" doc:"task messages one replica runs at once"`
	// AckWait is when an unacknowledged task message goes to another
	// worker (a running task sends heartbeats every AckWait/3).
	AckWait time.Duration `mapstructure:"inventory_ack_wait" default:"1m" min:"1s" doc:"a task message not acknowledged within this goes to another replica (a killed worker's task); running tasks send heartbeats every third of it"`
	// JobTimeout is how long a job may run before it becomes FAILURE.
	JobTimeout time.Duration `mapstructure:"inventory_job_timeout" default:"2h" min:"1s" doc:"a job still IN_PROGRESS after this is FAILURE, its unfinished tasks FAILURE with ERROR_JOB_TIMEOUT"`
	// SlotRetry is when a task waiting for a concurrency slot of its job
	// is tried again.
	SlotRetry time.Duration `mapstructure:"inventory_slot_retry" default:"5s" min:"1ms" doc:"a sub-task finding every concurrency slot of its job taken comes back after this"`
	// ScheduleTick is how often schedules are looked at.
	ScheduleTick time.Duration `mapstructure:"inventory_schedule_tick" default:"30s" min:"1ms" doc:"how often collector schedules are looked at"`
	// SweepEvery is how often jobs past their timeout are ended.
	SweepEvery time.Duration `mapstructure:"inventory_sweep_every" default:"1m" min:"1ms" doc:"how often jobs past inventory_job_timeout are ended"`
	// Batch is how many streamed resources are written together.
	Batch int `mapstructure:"inventory_batch" default:"200" min:"1" doc:"streamed resources matched and written together"`
}

// Config configures the inventory rules and workers: the settings, and
// what no key sets.
type Config struct {
	Settings
	// NoWorkers builds the API without workers, schedules or sweeps
	// (tests that drive the workers themselves).
	NoWorkers bool
	// Clock is the hour the schedules fire at; nil: time.Now. Tests move
	// it instead of waiting for the wall clock's hour.
	Clock func() time.Time
}

// DefaultConfig is the configuration with every default.
func DefaultConfig() Config {
	var c Config
	if err := config.SetDefaults(&c.Settings); err != nil {
		panic(err) // a declaration that does not parse: a bug TestConfigurationDoc shows
	}
	return c
}

// binarySettings are what the binary reads.
type binarySettings struct {
	config.Base `mapstructure:",squash"`
	Settings    `mapstructure:",squash"`
}

// Defaults are the defaults of the binary's keys.
func Defaults() map[string]any { return app.SettingsDefaults(&binarySettings{}) }

// FromEnv is the constructor of the inventory binary: it reads Settings
// from NUBES_* and the config file, checks and prints them.
func FromEnv(ctx context.Context, d app.Deps) (*app.Service, error) {
	var st binarySettings
	if err := app.LoadSettings(d, &st); err != nil {
		return nil, err
	}
	return Build(ctx, d, Config{Settings: st.Settings})
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
		}, cfg.ScheduleTick, cfg.Clock, log)
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
