// Package identity is the identity service: domains, users, credentials,
// workspaces, projects, roles and role bindings, API keys and trusted
// accounts (spec part 1, /identity/v1 and /identity/v2), and the one
// issuer of the tokens every Nubes service accepts.
//
// New and FromEnv are its public surface; everything else is internal.
package identity

import (
	"context"
	"fmt"
	"github.com/nubes-io/nubes/pkg/api"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/services/identity/internal/apikey"
	"github.com/nubes-io/nubes/services/identity/internal/bootstrap"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/credential"
	"github.com/nubes-io/nubes/services/identity/internal/domain"
	"github.com/nubes-io/nubes/services/identity/internal/endpoint"
	"github.com/nubes-io/nubes/services/identity/internal/job"
	"github.com/nubes-io/nubes/services/identity/internal/project"
	"github.com/nubes-io/nubes/services/identity/internal/projectgroup"
	"github.com/nubes-io/nubes/services/identity/internal/provider"
	"github.com/nubes-io/nubes/services/identity/internal/role"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/schema"
	"github.com/nubes-io/nubes/services/identity/internal/serviceaccount"
	"github.com/nubes-io/nubes/services/identity/internal/token"
	"github.com/nubes-io/nubes/services/identity/internal/trustedaccount"
	"github.com/nubes-io/nubes/services/identity/internal/trustedserviceaccount"
	"github.com/nubes-io/nubes/services/identity/internal/user"
	"github.com/nubes-io/nubes/services/identity/internal/userprofile"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
	"github.com/nubes-io/nubes/services/identity/internal/workspaceuser"
)

// Name is the service name.
const Name = "identity"

// JWKSPath is where identity serves its public keys by GET.
const JWKSPath = "/.well-known/jwks.json"

// ReflectionTTL is how long identity keeps the suite's merged reflection
// list before asking the services again.
const ReflectionTTL = 30 * time.Second

// Config configures the identity rules.
type Config = core.Config

// Bootstrapped is what the first start made (root domain and admin).
type Bootstrapped = bootstrap.Bootstrapped

// Cipher encrypts secret data at rest.
type Cipher = core.Cipher

// NewCipher parses AES-256 keys ("1:<base64>,2:<base64>", the highest
// numeric id sealing); Settings also take encryption_keys_file and
// encryption_active_key.
func NewCipher(spec string) (*Cipher, error) { return core.NewCipher(spec) }

// RandomCipherSpec makes a one-key spec for development.
func RandomCipherSpec() string { return core.RandomCipherSpec() }

// ResealTargets are the sealed fields identity stores (for the reseal
// command after a key rotation).
func ResealTargets(db *mongo.Database) []seal.Target { return core.ResealTargets(db) }

// ResealMain is `identity reseal`: it re-seals identity's records with the
// active key, reading the same configuration as the service.
func ResealMain(args []string) int {
	return sealcmd.Main(Name, args, func() (config.Base, *seal.Keyring, error) {
		var st BinarySettings
		if err := config.LoadDeclared(&st); err != nil {
			return config.Base{}, nil, err
		}
		k, err := st.Keyring()
		return st.Base, k, err
	}, ResealTargets)
}

// Built is a running identity service with its bootstrap result.
type Built struct {
	Service     *app.Service
	Bootstrap   *Bootstrapped
	SystemToken string // SYSTEM token of the root domain
	// Deps is the service's core: tests store records through it as the
	// operations would (internal/identitytest).
	Deps *core.Deps
}

