package monitoring_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/monitoring"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Projects the fake identity knows.
var knownProjects = map[string]testkit.Project{
	"project-a1": {DomainID: "domain-a", WorkspaceID: "workspace-1"},
	"project-a2": {DomainID: "domain-a", WorkspaceID: "workspace-2"},
	"project-a3": {DomainID: "domain-a", WorkspaceID: "workspace-1"},
	"project-b1": {DomainID: "domain-b", WorkspaceID: "workspace-b"},
}

// The role bindings the fake identity knows: who may be assigned alerts.
var knownBindings = []binding{{"mia", "WORKSPACE_MEMBER", "workspace-1", "domain-a"}, {"olga", "WORKSPACE_OWNER", "workspace-1", "domain-a"},
	{"eve", "WORKSPACE_MEMBER", "workspace-1", "domain-a"}, {"max", "WORKSPACE_MEMBER", "workspace-2", "domain-a"},
	{"alice", "DOMAIN_ADMIN", "*", "domain-a"}, {"bob", "DOMAIN_ADMIN", "*", "domain-b"}}

type binding struct{ user, role, workspace, domain string }

// bindingsOf answers role-binding/list as identity does for the caller:
// its domain's bindings of the user_id asked.
func bindingsOf(bs []binding) testkit.Handler {
	return func(p *auth.Principal, req map[string]any) (any, error) {
		var out []map[string]any
		for _, b := range bs {
			if b.domain == p.DomainID && b.user == testkit.Str(req, "user_id") {
				out = append(out, map[string]any{"user_id": b.user, "role_type": b.role, "workspace_id": b.workspace, "domain_id": b.domain})
			}
		}
		return map[string]any{"results": out, "total_count": len(out)}, nil
	}
}

// callers of the monitoring API in two domains.
type callers struct {
	anon, system, adminA, adminB, ownerA1, memberA1, memberA2, userA *testkit.Client
	db                                                               *mongo.Database
	identity                                                         *testkit.Fake
	handler                                                          http.Handler
	svc                                                              *app.Service
	plugin                                                           *fakeplugin.Server
	bus                                                              *events.Bus
	clock                                                            *testkit.Clock // the alerts' clock: the real time plus what a test adds
	deps                                                             app.Deps
	cfg                                                              monitoring.Config
}

// testKeys seal the acknowledge links of the tests.
var testKeys = func() *seal.Keyring {
	k, err := seal.Parse("k1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)), "k1")
	if err != nil {
		panic(err)
	}
	return k
}()

type options struct {
	settings func(*monitoring.Config)
	// ownNATS starts a NATS of the test's own: a deletion the test
	// publishes reaches no other test's service.
	ownNATS bool
}

// Plugins the fake repository knows.
var knownPlugins = map[string]testkit.RepoPlugin{
	"plugin-grafana-mon-webhook": {ResourceType: "monitoring.Webhook", Capability: map[string]any{"supported_schema": []string{}}},
	"plugin-unreachable":         {ResourceType: "monitoring.Webhook", Capability: map[string]any{"supported_schema": []string{}}},
	"plugin-aws-inven-collector": {ResourceType: "inventory.Collector", Capability: map[string]any{"supported_schema": []string{}}},
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
	fake := testkit.FakeIdentity(t, knownProjects).Handle(core.RoleBindingListPath, bindingsOf(knownBindings))
	repo := testkit.FakeRepository(t, knownPlugins)
	fp := fakeplugin.Start(t, fakeplugin.Options{})
	fp.Script(initMethod, fakeplugin.Reply{Result: map[string]any{"metadata": map[string]any{"supported_event_type": []any{"ALERT"}}}})
	plugins := fakeplugin.Client(t, map[string]string{"plugin-grafana-mon-webhook": fp.Endpoint, "plugin-unreachable": fakeplugin.Unreachable},
		plugin.Options{ReadyTimeout: 300 * time.Millisecond, Retries: -1})
	// An account of its own: the tests run side by side, and two services
	// on one account would share the fixed consumer names.
	natsURL := env.OwnNATS(t)
	if o.ownNATS {
		natsURL = testkit.StartNATS(t).URL()
	}
	bus, err := events.Connect(context.Background(), natsURL, "monitoring-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	urls := map[string]string{"identity": fake.URL, "repository": repo.URL}
	// The service credential: the ingest asks identity whether a
	// webhook's project is still live.
	serviceToken := env.Token(t, auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-root", UserID: "system", Role: auth.SystemAdmin})
	deps := app.Deps{DB: db, Log: slog.New(slog.DiscardHandler), Services: call.NewServices(urls, serviceToken, nil), Plugins: plugins, Events: bus}
	clock := testkit.RunningClock()
	cfg := monitoring.DefaultConfig()
	cfg.WebhookBaseURL = "https://nubes.example.com/"
	cfg.CounterFlush = 20 * time.Millisecond
	cfg.Keys = testKeys
	cfg.Clock = clock.Now
	cfg.EscalationTick = 0 // off: escalation tests turn it on
	cfg.FailRate = 0       // off: the tests of refusals post many from one address; public_test.go turns it on
	if o.settings != nil {
		o.settings(&cfg)
	}
	svc, err := monitoring.Build(context.Background(), deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.RunWorkers(t, svc.Workers)
	srv, err := server.New(server.Options{Name: "monitoring", Auth: env.Verifier, Logger: slog.New(slog.DiscardHandler), Raw: svc.Raw}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.NewClient(t, srv.Handler())
	return &callers{
		anon:     c,
		system:   c.For(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-a", UserID: "root", Role: auth.SystemAdmin}),
		adminA:   c.For(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin}),
		adminB:   c.For(auth.Principal{DomainID: "domain-b", UserID: "bob", Role: auth.DomainAdmin}),
		ownerA1:  c.For(auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"}),
		memberA1: c.For(memberA1),
		memberA2: c.For(auth.Principal{DomainID: "domain-a", UserID: "max", Role: auth.WorkspaceMember, WorkspaceID: "workspace-2", Projects: []string{"project-a2"}}),
		userA:    c.For(auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User}),
		db:       db,
		identity: fake,
		handler:  srv.Handler(),
		svc:      svc,
		plugin:   fp,
		bus:      bus,
		clock:    clock,
		deps:     deps,
		cfg:      cfg,
	}
}

// memberA1 is a member of workspace-1 in project-a1 (and project-a3).
var memberA1 = auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1", Projects: []string{"project-a1", "project-a3"}}

type list[T any] struct {
	Results    []T `json:"results"`
	TotalCount int `json:"total_count"`
}

// count is the number of documents in a collection (filter may be nil):
// the proof that a refused request stored nothing.
func (c *callers) count(t *testing.T, coll string, filter bson.D) int64 {
	t.Helper()
	return testkit.Count(t, c.db.Collection(coll), filter...)
}

// raw reads a stored document by _id.
func (c *callers) raw(t *testing.T, coll, id string) bson.M {
	t.Helper()
	return testkit.Raw(t, c.db.Collection(coll), id)
}
