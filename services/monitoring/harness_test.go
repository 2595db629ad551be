package monitoring_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/monitoring"
	"github.com/nubes-io/nubes/services/monitoring/internal/mon"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Projects the fake identity knows: id -> domain, workspace.
var knownProjects = map[string][2]string{
	"project-a1": {"domain-a", "workspace-1"},
	"project-a2": {"domain-a", "workspace-2"},
	"project-b1": {"domain-b", "workspace-b"},
}

// fakeIdentity answers /identity/v2/project/get as identity does: it
// verifies the forwarded bearer and finds the project in the caller's
// domain (and workspace, for a workspace-scoped caller), 404 otherwise.
type fakeIdentity struct {
	srv   *httptest.Server
	calls atomic.Int64
}

func writeError(w http.ResponseWriter, status int, code string) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"detail": map[string]string{"code": code, "message": "fake: " + code}})
}

func newFakeIdentity(t *testing.T) *fakeIdentity {
	f := &fakeIdentity{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		if r.URL.Path != mon.ProjectGetPath {
			writeError(w, http.StatusNotFound, errs.UnsupportedAPI)
			return
		}
		p, err := testkit.Get().Verifier.Authenticate(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		if err != nil {
			writeError(w, http.StatusUnauthorized, errs.AuthenticateFailure)
			return
		}
		var req struct {
			ProjectID string `json:"project_id"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		pr, ok := knownProjects[req.ProjectID]
		if !ok || pr[0] != p.DomainID || (p.WorkspaceID != "" && pr[1] != p.WorkspaceID) {
			writeError(w, http.StatusNotFound, errs.NotFoundCode)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"project_id": req.ProjectID, "name": "P", "workspace_id": pr[1], "domain_id": pr[0]})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// callers of the monitoring API in two domains.
type callers struct {
	anon, system, adminA, adminB, ownerA1, memberA1, memberA2, userA *testkit.Client
	db                                                               *mongo.Database
	identity                                                         *fakeIdentity
	handler                                                          http.Handler
	svc                                                              *app.Service
	plugin                                                           *fakeplugin.Server
	bus                                                              *events.Bus
}

type options struct {
	settings func(*monitoring.Config)
}

// Plugins the fake repository knows: id -> resource_type.
var knownPlugins = map[string]string{
	"plugin-grafana-mon-webhook": "monitoring.Webhook",
	"plugin-unreachable":         "monitoring.Webhook",
	"plugin-aws-inven-collector": "inventory.Collector",
}

// newFakeRepository answers plugin/get and plugin/get-versions.
func newFakeRepository(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := testkit.Get().Verifier.Authenticate(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); err != nil {
			writeError(w, http.StatusUnauthorized, errs.AuthenticateFailure)
			return
		}
		var req struct {
			PluginID string `json:"plugin_id"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		rt, ok := knownPlugins[req.PluginID]
		if !ok {
			writeError(w, http.StatusNotFound, errs.NotFoundCode)
			return
		}
		switch r.URL.Path {
		case pluginref.GetPath:
			_ = json.NewEncoder(w).Encode(map[string]any{"plugin_id": req.PluginID, "name": req.PluginID, "resource_type": rt,
				"capability": map[string]any{"supported_schema": []string{}}, "state": "ENABLED"})
		case pluginref.VersionsPath:
			_ = json.NewEncoder(w).Encode(map[string]any{"results": []string{"1.2.0", "1.1.0"}, "total_count": 2})
		default:
			writeError(w, http.StatusNotFound, errs.UnsupportedAPI)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

const (
	initMethod   = "spaceone.api.monitoring.plugin.Webhook/init"
	verifyMethod = "spaceone.api.monitoring.plugin.Webhook/verify"
	parseMethod  = "spaceone.api.monitoring.plugin.Event/parse"
)

func setup(t *testing.T) *callers { t.Helper(); return setupWith(t, options{}) }

func setupWith(t *testing.T, o options) *callers {
	t.Helper()
	env := testkit.Get()
	db := env.Database(t)
	fake := newFakeIdentity(t)
	repo := newFakeRepository(t)
	fp := fakeplugin.Start(t, fakeplugin.Options{})
	fp.Script(initMethod, fakeplugin.Reply{Result: map[string]any{"metadata": map[string]any{"supported_event_type": []any{"ALERT"}}}})
	plugins, err := plugin.New(map[string]string{"plugin-grafana-mon-webhook": fp.Endpoint, "plugin-unreachable": "grpc://127.0.0.1:1"},
		plugin.Options{ReadyTimeout: 300 * time.Millisecond, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plugins.Close() })
	bus, err := events.Connect(context.Background(), env.NATS.URL, "monitoring-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	urls := map[string]string{"identity": fake.srv.URL, "repository": repo.URL}
	deps := app.Deps{DB: db, Log: slog.New(slog.DiscardHandler), Services: call.NewServices(urls, "", nil), Plugins: plugins, Events: bus}
	cfg := monitoring.DefaultConfig()
	cfg.WebhookBaseURL = "https://nubes.example.com/"
	cfg.CounterFlush = 20 * time.Millisecond
	if o.settings != nil {
		o.settings(&cfg)
	}
	svc, err := monitoring.Build(context.Background(), deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, len(svc.Workers))
	for _, w := range svc.Workers {
		go func() { _ = w(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for range svc.Workers {
			<-done
		}
	})
	srv, err := server.New(server.Options{Name: "monitoring", Auth: env.Verifier, Logger: slog.New(slog.DiscardHandler), Raw: svc.Raw}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.NewClient(t, srv.Handler())
	tok := func(p auth.Principal) *testkit.Client { return c.As(env.Token(t, p)) }
	return &callers{
		anon:     c,
		system:   tok(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-a", UserID: "root", Role: auth.SystemAdmin}),
		adminA:   tok(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin}),
		adminB:   tok(auth.Principal{DomainID: "domain-b", UserID: "bob", Role: auth.DomainAdmin}),
		ownerA1:  tok(auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"}),
		memberA1: tok(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"}),
		memberA2: tok(auth.Principal{DomainID: "domain-a", UserID: "max", Role: auth.WorkspaceMember, WorkspaceID: "workspace-2"}),
		userA:    tok(auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User}),
		db:       db,
		identity: fake,
		handler:  srv.Handler(),
		svc:      svc,
		plugin:   fp,
		bus:      bus,
	}
}

type list[T any] struct {
	Results    []T `json:"results"`
	TotalCount int `json:"total_count"`
}

// count is the number of documents in a collection (filter may be nil):
// the proof that a refused request stored nothing.
func (c *callers) count(t *testing.T, coll string, filter bson.D) int64 {
	t.Helper()
	if filter == nil {
		filter = bson.D{}
	}
	n, err := c.db.Collection(coll).CountDocuments(context.Background(), filter)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// raw reads a stored document by _id.
func (c *callers) raw(t *testing.T, coll, id string) bson.M {
	t.Helper()
	var m bson.M
	if err := c.db.Collection(coll).FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&m); err != nil {
		t.Fatalf("%s %s: %v", coll, id, err)
	}
	return m
}
