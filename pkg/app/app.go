// Package app is the lifecycle every Nubes binary shares: load config,
// set up slog, connect to MongoDB (and NATS when asked), build the service
// from its constructor, serve it, and shut down in order on SIGTERM.
//
// A service's main is one call to Main; the devstack and tests call the
// same constructors through Build. app holds no business rule.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/grpcapi"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
)

// Deps are what a service constructor receives.
type Deps struct {
	DB     *mongo.Database
	Events *events.Bus // nil unless the service needs events
	Log    *slog.Logger
	// Services calls the other services of the suite (config service_urls
	// and service_token); never nil when built by Main.
	Services *call.Services
	// Plugins calls plugins by plugin_id[@version] (config
	// plugin_endpoints); never nil when built by Main.
	Plugins *plugin.Client
}

// Service is what a constructor returns: its routes and its background
// workers (each runs until ctx is done).
type Service struct {
	Name    string
	Routes  []api.Route
	Workers []func(ctx context.Context) error
	// Auth, when set, replaces the authenticator built from config: the
	// identity service verifies with its own keys and its own records.
	Auth auth.Authenticator
	// Documents are JSON documents served by GET (server.Options.Documents).
	Documents map[string][]byte
	// Reflection, when set, lists the whole suite for the console
	// (server.Options.Reflection); identity sets it.
	Reflection func(ctx context.Context) (api.Reflection, error)
	// Raw are routes outside the operation contract (server.Raw), such
	// as monitoring's webhook ingest URL.
	Raw []server.Raw
}

// Constructor builds a service. It must create its indexes and streams
// (idempotently) before returning.
type Constructor func(ctx context.Context, d Deps) (*Service, error)

// Main runs one service binary and returns the process exit code.
// defaults are the binary's full config defaults when it has keys of its
// own beside config.Base (its constructor loads those itself).
func Main(name string, needsEvents bool, build Constructor, defaults ...map[string]any) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	all := config.BaseDefaults()
	for _, d := range defaults {
		maps.Copy(all, d)
	}
	if err := run(ctx, name, needsEvents, build, all); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

func run(ctx context.Context, name string, needsEvents bool, build Constructor, defaults map[string]any) error {
	var cfg config.Base
	if err := config.Load(&cfg, defaults); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := NewLogger(cfg.LogFormat, cfg.LogLevel, os.Stderr).With("service", name)
	slog.SetDefault(log)
	log.Info("config", "values", config.String(&cfg))
	query.SetMaxPageSize(cfg.MaxPageSize)
	stat.SetLimits(stat.Limits{MaxGroups: cfg.StatMaxGroups, MaxPushed: cfg.StatMaxPushed})

	client, err := store.Connect(ctx, cfg.MongoURI, store.Options{MaxPoolSize: cfg.MongoPoolSize, OpTimeout: cfg.MongoTimeout})
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	plugins, err := plugin.New(cfg.PluginEndpoints, plugin.Options{Log: log})
	if err != nil {
		return err
	}
	defer plugins.Close()
	deps := Deps{DB: client.Database(cfg.MongoDatabase), Log: log, Services: call.NewServices(cfg.ServiceURLs, cfg.ServiceToken, nil), Plugins: plugins}
	if needsEvents {
		opts := []events.Option{events.WithReplicas(cfg.NATSReplicas), events.WithUser(cfg.NATSUser, cfg.NATSPassword)}
		// A service creates and updates only the streams it publishes
		// into, and binds to the others (the chart's NATS users allow no
		// more).
		if owned, ok := events.OwnedStreams(name); ok {
			opts = append(opts, events.WithStreams(owned...))
		}
		bus, err := events.Connect(ctx, cfg.NATSURL, name, log, opts...)
		if err != nil {
			return err
		}
		defer bus.Close()
		deps.Events = bus
	}
	svc, err := build(ctx, deps)
	if err != nil {
		return fmt.Errorf("build %s: %w", name, err)
	}
	authn := svc.Auth
	if authn == nil {
		if authn, err = authenticator(ctx, &cfg, log); err != nil {
			return err
		}
	}
	srv, err := server.New(server.Options{
		Name: name, Logger: log, Auth: authn,
		Ready:      func(ctx context.Context) error { return store.Ping(ctx, deps.DB) },
		DrainDelay: cfg.DrainDelay, ShutdownTimeout: cfg.ShutdownTimeout, Documents: svc.Documents,
		ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout, ReadTimeout: cfg.HTTPReadTimeout,
		WriteTimeout: cfg.HTTPWriteTimeout, IdleTimeout: cfg.HTTPIdleTimeout,
		Reflection: svc.Reflection, Raw: svc.Raw,
	}, svc.Routes...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return err
	}
	workers := svc.Workers
	if cfg.GRPCAddr != "" {
		g, err := grpcapi.New(srv, grpcapi.Options{CallTimeout: cfg.HTTPWriteTimeout, Idle: cfg.HTTPIdleTimeout,
			DrainDelay: cfg.DrainDelay, ShutdownTimeout: cfg.ShutdownTimeout})
		if err != nil {
			return err
		}
		gln, err := net.Listen("tcp", cfg.GRPCAddr)
		if err != nil {
			_ = ln.Close()
			return err
		}
		workers = append(workers, GRPC(g, gln))
	}
	return Serve(ctx, srv, ln, workers...)
}

