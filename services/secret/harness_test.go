package secret_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/secret"
	"github.com/nubes-io/nubes/services/secret/internal/usersecret"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const p = "/secret/v1/user-secret/"

// fakeRepo answers /repository/v1/schema/get like the repository
// service: schemas by domain and name, 404 ERROR_NOT_FOUND otherwise.
type fakeRepo struct {
	srv     *httptest.Server
	mu      sync.Mutex
	schemas map[string]map[string]any // domain_id/name -> SchemaInfo
	calls   []map[string]any
	bearers []string
	mode    string // "": serve; "unrouted": 404 without the schema path
}

func newFakeRepo(t *testing.T) *fakeRepo {
	r := &fakeRepo{schemas: map[string]map[string]any{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *fakeRepo) add(domainID, name string, schema map[string]any, tags map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.schemas[domainID+"/"+name] = map[string]any{"name": name, "service_type": "secret.credentials", "schema_id": name,
		"schema": schema, "labels": []any{}, "tags": tags, "project_id": "*", "domain_id": domainID}
}

func (r *fakeRepo) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fail := func(status int, code string) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"detail":{"code":"` + code + `","message":"fake repository"}}`))
	}
	if r.mode == "unrouted" || req.URL.Path != usersecret.SchemaGetPath {
		fail(http.StatusNotFound, "ERROR_UNSUPPORTED_API")
		return
	}
	var body map[string]any
	_ = json.NewDecoder(req.Body).Decode(&body)
	r.calls = append(r.calls, body)
	r.bearers = append(r.bearers, req.Header.Get("Authorization"))
	s, ok := r.schemas[body["domain_id"].(string)+"/"+body["name"].(string)]
	if !ok {
		fail(http.StatusNotFound, "ERROR_NOT_FOUND")
		return
	}
	_ = json.NewEncoder(w).Encode(s)
}

// harness is the secret service on a fresh database with callers in two
// domains, a fake repository, and its log lines.
type harness struct {
	t      *testing.T
	db     *mongo.Database
	logs   *testkit.LogBuffer
	repo   *fakeRepo
	keys   *seal.Keyring
	anon   *testkit.Client
	alice  *testkit.Client // USER of domain-a, owner of most secrets
	amy    *testkit.Client // another USER of domain-a
	adminA *testkit.Client // DOMAIN_ADMIN of domain-a
	bob    *testkit.Client // USER of domain-b
	system *testkit.Client // SYSTEM token (root domain)
	sysAdm *testkit.Client // SYSTEM_ADMIN role token
	ws     *testkit.Client // WORKSPACE_MEMBER of domain-a
	// handler serves the API (the tenancy matrix makes its own callers).
	handler http.Handler
}

var keySpec = seal.RandomSpec("1")

func newHarness(t *testing.T) *harness {
	t.Helper()
	keys, err := seal.Parse(keySpec, "")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, db: testkit.Get().Database(t), logs: &testkit.LogBuffer{}, keys: keys}
	h.repo = newFakeRepo(t)
	h.serve(keys, h.repo.srv.URL)
	return h
}

// serve (re)builds the service over the harness database with keys.
func (h *harness) serve(keys *seal.Keyring, repoURL string) {
	h.t.Helper()
	env := testkit.Get()
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := secret.New(keys)(context.Background(), app.Deps{DB: h.db, Log: log,
		Services: call.NewServices(map[string]string{"repository": repoURL}, "", nil)})
	if err != nil {
		h.t.Fatal(err)
	}
	srv, err := server.New(server.Options{Name: secret.Name, Auth: env.Verifier, Logger: log}, svc.Routes...)
	if err != nil {
		h.t.Fatal(err)
	}
	c := testkit.NewClient(h.t, srv.Handler())
	h.handler = srv.Handler()
	h.anon = c
	h.alice = c.For(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.User})
	h.amy = c.For(auth.Principal{DomainID: "domain-a", UserID: "amy", Role: auth.User})
	h.adminA = c.For(auth.Principal{DomainID: "domain-a", UserID: "root-a", Role: auth.DomainAdmin})
	h.bob = c.For(auth.Principal{DomainID: "domain-b", UserID: "alice", Role: auth.User}) // same user id, other domain
	h.system = c.For(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-root", UserID: "system", Role: auth.SystemAdmin})
	h.sysAdm = c.For(auth.Principal{DomainID: "domain-root", UserID: "sysadmin", Role: auth.SystemAdmin})
	h.ws = c.For(auth.Principal{DomainID: "domain-a", UserID: "wendy", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"})
}

// info is UserSecretInfo.
type info struct {
	UserSecretID string         `json:"user_secret_id"`
	Name         string         `json:"name"`
	SchemaID     string         `json:"schema_id"`
	Provider     string         `json:"provider"`
	Tags         map[string]any `json:"tags"`
	DomainID     string         `json:"domain_id"`
	UserID       string         `json:"user_id"`
	CreatedAt    string         `json:"created_at"`
}

type list struct {
	Results    []info `json:"results"`
	TotalCount int    `json:"total_count"`
}

type dataInfo struct {
	Encrypted      bool           `json:"encrypted"`
	EncryptOptions map[string]any `json:"encrypt_options"`
	Data           map[string]any `json:"data"`
}

func (h *harness) create(c *testkit.Client, body map[string]any) info {
	h.t.Helper()
	var out info
	c.Call(p+"create", body).OK(&out)
	return out
}

func (h *harness) getData(id, domainID string) dataInfo {
	h.t.Helper()
	var out dataInfo
	h.system.Call(p+"get-data", map[string]any{"user_secret_id": id, "domain_id": domainID}).OK(&out)
	return out
}

// docs are every stored document, raw.
func (h *harness) docs() []bson.Raw {
	h.t.Helper()
	cur, err := h.db.Collection(usersecret.Collection).Find(context.Background(), bson.D{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []bson.Raw
	if err := cur.All(context.Background(), &out); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// snapshot is the whole collection as bytes: equal snapshots prove a
// refused request changed nothing.
func (h *harness) snapshot() string {
	h.t.Helper()
	var b strings.Builder
	for _, d := range h.docs() {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// fails checks status and code, and that the message shows none of hide.
func fails(t *testing.T, r *testkit.Response, status int, code string, hide ...string) string {
	t.Helper()
	r.Fails(status, code)
	for _, s := range hide {
		if strings.Contains(string(r.Body), s) {
			t.Fatalf("%s: the error shows %q: %s", r.Path, s, r.Body)
		}
	}
	var body struct {
		Detail struct{ Message string } `json:"detail"`
	}
	_ = json.Unmarshal(r.Body, &body)
	return body.Detail.Message
}
