// Command devstack runs the whole Nubes suite in one process for
// development: every service behind one port (127.0.0.1:8080), embedded
// FerretDB on SQLite and embedded NATS JetStream, with data under .data/.
//
// On first start it creates a domain and a signing key and writes
// .data/bootstrap.json (mode 0600) with domain_id and system_token.
// It is not a production deployment: see helm/ and docs/operations.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/devinfra"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/grpcapi"
	"github.com/nubes-io/nubes/pkg/outward"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/board"
	configsvc "github.com/nubes-io/nubes/services/config"
	costanalysis "github.com/nubes-io/nubes/services/cost-analysis"
	"github.com/nubes-io/nubes/services/dashboard"
	"github.com/nubes-io/nubes/services/identity"
	"github.com/nubes-io/nubes/services/inventory"
	"github.com/nubes-io/nubes/services/mailer"
	"github.com/nubes-io/nubes/services/monitoring"
	"github.com/nubes-io/nubes/services/notification"
	"github.com/nubes-io/nubes/services/repository"
	"github.com/nubes-io/nubes/services/secret"
)

// serviceNames are the services the devstack runs, identity first.
var serviceNames = []string{identity.Name, board.Name, mailer.Name, dashboard.Name, secret.Name, repository.Name, monitoring.Name, notification.Name, costanalysis.Name, inventory.Name, configsvc.Name}

// Config of the devstack. An empty mongo_uri or nats_url starts the
// embedded server instead.
type Config struct {
	HTTPAddr string `mapstructure:"http_addr"`
	// GRPCAddr serves every service's operations over gRPC on one
	// address, as upstream's clients call them; empty: no gRPC.
	GRPCAddr  string `mapstructure:"grpc_addr"`
	DataDir   string `mapstructure:"data_dir"`
	MongoURI  string `mapstructure:"mongo_uri" secret:"true"`
	MongoDB   string `mapstructure:"mongo_database"`
	NATSURL   string `mapstructure:"nats_url" secret:"true"`
	LogFormat string `mapstructure:"log_format"`
	LogLevel  string `mapstructure:"log_level"`
	// EmbeddedLogLevel is the least level the embedded FerretDB and NATS
	// log at: warn keeps their wire dumps and connection lines out of the
	// way; debug shows everything.
	EmbeddedLogLevel string `mapstructure:"embedded_log_level"`
	// The root domain's admin, created on first start (a random password
	// when empty; bootstrap.json keeps it).
	AdminUserID   string `mapstructure:"admin_user_id"`
	AdminPassword string `mapstructure:"admin_password" secret:"true"`
	// PluginEndpoints maps plugin_id or plugin_id@version to
	// grpc://host:port or grpc+ssl://host:port (docs/configuration.md).
	PluginEndpoints map[string]string `mapstructure:"plugin_endpoints"`
	// AccountCollectors maps a provider to the account collector plugin of
	// trusted-account sync (identity's account_collector_plugins).
	AccountCollectors map[string]string `mapstructure:"account_collector_plugins"`
	// The mailer writes .eml files under <data_dir>/mail unless smtp_host is set.
	Mailer mailer.Config `mapstructure:",squash"`
	// Built, when set, receives the services once they are built (the
	// service map test reads their routes).
	Built func([]*app.Service) `mapstructure:"-"`
	// GRPCListening, when set, receives the gRPC address once it listens.
	GRPCListening func(addr string) `mapstructure:"-"`
}

func defaults() map[string]any {
	d := mailer.Defaults()
	maps.Copy(d, map[string]any{
		"http_addr": "127.0.0.1:8080", "grpc_addr": "127.0.0.1:50051", "data_dir": ".data", "mongo_uri": "", "mongo_database": "nubes",
		"nats_url": "", "log_format": "auto", "log_level": "info", "embedded_log_level": "warn", "admin_user_id": "admin", "admin_password": "",
		"plugin_endpoints": map[string]string{}, "account_collector_plugins": map[string]string{},
	})
	return d
}

