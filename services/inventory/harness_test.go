package inventory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
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
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/inventory"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Plugin methods scripted on the fake collector.
const (
	initMethod     = "spaceone.api.inventory.plugin.Collector/init"
	verifyMethod   = "spaceone.api.inventory.plugin.Collector/verify"
	collectMethod  = "spaceone.api.inventory.plugin.Collector/collect"
	getTasksMethod = "spaceone.api.inventory.plugin.Job/get_tasks"
)

// Collections (as the service names them).
const (
	collectorsColl = "inventory_collectors"
	typesColl      = "inventory_cloud_service_types"
	jobsColl       = "inventory_jobs"
	tasksColl      = "inventory_job_tasks"
	servicesColl   = "inventory_cloud_services"
	regionsColl    = "inventory_regions"
	keysColl       = "inventory_keys"
)

const collectorPlugin = "plugin-aws-inven-collector"

// account is a trusted account the fake identity knows.
type account struct {
	ID, Name, Provider, Group, Domain, Workspace, Schema, Secret string
}

func (a account) info() map[string]any {
	return map[string]any{"trusted_account_id": a.ID, "name": a.Name, "provider": a.Provider, "resource_group": a.Group,
		"domain_id": a.Domain, "workspace_id": a.Workspace, "secret_schema_id": a.Schema, "trusted_secret_id": a.Secret}
}

func secretDataOf(id string) map[string]any {
	return map[string]any{"access_key": "AK-" + id, "secret_key": "S3CR3T-" + id}
}

func defaultAccounts() []account {
	return []account{
		{ID: "ta-a-dom", Name: "A domain", Provider: "aws", Group: "DOMAIN", Domain: "domain-a", Workspace: "*", Schema: "aws_access_key", Secret: "trusted-secret-adom"},
		{ID: "ta-a-w1", Name: "A w1", Provider: "aws", Group: "WORKSPACE", Domain: "domain-a", Workspace: "workspace-1", Schema: "aws_assume_role", Secret: "trusted-secret-aw1"},
		{ID: "ta-a-w2", Name: "A w2", Provider: "aws", Group: "WORKSPACE", Domain: "domain-a", Workspace: "workspace-2", Schema: "aws_access_key", Secret: "trusted-secret-aw2"},
		{ID: "ta-a-gcp", Name: "A gcp", Provider: "google_cloud", Group: "DOMAIN", Domain: "domain-a", Workspace: "*", Schema: "gcp", Secret: "trusted-secret-agcp"},
		{ID: "ta-b", Name: "B", Provider: "aws", Group: "DOMAIN", Domain: "domain-b", Workspace: "*", Schema: "aws_access_key", Secret: "trusted-secret-b"},
	}
}

// workspaces the fake identity knows: id -> domain.
var knownWorkspaces = map[string]string{"workspace-1": "domain-a", "workspace-2": "domain-a", "workspace-b": "domain-b"}

// fakeIdentity answers what inventory asks identity: workspace/get on
// the caller's behalf, trusted-account/list and get-secret-data for
// SYSTEM callers only, as identity does.
type fakeIdentity struct {
	srv *httptest.Server

	mu          sync.Mutex
	accounts    []account
	secretReads int
	down        bool
}

func writeError(w http.ResponseWriter, status int, code string) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"detail": map[string]string{"code": code, "message": "fake: " + code}})
}

