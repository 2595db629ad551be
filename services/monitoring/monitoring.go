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
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/ratelimit"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/services/monitoring/internal/alert"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
	"github.com/nubes-io/nubes/services/monitoring/internal/escalation"
	"github.com/nubes-io/nubes/services/monitoring/internal/escalationpolicy"
	"github.com/nubes-io/nubes/services/monitoring/internal/event"
	"github.com/nubes-io/nubes/services/monitoring/internal/ingest"
	"github.com/nubes-io/nubes/services/monitoring/internal/note"
	"github.com/nubes-io/nubes/services/monitoring/internal/projectalertconfig"
	"github.com/nubes-io/nubes/services/monitoring/internal/webhook"
)

// Name is the service name.
const Name = "monitoring"

// Settings are monitoring's keys (on top of config.Base), declared once:
// each field's tags give its key, default, bound and meaning; the kit
// derives the environment names (NUBES_<KEY>), the defaults, the checks
// and the print at start (pkg/config). docs/configuration.md
// "Monitoring" lists them (TestConfigurationDoc).
type Settings struct {
	// WebhookBaseURL is the public base URL of the suite: a webhook's
	// webhook_url is WebhookBaseURL + /monitoring/v1/webhook/<id>/<key>/events.
	WebhookBaseURL string `mapstructure:"webhook_base_url" doc:"public base URL of webhook_url; empty gives a relative URL, as upstream stores it"`
	// IngestRate and IngestBurst are each webhook's token bucket (events
	// per second, bucket size), per replica.
	IngestRate  float64 `mapstructure:"webhook_rate_limit" default:"50" min:"0" doc:"events per second per webhook, per replica; 0 turns it off"`
	IngestBurst int     `mapstructure:"webhook_rate_burst" default:"100" min:"0" doc:"the webhook bucket's size"`
	// WorkspaceRate and WorkspaceBurst are each workspace's bucket over
	// all its webhooks (events per second, per replica).
	WorkspaceRate  float64 `mapstructure:"webhook_workspace_rate_limit" default:"200" min:"0" doc:"events per second of all a workspace's webhooks, per replica (a body's events count, not the request); 0 turns it off"`
	WorkspaceBurst int     `mapstructure:"webhook_workspace_rate_burst" default:"400" min:"0" doc:"the workspace bucket's size"`
	// FailRate and FailBurst bound the refused ingest and link calls of
	// one source address (per second, bucket size).
	FailRate  float64 `mapstructure:"public_url_failure_rate" default:"1" min:"0" doc:"refused ingest and acknowledge-link calls per second one source address may make before it gets 429 with nothing looked at; 0 turns it off"`
	FailBurst int     `mapstructure:"public_url_failure_burst" default:"30" min:"0" doc:"the refusal bucket's size"`
	// EventRetention is how long events are kept (0: for ever);
	// PurgeEvery how often older ones are deleted.
	EventRetention time.Duration `mapstructure:"event_retention" default:"720h" min:"0s" doc:"events and their bodies older than this are purged; 0 keeps them"`
	PurgeEvery     time.Duration `mapstructure:"event_purge_every" default:"1h" min:"1ms" doc:"how often events past event_retention are purged"`
	// ParseTimeout bounds the plugin's Event.parse during an ingest call.
	ParseTimeout time.Duration `mapstructure:"webhook_parse_timeout" default:"10s" min:"1ms" doc:"bound of the plugin's Event.parse during an ingest call"`
	// ReadTimeout bounds the reading of an ingest body.
	ReadTimeout time.Duration `mapstructure:"webhook_read_timeout" default:"10s" min:"0s" doc:"bound of the reading of an ingest body (408 past it)"`
	// RetryInterval is how often the retry worker looks for ingest bodies
	// kept after a plugin failure; MaxAttempts bounds the tries of one.
	RetryInterval time.Duration `mapstructure:"webhook_retry_interval" default:"30s" min:"1ms" doc:"how often bodies kept after a plugin failure are tried again (the wait doubles per try)"`
	MaxAttempts   int           `mapstructure:"webhook_retry_attempts" default:"10" min:"1" doc:"tries of a kept body before it becomes an ERROR event carrying it"`
	// MaxKept is how many bodies one webhook keeps for retry.
	MaxKept int `mapstructure:"webhook_max_kept_bodies" default:"1000" min:"1" doc:"ingest bodies one webhook keeps for retry while its plugin cannot be reached; one more is dropped (503, counted in the webhook's requests.error)"`
	// CounterFlush is how often request counters are written.
	CounterFlush time.Duration `mapstructure:"webhook_counter_flush" default:"250ms" min:"1ms" doc:"how often the webhooks' request counters are written"`
	// LinkTTL is how long an acknowledge link works.
	LinkTTL time.Duration `mapstructure:"alert_link_ttl" default:"24h" min:"1s" doc:"how long an acknowledge link works"`
	// EscalationTick is how often open alerts are walked through their
	// policies (upstream's scheduler: 60 s); 0 turns the escalation off.
	EscalationTick time.Duration `mapstructure:"escalation_tick" default:"1m" min:"0s" doc:"how often open alerts are walked through their policies (upstream: 60 s); 0 turns the escalation off"`
	// SweepEvery is how often events stored but never applied to alerts
	// (their request died) are looked for; SweepAge how old they must be.
	SweepEvery time.Duration `mapstructure:"event_sweep_every" default:"30s" min:"1ms" doc:"how often events stored but never applied to an alert (their request died) are looked for"`
	SweepAge   time.Duration `mapstructure:"event_sweep_age" default:"1m" min:"1ms" doc:"how old such an event must be before the sweep applies it"`
}