// Bootstrap is .data/bootstrap.json: the root domain, a SYSTEM token for
// it and its admin's credentials.
type Bootstrap struct {
	DomainID      string `json:"domain_id"`
	SystemToken   string `json:"system_token"`
	DomainName    string `json:"domain_name"`
	AdminUserID   string `json:"admin_user_id"`
	AdminPassword string `json:"admin_password"`
}

// Run starts the devstack and serves until ctx is done. started, if not
// nil, receives the listening address once the stack is up.
func Run(ctx context.Context, cfg Config, log *slog.Logger, started func(addr string)) error {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	embeddedLevel := slog.LevelWarn
	if cfg.EmbeddedLogLevel != "" {
		if err := embeddedLevel.UnmarshalText([]byte(cfg.EmbeddedLogLevel)); err != nil {
			return fmt.Errorf("embedded_log_level: %w", err)
		}
	}
	mongoURI := cfg.MongoURI
	if mongoURI == "" {
		m, err := devinfra.StartMongo(filepath.Join(cfg.DataDir, "mongo"), "127.0.0.1:0", devinfra.Quiet(log.With("component", "ferretdb"), embeddedLevel))
		if err != nil {
			return err
		}
		defer m.Stop()
		mongoURI = m.URI
	}
	natsURL := cfg.NATSURL
	if natsURL == "" {
		n, err := devinfra.StartNATSWithLog(filepath.Join(cfg.DataDir, "nats"), "127.0.0.1", 0, devinfra.Quiet(log.With("component", "nats"), embeddedLevel))
		if err != nil {
			return err
		}
		defer n.Stop()
		natsURL = n.URL
	}
	signer, cipher, err := keys(cfg.DataDir)
	if err != nil {
		return err
	}
	bootPath := filepath.Join(cfg.DataDir, "bootstrap.json")
	old, err := readBootstrap(bootPath)
	if err != nil {
		return err
	}

	// SQLite serializes writes: a small pool avoids queueing inside FerretDB.
	client, err := store.Connect(ctx, mongoURI, store.Options{MaxPoolSize: 16})
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	bus, err := events.Connect(ctx, natsURL, "devstack", log)
	if err != nil {
		return err
	}
	defer bus.Close()
	plugins, err := plugin.New(cfg.PluginEndpoints, plugin.Options{Log: log})
	if err != nil {
		return err
	}
	defer plugins.Close()
	deps := app.Deps{DB: client.Database(cfg.MongoDB), Events: bus, Log: log, Plugins: plugins}

	// Listen first: identity's e-mail links need the real address.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return err
	}
	defer ln.Close()
	password := cfg.AdminPassword
	if password == "" {
		password = old.AdminPassword
	}
	// endpoint/list answers this process's address for every service with
	// an API; the map is filled below, once they are built.
	// With a gRPC address it answers that one instead, as upstream's
	// clients dial it (filled once it listens).
	serviceURLs, grpcURLs := map[string]string{}, map[string]string{}
	id, err := identity.Build(ctx, deps, identity.Config{Signer: signer, Cipher: cipher, RootDomainID: old.DomainID,
		AdminUserID: cfg.AdminUserID, AdminPassword: password, ConsoleURL: "http://" + ln.Addr().String() + "/console",
		ServiceURLs: serviceURLs, GRPCServiceURLs: grpcURLs, AccountCollectors: cfg.AccountCollectors})
	if err != nil {
		return fmt.Errorf("build identity: %w", err)
	}
	boot, err := writeBootstrap(bootPath, old, id, signer)
	if err != nil {
		return err
	}
	if err := writeLogin(filepath.Join(cfg.DataDir, LoginFile), boot); err != nil {
		return err
	}
	built := []*app.Service{id.Service}
	mcfg := cfg.Mailer
	if mcfg.SMTPHost == "" && mcfg.MailDir == "" {
		mcfg.MailDir = filepath.Join(cfg.DataDir, "mail")
	}
	// Calls between services (pkg/call) come back to this process, with
	// the root domain's system token as the service credential.
	self := map[string]string{}
	for _, name := range serviceNames {
		self[name] = "http://" + ln.Addr().String()
	}
	deps.Services = call.NewServices(self, boot.SystemToken, nil)
	// The secret, repository, notification, monitoring (acknowledge links) and cost-analysis services seal with the same keys as identity (.data/encryption-keys).
	for _, build := range []app.Constructor{board.New, mailer.New(mcfg, mailer.WithKeys(cipher)), dashboard.New, secret.New(cipher), repository.New(repository.Config{Outward: outward.Allow{Loopback: true}, Keys: cipher}), monitoringAt("http://"+ln.Addr().String(), cipher), notification.New(cipher), costanalysis.New(cipher), inventory.New, configsvc.New} {
		svc, err := build(ctx, deps)
		if err != nil {
			return err
		}
		built = append(built, svc)
	}
	if cfg.Built != nil {
		cfg.Built(built)
	}
	var routes []api.Route
	var raw []server.Raw
	var workers []func(context.Context) error
	var docs []map[string]any
	for _, svc := range built {
		if len(svc.Routes) > 0 {
			serviceURLs[svc.Name] = "http://" + ln.Addr().String()
		}
		routes = append(routes, svc.Routes...)
		raw = append(raw, svc.Raw...)
		workers = append(workers, svc.Workers...)
		docs = append(docs, api.OpenAPI("Nubes "+svc.Name, svc.Routes, server.Aliases(svc.Routes)))
	}
	// One process: identity's authenticator checks every credential
	// against its own records, as the remote check does in a cluster.
	srv, err := server.New(server.Options{
		Name: "devstack", Logger: log, Auth: id.Service.Auth, Documents: id.Service.Documents,
		Ready:   func(ctx context.Context) error { return store.Ping(ctx, deps.DB) },
		OpenAPI: api.MergeOpenAPI("Nubes", docs...), Raw: raw,
	}, routes...)
	if err != nil {
		return err
	}
	if cfg.GRPCAddr != "" {
		g, err := grpcapi.New(srv, grpcapi.Options{})
		if err != nil {
			return err
		}
		gln, err := net.Listen("tcp", cfg.GRPCAddr)
		if err != nil {
			return err
		}
		defer gln.Close()
		for name := range serviceURLs {
			grpcURLs[name] = "grpc://" + gln.Addr().String()
		}
		workers = append(workers, app.GRPC(g, gln))
		if cfg.GRPCListening != nil {
			cfg.GRPCListening(gln.Addr().String())
		}
	}
	log.Info("devstack ready", "url", "http://"+ln.Addr().String(), "grpc", cfg.GRPCAddr, "domain_id", boot.DomainID,
		"admin_user_id", boot.AdminUserID, "bootstrap", bootPath)
	if started != nil {
		started(ln.Addr().String())
	}
	return app.Serve(ctx, srv, ln, workers...)
}