func newFakeIdentity(t *testing.T) *fakeIdentity {
	f := &fakeIdentity{accounts: defaultAccounts()}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.down {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		p, err := testkit.Get().Verifier.Authenticate(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		if err != nil {
			writeError(w, http.StatusUnauthorized, errs.AuthenticateFailure)
			return
		}
		var req map[string]any
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		str := func(k string) string { s, _ := req[k].(string); return s }
		switch r.URL.Path {
		case "/identity/v2/workspace/get":
			d, ok := knownWorkspaces[str("workspace_id")]
			if !ok || d != p.DomainID || (p.WorkspaceID != "" && p.WorkspaceID != str("workspace_id")) {
				writeError(w, http.StatusNotFound, errs.NotFoundCode)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"workspace_id": str("workspace_id"), "domain_id": d, "name": "W"})
		case "/identity/v2/trusted-account/list":
			if !p.IsSystem() {
				writeError(w, http.StatusForbidden, errs.PermissionDenied)
				return
			}
			out := []any{}
			for _, a := range f.accounts {
				if a.Domain == str("domain_id") && (str("provider") == "" || a.Provider == str("provider")) {
					out = append(out, a.info())
				}
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"results": out, "total_count": len(out)})
		case "/identity/v2/trusted-account/get-secret-data":
			if !p.IsSystem() {
				writeError(w, http.StatusForbidden, errs.PermissionDenied)
				return
			}
			for _, a := range f.accounts {
				if a.ID == str("trusted_account_id") && a.Domain == str("domain_id") {
					f.secretReads++
					_ = json.NewEncoder(w).Encode(map[string]any{"trusted_account_id": a.ID, "domain_id": a.Domain, "data": secretDataOf(a.ID)})
					return
				}
			}
			writeError(w, http.StatusNotFound, errs.NotFoundCode)
		default:
			writeError(w, http.StatusNotFound, errs.UnsupportedAPI)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeIdentity) setAccounts(as []account) { f.mu.Lock(); f.accounts = as; f.mu.Unlock() }
func (f *fakeIdentity) setDown(down bool)        { f.mu.Lock(); f.down = down; f.mu.Unlock() }

// Plugins the fake repository knows.
var knownPlugins = map[string]testkit.RepoPlugin{
	collectorPlugin:              {ResourceType: "inventory.Collector", Provider: "aws", Capability: awsCapability()},
	"plugin-multi-provider":      {ResourceType: "inventory.Collector", Capability: multiCapability()},
	"plugin-unreachable":         {ResourceType: "inventory.Collector", Provider: "aws", Capability: awsCapability()},
	"plugin-grafana-mon-webhook": {ResourceType: "monitoring.Webhook", Provider: "aws", Capability: awsCapability()},
}

func awsCapability() map[string]any {
	return map[string]any{"supported_schema": []string{"aws_access_key"}}
}

func multiCapability() map[string]any {
	c := awsCapability()
	c["supported_providers"] = []string{"aws", "google_cloud"}
	return c
}

// stack is one test's inventory: its store, broker, fakes and callers.
type stack struct {
	t        *testing.T
	db       *mongo.Database
	nats     *testkit.NATS
	identity *fakeIdentity
	repo     *testkit.Fake
	plugin   *fakeplugin.Server
	plugins  *plugin.Client
	svcToken string

	anon, system, adminA, adminB, ownerA1, ownerA2, memberA1, userA *testkit.Client
	h                                                               http.Handler
}

type options struct {
	cfg      func(*inventory.Config)
	replicas int // instances running workers (default 1)
}

func setup(t *testing.T) *stack { t.Helper(); return setupWith(t, options{}) }

func setupWith(t *testing.T, o options) *stack {
	t.Helper()
	env := testkit.Get()
	s := &stack{t: t, db: env.Database(t), nats: testkit.StartNATS(t), identity: newFakeIdentity(t), repo: testkit.FakeRepository(t, knownPlugins)}
	s.plugin = fakeplugin.Start(t, fakeplugin.Options{})
	s.plugin.Script(initMethod, fakeplugin.Reply{Result: map[string]any{"metadata": map[string]any{
		"supported_resource_type": []any{"inventory.CloudService"}, "options_schema": map[string]any{"type": "object"}}}})
	s.plugins = fakeplugin.Client(t, map[string]string{collectorPlugin: s.plugin.Endpoint, "plugin-multi-provider": s.plugin.Endpoint,
		"plugin-unreachable": fakeplugin.Unreachable}, plugin.Options{ReadyTimeout: 300 * time.Millisecond, Retries: -1})
	s.svcToken = env.Token(t, auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-root", UserID: "inventory", Role: auth.SystemAdmin})

	replicas := max(o.replicas, 1)
	var first *app.Service
	for i := range replicas {
		svc := s.start(fmt.Sprintf("inventory-%d", i), o.cfg)
		if first == nil {
			first = svc
		}
	}
	srv, err := server.New(server.Options{Name: "inventory", Auth: env.Verifier, Logger: slog.New(slog.DiscardHandler)}, first.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	s.h = srv.Handler()
	c := testkit.NewClient(t, s.h)
	s.anon = c
	s.system = c.For(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-a", UserID: "root", Role: auth.SystemAdmin})
	s.adminA = c.For(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	s.adminB = c.For(auth.Principal{DomainID: "domain-b", UserID: "bob", Role: auth.DomainAdmin})
	s.ownerA1 = c.For(auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"})
	s.ownerA2 = c.For(auth.Principal{DomainID: "domain-a", UserID: "otto", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-2"})
	s.memberA1 = c.For(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"})
	s.userA = c.For(auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User})
	return s
}

// testConfig: fast heartbeats, retries and sweeps.
func testConfig() inventory.Config {
	cfg := inventory.DefaultConfig()
	cfg.AckWait = 2 * time.Second
	cfg.SlotRetry = 100 * time.Millisecond
	cfg.ScheduleTick = time.Hour // tests fire schedules themselves
	cfg.SweepEvery = 100 * time.Millisecond
	cfg.Batch = 7
	return cfg
}

// start runs one inventory instance (a replica) with its own broker
// connection until the test ends.
func (s *stack) start(name string, change func(*inventory.Config)) *app.Service {
	svc, _ := s.startStoppable(name, change)
	return svc
}

// startStoppable is start returning a kill: the replica's connection to
// NATS is closed (nothing acknowledged any more) and its workers stop.
func (s *stack) startStoppable(name string, change func(*inventory.Config)) (*app.Service, func()) {
	t := s.t
	bus, err := events.Connect(context.Background(), s.nats.URL(), name, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{"identity": s.identity.srv.URL, "repository": s.repo.URL}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("INVENTORY_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", name)
	}
	deps := app.Deps{DB: s.db, Log: log, Services: call.NewServices(urls, s.svcToken, nil), Plugins: s.plugins, Events: bus}
	cfg := testConfig()
	if change != nil {
		change(&cfg)
	}
	svc, err := inventory.Build(context.Background(), deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, len(svc.Workers))
	for _, w := range svc.Workers {
		go func() { _ = w(ctx); done <- struct{}{} }()
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			bus.NC.Close() // first: a dying process acknowledges nothing
			cancel()
			for range svc.Workers {
				<-done
			}
		})
	}
	t.Cleanup(kill)
	return svc, kill
}

type list[T any] struct {
	Results    []T `json:"results"`
	TotalCount int `json:"total_count"`
}

// count is the number of documents in a collection (filter may be nil):
// the proof that a refused request stored nothing.
func (s *stack) count(coll string, filter bson.D) int64 {
	s.t.Helper()
	return testkit.Count(s.t, s.db.Collection(coll), filter...)
}

// raw reads a stored document by _id.
func (s *stack) raw(coll, id string) bson.M {
	s.t.Helper()
	var d bson.D
	if err := s.db.Collection(coll).FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		s.t.Fatalf("%s %s: %v", coll, id, err)
	}
	return plain(d).(bson.M)
}

// plain turns nested documents into maps.
func plain(v any) any {
	switch x := v.(type) {
	case bson.D:
		m := bson.M{}
		for _, e := range x {
			m[e.Key] = plain(e.Value)
		}
		return m
	case bson.A:
		out := make(bson.A, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	}
	return v
}
