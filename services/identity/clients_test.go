package identity_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
)

// What the upstream console and CLI send and read (docs/spec/clients.md
// sections 1, 9, 11 and 12), against identity alone.

// claims reads a JWT's payload without checking it, as the console does.
func claims(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", token)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

type granted struct {
	AccessToken string `json:"access_token"`
	RoleType    string `json:"role_type"`
	RoleID      string `json:"role_id"`
	WorkspaceID string `json:"workspace_id"`
}

func TestGrantClientKeys(t *testing.T) {
	h := newHarness(t)
	var ws struct {
		WorkspaceID string `json:"workspace_id"`
	}
	h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": "Console"}).OK(&ws)
	otherDomain, _ := h.NewDomain("grant-other")
	p := h.Login("admin", identitytest.AdminPassword)

	ok := []struct {
		name   string
		bearer string
		body   map[string]any
		role   string
	}{
		{"CLI: domain_id, timeout, workspace_id", "", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "WORKSPACE",
			"timeout": 10800, "domain_id": h.Domain, "workspace_id": ws.WorkspaceID}, "WORKSPACE_OWNER"},
		{"console refresh: workspaceId, token in both places", p.RefreshToken, map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken,
			"scope": "WORKSPACE", "workspaceId": ws.WorkspaceID}, "WORKSPACE_OWNER"},
		{"refresh token only in the Bearer header", p.RefreshToken, map[string]any{"grant_type": "REFRESH_TOKEN", "scope": "DOMAIN"}, "DOMAIN_ADMIN"},
		{"token null: the header's", p.RefreshToken, map[string]any{"grant_type": "REFRESH_TOKEN", "token": nil, "scope": "USER"}, "USER"},
		{"body token wins over an access token in the header", p.AccessToken, map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "DOMAIN"}, "DOMAIN_ADMIN"},
		{"console sign-in: workspace_id null", "", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "DOMAIN", "workspace_id": nil}, "DOMAIN_ADMIN"},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			var g granted
			h.Anon.As(c.bearer).Call("/identity/token/grant", c.body).OK(&g)
			if g.RoleType != c.role || g.AccessToken == "" {
				t.Fatalf("granted %+v, want role %s", g, c.role)
			}
			cl := claims(t, g.AccessToken)
			if cl["rol"] != c.role {
				t.Fatalf("rol claim %v, want %s", cl["rol"], c.role)
			}
			if c.role == "WORKSPACE_OWNER" && (cl["wid"] != ws.WorkspaceID || g.WorkspaceID != ws.WorkspaceID) {
				t.Fatalf("wid %v / workspace_id %q, want %s", cl["wid"], g.WorkspaceID, ws.WorkspaceID)
			}
		})
	}

	refused := []struct {
		name         string
		bearer       string
		body         map[string]any
		status       int
		code, naming string
	}{
		{"domain_id of another domain", "", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "DOMAIN", "domain_id": otherDomain},
			http.StatusUnauthorized, errs.AuthenticateFailure, otherDomain},
		{"domain_id that does not exist", "", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER", "domain_id": "domain-nope"},
			http.StatusUnauthorized, errs.AuthenticateFailure, "domain-nope"},
		{"workspace_id under both names", "", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "WORKSPACE",
			"workspace_id": ws.WorkspaceID, "workspaceId": ws.WorkspaceID}, http.StatusBadRequest, errs.InvalidParameter, "workspace_id"},
		{"unknown key", "", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER", "permissionz": []string{}},
			http.StatusBadRequest, errs.InvalidParameter, "permissionz"},
		{"no token anywhere", "", map[string]any{"grant_type": "REFRESH_TOKEN", "scope": "USER"}, http.StatusBadRequest, errs.RequiredParameter, "token"},
		{"an access token in the header is no refresh token", p.AccessToken, map[string]any{"grant_type": "REFRESH_TOKEN", "scope": "USER"},
			http.StatusBadRequest, errs.InvalidGrantType, ""},
		{"a bad body token is not saved by a good header", p.RefreshToken, map[string]any{"grant_type": "REFRESH_TOKEN", "token": "abc.def.ghi", "scope": "USER"},
			http.StatusUnauthorized, errs.AuthenticateFailure, ""},
		{"timeout negative", "", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER", "timeout": -1},
			http.StatusBadRequest, errs.InvalidParameter, "timeout"},
		{"timeout not a number", "", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER", "timeout": "10800"},
			http.StatusBadRequest, errs.InvalidParameterType, "timeout"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			r := h.Anon.As(c.bearer).Call("/identity/token/grant", c.body)
			r.Fails(c.status, c.code)
			if strings.Contains(string(r.Body), "access_token") {
				t.Fatalf("a refused grant answered a token: %s", r.Body)
			}
			if c.naming != "" && !strings.Contains(string(r.Body), c.naming) {
				t.Fatalf("the error does not name %s: %s", c.naming, r.Body)
			}
		})
	}
}

