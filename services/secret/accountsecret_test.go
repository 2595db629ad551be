package secret_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/secret"
	"github.com/nubes-io/nubes/services/secret/internal/accountsecret"
)

const sp = "/secret/secret/"

var secretFields = []string{"secret_id", "name", "schema_id", "provider", "tags", "trusted_secret_id", "service_account_id",
	"resource_group", "project_id", "workspace_id", "domain_id", "created_at"}

// account is a service account, project or trusted account the fake
// identity knows.
type account struct{ domain, workspace, project, provider string }

// secretsHarness is the secret service with a fake identity answering
// service-account/get, project/get, trusted-account/list and
// get-secret-data as identity does (the caller's tenancy decides).
type secretsHarness struct {
	t        *testing.T
	db       *mongo.Database
	logs     *testkit.LogBuffer
	handler  http.Handler
	c        *testkit.Client
	accounts map[string]account // sa-...
	projects map[string]account
	trusted  map[string]account        // trusted_secret_id -> the account's tenancy
	tdata    map[string]map[string]any // trusted_secret_id -> data
}

func visible(p *auth.Principal, a account) bool {
	if a.domain != p.DomainID {
		return false
	}
	if p.Role == auth.WorkspaceOwner || p.Role == auth.WorkspaceMember {
		if a.workspace != p.WorkspaceID && a.workspace != "*" {
			return false
		}
		if p.Role == auth.WorkspaceMember && a.project != "" && !slices.Contains(p.Projects, a.project) {
			return false
		}
	}
	return true
}

func newSecretsHarness(t *testing.T) *secretsHarness {
	t.Helper()
	keys, err := seal.Parse(keySpec, "")
	if err != nil {
		t.Fatal(err)
	}
	h := &secretsHarness{t: t, db: testkit.Get().Database(t), logs: &testkit.LogBuffer{},
		accounts: map[string]account{}, projects: map[string]account{}, trusted: map[string]account{}, tdata: map[string]map[string]any{}}
	id := testkit.StartFake(t).
		Handle(accountsecret.ServiceAccountGetPath, func(p *auth.Principal, req map[string]any) (any, error) {
			sa, ok := h.accounts[testkit.Str(req, "service_account_id")]
			if !ok || !visible(p, sa) {
				return nil, errs.NotFound("service_account_id", testkit.Str(req, "service_account_id"))
			}
			return map[string]any{"service_account_id": req["service_account_id"], "provider": sa.provider, "project_id": sa.project,
				"workspace_id": sa.workspace, "domain_id": sa.domain}, nil
		}).
		Handle(accountsecret.ProjectGetPath, func(p *auth.Principal, req map[string]any) (any, error) {
			pr, ok := h.projects[testkit.Str(req, "project_id")]
			if !ok || !visible(p, pr) {
				return nil, errs.NotFound("project_id", testkit.Str(req, "project_id"))
			}
			return map[string]any{"project_id": req["project_id"], "workspace_id": pr.workspace, "domain_id": pr.domain}, nil
		}).
		Handle(accountsecret.TrustedListPath, func(p *auth.Principal, req map[string]any) (any, error) {
			out := []any{}
			ts := testkit.Str(req, "trusted_secret_id")
			if a, ok := h.trusted[ts]; ok && visible(p, account{domain: a.domain, workspace: a.workspace}) {
				out = append(out, map[string]any{"trusted_account_id": "ta-" + ts, "trusted_secret_id": ts, "workspace_id": a.workspace})
			}
			return map[string]any{"results": out, "total_count": len(out)}, nil
		}).
		Handle(accountsecret.TrustedDataPath, func(p *auth.Principal, req map[string]any) (any, error) {
			if !p.IsService() {
				return nil, errs.Forbidden()
			}
			ts := strings.TrimPrefix(testkit.Str(req, "trusted_account_id"), "ta-")
			a, ok := h.trusted[ts]
			if !ok || a.domain != testkit.Str(req, "domain_id") {
				return nil, errs.NotFound("trusted_account_id", testkit.Str(req, "trusted_account_id"))
			}
			return map[string]any{"trusted_secret_id": ts, "data": h.tdata[ts]}, nil
		})
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := secret.New(keys)(context.Background(), app.Deps{DB: h.db, Log: log,
		Services: call.NewServices(map[string]string{"identity": id.URL, "repository": id.URL}, testkit.Get().Token(t, system), nil)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Name: secret.Name, Auth: testkit.Get().Verifier, Logger: log}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	h.handler = srv.Handler()
	h.c = testkit.NewClient(t, h.handler)
	return h
}

var (
	system = auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-root", UserID: "system", Role: auth.SystemAdmin}
	admin  = auth.Principal{DomainID: "domain-a", UserID: "root-a", Role: auth.DomainAdmin}
	owner  = auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "ws-1"}
	member = auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "ws-1", Projects: []string{"project-1"}}
)

