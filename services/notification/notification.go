// Package notification is the notification service: notification
// protocols (spec part 3, /notification/v1/protocol), each an instance of
// a repository plugin of resource_type notification.Protocol, and the
// dispatcher that delivers notification events from JetStream through
// their protocol's plugin.
//
// New, FromEnv and the reseal entry points are its public surface;
// everything else is internal. It calls repository (plugins, versions)
// through service_urls and never reads other services' collections.
package notification

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/services/notification/internal/core"
	"github.com/nubes-io/nubes/services/notification/internal/dispatch"
	"github.com/nubes-io/nubes/services/notification/internal/fanout"
	"github.com/nubes-io/nubes/services/notification/internal/notification"
	"github.com/nubes-io/nubes/services/notification/internal/projectchannel"
	"github.com/nubes-io/nubes/services/notification/internal/protocol"
	"github.com/nubes-io/nubes/services/notification/internal/userchannel"
)

// Name is the service name.
const Name = "notification"

// Config configures the service.
type Config struct {
	// Keys seal the protocols' secret data.
	Keys *seal.Keyring
	// Dispatch bounds the deliveries of notification events.
	Dispatch dispatch.Config
	// Fanout bounds the consumer of notification requests (and holds the
	// clock of schedule windows); zero: fanout.DefaultConfig.
	Fanout fanout.Config
}

// DefaultDispatch is the dispatcher's default configuration.
func DefaultDispatch() dispatch.Config { return dispatch.DefaultConfig() }

// New returns the constructor of the service sealing with keys and the
// default dispatch bounds.
func New(keys *seal.Keyring) app.Constructor {
	return func(ctx context.Context, d app.Deps) (*app.Service, error) {
		return Build(ctx, d, Config{Keys: keys, Dispatch: dispatch.DefaultConfig()})
	}
}

// Build builds the service on d.DB, creating its indexes. Without an event
// bus (d.Events nil) it serves the API and dispatches nothing.
func Build(ctx context.Context, d app.Deps, cfg Config) (*app.Service, error) {
	if cfg.Keys == nil {
		return nil, errors.New("notification: no encryption keys (encryption_keys)")
	}
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
	protocols, err := protocol.New(ctx, d.DB, pluginref.Repository{Client: d.Services.Client("repository"), Kind: core.PluginKind, Strict: true, Log: log}, plugins, cfg.Keys, log)
	if err != nil {
		return nil, err
	}
	projectChannels, err := projectchannel.New(ctx, d.DB, d.Services.Client("identity"), cfg.Keys)
	if err != nil {
		return nil, err
	}
	userChannels, err := userchannel.New(ctx, d.DB, d.Services.Client("identity"), cfg.Keys)
	if err != nil {
		return nil, err
	}
	if cfg.Fanout.MaxDeliver == 0 {
		now, keep, every := cfg.Fanout.Now, cfg.Fanout.InboxKeep, cfg.Fanout.PurgeEvery
		users, chans, inbox := cfg.Fanout.MaxUsers, cfg.Fanout.MaxChannels, cfg.Fanout.InboxMax
		cfg.Fanout = fanout.DefaultConfig()
		cfg.Fanout.Now, cfg.Fanout.MaxUsers, cfg.Fanout.MaxChannels, cfg.Fanout.InboxMax = now, users, chans, inbox
		if keep > 0 {
			cfg.Fanout.InboxKeep, cfg.Fanout.PurgeEvery = keep, every
		}
	}
	fan, err := fanout.New(ctx, d.DB, d.Events, d.Services.Client("identity"), cfg.Fanout, log)
	if err != nil {
		return nil, err
	}
	workers := []func(context.Context) error{fan.RunPurge}
	if d.Events != nil {
		workers = append(workers, fan.Run)
		disp, err := dispatch.New(ctx, d.DB, d.Events, plugins, cfg.Keys, cfg.Dispatch, log)
		if err != nil {
			return nil, err
		}
		workers = append(workers, disp.Run)
		workers = append(workers, events.DeletionWorkers(d.Events, Name, events.DeadRecords(d.DB.Collection(core.DeadLettersCollection)), log, cleanup(d.DB))...)
	} else {
		log.Warn("notification runs without an event bus: notification events are not dispatched")
	}
	var routes []api.Route
	routes = append(routes, protocols.Routes()...)
	routes = append(routes, projectChannels.Routes()...)
	routes = append(routes, userChannels.Routes()...)
	routes = append(routes, notification.API{Fanout: fan, Bus: d.Events}.Routes()...)
	routes = append(routes, notification.New(d.DB).Routes()...)
	return &app.Service{Name: Name, Routes: routes, Workers: workers}, nil
}

// Settings are the service's keys on top of config.Base, declared once
// (pkg/config: key, default, bound and meaning in the tags);
// docs/configuration.md "Notification" lists them (TestConfigurationDoc).
type Settings struct {
	DispatchMaxDeliver int           `mapstructure:"dispatch_max_deliver" default:"6" min:"1" doc:"deliveries of a dispatch that fails for a passing reason before it is dead-lettered"`
	DispatchBackoff    time.Duration `mapstructure:"dispatch_backoff" default:"10s" min:"1ms" doc:"the wait before a failed dispatch's next delivery, doubled per delivery"`
	DispatchMaxBackoff time.Duration `mapstructure:"dispatch_max_backoff" default:"2m" min:"1ms" doc:"the longest such wait"`
	DispatchTimeout    time.Duration `mapstructure:"dispatch_timeout" default:"60s" min:"1s" doc:"bound of one Notification.dispatch"`
	// What one notification request reaches at most, and a user's inbox
	// bound (its oldest entries go first).
	NotifyMaxUsers    int `mapstructure:"notify_max_users" default:"100" min:"1" doc:"users one notification request reaches at most (the rest left out by id order, logged)"`
	NotifyMaxChannels int `mapstructure:"notify_max_channels" default:"100" min:"1" doc:"channels one notification request reaches at most"`
	InboxMaxEntries   int `mapstructure:"inbox_max_entries" default:"1000" min:"1" doc:"a user's inbox bound; its oldest entries are deleted first"`
}

// binarySettings are what the binary reads: Base, the encryption keys
// (encryption_keys, encryption_keys_file, encryption_active_key) and
// Settings.
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

// FromEnv is the constructor of the notification binary: it reads
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
	dc := dispatch.DefaultConfig()
	dc.MaxDeliver, dc.Backoff, dc.MaxBackoff, dc.CallTimeout = st.DispatchMaxDeliver, st.DispatchBackoff, st.DispatchMaxBackoff, st.DispatchTimeout
	dc.AckWait = max(dc.AckWait, 2*dc.CallTimeout)
	fc := fanout.DefaultConfig()
	fc.MaxUsers, fc.MaxChannels, fc.InboxMax = st.NotifyMaxUsers, st.NotifyMaxChannels, st.InboxMaxEntries
	return Build(ctx, d, Config{Keys: k, Dispatch: dc, Fanout: fc})
}

// ResealTargets are the sealed fields of the service.
func ResealTargets(db *mongo.Database) []seal.Target {
	return []seal.Target{{Coll: db.Collection(core.ProtocolsCollection), Field: seal.Field{Path: "sealed", AD: func(doc bson.Raw) ([]byte, error) {
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

// ResealMain is `notification reseal`: it re-seals every protocol's
// secret data with the active key.
func ResealMain(args []string) int {
	return sealcmd.Main(Name, args, func() (config.Base, *seal.Keyring, error) {
		st, k, err := load()
		return st.Base, k, err
	}, ResealTargets)
}