// The JWK set from jwks_url or jwks_file is read again when a token names
// an unknown key (at most every JWKSMinInterval) and when the set held is
// older than JWKSMaxAge: a key identity adds verifies at once, a key it
// withdraws stops verifying within JWKSMaxAge.
const (
	JWKSMinInterval = 30 * time.Second
	JWKSMaxAge      = 5 * time.Minute
)

// authenticator verifies tokens offline with the configured JWK set and,
// when identity_url is set, asks identity whether users and API keys are
// still enabled (answers cached for auth.CheckTTL).
func authenticator(ctx context.Context, cfg *config.Base, log *slog.Logger) (auth.Authenticator, error) {
	jwks, err := cfg.JWKSBytes(ctx)
	if err != nil {
		return nil, fmt.Errorf("read JWKS: %w", err)
	}
	verifier, err := auth.NewVerifier(jwks)
	if err != nil {
		return nil, err
	}
	if read := cfg.JWKSReader(); read != nil {
		verifier.Reload(read, JWKSMinInterval, JWKSMaxAge, log)
	}
	if cfg.IdentityURL == "" {
		return verifier, nil
	}
	return auth.Checked(verifier, auth.RemoteChecker(cfg.IdentityURL, nil), auth.CheckTTL), nil
}

// Serve runs the server and the workers until ctx is done, then stops the
// server (readiness first) and waits for the workers.
func Serve(ctx context.Context, srv *server.Server, ln net.Listener, workers ...func(context.Context) error) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(workers))
	for _, w := range workers {
		go func() { errc <- w(wctx) }()
	}
	err := srv.Run(ctx, ln)
	cancel()
	for range workers {
		if werr := <-errc; werr != nil && !errors.Is(werr, context.Canceled) {
			err = errors.Join(err, werr)
		}
	}
	return err
}

// GRPC runs g on ln as one of Serve's workers: it stops with the HTTP
// server (health NOT_SERVING, drain, calls under way finish) and Serve
// waits for it.
func GRPC(g *grpcapi.Server, ln net.Listener) func(context.Context) error {
	return func(ctx context.Context) error { return g.Run(ctx, ln) }
}

// NewLogger returns a JSON logger, or a text one on a terminal when
// format is "auto".
func NewLogger(format, level string, w io.Writer) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(strings.ToUpper(level)))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "text" || (format == "auto" && isTerminal(w)) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// AfterStop returns a context for work a worker has under way when its
// ctx ends (the stop) and must not drop at once: a call whose effect
// cannot be taken back, whose answer decides whether it is done again,
// or a last write. It is not ended by the stop itself, but grace after
// it (grace budgets are chosen so the work and the drain fit a pod's
// 30 s termination grace); a bound of the work's own is the caller's
// (context.WithTimeout on it).
func AfterStop(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The timer left pending after cancel only cancels an ended context.
	stopCut := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return actx, func() { stopCut(); cancel() }
}

// LoadSettings is what a service's binary does with its declared settings
// at start (pkg/config, declare.go): out, a pointer to a struct embedding
// config.Base beside the service's own keys, is loaded from the defaults
// its tags declare, the config file and NUBES_* variables, checked against
// its bounds, and its own keys are logged with secrets masked (Main logs
// Base's).
func LoadSettings(d Deps, out any) error {
	if err := config.LoadDeclared(out); err != nil {
		return err
	}
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	log.Info("settings", "values", config.OwnString(out))
	return nil
}

// SettingsDefaults are the defaults Main needs for a service whose
// binary loads settings (out, as for LoadSettings): its file keys are
// then known, and its keys read from the environment.
func SettingsDefaults(out any) map[string]any { return config.Defaults(out) }