// Build creates the service, runs the bootstrap and issues the root
// domain's system token.
func Build(ctx context.Context, d app.Deps, cfg Config) (*Built, error) {
	if d.Events == nil {
		return nil, fmt.Errorf("identity needs the event bus (mail outbox)")
	}
	if cfg.Plugins == nil {
		cfg.Plugins = d.Plugins // trusted-account sync calls account collector plugins
	}
	s, err := core.New(ctx, d.DB, d.Events, d.Log, cfg)
	if err != nil {
		return nil, err
	}
	b, err := bootstrap.Run(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	if b.Created {
		d.Log.Info("bootstrap created the root domain and its admin", "domain_id", b.DomainID, "admin_user_id", b.AdminUserID)
		if cfg.AdminPassword == "" {
			// Never logged: logs outlive and travel further than the
			// password should. The caller gets it in Built.Bootstrap (the
			// devstack writes it to its bootstrap file); a cluster sets
			// admin_password (the chart's Secret) before the first start.
			d.Log.Warn("the admin password was generated and is not shown: set admin_password before the first start, or reset the admin's password with the SYSTEM token",
				"admin_user_id", b.AdminUserID)
		}
	}
	tok, err := bootstrap.SystemToken(s, b)
	if err != nil {
		return nil, err
	}
	routes := Routes(s)
	svc := &app.Service{Name: Name, Routes: routes, Workers: append([]func(context.Context) error{s.Outbox.Run}, trustedaccount.Workers(s)...), Auth: credential.Authenticator(s),
		Documents: map[string][]byte{JWKSPath: s.JWKS()},
		// The Ingress sends the console's reflection here: identity lists
		// the whole suite, merged from the services in service_urls.
		Reflection: server.SuiteReflection(Name, routes, cfg.ServiceURLs, ReflectionTTL, d.Log)}
	return &Built{Service: svc, Bootstrap: b, SystemToken: tok, Deps: s}, nil
}

// Routes are every operation of the service, one package per resource
// (internal/<resource>) over internal/core.
func Routes(d *core.Deps) []api.Route {
	var r []api.Route
	for _, part := range [][]api.Route{
		token.Routes(d), domain.Routes(d), workspace.Routes(d), project.Routes(d), role.Routes(), rolebinding.Routes(d),
		user.Routes(d), userprofile.Routes(d), apikey.Routes(d), trustedaccount.Routes(d), trustedserviceaccount.Routes(d), endpoint.Routes(d),
		provider.Routes(d), schema.Routes(d), serviceaccount.Routes(d), job.Routes(d),
		projectgroup.Routes(d), workspaceuser.Routes(d),
	} {
		r = append(r, part...)
	}
	// What the console binds that is not built yet answers 501 (pkg/api
	// NotBuilt), search's too: the suite has no search service.
	r = append(r, api.PendingRoutes(Name)...)
	return append(r, api.PendingRoutes("search")...)
}

// New returns the constructor for cfg.
func New(cfg Config) app.Constructor {
	return func(ctx context.Context, d app.Deps) (*app.Service, error) {
		b, err := Build(ctx, d, cfg)
		if err != nil {
			return nil, err
		}
		return b.Service, nil
	}
}

// Settings are identity's own keys, declared once (pkg/config: key,
// default, bound and meaning in the tags); docs/configuration.md
// "Identity" lists them (TestConfigurationDoc).
type Settings struct {
	// SigningKeyFile (or SigningKey) holds one PKCS#8 RSA key, or several
	// during a rotation: the first signs, every one verifies
	// (docs/operations.md).
	SigningKeyFile string        `mapstructure:"signing_key_file" doc:"a file holding signing_key"`
	SigningKey     string        `mapstructure:"signing_key" secret:"true" doc:"the RSA signing key (PKCS#8 PEM); one of the two is required"`
	RootDomain     string        `mapstructure:"root_domain" default:"root" doc:"the name of the root domain the bootstrap makes"`
	AdminUserID    string        `mapstructure:"admin_user_id" default:"admin" doc:"the root domain's first admin"`
	AdminPassword  string        `mapstructure:"admin_password" secret:"true" doc:"its password at the bootstrap"`
	ConsoleURL     string        `mapstructure:"console_url" default:"http://127.0.0.1:8080/console" doc:"the console's URL, in the mails"`
	AccessTTL      time.Duration `mapstructure:"access_token_ttl" default:"30m" min:"1s" doc:"lifetime of an access token"`
	RefreshTTL     time.Duration `mapstructure:"refresh_token_ttl" default:"3h" min:"1s" doc:"lifetime of a refresh token"`
	MaxAccessTTL   time.Duration `mapstructure:"max_access_token_ttl" default:"12h" min:"1s" doc:"the longest lifetime a timeout may ask for"`
	EndpointURL    string        `mapstructure:"endpoint_url" doc:"the one base URL clients reach every service at"`
	// GRPCEndpointURL and GRPCServiceURLs: see core.Config. As
	// environment variables: NUBES_GRPC_ENDPOINT_URL=grpc://127.0.0.1:50051,
	// NUBES_GRPC_SERVICE_URLS=identity=grpc://identity:50051,board=grpc://board:50051
	GRPCEndpointURL  string            `mapstructure:"grpc_endpoint_url" doc:"the one gRPC endpoint endpoint/list answers"`
	GRPCServiceURLs  map[string]string `mapstructure:"grpc_service_urls" doc:"service -> its gRPC endpoint"`
	MaxLoginFailures int               `mapstructure:"max_login_failures" default:"10" min:"1" doc:"password attempts per address and account in login_block"`
	LoginBlock       time.Duration     `mapstructure:"login_block" default:"5m" min:"1s" doc:"the window of max_login_failures"`
	SystemTokenTTL   time.Duration     `mapstructure:"system_token_ttl" default:"720h" min:"1m" doc:"lifetime of the SYSTEM tokens identity issues"`
	// AccountCollectors maps a provider to the account collector plugin
	// (plugin_id or plugin_id@version) that syncs its trusted accounts.
	// As an environment variable:
	// NUBES_ACCOUNT_COLLECTOR_PLUGINS=aws=plugin-aws-account-collector,google_cloud=plugin-gcp-account-collector
	AccountCollectors map[string]string `mapstructure:"account_collector_plugins" doc:"provider -> its account collector plugin"`
}

// BinarySettings are what the identity binary reads: a service's keys,
// the sealing keys and identity's own.
type BinarySettings struct {
	config.Base  `mapstructure:",squash"`
	sealcmd.Keys `mapstructure:",squash"`
	Settings     `mapstructure:",squash"`
}

// Defaults are the defaults of the binary's keys.
func Defaults() map[string]any { return app.SettingsDefaults(&BinarySettings{}) }

// FromEnv is the constructor of the identity binary: it reads the
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

// Config turns settings into the rules' configuration.
func (st *BinarySettings) Config() (Config, error) {
	pemBytes := []byte(st.SigningKey)
	if st.SigningKeyFile != "" {
		b, err := os.ReadFile(st.SigningKeyFile)
		if err != nil {
			return Config{}, err
		}
		pemBytes = b
	}
	if len(pemBytes) == 0 {
		return Config{}, fmt.Errorf("signing_key or signing_key_file (PKCS#8 RSA PEM) is required")
	}
	signers, err := auth.ParseSignersPEM(pemBytes)
	if err != nil {
		return Config{}, err
	}
	cipher, err := st.Keyring()
	if err != nil {
		return Config{}, err
	}
	return Config{Signer: signers[0], VerifyKeys: signers[1:], SystemTokenTTL: st.SystemTokenTTL, Cipher: cipher, RootDomain: st.RootDomain, AdminUserID: st.AdminUserID,
		AdminPassword: st.AdminPassword, ConsoleURL: st.ConsoleURL, AccessTTL: st.AccessTTL, RefreshTTL: st.RefreshTTL,
		MaxLoginFailures: st.MaxLoginFailures, LoginBlock: st.LoginBlock, MaxAccessTTL: st.MaxAccessTTL,
		ServiceURLs: st.ServiceURLs, EndpointURL: st.EndpointURL, GRPCEndpointURL: st.GRPCEndpointURL, GRPCServiceURLs: st.GRPCServiceURLs,
		AccountCollectors: st.AccountCollectors}, nil
}
