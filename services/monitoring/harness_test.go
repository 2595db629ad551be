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

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
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
}

type options struct {
	urls     map[string]string // service_urls overrides
	settings func(*monitoring.Config)
}

func setup(t *testing.T) *callers { t.Helper(); return setupWith(t, options{}) }

func setupWith(t *testing.T, o options) *callers {
	t.Helper()
	env := testkit.Get()
	db := env.Database(t)
	fake := newFakeIdentity(t)
	urls := map[string]string{"identity": fake.srv.URL}
	for k, v := range o.urls {
		urls[k] = v
	}
	deps := app.Deps{DB: db, Log: slog.New(slog.DiscardHandler), Services: call.NewServices(urls, "", nil)}
	cfg := monitoring.DefaultConfig()
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
