// Package costanalysis is the cost-analysis service (spec part 2,
// /cost-analysis/v1): data sources (Nubes' addition, upstream's shapes),
// their rules, cost jobs (started by sync or, once across replicas, at the
// hours of a data source's schedule: schedule.go) run by workers from a
// JetStream work queue, the costs they store (read-only, Nubes' addition)
// and exchange rates.
//
// New, Build, FromEnv and the reseal entry points are its public surface;
// everything else is internal. It calls repository (plugins, versions)
// and identity (projects and trusted service accounts for the rules,
// trusted accounts and their secret data) through service_urls and never
// reads other services' collections.
package costanalysis

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/cost"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/datasource"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/datasourcerule"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/exchangerate"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/job"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/jobtask"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/worker"
)

// Name is the service name.
const Name = "cost-analysis"

// DefaultExchangeRates are the supported currencies and their default
// rates (per US dollar) unless config exchange_rates says otherwise.
const DefaultExchangeRates = "USD=1,KRW=1300,JPY=150,EUR=0.92,CNY=7.2"

// Config configures the service.
type Config struct {
	// Keys seal the data sources' secret data.
	Keys *seal.Keyring
	// ExchangeRates are the supported currencies and their default rates.
	ExchangeRates map[string]float64
	Jobs          job.Config
	Workers       worker.Config
	// NoWorkers serves the API without running tasks (an API-only replica)
	// or firing schedules.
	NoWorkers bool
	// SyncSchedule times the data sources' scheduled syncs.
	SyncSchedule SyncSchedule
}

// DefaultConfig is the configuration of New.
func DefaultConfig(keys *seal.Keyring) Config {
	rates, _ := ParseRates(DefaultExchangeRates)
	return Config{Keys: keys, ExchangeRates: rates, Jobs: job.DefaultConfig(), Workers: worker.DefaultConfig(),
		SyncSchedule: SyncSchedule{Tick: DefaultSyncScheduleTick}}
}

// New returns the constructor of the service sealing with keys and the
// default configuration.
func New(keys *seal.Keyring) app.Constructor {
	return func(ctx context.Context, d app.Deps) (*app.Service, error) {
		return Build(ctx, d, DefaultConfig(keys))
	}
}

