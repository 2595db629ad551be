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

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/secret"
	"github.com/nubes-io/nubes/services/secret/internal/trustedsecret"
)

// fakeIdentity answers trusted-account/list as identity does for the
// bearer it is given: domain-a's accounts to domain-a's callers, none to
// others, and 403 to a plain user. Each account also carries data and a
// secret_data member, which the secret service must never pass on.
type fakeIdentity struct {
	mu      sync.Mutex
	bodies  []map[string]any
	callers []string // user ids of the bearers identity was asked with
}

func (f *fakeIdentity) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path != trustedsecret.TrustedAccountListPath {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"detail":{"code":"ERROR_UNSUPPORTED_API","message":"fake"}}`))
		return
	}
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.bodies = append(f.bodies, body)
	p, err := testkit.Get().Verifier.Authenticate(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	if err == nil {
		f.callers = append(f.callers, p.UserID)
	}
	if err != nil || p.Role == auth.User {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"detail":{"code":"ERROR_PERMISSION_DENIED","message":"fake"}}`))
		return
	}
	accounts := []map[string]any{
		{"trusted_account_id": "ta-aaaaaaaaaaaa", "name": "AWS main", "provider": "aws", "tags": map[string]any{"k": "v"}, "resource_group": "DOMAIN",
			"domain_id": "domain-a", "workspace_id": "*", "secret_schema_id": "aws-access-key", "trusted_secret_id": "trusted-secret-aaaaaaaaaaaa",
			"created_at": "2026-11-01T00:00:00.000Z", "data": map[string]any{"acct_number": "1234"}, "secret_data": map[string]any{"key": "AKIA-SECRET"}},
	}
	out := []map[string]any{}
	if p.DomainID == "domain-a" {
		for _, a := range accounts {
			if id, ok := body["trusted_secret_id"]; !ok || id == a["trusted_secret_id"] {
				out = append(out, a)
			}
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"results": out, "total_count": len(out)})
}

