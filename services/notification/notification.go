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
	"maps"
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

// Settings are the service's keys on top of config.Base: the encryption
// keys and the dispatch bounds.
type Settings struct {
	config.Base        `mapstructure:",squash"`
	sealcmd.Keys       `mapstructure:",squash"`
	DispatchMaxDeliver int           `mapstructure:"dispatch_max_deliver"`
	DispatchBackoff    time.Duration `mapstructure:"dispatch_backoff"`
	DispatchMaxBackoff time.Duration `mapstructure:"dispatch_max_backoff"`
	DispatchTimeout    time.Duration `mapstructure:"dispatch_timeout"`
	// What one notification request reaches at most, and a user's inbox
	// bound (its oldest entries go first).
	NotifyMaxUsers    int `mapstructure:"notify_max_users"`
	NotifyMaxChannels int `mapstructure:"notify_max_channels"`
	InboxMaxEntries   int `mapstructure:"inbox_max_entries"`
}

// Defaults are the defaults of Settings.
func Defaults() map[string]any {
	d := config.BaseDefaults()
	maps.Copy(d, sealcmd.KeyDefaults())
	c := dispatch.DefaultConfig()
	maps.Copy(d, map[string]any{"dispatch_max_deliver": c.MaxDeliver, "dispatch_backoff": c.Backoff.String(),
		"dispatch_max_backoff": c.MaxBackoff.String(), "dispatch_timeout": c.CallTimeout.String(),
		"notify_max_users": fanout.DefaultMaxUsers, "notify_max_channels": fanout.DefaultMaxChannels, "inbox_max_entries": fanout.DefaultInboxMax})
	return d
}

func load() (Settings, *seal.Keyring, error) {
	var st Settings
	if err := config.Load(&st, Defaults()); err != nil {
		return st, nil, err
	}
	k, err := st.Keyring()
	return st, k, err
}

// FromEnv is the constructor of the notification binary: it reads
// Settings from NUBES_* and the config file.
func FromEnv(ctx context.Context, d app.Deps) (*app.Service, error) {
	st, k, err := load()
	if err != nil {
		return nil, err
	}
	dc := dispatch.DefaultConfig()
	dc.MaxDeliver, dc.Backoff, dc.MaxBackoff, dc.CallTimeout = max(1, st.DispatchMaxDeliver), st.DispatchBackoff, st.DispatchMaxBackoff, st.DispatchTimeout
	dc.AckWait = max(dc.AckWait, 2*dc.CallTimeout)
	fc := fanout.DefaultConfig()
	fc.MaxUsers, fc.MaxChannels, fc.InboxMax = max(1, st.NotifyMaxUsers), max(1, st.NotifyMaxChannels), max(1, st.InboxMaxEntries)
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
