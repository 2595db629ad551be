package repository_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/repository"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// harness is one repository service and its callers in two domains.
type harness struct {
	db                                                             *mongo.Database
	handler                                                        http.Handler
	local                                                          string // the local repository's id
	anon, system, sysAdmin, adminA, adminB, ownerA, memberA, userA *testkit.Client
}

// testKeys seal registry_config in tests.
var testKeys = func() *seal.Keyring {
	k, err := seal.Parse(seal.RandomSpec("t1"), "")
	if err != nil {
		panic(err)
	}
	return k
}()

func build(t *testing.T, db *mongo.Database, cfg repository.Config) (*app.Service, http.Handler) {
	t.Helper()
	if cfg.Keys == nil {
		cfg.Keys = testKeys
	}
	svc, err := repository.New(cfg)(context.Background(), app.Deps{DB: db, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Name: "repository", Auth: testkit.Get().Verifier, Logger: slog.New(slog.DiscardHandler)}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	return svc, srv.Handler()
}

func setup(t *testing.T, cfg repository.Config) *harness {
	t.Helper()
	env := testkit.Get()
	h := &harness{db: env.Database(t)}
	_, h.handler = build(t, h.db, cfg)
	c := testkit.NewClient(t, h.handler)
	h.anon = c
	h.system = c.For(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-root", UserID: "root", Role: auth.SystemAdmin})
	h.sysAdmin = c.For(auth.Principal{DomainID: "domain-root", UserID: "sa", Role: auth.SystemAdmin})
	h.adminA = c.For(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	h.adminB = c.For(auth.Principal{DomainID: "domain-b", UserID: "bob", Role: auth.DomainAdmin})
	h.ownerA = c.For(auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"})
	h.memberA = c.For(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"})
	h.userA = c.For(auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User})
	var l list[repoInfo]
	h.adminA.Call("/repository/v1/repository/list", map[string]any{"repository_type": "local"}).OK(&l)
	if l.TotalCount != 1 || !repoIDPattern.MatchString(l.Results[0].RepositoryID) {
		t.Fatalf("local repository: %+v", l)
	}
	h.local = l.Results[0].RepositoryID
	return h
}

// serve serves the harness over real HTTP (for a remote repository).
func (h *harness) serve(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(h.handler)
	t.Cleanup(s.Close)
	return s.URL
}

var repoIDPattern = regexp.MustCompile(`^repo-[0-9a-f]{12}$`)

type list[T any] struct {
	Results    []T `json:"results"`
	TotalCount int `json:"total_count"`
}

type repoInfo struct {
	RepositoryID   string `json:"repository_id"`
	Name           string `json:"name"`
	RepositoryType string `json:"repository_type"`
}

type pluginInfo struct {
	PluginID       string         `json:"plugin_id"`
	Name           string         `json:"name"`
	State          string         `json:"state"`
	ResourceType   string         `json:"resource_type"`
	Image          string         `json:"image"`
	Provider       string         `json:"provider"`
	RegistryType   string         `json:"registry_type"`
	RegistryURL    string         `json:"registry_url"`
	RegistryConfig map[string]any `json:"registry_config"`
	Capability     map[string]any `json:"capability"`
	Template       map[string]any `json:"template"`
	Labels         []any          `json:"labels"`
	Tags           map[string]any `json:"tags"`
	DomainID       string         `json:"domain_id"`
	RepositoryInfo repoInfo       `json:"repository_info"`
	CreatedAt      string         `json:"created_at"`
	UpdatedAt      string         `json:"updated_at"`
}

type versionsInfo struct {
	Version    []string `json:"version"`
	Results    []string `json:"results"`
	TotalCount int      `json:"total_count"`
}

type policyInfo struct {
	PolicyID       string         `json:"policy_id"`
	Name           string         `json:"name"`
	State          string         `json:"state"`
	Permissions    []string       `json:"permissions"`
	Labels         []any          `json:"labels"`
	Tags           map[string]any `json:"tags"`
	RepositoryInfo repoInfo       `json:"repository_info"`
	ProjectID      string         `json:"project_id"`
	DomainID       string         `json:"domain_id"`
	CreatedAt      string         `json:"created_at"`
	UpdatedAt      string         `json:"updated_at"`
}

type schemaInfo struct {
	Name           string         `json:"name"`
	ServiceType    string         `json:"service_type"`
	SchemaID       string         `json:"schema_id"`
	Schema         map[string]any `json:"schema"`
	Labels         []any          `json:"labels"`
	Tags           map[string]any `json:"tags"`
	RepositoryInfo repoInfo       `json:"repository_info"`
	ProjectID      string         `json:"project_id"`
	DomainID       string         `json:"domain_id"`
	CreatedAt      string         `json:"created_at"`
	UpdatedAt      string         `json:"updated_at"`
}

// count is the number of documents in a collection: the proof that a
// refused request stored nothing.
func (h *harness) count(t *testing.T, coll string) int64 {
	t.Helper()
	return testkit.Count(t, h.db.Collection(coll))
}

// snapshot is every document of a collection, to prove a refused write
// changed nothing.
func (h *harness) snapshot(t *testing.T, coll string) []bson.M {
	t.Helper()
	return testkit.Docs(t, h.db.Collection(coll))
}

func (h *harness) register(t *testing.T, as *testkit.Client, body map[string]any) pluginInfo {
	t.Helper()
	var p pluginInfo
	as.Call("/repository/v1/plugin/register", body).OK(&p)
	return p
}

func merge(base map[string]any, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

func adminOf(domain string) auth.Principal {
	return auth.Principal{DomainID: domain, UserID: "admin-of-" + domain, Role: auth.DomainAdmin}
}

func appDeps(t *testing.T) app.Deps {
	return app.Deps{DB: testkit.Get().Database(t), Log: slog.New(slog.DiscardHandler)}
}