// TestGrantTimeout: timeout (seconds) sets the access token's lifetime,
// bounded by the configured maximum (12 hours by default; upstream 7 days).
func TestGrantTimeout(t *testing.T) {
	h := newHarness(t)
	p := h.Login("admin", identitytest.AdminPassword)
	for _, c := range []struct {
		timeout int
		want    time.Duration
	}{
		{0, 30 * time.Minute}, // the default lifetime
		{10800, 3 * time.Hour},
		{60, time.Minute},
		{100 * 24 * 3600, 12 * time.Hour}, // over the maximum
		{7 * 24 * 3600, 12 * time.Hour},
	} {
		var g granted
		before := time.Now()
		h.Anon.Call("/identity/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER", "timeout": c.timeout}).OK(&g)
		exp := time.Unix(int64(claims(t, g.AccessToken)["exp"].(float64)), 0)
		if d := exp.Sub(before); d < c.want-5*time.Second || d > c.want+5*time.Second {
			t.Errorf("timeout %d: token lives %s, want %s", c.timeout, d, c.want)
		}
	}
}

// TestAuthInfoForConsole: the console reads metadata.* and
// config.settings.* without a guard; both must be objects.
func TestAuthInfoForConsole(t *testing.T) {
	h := newHarness(t)
	got := h.Anon.Call("/identity/domain/get-auth-info", map[string]any{"name": "root"}).JSON()
	if got["domain_id"] != h.Domain || got["name"] != "root" || got["state"] != "ENABLED" || got["external_auth_state"] != "DISABLED" {
		t.Fatalf("get-auth-info = %v", got)
	}
	if _, ok := got["metadata"].(map[string]any); !ok {
		t.Fatalf("metadata is not an object: %v", got["metadata"])
	}
	cfg, ok := got["config"].(map[string]any)
	if !ok {
		t.Fatalf("config is not an object: %v", got["config"])
	}
	if _, ok := cfg["settings"].(map[string]any); !ok {
		t.Fatalf("config.settings is not an object: %v", cfg["settings"])
	}
	h.Anon.Call("/identity/domain/get-auth-info", map[string]any{"name": "nope"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Anon.Call("/identity/domain/get-auth-info", map[string]any{"name": nil}).Fails(http.StatusBadRequest, errs.RequiredParameter)
}

// TestWorkspacesCarryState: the console keeps only results whose state is
// ENABLED, so state must be there.
func TestWorkspacesCarryState(t *testing.T) {
	h := newHarness(t)
	h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": "Stateful"}).OK(nil)
	var ws struct {
		Results []map[string]any `json:"results"`
	}
	h.Anon.As(h.Login("admin", identitytest.AdminPassword).AccessToken).Call("/identity/user-profile/get-workspaces", map[string]any{}).OK(&ws)
	if len(ws.Results) == 0 {
		t.Fatal("no workspace")
	}
	for _, w := range ws.Results {
		if w["state"] != "ENABLED" || w["workspace_id"] == "" || w["name"] == "" {
			t.Fatalf("workspace %v", w)
		}
		if _, ok := w["tags"].(map[string]any); !ok {
			t.Fatalf("tags is not an object: %v", w)
		}
	}
}

// endpointsOf builds an identity with the given service_urls and
// endpoint_url and answers its endpoint/list (no credential, as the CLI
// asks before it signs in).
func endpointsOf(t *testing.T, set func(*identity.Config), body any) map[string]any {
	t.Helper()
	return testkit.NewClient(t, buildConfigured(t, set)).Call("/identity/endpoint/list", body).OK(nil).JSON()
}

// buildWith serves an identity built with service_urls and endpoint_url
// as cmd/identity does (with the suite's reflection list).
func buildWith(t *testing.T, urls map[string]string, endpointURL string) http.Handler {
	t.Helper()
	return buildConfigured(t, func(c *identity.Config) { c.ServiceURLs, c.EndpointURL = urls, endpointURL })
}

// buildConfigured serves an identity built with the configuration set
// makes.
func buildConfigured(t *testing.T, set func(*identity.Config)) http.Handler {
	t.Helper()
	env := testkit.Get()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	bus, err := events.Connect(ctx, env.NATS.URL, "identity-endpoints", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	cipher, _ := identity.NewCipher(identity.RandomCipherSpec())
	cfg := identity.Config{PasswordCost: bcrypt.MinCost, Signer: env.Signer, Cipher: cipher, AdminPassword: identitytest.AdminPassword}
	set(&cfg)
	b, err := identity.Build(ctx, app.Deps{DB: env.Database(t), Events: bus, Log: log}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Name: "identity", Logger: log, Auth: b.Service.Auth, Reflection: b.Service.Reflection}, b.Service.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	return srv.Handler()
}

// TestIdentityListsTheSuite: identity answers the console's reflection
// with its own operations and those of every other service in
// service_urls (asked with ?local=1).
func TestIdentityListsTheSuite(t *testing.T) {
	board := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != api.ReflectionPath || r.URL.Query().Get("local") != "1" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(api.Reflection{APIs: []api.Reflected{{Name: "board.post.list", Path: "/board/post/list", Method: "POST"}}})
	}))
	defer board.Close()
	h := buildWith(t, map[string]string{"identity": "http://127.0.0.1:1", "board": board.URL}, "")
	req := httptest.NewRequest(http.MethodGet, api.ReflectionPath, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var got api.Reflection
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
		t.Fatalf("reflection: %d %s", rec.Code, rec.Body)
	}
	paths := map[string]bool{}
	for _, a := range got.APIs {
		if a.Method != "POST" || strings.Contains(a.Path, "/v2/") || strings.Contains(a.Path, "/v1/") {
			t.Fatalf("entry %+v", a)
		}
		paths[a.Path] = true
	}
	for _, p := range []string{"/board/post/list", "/identity/token/grant", "/identity/domain/get-auth-info", "/identity/endpoint/list", "/identity/user-profile/get-workspaces"} {
		if !paths[p] {
			t.Errorf("%s missing from %d entries", p, len(got.APIs))
		}
	}
}