// Config configures the monitoring rules: the settings, and what comes
// from elsewhere than a key.
type Config struct {
	Settings
	// Keys seal the acknowledge links notifications carry (the suite's
	// encryption keys); nil: alerts carry no link.
	Keys *seal.Keyring
	// Clock is the service's one time (core.Clock: events, alerts, escalation,
	// the purge and the public URLs' rate limits); nil: wire.Now. Tests move it.
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

// binarySettings are the monitoring binary's keys: the service's own,
// config.Base and the sealing keys.
type binarySettings struct {
	config.Base  `mapstructure:",squash"`
	Settings     `mapstructure:",squash"`
	sealcmd.Keys `mapstructure:",squash"`
}

// Defaults are the defaults of the binary's keys.
func Defaults() map[string]any { return app.SettingsDefaults(&binarySettings{}) }

// FromEnv is the constructor of the monitoring binary: it reads Settings
// from NUBES_* and the config file, checks and prints them.
func FromEnv(ctx context.Context, d app.Deps) (*app.Service, error) {
	var st binarySettings
	if err := app.LoadSettings(d, &st); err != nil {
		return nil, err
	}
	cfg := Config{Settings: st.Settings}
	if st.EncryptionKeys != "" || st.EncryptionKeysFile != "" {
		var err error
		if cfg.Keys, err = st.Keyring(); err != nil {
			return nil, err
		}
	}
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
	projects := core.Projects{Identity: d.Services.Client("identity")}
	policies, err := escalationpolicy.New(ctx, d.DB, projects, log)
	if err != nil {
		return nil, err
	}
	if cfg.Keys == nil {
		log.Warn("monitoring runs without encryption_keys: notifications of alerts carry no acknowledge link")
	}
	configs, err := projectalertconfig.New(ctx, d.DB, projects, policyReader{policies})
	if err != nil {
		return nil, err
	}
	// One bucket of refusals per source over both public URLs.
	failures := ratelimit.New(cfg.FailRate, cfg.FailBurst)
	// What follows an alert opened (by the create operation or an event)
	// is its first escalation step, at once, when the escalation runs:
	// with a tick and an event bus for its notices.
	var kicks escalation.Kicks
	var opened alert.Opener
	if cfg.EscalationTick > 0 && d.Events != nil {
		kicks = escalation.NewKicks()
		opened = kicks
	}
	alerts, err := alert.New(ctx, d.DB, projects, policyOf(policies, configs, kicks != nil),
		alert.Config{BaseURL: cfg.WebhookBaseURL, Keys: cfg.Keys, LinkTTL: cfg.LinkTTL, Failures: failures, Opened: opened}, log)
	if err != nil {
		return nil, err
	}
	alerts.SetClock(core.Clock(cfg.Clock))
	notes, err := note.New(ctx, d.DB, func(ctx context.Context, p *auth.Principal, id string) (*note.Alert, error) {
		a, err := alerts.GetFor(ctx, p, id)
		if err != nil {
			return nil, err
		}
		return &note.Alert{DomainID: a.DomainID, WorkspaceID: a.WorkspaceID, ProjectID: a.ProjectID}, nil
	})
	if err != nil {
		return nil, err
	}
	plugins := d.Plugins
	if plugins == nil {
		// No plugin_endpoints: every plugin call answers ERROR_NO_PLUGIN_ENDPOINT.
		if plugins, err = plugin.New(nil, plugin.Options{Log: log}); err != nil {
			return nil, err
		}
	}
	var workers []func(context.Context) error
	var outbox *events.Outbox
	if d.Events != nil {
		if outbox, err = events.NewOutbox(ctx, d.DB, core.OutboxCollection, d.Events, log); err != nil {
			return nil, err
		}
		workers = append(workers, outbox.Run)
	} else {
		log.Warn("monitoring runs without an event bus: received events are stored, not published")
	}
	counters := &core.Counters{C: d.DB.Collection(core.RequestsCollection), Log: log}
	workers = append(workers, func(ctx context.Context) error { return counters.Run(ctx, cfg.CounterFlush) })
	webhooks, err := webhook.New(ctx, d.DB, counters, projects, pluginref.Repository{Client: d.Services.Client("repository"), Kind: core.WebhookKind, Log: log},
		plugins, cfg.WebhookBaseURL, cfg.Keys, log)
	if err != nil {
		return nil, err
	}
	alerting := event.NewAlerting(d.DB, alerts, configs, core.Clock(cfg.Clock), log)
	evs, err := event.NewStore(ctx, d.DB, outbox, alerting, log)
	if err != nil {
		return nil, err
	}
	workers = append(workers, func(ctx context.Context) error { return evs.RunSweep(ctx, cfg.SweepEvery, cfg.SweepAge) })
	workers = append(workers, func(ctx context.Context) error {
		return evs.RunPurge(ctx, cfg.PurgeEvery, cfg.EventRetention, core.Clock(cfg.Clock))
	})
	switch {
	case cfg.EscalationTick <= 0:
		log.Warn("escalation_tick is 0: alerts are not escalated")
	case outbox != nil:
		esc := escalation.New(d.DB, alerts, configs, escalationPolicies(policies), outbox, kicks, cfg.EscalationTick, core.Clock(cfg.Clock), log)
		workers = append(workers, esc.Run)
	default:
		log.Warn("monitoring runs without an event bus: alerts are not escalated (no notification can be asked for)")
	}
	in, err := ingest.New(ctx, d.DB, evs, alerting, counters, plugins, ingest.Config{Opened: opened, Rate: cfg.IngestRate, Burst: cfg.IngestBurst,
		WorkspaceRate: cfg.WorkspaceRate, WorkspaceBurst: cfg.WorkspaceBurst, Failures: failures, Keys: cfg.Keys,
		ParseTimeout: cfg.ParseTimeout, ReadTimeout: cfg.ReadTimeout, RetryInterval: cfg.RetryInterval, MaxAttempts: cfg.MaxAttempts, MaxKept: cfg.MaxKept,
		Clock: core.Clock(cfg.Clock), Live: func(ctx context.Context, wh *core.Webhook) error {
			return projects.Live(ctx, wh.DomainID, wh.WorkspaceID, wh.ProjectID)
		}}, log)
	if err != nil {
		return nil, err
	}
	workers = append(workers, in.Run)
	workers = append(workers, events.DeletionWorkers(d.Events, Name, events.DeadRecords(d.DB.Collection(core.DeadLettersCollection)), log, cleanup(d.DB, counters))...)
	var routes []api.Route
	routes = append(routes, policies.Routes()...)
	routes = append(routes, notes.Routes()...)
	routes = append(routes, webhooks.Routes()...)
	routes = append(routes, evs.Routes()...)
	routes = append(routes, alerts.Routes()...)
	routes = append(routes, configs.Routes()...)
	return &app.Service{Name: Name, Routes: routes, Workers: workers, Raw: append([]server.Raw{in.Raw()}, alerts.Raw()...)}, nil
}

// policyReader gives project alert configs the escalation policies.
type policyReader struct{ ps *escalationpolicy.Policies }

func (r policyReader) Policy(ctx context.Context, id string) (*projectalertconfig.Policy, error) {
	pol, err := r.ps.Get(ctx, id)
	if err != nil || pol == nil {
		return nil, err
	}
	return &projectalertconfig.Policy{ID: pol.EscalationPolicyID, Name: pol.Name, ResourceGroup: pol.ResourceGroup, ProjectID: pol.ProjectID,
		WorkspaceID: pol.WorkspaceID, DomainID: pol.DomainID}, nil
}

// policyOf is the policy of a new alert: its project's alert config's,
// else (no config, a config without one, or its policy deleted) the
// default of the workspace, else of the domain; none: the built-in rule.
// When the service escalates (begin), it carries what the alert's first
// step needs, so that the alert's insert takes it (alert.Start): the
// rule the escalation would read for it, and the project's urgency option.
func policyOf(ps *escalationpolicy.Policies, cs *projectalertconfig.Configs, begin bool) alert.PolicyOf {
	return func(ctx context.Context, domainID, workspaceID, projectID string) (alert.Policy, error) {
		cfg, err := cs.Of(ctx, domainID, projectID)
		if err != nil {
			return alert.Policy{}, err
		}
		var pol *escalationpolicy.Policy
		if cfg != nil && cfg.EscalationPolicyInfo.EscalationPolicyID != "" {
			if pol, err = ps.Get(ctx, cfg.EscalationPolicyInfo.EscalationPolicyID); err != nil {
				return alert.Policy{}, err
			}
		}
		if pol == nil {
			if pol, err = ps.DefaultOf(ctx, domainID, workspaceID); err != nil {
				return alert.Policy{}, err
			}
		}
		var out alert.Policy
		rules := escalation.Builtin.Rules
		if pol != nil {
			out = alert.Policy{ID: pol.EscalationPolicyID, RepeatCount: pol.RepeatCount}
			if ep := escalationPolicyOf(pol); len(ep.Rules) > 0 {
				rules = ep.Rules
			}
		}
		if begin {
			opts := projectalertconfig.Defaults
			if cfg != nil {
				opts = cfg.Options
			}
			out.Start = &alert.Start{Level: rules[0].Level, Minutes: rules[0].EscalateMinutes,
				HighOnly: opts.NotificationUrgency == projectalertconfig.UrgencyHighOnly}
		}
		return out, nil
	}
}

// escalationPolicies gives the escalation the policies' rules.
func escalationPolicies(ps *escalationpolicy.Policies) escalation.Policies {
	return func(ctx context.Context, id string) (*escalation.Policy, error) {
		pol, err := ps.Get(ctx, id)
		if err != nil || pol == nil {
			return nil, err
		}
		return escalationPolicyOf(pol), nil
	}
}

func escalationPolicyOf(pol *escalationpolicy.Policy) *escalation.Policy {
	out := &escalation.Policy{Name: pol.Name, RepeatCount: pol.RepeatCount, FinishCondition: pol.FinishCondition}
	for _, r := range pol.Rules {
		out.Rules = append(out.Rules, escalation.Rule{Level: r.NotificationLevel, EscalateMinutes: r.EscalateMinutes})
	}
	return out
}
