package serviceaccount_test

import (
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/project"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/schema"
	"github.com/nubes-io/nubes/services/identity/internal/serviceaccount"
	"github.com/nubes-io/nubes/services/identity/internal/trustedaccount"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const sa = "/identity/service-account/"

var saID = regexp.MustCompile(`^sa-[0-9a-f]{12}$`)

var saFields = []string{"service_account_id", "name", "state", "data", "provider", "tags", "reference_id", "is_managed",
	"service_account_mgr_id", "secret_schema_id", "secret_id", "trusted_account_id", "project_id", "workspace_id", "domain_id",
	"created_at", "last_synced_at"}

// fakeSecrets stands in for the secret service: it keeps what identity
// asked it to store, by the caller who asked.
type fakeSecrets struct {
	mu      sync.Mutex
	secrets map[string]map[string]any // secret_id -> create body
	callers []auth.Principal
	stats   int // secret/stat calls
	fake    *testkit.Fake
}

func newFakeSecrets(t *testing.T) *fakeSecrets {
	f := &fakeSecrets{secrets: map[string]map[string]any{}}
	f.fake = testkit.StartFake(t).
		Handle(serviceaccount.SecretCreatePath, func(p *auth.Principal, req map[string]any) (any, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			id := wire.NewID("secret")
			f.secrets[id] = req
			f.callers = append(f.callers, *p)
			return map[string]any{"secret_id": id}, nil
		}).
		Handle(serviceaccount.SecretListPath, func(p *auth.Principal, req map[string]any) (any, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			out := []any{}
			for id, s := range f.secrets {
				if s["service_account_id"] == req["service_account_id"] {
					out = append(out, map[string]any{"secret_id": id})
				}
			}
			return map[string]any{"results": out, "total_count": len(out)}, nil
		}).
		Handle(serviceaccount.SecretStatPath, func(p *auth.Principal, req map[string]any) (any, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.stats++
			q, _ := req["query"].(map[string]any)
			if q["distinct"] != "service_account_id" {
				return nil, errs.Invalid("query.distinct", "fake: only service_account_id")
			}
			seen, out := map[any]bool{}, []any{}
			for _, s := range f.secrets {
				if id := s["service_account_id"]; id != "" && !seen[id] {
					seen[id] = true
					out = append(out, id)
				}
			}
			return map[string]any{"results": out, "total_count": len(out)}, nil
		}).
		Handle(serviceaccount.SecretDeletePath, func(p *auth.Principal, req map[string]any) (any, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			delete(f.secrets, testkit.Str(req, "secret_id"))
			return map[string]any{}, nil
		}).
		Handle(serviceaccount.SecretUpdatePath, func(p *auth.Principal, req map[string]any) (any, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.secrets[testkit.Str(req, "secret_id")]["project_id"] = req["project_id"]
			return map[string]any{}, nil
		})
	return f
}

func (f *fakeSecrets) n() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.secrets) }

type env struct {
	*identitytest.Harness
	secrets        *fakeSecrets
	ws, p1, p2     string
	owner, member  *testkit.Client
	memberID       string
	otherWS        string
	otherOwner     *testkit.Client
	otherProject   string
	privateProject string
}

func newEnv(t *testing.T) *env {
	f := newFakeSecrets(t)
	h := identitytest.New(t, identitytest.Mount(serviceaccount.Routes, schema.Routes, project.Routes, workspace.Routes, rolebinding.Routes, trustedaccount.Routes),
		identitytest.Options{Config: func(c *core.Config) { c.ServiceURLs = map[string]string{"secret": f.fake.URL} }})
	e := &env{Harness: h, secrets: f}
	e.ws, e.owner, e.member = h.WorkspaceUsers("ws")
	e.memberID = "ws-member"
	mk := func(c *testkit.Client, name, kind string, users ...string) string {
		var pr map[string]any
		c.Call("/identity/v2/project/create", map[string]any{"name": name, "project_type": kind, "users": users}).OK(&pr)
		return pr["project_id"].(string)
	}
	e.p1 = mk(e.owner, "p1", "PUBLIC")
	e.p2 = mk(e.owner, "p2", "PRIVATE")
	e.privateProject = e.p2
	// A member's projects are in its token: granted after they exist.
	e.member = h.Anon.As(h.Scoped("ws-member", "Member-Passw0rd", "WORKSPACE", e.ws))
	e.otherWS, e.otherOwner, _ = h.WorkspaceUsers("other")
	e.otherProject = mk(e.otherOwner, "o1", "PUBLIC")
	return e
}

