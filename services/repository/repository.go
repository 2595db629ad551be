// Package repository is the repository service: the plugins, policies and
// schemas of spec part 3 (/repository/v1), kept in one local repository
// and read also from remote repositories (other repository services named
// in the configuration), plus repository/list and repository/get, which
// the console uses.
//
// New, FromEnv and Defaults are its public surface; everything else is
// internal. It never calls a plugin.
package repository

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-viper/mapstructure/v2"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/outward"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/services/repository/internal/plugin"
	"github.com/nubes-io/nubes/services/repository/internal/policy"
	"github.com/nubes-io/nubes/services/repository/internal/registry"
	"github.com/nubes-io/nubes/services/repository/internal/repository"
	"github.com/nubes-io/nubes/services/repository/internal/schema"
)

// Name is the service name.
const Name = "repository"

// Collections owned by the repository service.
const (
	RepositoriesCollection = repository.Collection
	PluginsCollection      = plugin.Collection
	PoliciesCollection     = policy.Collection
	SchemasCollection      = schema.Collection
)

// DefaultPublicHub is the registry of PUBLIC_HUB plugins unless configured.
const DefaultPublicHub = "https://registry-1.docker.io" // = Settings.PublicHubURL's default

// Remote is one remote repository: another repository service speaking
// this API, its base URL and the bearer credential it accepts.
type Remote = repository.RemoteConfig

// Config configures the service.
type Config struct {
	// PublicHubURL is the image registry of PUBLIC_HUB plugins.
	PublicHubURL string
	// Remotes are consulted in order after the local repository.
	Remotes []Remote
	// HTTPClient calls remote repositories (nil: a client with the default
	// timeouts).
	HTTPClient *http.Client
	// Outward names the inward addresses (loopback, private, link-local)
	// a plugin's registry_url and its token realm may reach: none by
	// default (pkg/outward).
	Outward outward.Allow
	// RegistryPageSize is the number of tags asked per page (0: 100).
	RegistryPageSize int
	// Keys seal plugins' registry_config (required).
	Keys *seal.Keyring
}

// New returns the constructor for cfg.
func New(cfg Config) app.Constructor {
	return func(ctx context.Context, d app.Deps) (*app.Service, error) {
		log := d.Log
		if log == nil {
			log = slog.Default()
		}
		if cfg.PublicHubURL == "" {
			cfg.PublicHubURL = DefaultPublicHub
		}
		repos, err := repository.Open(ctx, d.DB, cfg.Remotes, cfg.HTTPClient, log)
		if err != nil {
			return nil, err
		}
		plugins, err := plugin.Routes(ctx, d.DB, repos, plugin.Config{PublicHubURL: cfg.PublicHubURL,
			Registry: registry.New(cfg.Outward, cfg.RegistryPageSize), Keys: cfg.Keys})
		if err != nil {
			return nil, err
		}
		policies, err := policy.Routes(ctx, d.DB, repos)
		if err != nil {
			return nil, err
		}
		schemas, err := schema.Routes(ctx, d.DB, repos)
		if err != nil {
			return nil, err
		}
		routes := append(repos.Routes(), plugins...)
		routes = append(routes, policies...)
		routes = append(routes, api.PendingRoutes(Name)...) // dashboard templates: 501 (pkg/api NotBuilt)
		return &app.Service{Name: Name, Routes: append(routes, schemas...)}, nil
	}
}

// Settings are the repository's own keys, declared once (pkg/config:
// key, default and meaning in the tags); docs/configuration.md
// "Repository" lists them (TestConfigurationDoc).
type Settings struct {
	PublicHubURL string `mapstructure:"public_hub_url" default:"https://registry-1.docker.io" doc:"the public registry plugins' images are looked up in"`
	// RemoteRepositories is a list of {name, url, token, repository_id};
	// as an environment variable, the same list in JSON:
	// NUBES_REMOTE_REPOSITORIES='[{"name":"hub","url":"https://repo.example.com","token":"..."}]'
	RemoteRepositories any `mapstructure:"remote_repositories" secret:"true" doc:"the upstream repositories this one reads from"`
	// outward_allow_loopback, outward_allow_private,
	// outward_allow_link_local: what registry_url may reach inside.
	outward.Allow `mapstructure:",squash"`
}

// BinarySettings are what the repository binary reads: a service's keys,
// the sealing keys (they seal plugins' registry_config) and its own.
type BinarySettings struct {
	config.Base  `mapstructure:",squash"`
	sealcmd.Keys `mapstructure:",squash"`
	Settings     `mapstructure:",squash"`
}

// Defaults are the defaults of the binary's keys.
func Defaults() map[string]any { return app.SettingsDefaults(&BinarySettings{}) }

// Config turns settings into the service's configuration.
func (st *BinarySettings) Config() (Config, error) {
	remotes, err := ParseRemotes(st.RemoteRepositories)
	if err != nil {
		return Config{}, err
	}
	keys, err := st.Keyring()
	if err != nil {
		return Config{}, err
	}
	return Config{PublicHubURL: st.PublicHubURL, Remotes: remotes, Outward: st.Allow, Keys: keys}, nil
}

// ParseRemotes reads remote_repositories: a list from a config file, or
// its JSON text from the environment.
func ParseRemotes(v any) ([]Remote, error) {
	var out []Remote
	switch t := v.(type) {
	case nil:
		return nil, nil
	case string:
		if t == "" {
			return nil, nil
		}
		if err := json.Unmarshal([]byte(t), &out); err != nil {
			return nil, fmt.Errorf("remote_repositories: want a JSON list of {name, url, token, repository_id}: %w", err)
		}
	default:
		dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{Result: &out, ErrorUnused: true})
		if err != nil {
			return nil, err
		}
		if err := dec.Decode(t); err != nil {
			return nil, fmt.Errorf("remote_repositories: %w", err)
		}
	}
	return out, nil
}

// FromEnv is the constructor of the repository binary: it reads the
// settings from NUBES_* and the config file, checks and prints them.
func FromEnv(ctx context.Context, d app.Deps) (*app.Service, error) {
	var st BinarySettings
	if err := app.LoadSettings(d, &st); err != nil {
		return nil, err
	}
	cfg, err := st.Config()
	if err != nil {
		return nil, err
	}
	return New(cfg)(ctx, d)
}

func load() (BinarySettings, *seal.Keyring, error) {
	var st BinarySettings
	if err := config.LoadDeclared(&st); err != nil {
		return st, nil, err
	}
	k, err := st.Keyring()
	return st, k, err
}

// ResealTargets are the sealed fields of the service.
func ResealTargets(db *mongo.Database) []seal.Target {
	return []seal.Target{plugin.ResealTarget(db)}
}

// ResealMain is `repository reseal`: it re-seals every plugin's
// registry_config with the active key, reading the same configuration as
// the service.
func ResealMain(args []string) int {
	return sealcmd.Main(Name, args, func() (config.Base, *seal.Keyring, error) {
		st, k, err := load()
		return st.Base, k, err
	}, ResealTargets)
}