// Build builds the service on d.DB, creating its indexes. Without an event
// bus (d.Events nil) it serves the API, and sync answers 503.
func Build(ctx context.Context, d app.Deps, cfg Config) (*app.Service, error) {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	plugins := d.Plugins
	if plugins == nil {
		var err error
		if plugins, err = plugin.New(nil, plugin.Options{Log: log}); err != nil {
			return nil, err
		}
	}
	rules, err := datasourcerule.New(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	var outbox *events.Outbox
	var workers []func(context.Context) error
	if d.Events != nil {
		if outbox, err = events.NewOutbox(ctx, d.DB, core.OutboxCollection, d.Events, log); err != nil {
			return nil, err
		}
		workers = append(workers, outbox.Run)
	} else {
		log.Warn("cost-analysis runs without an event bus: sync is refused and no task runs")
	}
	// The secret service's secrets collect too, where one is configured
	// (issue 36: general service accounts' keys).
	var secrets *call.Client
	if d.Services.URL("secret") != "" {
		secrets = d.Services.Client("secret")
	}
	jobs, err := job.New(ctx, d.DB, plugins, cfg.Keys, rules, d.Services.Client("identity"), secrets, outbox, cfg.Jobs, log)
	if err != nil {
		return nil, err
	}
	sources, err := datasource.New(ctx, d.DB, pluginref.Repository{Client: d.Services.Client("repository"), Kind: core.PluginKind, Strict: true, Log: log}, plugins, cfg.Keys, rules, jobs, log)
	if err != nil {
		return nil, err
	}
	workers = append(workers, jobs.Sweep)
	workers = append(workers, events.DeletionWorkers(d.Events, Name, events.DeadRecords(d.DB.Collection(core.DeadLettersCollection)), log, cleanup(d.DB, jobs, rules))...)
	if d.Events != nil && !cfg.NoWorkers {
		workers = append(workers, worker.New(d.DB, d.Events, jobs, rules, plugins, cfg.Keys, cfg.Workers, log).Run)
		workers = append(workers, syncScheduler(d.DB, jobs, cfg.SyncSchedule, log).Run)
	}
	var routes []api.Route
	routes = append(routes, sources.Routes()...)
	routes = append(routes, rules.Routes()...)
	routes = append(routes, jobs.Routes()...)
	tasks, err := jobtask.New(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	routes = append(routes, tasks.Routes()...)
	routes = append(routes, cost.New(d.DB).Routes()...)
	routes = append(routes, exchangerate.New(d.DB, cfg.ExchangeRates).Routes()...)
	routes = append(routes, api.PendingRoutes(Name)...) // unified cost, cost reports, query sets: 501 (pkg/api NotBuilt)
	return &app.Service{Name: Name, Routes: routes, Workers: workers}, nil
}

// ParseRates reads "USD=1,KRW=1300": every rate a number above 0.
func ParseRates(s string) (map[string]float64, error) {
	m, err := config.ParseMap(s)
	if err != nil {
		return nil, err
	}
	return ratesOf(m)
}

func ratesOf(m map[string]string) (map[string]float64, error) {
	out := map[string]float64{}
	for k, v := range m {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return nil, fmt.Errorf("exchange_rates: %s=%q is not a rate above 0", k, v)
		}
		out[strings.ToUpper(k)] = f
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("exchange_rates: no currency")
	}
	return out, nil
}

// Settings are the service's keys on top of config.Base, declared once
// (pkg/config: key, default, bound and meaning in the tags);
// docs/configuration.md "Cost analysis" lists them (TestConfigurationDoc),
// and a test keeps the defaults equal to the rules' own.
type Settings struct {
	ExchangeRates     map[string]string `mapstructure:"exchange_rates" default:"USD=1,KRW=1300,JPY=150,EUR=0.92,CNY=7.2" doc:"the supported currencies and their default rates per US dollar"`
	JobTimeout        time.Duration     `mapstructure:"job_timeout" default:"10m" min:"1ms" doc:"a job still IN_PROGRESS after this is TIMEOUT"`
	WorkerConcurrency int               `mapstructure:"worker_concurrency" default:"4" min:"1" doc:"tasks one replica runs at once"`
	TaskAckWait       time.Duration     `mapstructure:"task_ack_wait" default:"30s" min:"30ms" doc:"a task without a sign of life this long goes to another replica"`
	TaskMaxDeliver    int               `mapstructure:"task_max_deliver" default:"5" min:"1" doc:"tries of a task whose plugin cannot answer (plugin.Retryable)"`
	TaskBackoff       time.Duration     `mapstructure:"task_backoff" default:"5s" min:"1ms" doc:"delay before such a try again (±20%)"`
	NoWorkers         bool              `mapstructure:"no_workers" default:"false" doc:"serve the API only: run no task and fire no schedule"`
	SyncScheduleTick  time.Duration     `mapstructure:"sync_schedule_tick" default:"30s" min:"1ms" doc:"how often data sources' schedules are looked at (each fires once per scheduled hour across replicas)"`
}

// binarySettings are what the binary reads: Base, the encryption keys
// and Settings.
type binarySettings struct {
	config.Base  `mapstructure:",squash"`
	sealcmd.Keys `mapstructure:",squash"`
	Settings     `mapstructure:",squash"`
}

// Defaults are the defaults of the binary's keys.
func Defaults() map[string]any { return app.SettingsDefaults(&binarySettings{}) }

func load() (binarySettings, *seal.Keyring, error) {
	var st binarySettings
	if err := config.LoadDeclared(&st); err != nil {
		return st, nil, err
	}
	k, err := st.Keyring()
	return st, k, err
}

// FromEnv is the constructor of the cost-analysis binary: it reads
// Settings from NUBES_* and the config file, checks and prints them.
func FromEnv(ctx context.Context, d app.Deps) (*app.Service, error) {
	var st binarySettings
	if err := app.LoadSettings(d, &st); err != nil {
		return nil, err
	}
	k, err := st.Keyring()
	if err != nil {
		return nil, err
	}
	cfg := DefaultConfig(k)
	if cfg.ExchangeRates, err = ratesOf(st.ExchangeRates); err != nil {
		return nil, err
	}
	cfg.Jobs.Timeout = st.JobTimeout
	cfg.Jobs.SweepEvery = min(cfg.Jobs.SweepEvery, st.JobTimeout/2)
	cfg.Workers = worker.Config{Concurrency: st.WorkerConcurrency, AckWait: st.TaskAckWait, MaxDeliver: st.TaskMaxDeliver,
		Backoff: st.TaskBackoff, Poll: time.Second}
	cfg.NoWorkers = st.NoWorkers
	cfg.SyncSchedule.Tick = st.SyncScheduleTick
	return Build(ctx, d, cfg)
}

// ResealTargets are the sealed fields of the service.
func ResealTargets(db *mongo.Database) []seal.Target {
	return []seal.Target{{Coll: db.Collection(core.DataSourcesCollection), Field: seal.Field{Path: "sealed", AD: func(doc bson.Raw) ([]byte, error) {
		var d struct {
			ID       string `bson:"_id"`
			DomainID string `bson:"domain_id"`
		}
		if err := bson.Unmarshal(doc, &d); err != nil {
			return nil, err
		}
		return core.AD(d.ID, d.DomainID), nil
	}}}}
}

// ResealMain is `cost-analysis reseal`: it re-seals every data source's
// secret data with the active key.
func ResealMain(args []string) int {
	return sealcmd.Main(Name, args, func() (config.Base, *seal.Keyring, error) {
		st, k, err := load()
		return st.Base, k, err
	}, ResealTargets)
}