func awsBody(projectID string, edit ...func(map[string]any)) map[string]any {
	m := map[string]any{"provider": "aws", "name": "prod", "data": map[string]any{"account_id": "123456789012"},
		"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": "s3cr3t-value-x"},
		"tags": map[string]any{}, "service_account_mgr_id": "", "project_id": projectID}
	for _, f := range edit {
		f(m)
	}
	return m
}

// TestCreate: the console's create, with its keys stored as a PROJECT
// secret named <sa-id>-secret by the caller; every bad input is 400, 403
// or 404 with nothing stored in identity or the secret service.
func TestCreate(t *testing.T) {
	e := newEnv(t)
	frozen := e.DBFrozen(core.ServiceAccountsCollection, core.ProjectsCollection)
	for name, c := range map[string]struct {
		status int
		code   string
		body   map[string]any
	}{
		"data off schema":         {400, errs.InvalidParameter, awsBody(e.p1, func(m map[string]any) { m["data"] = map[string]any{"x": 1} })},
		"no provider schema":      {400, errs.SchemaNotDefined, awsBody(e.p1, func(m map[string]any) { m["provider"] = "oci" })},
		"keys off schema":         {400, errs.InvalidParameter, awsBody(e.p1, func(m map[string]any) { m["secret_data"] = map[string]any{"aws_access_key_id": "AKIAEXAMPLE"} })},
		"short key":               {400, errs.InvalidParameter, awsBody(e.p1, func(m map[string]any) { m["secret_data"].(map[string]any)["aws_secret_access_key"] = "s3" })},
		"no schema id":            {400, errs.RequiredParameter, awsBody(e.p1, func(m map[string]any) { m["secret_schema_id"] = "" })},
		"trusting schema as keys": {400, errs.SchemaIDNotDefined, awsBody(e.p1, func(m map[string]any) { m["secret_schema_id"] = "aws-secret-assume-role" })},
		"unknown schema":          {400, errs.SchemaIDNotDefined, awsBody(e.p1, func(m map[string]any) { m["secret_schema_id"] = "nope" })},
		"no project":              {400, errs.RequiredParameter, awsBody("")},
		"another ws's project":    {404, errs.NotFoundCode, awsBody(e.otherProject)},
		"no such project":         {404, errs.NotFoundCode, awsBody("project-000000000000")},
		"unbound manager":         {404, errs.NotFoundCode, awsBody(e.p1, func(m map[string]any) { m["service_account_mgr_id"] = "nobody" })},
		"unknown trusted account": {404, errs.NotFoundCode, awsBody(e.p1, func(m map[string]any) { m["trusted_account_id"] = "ta-000000000000" })},
		"unknown field":           {400, errs.InvalidParameter, awsBody(e.p1, func(m map[string]any) { m["resource_group"] = "PROJECT" })},
		"no name":                 {400, errs.RequiredParameter, awsBody(e.p1, func(m map[string]any) { delete(m, "name") })},
	} {
		r := e.owner.Call(sa+"create", c.body)
		if r.Status != c.status {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
			continue
		}
		if e := r.JSON()["detail"].(map[string]any)["code"]; e != c.code && !(c.code == errs.InvalidParameter && strings.HasPrefix(e.(string), "ERROR_")) {
			t.Errorf("%s: code %v, want %s", name, e, c.code)
		}
		if strings.Contains(string(r.Body), "s3cr3t") {
			t.Errorf("%s: the error shows the key: %s", name, r.Body)
		}
	}
	// A member outside the project does not reach it.
	e.member.Call(sa+"create", awsBody(e.p2)).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()
	if e.secrets.n() != 0 {
		t.Fatal("a refused create stored a secret")
	}
	var a map[string]any
	e.owner.Call(sa+"create", awsBody(e.p1)).OK(&a)
	identitytest.SameFields(t, "create", a, saFields...)
	id := a["service_account_id"].(string)
	if !saID.MatchString(id) || a["state"] != "ACTIVE" || a["project_id"] != e.p1 || a["workspace_id"] != e.ws || a["is_managed"] != false ||
		a["secret_schema_id"] != "aws-secret-access-key" || a["secret_id"] == "" || a["trusted_account_id"] != "" || a["last_synced_at"] != "" {
		t.Fatalf("create = %v", a)
	}
	if strings.Contains(e.Dump(core.ServiceAccountsCollection), "s3cr3t") {
		t.Fatal("identity stored the key")
	}
	sec := e.secrets.secrets[a["secret_id"].(string)]
	if sec["name"] != id+"-secret" || sec["resource_group"] != "PROJECT" || sec["service_account_id"] != id || sec["schema_id"] != "aws-secret-access-key" ||
		sec["data"].(map[string]any)["aws_secret_access_key"] != "s3cr3t-value-x" || len(sec["data"].(map[string]any)) != 2 {
		t.Fatalf("secret create = %v", sec)
	}
	if c := e.secrets.callers[0]; c.Role != auth.WorkspaceOwner || c.WorkspaceID != e.ws {
		t.Fatalf("the secret was stored by %+v, not the caller", c)
	}
	// The name is unique in the project; {} keys mean no secret.
	e.owner.Call(sa+"create", awsBody(e.p1)).Fails(http.StatusConflict, errs.NotUnique)
	var none map[string]any
	e.owner.Call(sa+"create", awsBody(e.p1, func(m map[string]any) { m["name"] = "bare"; m["secret_data"] = map[string]any{} })).OK(&none)
	if none["secret_id"] != "" || e.secrets.n() != 1 {
		t.Fatalf("secret_data {} made a secret: %v", none)
	}
	// A member creates in its projects only; the manager joins a PRIVATE project.
	var m map[string]any
	e.owner.Call(sa+"create", awsBody(e.p2, func(m map[string]any) { m["name"] = "private"; m["service_account_mgr_id"] = "ws-member" })).OK(&m)
	var pr map[string]any
	e.owner.Call("/identity/v2/project/get", map[string]any{"project_id": e.p2}).OK(&pr)
	if us := identitytest.ToStrings(pr["users"]); len(us) != 1 || us[0] != "ws-member" {
		t.Fatalf("the manager is not in the PRIVATE project: %v", pr["users"])
	}
	// The kubernetes schema has no fields: any data, no keys.
	e.owner.Call(sa+"create", map[string]any{"provider": "kubernetes", "name": "k8s", "data": map[string]any{}, "project_id": e.p1}).OK(nil)
}

