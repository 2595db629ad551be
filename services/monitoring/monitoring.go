// Package monitoring is the monitoring service: escalation policies,
// notes and webhooks (spec part 2, /monitoring/v1), and the ingest URL
// through which external monitoring systems post events to a webhook.
//
// New is its only public surface; everything else is internal. It calls
// identity (projects) and repository (plugins) through service_urls and
// never reads their collections.
package monitoring

import (
	"context"
	"log/slog"
	"time"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/services/monitoring/internal/mon"
	"github.com/nubes-io/nubes/services/monitoring/internal/noteapi"
	"github.com/nubes-io/nubes/services/monitoring/internal/policyapi"
)

// Name is the service name.
const Name = "monitoring"

// Config configures the monitoring rules.
type Config struct {
	// WebhookBaseURL is the public base URL of the suite: a webhook's
	// webhook_url is WebhookBaseURL + /monitoring/v1/webhook/<id>/<key>/events.
	WebhookBaseURL string
	// IngestRate and IngestBurst are each webhook's token bucket (events
	// per second, bucket size), per replica.
	IngestRate  float64
	IngestBurst int
	// ParseTimeout bounds the plugin's Event.parse during an ingest call.
	ParseTimeout time.Duration
	// ReadTimeout bounds the reading of an ingest body.
	ReadTimeout time.Duration
	// RetryInterval is how often the retry worker looks for ingest bodies
	// kept after a plugin failure; MaxAttempts bounds the tries of one.
	RetryInterval time.Duration
	MaxAttempts   int
	// CounterFlush is how often request counters are written.
	CounterFlush time.Duration
}

// DefaultConfig is the configuration with every default.
func DefaultConfig() Config {
	return Config{IngestRate: 50, IngestBurst: 100, ParseTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		RetryInterval: 30 * time.Second, MaxAttempts: 10, CounterFlush: 250 * time.Millisecond}
}

// Settings are monitoring's keys on top of config.Base.
type Settings struct {
	config.Base    `mapstructure:",squash"`
	WebhookBaseURL string        `mapstructure:"webhook_base_url"`
	IngestRate     float64       `mapstructure:"webhook_rate_limit"`
	IngestBurst    int           `mapstructure:"webhook_rate_burst"`
	ParseTimeout   time.Duration `mapstructure:"webhook_parse_timeout"`
	ReadTimeout    time.Duration `mapstructure:"webhook_read_timeout"`
	RetryInterval  time.Duration `mapstructure:"webhook_retry_interval"`
	MaxAttempts    int           `mapstructure:"webhook_retry_attempts"`
}

// Defaults are the defaults of Settings.
func Defaults() map[string]any {
	d := config.BaseDefaults()
	c := DefaultConfig()
	for k, v := range map[string]any{
		"webhook_base_url": "", "webhook_rate_limit": c.IngestRate, "webhook_rate_burst": c.IngestBurst,
		"webhook_parse_timeout": c.ParseTimeout.String(), "webhook_read_timeout": c.ReadTimeout.String(),
		"webhook_retry_interval": c.RetryInterval.String(), "webhook_retry_attempts": c.MaxAttempts,
	} {
		d[k] = v
	}
	return d
}

// FromEnv is the constructor of the monitoring binary: it reads Settings
// from NUBES_* and the config file.
func FromEnv(ctx context.Context, d app.Deps) (*app.Service, error) {
	var st Settings
	if err := config.Load(&st, Defaults()); err != nil {
		return nil, err
	}
	cfg := DefaultConfig()
	cfg.WebhookBaseURL, cfg.IngestRate, cfg.IngestBurst = st.WebhookBaseURL, st.IngestRate, st.IngestBurst
	cfg.ParseTimeout, cfg.ReadTimeout, cfg.RetryInterval, cfg.MaxAttempts = st.ParseTimeout, st.ReadTimeout, st.RetryInterval, st.MaxAttempts
	return Build(ctx, d, cfg)
}

// New builds the service with the default configuration.
func New(ctx context.Context, d app.Deps) (*app.Service, error) {
	return Build(ctx, d, DefaultConfig())
}

// Build builds the monitoring service on d.DB, creating its indexes.
func Build(ctx context.Context, d app.Deps, cfg Config) (*app.Service, error) {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	projects := mon.Projects{Identity: d.Services.Client("identity")}
	policies, err := policyapi.New(ctx, d.DB, projects, log)
	if err != nil {
		return nil, err
	}
	notes, err := noteapi.New(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	var routes []api.Route
	routes = append(routes, policies.Routes()...)
	routes = append(routes, notes.Routes()...)
	return &app.Service{Name: Name, Routes: routes}, nil
}