// monitoringAt builds monitoring with webhook URLs and acknowledge links
// under base, the links sealed with keys.
func monitoringAt(base string, keys *identity.Cipher) app.Constructor {
	return func(ctx context.Context, d app.Deps) (*app.Service, error) {
		cfg := monitoring.DefaultConfig()
		cfg.WebhookBaseURL, cfg.Keys = base, keys
		return monitoring.Build(ctx, d, cfg)
	}
}

// keys loads or creates the signing key and the encryption keys (0600).
func keys(dir string) (*auth.Signer, *identity.Cipher, error) {
	keyPath := filepath.Join(dir, "signing-key.pem")
	pemBytes, err := os.ReadFile(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		s, err := auth.GenerateSigner()
		if err != nil {
			return nil, nil, err
		}
		pemBytes = s.PEM()
		if err := os.WriteFile(keyPath, pemBytes, 0o600); err != nil {
			return nil, nil, err
		}
	} else if err != nil {
		return nil, nil, err
	}
	signer, err := auth.ParseSignerPEM(pemBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	encPath := filepath.Join(dir, "encryption-keys")
	spec, err := os.ReadFile(encPath)
	if errors.Is(err, fs.ErrNotExist) {
		spec = []byte(identity.RandomCipherSpec())
		if err := os.WriteFile(encPath, spec, 0o600); err != nil {
			return nil, nil, err
		}
	} else if err != nil {
		return nil, nil, err
	}
	cipher, err := identity.NewCipher(string(spec))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", encPath, err)
	}
	return signer, cipher, nil
}

