// Package secret is the secret service (spec part 3, /secret/v1): user
// secrets, credentials that belong to one user, and the secrets of
// identity's service accounts, all sealed at rest with the keyring of
// pkg/seal and readable in clear only by services through get_data.
//
// New, FromEnv and the reseal entry points are its public surface;
// everything else is internal.
package secret

import (
	"context"
	"errors"
	"github.com/nubes-io/nubes/pkg/api"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/services/secret/internal/accountsecret"
	"github.com/nubes-io/nubes/services/secret/internal/trustedsecret"
	"github.com/nubes-io/nubes/services/secret/internal/usersecret"
)

// Name is the service name.
const Name = "secret"

// New returns the constructor of the service sealing with keys. Schemas
// are read from the "repository" service of d.Services, trusted secrets'
// metadata from the "identity" service.
func New(keys *seal.Keyring) app.Constructor {
	return func(ctx context.Context, d app.Deps) (*app.Service, error) {
		if keys == nil {
			return nil, errors.New("secret: no encryption keys (encryption_keys)")
		}
		log := d.Log
		if log == nil {
			log = slog.Default()
		}
		routes, err := usersecret.Routes(ctx, d.DB, keys, d.Services.Client("repository"), log)
		if err != nil {
			return nil, err
		}
		routes = append(routes, trustedsecret.Routes(d.Services.Client("identity"))...)
		secrets, err := accountsecret.Routes(ctx, d.DB, keys, d.Services.Client("identity"), log)
		if err != nil {
			return nil, err
		}
		routes = append(routes, secrets...)
		routes = append(routes, api.PendingRoutes(Name)...) // a secret's enable/disable, trusted secrets' writes (kept in identity): 501 (pkg/api NotBuilt)
		return &app.Service{Name: Name, Routes: routes, Workers: events.DeletionWorkers(d.Events, Name, events.DeadRecords(d.DB.Collection(DeadLettersCollection)), log, cleanup(d.DB))}, nil
	}
}

// Settings are the secret service's keys on top of config.Base: the
// encryption keys (encryption_keys, encryption_keys_file,
// encryption_active_key).
type Settings struct {
	config.Base  `mapstructure:",squash"`
	sealcmd.Keys `mapstructure:",squash"`
}

// Defaults are the defaults of Settings (declared in their tags).
func Defaults() map[string]any { return app.SettingsDefaults(&Settings{}) }

func load() (Settings, *seal.Keyring, error) {
	var st Settings
	if err := config.LoadDeclared(&st); err != nil {
		return st, nil, err
	}
	k, err := st.Keyring()
	return st, k, err
}

// FromEnv is the constructor of the secret binary: it reads Settings from
// NUBES_* and the config file.
func FromEnv(ctx context.Context, d app.Deps) (*app.Service, error) {
	_, k, err := load()
	if err != nil {
		return nil, err
	}
	return New(k)(ctx, d)
}

// ResealTargets are the sealed fields of the service.
func ResealTargets(db *mongo.Database) []seal.Target {
	return []seal.Target{usersecret.ResealTarget(db), accountsecret.ResealTarget(db)}
}

// ResealMain is `secret reseal`: it re-seals every secret with the active
// key, reading the same configuration as the service.
func ResealMain(args []string) int {
	return sealcmd.Main(Name, args, func() (config.Base, *seal.Keyring, error) {
		st, k, err := load()
		return st.Base, k, err
	}, ResealTargets)
}