func (h *secretsHarness) count() int64 {
	return testkit.Count(h.t, h.db.Collection(accountsecret.Collection))
}

// TestProjectSecret: a PROJECT secret takes its provider, project and
// workspace from its service account; its data never comes back but from
// get-data to a service; bad input stores nothing.
func TestProjectSecret(t *testing.T) {
	t.Parallel()
	h := newSecretsHarness(t)
	h.accounts["sa-1"] = account{"domain-a", "ws-1", "project-1", "aws"}
	h.accounts["sa-2"] = account{"domain-a", "ws-2", "project-2", "aws"}
	h.projects["project-1"] = account{"domain-a", "ws-1", "project-1", ""}
	h.projects["project-3"] = account{"domain-a", "ws-1", "project-3", ""}
	const key = "wJalrXUtnFEMI-K7MDENG-secret"
	wo := h.c.For(owner)
	for name, body := range map[string]map[string]any{
		"no data":         {"name": "n", "resource_group": "PROJECT", "service_account_id": "sa-1"},
		"empty data":      {"name": "n", "data": map[string]any{}, "resource_group": "PROJECT", "service_account_id": "sa-1"},
		"no group":        {"name": "n", "data": map[string]any{"k": "v"}, "service_account_id": "sa-1"},
		"bad group":       {"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "USER", "service_account_id": "sa-1"},
		"no project":      {"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "PROJECT"},
		"unknown field":   {"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "PROJECT", "service_account_id": "sa-1", "secret_data": map[string]any{}},
		"another ws's sa": {"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "PROJECT", "service_account_id": "sa-2"},
		"no such sa":      {"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "PROJECT", "service_account_id": "sa-9"},
		"domain secret":   {"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "DOMAIN"},
		"unseen trusted":  {"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "PROJECT", "service_account_id": "sa-1", "trusted_secret_id": "trusted-secret-x"},
		"long name":       {"name": strings.Repeat("n", 256), "data": map[string]any{"k": "v"}, "resource_group": "PROJECT", "service_account_id": "sa-1"},
	} {
		r := wo.Call(sp+"create", body)
		if r.Status < 400 || r.Status >= 500 {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	wo.Call(sp+"create", map[string]any{"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "PROJECT"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	wo.Call(sp+"create", map[string]any{"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "DOMAIN"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	if n := h.count(); n != 0 {
		t.Fatalf("%d secrets stored by refused creates", n)
	}
	var s map[string]any
	wo.Call("/secret/v1/secret/create", map[string]any{"name": "sa-1-secret", "data": map[string]any{"aws_secret_access_key": key},
		"schema_id": "aws-secret-access-key", "resource_group": "PROJECT", "service_account_id": "sa-1", "provider": "google_cloud"}).OK(&s)
	sameKeys(t, "create", s, secretFields)
	id := s["secret_id"].(string)
	if !strings.HasPrefix(id, "secret-") || s["provider"] != "aws" || s["project_id"] != "project-1" || s["workspace_id"] != "ws-1" ||
		s["domain_id"] != "domain-a" || s["resource_group"] != "PROJECT" || s["service_account_id"] != "sa-1" {
		t.Fatalf("create = %v", s)
	}
	for _, c := range []*testkit.Client{wo, h.c.For(member), h.c.For(admin)} {
		for _, r := range []*testkit.Response{c.Call(sp+"get", map[string]any{"secret_id": id}), c.Call(sp+"list", map[string]any{})} {
			r.OK(nil)
			if strings.Contains(string(r.Body), key) || strings.Contains(string(r.Body), "sealed") {
				t.Fatalf("%s shows the data: %s", r.Path, r.Body)
			}
		}
	}
	// The console's collector page queries.
	var l struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	wo.Call(sp+"list", map[string]any{"query": map[string]any{"page": map[string]any{"start": 1, "limit": 15}, "sort": []any{map[string]any{"key": "name", "desc": true}},
		"filter": []any{map[string]any{"k": "provider", "v": "aws", "o": "eq"}, map[string]any{"k": "service_account_id", "v": []any{"sa-1"}, "o": "in"}}}}).OK(&l)
	if l.TotalCount != 1 {
		t.Fatalf("collector list = %v", l)
	}
	// No query reads the data.
	for _, q := range []map[string]any{
		{"filter": []any{map[string]any{"k": "data.aws_secret_access_key", "v": key, "o": "eq"}}},
		{"filter": []any{map[string]any{"k": "sealed", "v": nil, "o": "exists"}}},
		{"sort": []any{map[string]any{"key": "sealed.data"}}},
		{"only": []any{"sealed"}},
		{"filter": []any{map[string]any{"k": "encrypt_options", "v": nil, "o": "exists"}}},
	} {
		if r := wo.Call(sp+"list", map[string]any{"query": q}); r.Status != http.StatusBadRequest {
			t.Errorf("list %v: %d %s", q, r.Status, r.Body)
		}
	}
	if r := wo.Call(sp+"stat", map[string]any{"query": map[string]any{"distinct": "sealed"}}); r.Status != http.StatusBadRequest {
		t.Errorf("stat distinct sealed: %d %s", r.Status, r.Body)
	}
	// get-data: services only.
	for _, p := range []auth.Principal{owner, admin, {DomainID: "domain-root", UserID: "sysadmin", Role: auth.SystemAdmin}} {
		h.c.For(p).Call(sp+"get-data", map[string]any{"secret_id": id, "domain_id": "domain-a"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	sys := h.c.For(system)
	sys.Call(sp+"get-data", map[string]any{"secret_id": id, "domain_id": "domain-b"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var d struct {
		Encrypted bool           `json:"encrypted"`
		Data      map[string]any `json:"data"`
	}
	sys.Call(sp+"get-data", map[string]any{"secret_id": id, "domain_id": "domain-a"}).OK(&d)
	if d.Data["aws_secret_access_key"] != key || len(d.Data) != 1 || d.Encrypted {
		t.Fatalf("get-data = %v", d)
	}
	// update: a project of its workspace only; update-data; delete.
	wo.Call(sp+"update", map[string]any{"secret_id": id, "project_id": "project-9"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var u map[string]any
	wo.Call(sp+"update", map[string]any{"secret_id": id, "project_id": "project-3", "name": "moved"}).OK(&u)
	if u["project_id"] != "project-3" || u["name"] != "moved" {
		t.Fatalf("update = %v", u)
	}
	h.c.For(member).Call(sp+"get", map[string]any{"secret_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
	wo.Call(sp+"update-data", map[string]any{"secret_id": id, "data": map[string]any{}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	wo.Call(sp+"update-data", map[string]any{"secret_id": id, "data": map[string]any{"aws_secret_access_key": "new-" + key}}).OK(nil)
	sys.Call(sp+"get-data", map[string]any{"secret_id": id, "domain_id": "domain-a"}).OK(&d)
	if d.Data["aws_secret_access_key"] != "new-"+key {
		t.Fatalf("get-data after update-data = %v", d)
	}
	if strings.Contains(h.logs.String(), key) {
		t.Fatal("a log line shows the data")
	}
	wo.Call(sp+"delete", map[string]any{"secret_id": id}).OK(nil)
	wo.Call(sp+"get", map[string]any{"secret_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// TestTrustedOverlay: get-data answers the trusted secret's data overlaid
// by the secret's own, as upstream.
func TestTrustedOverlay(t *testing.T) {
	t.Parallel()
	h := newSecretsHarness(t)
	h.accounts["sa-1"] = account{"domain-a", "ws-1", "project-1", "aws"}
	h.trusted["trusted-secret-1"] = account{domain: "domain-a", workspace: "*"}
	h.trusted["trusted-secret-2"] = account{domain: "domain-a", workspace: "ws-2"}
	h.tdata["trusted-secret-1"] = map[string]any{"aws_access_key_id": "AKIA-TRUSTED", "aws_secret_access_key": "trusted-key", "region": "a"}
	wo := h.c.For(owner)
	wo.Call(sp+"create", map[string]any{"name": "n", "data": map[string]any{"role_arn": "arn:x"}, "resource_group": "PROJECT",
		"service_account_id": "sa-1", "trusted_secret_id": "trusted-secret-2"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var s map[string]any
	wo.Call(sp+"create", map[string]any{"name": "n", "data": map[string]any{"role_arn": "arn:x", "region": "b"}, "resource_group": "PROJECT",
		"service_account_id": "sa-1", "trusted_secret_id": "trusted-secret-1"}).OK(&s)
	if s["trusted_secret_id"] != "trusted-secret-1" {
		t.Fatalf("create = %v", s)
	}
	var d struct {
		Data map[string]any `json:"data"`
	}
	h.c.For(system).Call(sp+"get-data", map[string]any{"secret_id": s["secret_id"], "domain_id": "domain-a"}).OK(&d)
	want := map[string]any{"aws_access_key_id": "AKIA-TRUSTED", "aws_secret_access_key": "trusted-key", "role_arn": "arn:x", "region": "b"}
	if len(d.Data) != len(want) {
		t.Fatalf("get-data = %v", d.Data)
	}
	for k, v := range want {
		if d.Data[k] != v {
			t.Fatalf("get-data = %v, want %v", d.Data, want)
		}
	}
	var l struct {
		TotalCount int `json:"total_count"`
	}
	h.c.For(system).Call(sp+"list", map[string]any{"trusted_secret_id": "trusted-secret-1", "domain_id": "domain-a", "query": map[string]any{"count_only": true}}).OK(&l)
	if l.TotalCount != 1 {
		t.Fatalf("a service lists %d secrets of the trusted secret", l.TotalCount)
	}
	h.c.For(owner).Call(sp+"list", map[string]any{"domain_id": "domain-b"}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// TestSecretTenancyMatrix: outsiders of a PROJECT secret read and change
// nothing of it.
func TestSecretTenancyMatrix(t *testing.T) {
	t.Parallel()
	h := newSecretsHarness(t)
	h.accounts["sa-1"] = account{"domain-a", "ws-1", "project-1", "aws"}
	h.projects["project-3"] = account{"domain-a", "ws-1", "project-3", ""}
	var s map[string]any
	h.c.For(owner).Call(sp+"create", map[string]any{"name": "n", "data": map[string]any{"k": "v"}, "resource_group": "PROJECT", "service_account_id": "sa-1"}).OK(&s)
	id := s["secret_id"].(string)
	testkit.Tenancy{
		Handler: h.handler, Coll: h.db.Collection(accountsecret.Collection), ID: id, Domain: "domain-a", Workspace: "ws-1", Project: "project-1",
		Get:  testkit.Req{Path: sp + "get", Body: map[string]any{"secret_id": id}},
		List: testkit.Req{Path: sp + "list", Body: map[string]any{"secret_id": id}},
		Stat: &testkit.Req{Path: sp + "stat", Body: map[string]any{"query": map[string]any{
			"filter":    []any{map[string]any{"k": "secret_id", "v": id, "o": "eq"}},
			"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "name", "name": "n"}}}}}}}},
		Changes: []testkit.Req{
			{Path: sp + "update", Body: map[string]any{"secret_id": id, "name": "taken"}},
			{Path: sp + "update", Body: map[string]any{"secret_id": id, "project_id": "project-3"}},
			{Path: sp + "update-data", Body: map[string]any{"secret_id": id, "data": map[string]any{"k": "x"}}},
			{Path: sp + "delete", Body: map[string]any{"secret_id": id}},
		},
		Insider:     member,
		NoToken:     true,
		SecretPaths: []string{"sealed", "data", "encrypt_options"},
	}.Run(t)
}

func sameKeys(t *testing.T, what string, m map[string]any, want []string) {
	t.Helper()
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	w := slices.Clone(want)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		t.Fatalf("%s fields = %v, want %v", what, got, w)
	}
}

// TestSecretReseal: `secret reseal` seals the secrets again with the
// active key, and a ciphertext copied onto another secret does not open.
func TestSecretReseal(t *testing.T) {
	t.Parallel()
	h := newSecretsHarness(t)
	h.accounts["sa-1"] = account{"domain-a", "ws-1", "project-1", "aws"}
	var a, b map[string]any
	h.c.For(owner).Call(sp+"create", map[string]any{"name": "a", "data": map[string]any{"k": "a"}, "resource_group": "PROJECT", "service_account_id": "sa-1"}).OK(&a)
	h.c.For(owner).Call(sp+"create", map[string]any{"name": "b", "data": map[string]any{"k": "b"}, "resource_group": "PROJECT", "service_account_id": "sa-1"}).OK(&b)
	coll := h.db.Collection(accountsecret.Collection)
	ctx := context.Background()
	sealedOf := func(id any) bson.Raw {
		raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		return raw.Lookup("sealed").Document()
	}
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: b["secret_id"]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "sealed", Value: sealedOf(a["secret_id"])}}}}); err != nil {
		t.Fatal(err)
	}
	r := h.c.For(system).Call(sp+"get-data", map[string]any{"secret_id": b["secret_id"], "domain_id": "domain-a"})
	r.Fails(http.StatusInternalServerError, errs.Unknown)
	if strings.Contains(string(r.Body), `"a"`) {
		t.Fatalf("the error shows the data: %s", r.Body)
	}
	rotated, err := seal.Parse(keySpec+","+seal.RandomSpec("2"), "2")
	if err != nil {
		t.Fatal(err)
	}
	reps, err := seal.ResealAll(ctx, rotated, secret.ResealTargets(h.db), 10, nil)
	// b holds a's ciphertext, bound to a: it does not open, so it is
	// reported, not resealed.
	if err != nil || len(reps) != 2 || reps[1].Resealed != 1 || len(reps[1].Failed) != 1 || reps[1].Failed[0] != b["secret_id"] {
		t.Fatalf("reseal = %+v, %v", reps, err)
	}
	if id, _ := sealedOf(a["secret_id"]).Lookup("key_id").StringValueOK(); id != "2" {
		t.Fatalf("key %q after reseal", id)
	}
}