// LoginFile, under the data directory, is the body of a token/issue call
// for the root domain's admin (mode 0600), so one curl logs in without
// the password on the screen.
const LoginFile = "login.json"

func writeLogin(path string, b *Bootstrap) error {
	if b.AdminPassword == "" {
		return nil // set from config, not known here
	}
	body := map[string]any{"credentials": map[string]string{"user_id": b.AdminUserID, "password": b.AdminPassword},
		"auth_type": "LOCAL", "domain_id": b.DomainID}
	raw, _ := json.MarshalIndent(body, "", "  ")
	return os.WriteFile(path, append(raw, '\n'), 0o600)
}

// Banner is what the devstack prints once it serves: the URL, where the
// credentials are and one command that logs in.
func Banner(addr, grpcAddr, dataDir string, up time.Duration) string {
	url := "http://" + addr
	grpcLine := ""
	if grpcAddr != "" {
		grpcLine = fmt.Sprintf("  gRPC         grpc://%s (every service, with reflection; metadata token)\n", grpcAddr)
	}
	return fmt.Sprintf("\nNubes devstack on %s (up in %s)\n"+
		"  credentials  %s (domain_id, system_token, admin user and password)\n"+
		"  log in       curl -s -d @%s %s/identity/token/issue\n"+
		"  API          %s/openapi.json\n%s\n",
		url, up.Round(time.Millisecond), filepath.Join(dataDir, "bootstrap.json"),
		filepath.Join(dataDir, LoginFile), url, url, grpcLine)
}

func readBootstrap(path string) (Bootstrap, error) {
	var b Bootstrap
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return b, err
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return b, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// writeBootstrap records what identity's bootstrap made. A second start
// changes nothing: the system token is kept while it still verifies for
// the root domain with half its life left, and the admin password is known only from the first
// start (or from config).
func writeBootstrap(path string, old Bootstrap, id *identity.Built, signer *auth.Signer) (*Bootstrap, error) {
	b := old
	b.DomainID, b.DomainName, b.AdminUserID = id.Bootstrap.DomainID, id.Bootstrap.DomainName, id.Bootstrap.AdminUserID
	if id.Bootstrap.AdminPassword != "" {
		b.AdminPassword = id.Bootstrap.AdminPassword
	}
	v, err := auth.NewVerifier(auth.JWKSOf(signer))
	if err != nil {
		return nil, err
	}
	// SYSTEM tokens expire (identity's system_token_ttl): one with less
	// than half its life left is renewed, so a devstack started now and
	// then never hands out a dead one.
	c, err := v.Parse(b.SystemToken)
	if err != nil || c.DomainID != b.DomainID || !c.Principal().IsService() || c.ExpiresAt == nil ||
		time.Until(c.ExpiresAt.Time) < c.ExpiresAt.Sub(c.IssuedAt.Time)/2 {
		b.SystemToken = id.SystemToken
	}
	if b == old {
		return &b, nil
	}
	raw, _ := json.MarshalIndent(b, "", "  ")
	return &b, os.WriteFile(path, append(raw, '\n'), 0o600)
}

func main() {
	var cfg Config
	if err := config.Load(&cfg, defaults()); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
	log := app.NewLogger(cfg.LogFormat, cfg.LogLevel, os.Stderr)
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	start := time.Now()
	grpcAddr := ""
	cfg.GRPCListening = func(a string) { grpcAddr = a }
	err := Run(ctx, cfg, log, func(addr string) {
		fmt.Fprint(os.Stderr, Banner(addr, grpcAddr, cfg.DataDir, time.Since(start)))
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}