// TestChange: the rename sends the name alone; keys are replaced and
// deleted through the secret service; delete takes the secrets along.
func TestChange(t *testing.T) {
	e := newEnv(t)
	var a map[string]any
	e.owner.Call(sa+"create", awsBody(e.p1)).OK(&a)
	id := a["service_account_id"].(string)
	var u map[string]any
	e.owner.Call(sa+"update", map[string]any{"service_account_id": id, "name": "renamed"}).OK(&u)
	if u["name"] != "renamed" || u["data"].(map[string]any)["account_id"] != "123456789012" {
		t.Fatalf("rename = %v", u)
	}
	frozen := e.DBFrozen(core.ServiceAccountsCollection)
	e.owner.Call(sa+"update", map[string]any{"service_account_id": id, "data": map[string]any{"x": 1}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	e.owner.Call(sa+"update", map[string]any{"service_account_id": id, "project_id": e.otherProject}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.owner.Call(sa+"update", map[string]any{"service_account_id": id, "service_account_mgr_id": "nobody"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.owner.Call(sa+"update-secret-data", map[string]any{"service_account_id": id, "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "x"}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	frozen()
	// Moving the account moves its secret.
	e.owner.Call(sa+"update", map[string]any{"service_account_id": id, "project_id": e.p2}).OK(&u)
	if u["project_id"] != e.p2 || e.secrets.secrets[u["secret_id"].(string)]["project_id"] != e.p2 {
		t.Fatalf("move = %v", u)
	}
	old := u["secret_id"].(string)
	e.owner.Call(sa+"update-secret-data", map[string]any{"service_account_id": id, "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIA2", "aws_secret_access_key": "second-key"}}).OK(&u)
	if u["secret_id"] == old || e.secrets.n() != 1 {
		t.Fatalf("update-secret-data = %v (%d secrets)", u, e.secrets.n())
	}
	e.owner.Call(sa+"delete-secret-data", map[string]any{"service_account_id": id}).OK(&u)
	if u["secret_id"] != "" || u["secret_schema_id"] != "" || e.secrets.n() != 0 {
		t.Fatalf("delete-secret-data = %v", u)
	}
	e.owner.Call(sa+"update-secret-data", map[string]any{"service_account_id": id, "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIA3", "aws_secret_access_key": "third-key"}}).OK(&u)
	e.owner.Call(sa+"delete", map[string]any{"service_account_id": id}).OK(nil)
	if e.secrets.n() != 0 {
		t.Fatal("delete left the secret")
	}
	e.owner.Call(sa+"get", map[string]any{"service_account_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// TestReads: the console's list queries, stat and analyze; a member sees
// its projects' accounts only; the secret service down is 503 and stores
// nothing.
func TestReads(t *testing.T) {
	e := newEnv(t)
	e.owner.Call(sa+"create", awsBody(e.p1)).OK(nil)
	e.owner.Call(sa+"create", awsBody(e.p2, func(m map[string]any) { m["name"] = "hidden"; m["secret_data"] = map[string]any{} })).OK(nil)
	body := map[string]any{"query": map[string]any{"sort": []any{map[string]any{"key": "created_at", "desc": true}}, "page": map[string]any{"start": 1, "limit": 15},
		"filter": []any{map[string]any{"k": "provider", "v": "aws", "o": "eq"}, map[string]any{"k": "state", "v": "ACTIVE", "o": "eq"}},
		"only":   []any{"name", "data.account_id", "project_id", "service_account_mgr_id", "state", "is_managed", "trusted_account_id", "created_at", "service_account_id", "tags"}}}
	if n := identitytest.ListCount(t, e.owner, sa+"list", body); n != 2 {
		t.Fatalf("owner lists %d", n)
	}
	if n := identitytest.ListCount(t, e.member, sa+"list", body); n != 1 {
		t.Fatalf("member (public project only) lists %d", n)
	}
	// has_secret asks the secret service, once per list whatever the page.
	stats := e.secrets.stats
	if n := identitytest.ListCount(t, e.owner, sa+"list", map[string]any{"has_secret": true}); n != 1 {
		t.Fatalf("has_secret lists %d", n)
	}
	if n := identitytest.ListCount(t, e.owner, sa+"list", map[string]any{"has_secret": false}); n != 1 {
		t.Fatalf("has_secret false lists %d", n)
	}
	if e.secrets.stats != stats+2 {
		t.Fatalf("%d secret/stat calls for two lists", e.secrets.stats-stats)
	}
	// What the secret service holds decides, not the account's secret_id.
	e.secrets.mu.Lock()
	held := e.secrets.secrets
	e.secrets.secrets = map[string]map[string]any{}
	e.secrets.mu.Unlock()
	if n := identitytest.ListCount(t, e.owner, sa+"list", map[string]any{"has_secret": true}); n != 0 {
		t.Fatalf("has_secret lists %d with no secret held", n)
	}
	e.secrets.mu.Lock()
	e.secrets.secrets = held
	e.secrets.mu.Unlock()
	if n := identitytest.ListCount(t, e.otherOwner, sa+"list", map[string]any{}); n != 0 {
		t.Fatalf("another workspace lists %d", n)
	}
	if n := identitytest.StatCount(e.Admin, sa+"stat", nil); n != 2 {
		t.Fatalf("stat %d", n)
	}
	e.owner.Call(sa+"analyze", map[string]any{"query": map[string]any{"group_by": []any{"provider"},
		"fields": map[string]any{"n": map[string]any{"operator": "count"}}}}).OK(nil)
	e.secrets.fake.Close()
	frozen := e.DBFrozen(core.ServiceAccountsCollection)
	e.owner.Call(sa+"create", awsBody(e.p1, func(m map[string]any) { m["name"] = "down" })).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	frozen()
}

// TestTenancyMatrix: another domain, another workspace, a member outside
// the project read and change nothing of an account.
func TestTenancyMatrix(t *testing.T) {
	e := newEnv(t)
	var a map[string]any
	e.owner.Call(sa+"create", awsBody(e.p1, func(m map[string]any) { m["secret_data"] = map[string]any{} })).OK(&a)
	id := a["service_account_id"].(string)
	testkit.Tenancy{
		Handler: e.Handler, Coll: e.DB.Collection(core.ServiceAccountsCollection), ID: id, Domain: e.Domain, Workspace: e.ws, Project: e.p1,
		Get:  testkit.Req{Path: sa + "get", Body: map[string]any{"service_account_id": id}},
		List: testkit.Req{Path: sa + "list", Body: map[string]any{"service_account_id": id}},
		Stat: &testkit.Req{Path: sa + "stat", Body: map[string]any{"query": map[string]any{
			"filter":    []any{map[string]any{"k": "service_account_id", "v": id, "o": "eq"}},
			"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "name", "name": "n"}}}}}}}},
		Changes: []testkit.Req{
			{Path: sa + "update", Body: map[string]any{"service_account_id": id, "name": "taken"}},
			{Path: sa + "update-secret-data", Body: map[string]any{"service_account_id": id, "secret_schema_id": "aws-secret-access-key",
				"secret_data": map[string]any{"aws_access_key_id": "AKIA", "aws_secret_access_key": "xxxxxx"}}},
			{Path: sa + "delete-secret-data", Body: map[string]any{"service_account_id": id}},
			{Path: sa + "delete", Body: map[string]any{"service_account_id": id}},
		},
		Insider:     auth.Principal{DomainID: e.Domain, UserID: "ws-owner", Role: auth.WorkspaceOwner, WorkspaceID: e.ws},
		Enroll:      e.Enroll,
		NoToken:     true,
		SecretPaths: []string{"secret_data"},
	}.Run(t)
	if e.secrets.n() != 0 {
		t.Fatal("an outsider stored a secret")
	}
}