func TestTrustedSecrets(t *testing.T) {
	t.Parallel()
	env := testkit.Get()
	f := &fakeIdentity{}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	defer srv.Close()
	svc, err := secret.New(mustKeys(t))(context.Background(), app.Deps{DB: env.Database(t), Log: slog.New(slog.DiscardHandler),
		Services: call.NewServices(map[string]string{"identity": srv.URL}, "service-token", nil)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Options{Name: secret.Name, Auth: env.Verifier, Logger: slog.New(slog.DiscardHandler)}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.NewClient(t, s.Handler())
	adminA := c.For(auth.Principal{DomainID: "domain-a", UserID: "root-a", Role: auth.DomainAdmin})
	memberA := c.For(auth.Principal{DomainID: "domain-a", UserID: "wendy", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"})
	adminB := c.For(auth.Principal{DomainID: "domain-b", UserID: "root-b", Role: auth.DomainAdmin})
	userA := c.For(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.User})
	const id = "trusted-secret-aaaaaaaaaaaa"

	// get, as the console's credentials tab sends it (unversioned path).
	r := adminA.Call("/secret/trusted-secret/get", map[string]any{"trusted_secret_id": id})
	var got map[string]any
	r.OK(&got)
	want := map[string]any{"trusted_secret_id": id, "name": "AWS main", "schema_id": "aws-access-key", "provider": "aws", "tags": map[string]any{"k": "v"},
		"resource_group": "DOMAIN", "trusted_account_id": "ta-aaaaaaaaaaaa", "workspace_id": "*", "domain_id": "domain-a", "created_at": "2026-11-01T00:00:00.000Z"}
	if b1, b2 := mustJSON(got), mustJSON(want); b1 != b2 {
		t.Fatalf("get = %s\nwant %s", b1, b2)
	}
	noData(t, r.Body)
	f.mu.Lock()
	if last := f.callers[len(f.callers)-1]; last != "root-a" {
		t.Fatalf("identity was asked as %q, not with the caller's bearer", last)
	}
	f.mu.Unlock()
	memberA.Call("/secret/v1/trusted-secret/get", map[string]any{"trusted_secret_id": id}).OK(nil)

	// Another domain, an unknown id: 404; a plain user: 403; bad input: 400.
	adminB.Call("/secret/trusted-secret/get", map[string]any{"trusted_secret_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
	adminA.Call("/secret/trusted-secret/get", map[string]any{"trusted_secret_id": "trusted-secret-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	userA.Call("/secret/trusted-secret/get", map[string]any{"trusted_secret_id": id}).Fails(http.StatusForbidden, errs.PermissionDenied)
	adminA.Call("/secret/trusted-secret/get", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	adminA.Call("/secret/trusted-secret/get", map[string]any{"trusted_secret_id": id, "data": true}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	c.Call("/secret/trusted-secret/get", map[string]any{"trusted_secret_id": id}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)

	// list: the query goes on to identity in its terms (schema_id is the
	// account's secret_schema_id), the rows are metadata only.
	var l struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	r = adminA.Call("/secret/trusted-secret/list", map[string]any{"schema_id": "aws-access-key", "query": map[string]any{
		"filter": []any{map[string]any{"k": "schema_id", "v": "aws-access-key", "o": "eq"}}, "sort": []any{map[string]any{"key": "name"}},
		"page": map[string]any{"start": 1, "limit": 10}}})
	r.OK(&l)
	noData(t, r.Body)
	if l.TotalCount != 1 || l.Results[0]["trusted_secret_id"] != id {
		t.Fatalf("list = %+v", l)
	}
	f.mu.Lock()
	sent := mustJSON(f.bodies[len(f.bodies)-1])
	f.mu.Unlock()
	if sent != `{"query":{"count_only":false,"filter":[{"k":"secret_schema_id","o":"eq","v":"aws-access-key"}],"filter_or":null,"keyword":"","minimal":false,"only":null,"page":{"limit":10,"start":1},"sort":[{"desc":false,"key":"name"}]},"secret_schema_id":"aws-access-key"}` {
		t.Fatalf("identity was asked %s", sent)
	}
	adminA.Call("/secret/trusted-secret/list", map[string]any{"query": map[string]any{"only": []string{"trusted_secret_id", "name"}}}).OK(&l)
	if l.TotalCount != 1 || len(l.Results[0]) != 2 {
		t.Fatalf("list only = %+v", l)
	}
	adminB.Call("/secret/trusted-secret/list", nil).OK(&l)
	if l.TotalCount != 0 || len(l.Results) != 0 {
		t.Fatalf("another domain lists %+v", l)
	}
	userA.Call("/secret/trusted-secret/list", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	adminA.Call("/secret/trusted-secret/list", map[string]any{"secret_data": true}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	// A filter, sort or only on the secret's data is refused before
	// identity is asked (identity's account data is no trusted secret's).
	f.mu.Lock()
	asked := len(f.bodies)
	f.mu.Unlock()
	for _, q := range []map[string]any{
		{"filter": []any{map[string]any{"k": "data.key", "v": "AKIA-SECRET", "o": "eq"}}},
		{"filter": []any{map[string]any{"k": "data", "v": nil, "o": "exists"}}},
		{"sort": []any{map[string]any{"key": "data.key"}}},
		{"only": []any{"secret_data"}},
		{"filter": []any{map[string]any{"k": "encrypt_options", "v": nil, "o": "exists"}}},
	} {
		adminA.Call("/secret/trusted-secret/list", map[string]any{"query": q}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	}
	f.mu.Lock()
	if len(f.bodies) != asked {
		t.Fatalf("identity was asked a refused query")
	}
	f.mu.Unlock()
	c.Call("/secret/trusted-secret/list", map[string]any{}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)

	// Identity down: 503, not an empty answer.
	srv.Close()
	adminA.Call("/secret/trusted-secret/get", map[string]any{"trusted_secret_id": id}).Fails(http.StatusServiceUnavailable, errs.Unavailable)
}

// noData fails when the raw answer holds a data or secret_data member.
func noData(t *testing.T, raw []byte) {
	t.Helper()
	for _, k := range []string{`"data"`, `"secret_data"`, "AKIA-SECRET", "acct_number"} {
		if strings.Contains(string(raw), k) {
			t.Fatalf("the answer holds %s: %s", k, raw)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func mustKeys(t *testing.T) *seal.Keyring {
	t.Helper()
	keys, err := seal.Parse(keySpec, "")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