func TestEndpointList(t *testing.T) {
	urls := map[string]string{"identity": "http://identity:8080", "board": "http://board:8080", "secret": "http://secret:8080"}
	row := func(svc, url string) any {
		return map[string]any{"service": svc, "name": svc, "endpoint": url, "state": "ENABLED"}
	}
	cases := []struct {
		name string
		cfg  identity.Config
		body any
		want []any
	}{
		{"service_urls", identity.Config{ServiceURLs: urls}, map[string]any{},
			[]any{row("board", "http://board:8080"), row("identity", "http://identity:8080"), row("secret", "http://secret:8080")}},
		{"one service", identity.Config{ServiceURLs: urls}, map[string]any{"service": "secret"}, []any{row("secret", "http://secret:8080")}},
		{"behind one Ingress", identity.Config{ServiceURLs: map[string]string{"board": "http://board:8080"}, EndpointURL: "https://api.example.com"}, nil,
			[]any{row("board", "https://api.example.com"), row("identity", "https://api.example.com")}},
		{"every service on one gRPC address", identity.Config{ServiceURLs: urls, EndpointURL: "https://api.example.com", GRPCEndpointURL: "grpc://127.0.0.1:50051"}, nil,
			[]any{row("board", "grpc://127.0.0.1:50051"), row("identity", "grpc://127.0.0.1:50051"), row("secret", "grpc://127.0.0.1:50051")}},
		{"each service its gRPC address", identity.Config{ServiceURLs: urls, GRPCServiceURLs: map[string]string{
			"identity": "grpc+ssl://identity.grpc.example.com:443", "board": "grpc+ssl://board.grpc.example.com:443"}}, nil,
			[]any{row("board", "grpc+ssl://board.grpc.example.com:443"), row("identity", "grpc+ssl://identity.grpc.example.com:443"),
				row("secret", "http://secret:8080")}},
		{"nothing configured", identity.Config{}, map[string]any{}, []any{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := endpointsOf(t, func(cfg *identity.Config) {
				cfg.ServiceURLs, cfg.EndpointURL, cfg.GRPCEndpointURL, cfg.GRPCServiceURLs = c.cfg.ServiceURLs, c.cfg.EndpointURL, c.cfg.GRPCEndpointURL, c.cfg.GRPCServiceURLs
			}, c.body)
			if !reflect.DeepEqual(got["results"], c.want) || got["total_count"] != float64(len(c.want)) {
				t.Fatalf("endpoint/list = %v, want %v", got, c.want)
			}
		})
	}
}
