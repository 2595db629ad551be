package config_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/config"
	"github.com/nubes-io/nubes/services/config/internal/core"
	"github.com/nubes-io/nubes/services/config/internal/sharedconfig"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const (
	uc = "/config/v2/user-config/"
	sc = "/config/v2/shared-config/"
	dc = "/config/v2/domain-config/"
	pc = "/config/v2/public-config/"
)

type harness struct {
	anon, adminA, adminB, alice, bob, owner1, owner2, member1, userA *testkit.Client
	db                                                               *mongo.Database
	handler                                                          http.Handler
}

// The projects and workspaces the fake identity knows.
var projects = map[string]testkit.Project{
	"project-1": {DomainID: "domain-a", WorkspaceID: "workspace-1"},
	"project-2": {DomainID: "domain-a", WorkspaceID: "workspace-1"},
	"project-9": {DomainID: "domain-a", WorkspaceID: "workspace-2"},
}

func setup(t *testing.T, limits config.Limits) *harness {
	t.Helper()
	env := testkit.Get()
	db := env.Database(t)
	fake := testkit.FakeIdentity(t, projects).Handle(sharedconfig.WorkspaceGetPath, func(p *auth.Principal, req map[string]any) (any, error) {
		ws := testkit.Str(req, "workspace_id")
		if p.DomainID != "domain-a" || (ws != "workspace-1" && ws != "workspace-2") {
			return nil, errs.NotFound("workspace_id", ws)
		}
		return map[string]any{"workspace_id": ws, "domain_id": p.DomainID}, nil
	})
	svc, err := config.Build(context.Background(), app.Deps{DB: db, Log: slog.New(slog.DiscardHandler),
		Services: call.NewServices(map[string]string{"identity": fake.URL}, "", nil)}, limits)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Name: config.Name, Auth: env.Verifier, Logger: slog.New(slog.DiscardHandler)}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.NewClient(t, srv.Handler())
	return &harness{
		anon:    c,
		adminA:  c.For(auth.Principal{DomainID: "domain-a", UserID: "admin-a", Role: auth.DomainAdmin}),
		adminB:  c.For(auth.Principal{DomainID: "domain-b", UserID: "admin-b", Role: auth.DomainAdmin}),
		alice:   c.For(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.User}),
		bob:     c.For(auth.Principal{DomainID: "domain-a", UserID: "bob", Role: auth.User}),
		owner1:  c.For(auth.Principal{DomainID: "domain-a", UserID: "olive", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"}),
		owner2:  c.For(auth.Principal{DomainID: "domain-a", UserID: "otto", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-2"}),
		member1: c.For(member("mia", "project-1")),
		userA:   c.For(auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User}),
		db:      db,
		handler: srv.Handler(),
	}
}

func member(user string, projects ...string) auth.Principal {
	return auth.Principal{DomainID: "domain-a", UserID: user, Role: auth.WorkspaceMember, WorkspaceID: "workspace-1", Projects: projects}
}

func (h *harness) coll(name string) *mongo.Collection { return h.db.Collection(name) }

type info struct {
	Name          string         `json:"name"`
	Data          map[string]any `json:"data"`
	Tags          map[string]any `json:"tags"`
	UserID        string         `json:"user_id"`
	DomainID      string         `json:"domain_id"`
	ResourceGroup string         `json:"resource_group"`
	WorkspaceID   string         `json:"workspace_id"`
	ProjectID     string         `json:"project_id"`
	CreatedAt     string         `json:"created_at"`
	UpdatedAt     string         `json:"updated_at"`
}

type list struct {
	Results    []info `json:"results"`
	TotalCount int    `json:"total_count"`
}

func m(kv ...any) map[string]any {
	out := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func cond(k string, v any, o string) map[string]any { return m("k", k, "v", v, "o", o) }

func TestUserConfigLifecycle(t *testing.T) {
	t.Parallel()
	h := setup(t, config.Limits{})
	var got info
	h.alice.Call(uc+"create", m("name", "console:gnb:navRail", "data", m("isMinimizeNavRail", true))).OK(&got)
	if got.UserID != "alice" || got.DomainID != "domain-a" || got.Data["isMinimizeNavRail"] != true || got.Tags == nil || got.CreatedAt == "" {
		t.Fatalf("create answered %+v", got)
	}
	// A taken name is 409 and stores nothing more.
	h.alice.Call(uc+"create", m("name", "console:gnb:navRail", "data", m())).Fails(http.StatusConflict, errs.SaveUniqueValues)
	if n := testkit.Count(t, h.coll(core.UserConfigs)); n != 1 {
		t.Fatalf("%d records after a duplicate create", n)
	}
	// Another user may take the same name: it is unique per user.
	h.bob.Call(uc+"create", m("name", "console:gnb:navRail", "data", m("isHideNavRail", true))).OK(nil)

	h.alice.Call(uc+"update", m("name", "console:gnb:navRail", "data", m("isHideNavRail", true), "tags", m("a", "b"))).OK(&got)
	if got.Data["isHideNavRail"] != true || got.Data["isMinimizeNavRail"] != nil || got.Tags["a"] != "b" {
		t.Fatalf("update replaces data and tags: %+v", got)
	}
	// set: an upsert, twice on one name, then on a new one.
	for _, v := range []string{"workspace-1", "workspace-2"} {
		h.alice.Call(uc+"set", m("name", "console:last-accessed-workspace", "data", m("workspace_id", v))).OK(&got)
	}
	if got.Data["workspace_id"] != "workspace-2" || got.Tags == nil {
		t.Fatalf("set answered %+v", got)
	}
	h.alice.Call(uc+"get", m("name", "console:last-accessed-workspace")).OK(&got)
	if got.Data["workspace_id"] != "workspace-2" {
		t.Fatalf("get after set: %+v", got)
	}
	// set keeps tags it is not given.
	h.alice.Call(uc+"set", m("name", "console:gnb:navRail", "data", m("isHideNavRail", false))).OK(&got)
	if got.Tags["a"] != "b" {
		t.Fatalf("set without tags dropped them: %+v", got)
	}
	if n := testkit.Count(t, h.coll(core.UserConfigs)); n != 3 {
		t.Fatalf("%d records, want 3", n)
	}
	var l list
	h.alice.Call(uc+"list", m()).OK(&l)
	if l.TotalCount != 2 {
		t.Fatalf("alice lists %+v", l)
	}
	var st map[string]any
	h.alice.Call(uc+"stat", m("query", m("aggregate", []any{m("count", m("name", "n"))}))).OK(&st)
	if res, _ := st["results"].([]any); len(res) != 1 || res[0].(map[string]any)["n"] != float64(2) {
		t.Fatalf("stat %v", st)
	}
	h.alice.Call(uc+"delete", m("name", "console:gnb:navRail")).OK(nil)
	h.alice.Call(uc+"get", m("name", "console:gnb:navRail")).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.alice.Call(uc+"delete", m("name", "console:gnb:navRail")).Fails(http.StatusNotFound, errs.NotFoundCode)
	// The v1 path is the same operation.
	h.alice.Call("/config/v1/user-config/get", m("name", "console:last-accessed-workspace")).OK(nil)
	h.alice.Call("/config/user-config/get", m("name", "console:last-accessed-workspace")).OK(nil)
}

// The console's list filters, as it sends them (console-2x.md 2.1, 3).
func TestUserConfigConsoleFilters(t *testing.T) {
	t.Parallel()
	h := setup(t, config.Limits{})
	set := func(name string, data map[string]any) { h.alice.Call(uc+"set", m("name", name, "data", data)).OK(nil) }
	set("console:recent:PROJECT:workspace-1:project-1", m("id", "project-1", "workspace_id", "workspace-1", "type", "PROJECT", "label", "One"))
	set("console:recent:PROJECT:workspace-2:project-9", m("id", "project-9", "workspace_id", "workspace-2", "type", "PROJECT", "label", "Nine"))
	set("console:recent:WORKSPACE:workspace-1:workspace-1", m("id", "workspace-1", "workspace_id", "workspace-1", "type", "WORKSPACE"))
	set("console:recent:MENU:workspace-1:workspace_home", m("id", "workspace_home", "workspace_id", "workspace-1", "type", "MENU"))
	set("console:favorite:PROJECT:workspace-1:project-1", m("workspaceId", "workspace-1", "itemType", "PROJECT", "type", "item"))
	set("console:bookmark:Folder", m("name", "Folder", "link", nil, "workspaceId", "workspace-1"))
	set("console:bookmark:Folder:Docs-x1", m("name", "Docs", "link", "https://example.org", "folder", "Folder", "workspaceId", "workspace-1"))
	h.bob.Call(uc+"set", m("name", "console:recent:PROJECT:workspace-1:project-2", "data", m("workspace_id", "workspace-1", "type", "PROJECT", "id", "project-2"))).OK(nil)

	names := func(body map[string]any) []string {
		var l list
		h.alice.Call(uc+"list", body).OK(&l)
		out := []string{}
		for _, r := range l.Results {
			out = append(out, r.Name)
		}
		if len(out) != l.TotalCount {
			t.Fatalf("results %d, total_count %d", len(out), l.TotalCount)
		}
		return out
	}
	// The workspace home's recent panel.
	got := names(m("query", m("filter", []any{cond("user_id", "alice", "eq"), cond("name", "console:recent:", "contain"),
		cond("data.workspace_id", "workspace-1", "eq"), cond("data.type", "WORKSPACE", "not"),
		cond("data.id", "workspace_home", "not"), cond("data.id", "home-dashboard", "not")})))
	if strings.Join(got, ",") != "console:recent:PROJECT:workspace-1:project-1" {
		t.Fatalf("recent panel: %v", got)
	}
	// Favourites of a workspace.
	got = names(m("query", m("filter", []any{cond("user_id", "alice", "eq"), cond("data.workspaceId", "workspace-1", "eq"),
		cond("data.itemType", "WORKSPACE", "not"), cond("name", "console:favorite:", "contain")})))
	if strings.Join(got, ",") != "console:favorite:PROJECT:workspace-1:project-1" {
		t.Fatalf("favourites: %v", got)
	}
	// Bookmark folders (data.link null) and links, newest first.
	got = names(m("query", m("sort", []any{m("key", "updated_at", "desc", true)}, "filter", []any{cond("name", "console:bookmark", "contain"), cond("data.link", nil, "eq")})))
	if strings.Join(got, ",") != "console:bookmark:Folder" {
		t.Fatalf("bookmark folders: %v", got)
	}
	got = names(m("query", m("filter", []any{cond("name", "console:bookmark", "contain"), cond("data.link", nil, "not")})))
	if strings.Join(got, ",") != "console:bookmark:Folder:Docs-x1" {
		t.Fatalf("bookmark links: %v", got)
	}
	// Top-bar recents: in, contain on data.label, a page limit, only.
	got = names(m("query", m("filter", []any{cond("name", "console:recent:PROJECT:", "contain"), cond("user_id", "alice", "eq"),
		cond("data.workspace_id", []any{"workspace-1", "workspace-2"}, "in"), cond("data.label", "n", "contain")}, "page", m("limit", 5), "only", []any{"name", "data"})))
	if len(got) != 2 {
		t.Fatalf("top-bar recents: %v", got)
	}
	// Sorted on a data key, both ways.
	for _, tc := range []struct {
		desc bool
		want string
	}{{false, "console:recent:PROJECT:workspace-2:project-9,console:recent:PROJECT:workspace-1:project-1"},
		{true, "console:recent:PROJECT:workspace-1:project-1,console:recent:PROJECT:workspace-2:project-9"}} {
		got = names(m("query", m("filter", []any{cond("data.type", "PROJECT", "eq")}, "sort", []any{m("key", "data.label", "desc", tc.desc)})))
		if strings.Join(got, ",") != tc.want {
			t.Fatalf("sorted on data.label (desc %v): %v", tc.desc, got)
		}
	}
	// Another user's filter finds nothing of bob's: the scope is the caller's.
	if got = names(m("query", m("filter", []any{cond("user_id", "bob", "eq")}))); len(got) != 0 {
		t.Fatalf("alice lists bob's configs: %v", got)
	}
	// The name parameter is an exact match.
	if got = names(m("name", "console:bookmark:Folder")); len(got) != 1 {
		t.Fatalf("name parameter: %v", got)
	}
}

func TestUserConfigBadInput(t *testing.T) {
	t.Parallel()
	h := setup(t, config.Limits{MaxDataBytes: 200, MaxUserConfigs: 2})
	coll := h.coll(core.UserConfigs)
	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"no name", "create", m("data", m()), 400, errs.RequiredParameter},
		{"blank name", "set", m("name", "   ", "data", m()), 400, errs.RequiredParameter},
		{"no data", "create", m("name", "x"), 400, errs.RequiredParameter},
		{"no data on set", "set", m("name", "x"), 400, errs.RequiredParameter},
		{"data not an object", "create", m("name", "x", "data", "text"), 400, errs.InvalidParameterType},
		{"data too large", "set", m("name", "x", "data", m("v", strings.Repeat("a", 300))), 400, errs.InvalidParameter},
		{"tags too large", "set", m("name", "x", "data", m(), "tags", m("v", strings.Repeat("a", 300))), 400, errs.InvalidParameter},
		{"empty key", "create", m("name", "x", "data", m("", 1)), 400, errs.InvalidParameter},
		{"name too long", "create", m("name", strings.Repeat("n", 256), "data", m()), 400, errs.InvalidParameter},
		{"unknown field", "create", m("name", "x", "data", m(), "user_id", "bob"), 400, errs.InvalidParameter},
		{"malformed", "create", "{", 400, errs.JSONFormat},
		{"bad filter operator", "list", m("query", m("filter", []any{cond("name", "x", "nope")})), 400, errs.DBQuery},
		{"stat without query", "stat", m(), 400, errs.RequiredParameter},
		{"update of nothing", "update", m("name", "missing", "data", m()), 404, errs.NotFoundCode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.alice.Call(uc+tc.path, tc.body)
			if r.Status != tc.status {
				t.Fatalf("%d, want %d: %s", r.Status, tc.status, r.Body)
			}
			if tc.code != "" && !strings.Contains(string(r.Body), tc.code) {
				t.Fatalf("want %s: %s", tc.code, r.Body)
			}
			if n := testkit.Count(t, coll); n != 0 {
				t.Fatalf("%d records stored", n)
			}
		})
	}
	// The bound on records per user: the third new name is refused, a set
	// of a kept one still passes, and another user is not counted.
	h.alice.Call(uc+"create", m("name", "a", "data", m())).OK(nil)
	h.alice.Call(uc+"set", m("name", "b", "data", m())).OK(nil)
	h.alice.Call(uc+"set", m("name", "c", "data", m())).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.alice.Call(uc+"create", m("name", "c", "data", m())).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.alice.Call(uc+"set", m("name", "b", "data", m("k", 1))).OK(nil)
	h.bob.Call(uc+"set", m("name", "c", "data", m())).OK(nil)
	if n := testkit.Count(t, coll); n != 3 {
		t.Fatalf("%d records, want 3", n)
	}
	// No token: 401, nothing stored.
	h.anon.Call(uc+"set", m("name", "z", "data", m())).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	h.anon.Call(uc+"list", m()).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	if n := testkit.Count(t, coll); n != 3 {
		t.Fatalf("%d records after anonymous calls", n)
	}
}

// A user config is its owner's alone: the kit's matrix, and another user
// of the same domain (the domain's admin included) by name.
func TestUserConfigTenancy(t *testing.T) {
	t.Parallel()
	h := setup(t, config.Limits{})
	h.alice.Call(uc+"set", m("name", "console:gnb:navRail", "data", m("isHideNavRail", true))).OK(nil)
	id := core.Key("domain-a", "alice", "console:gnb:navRail")
	body := m("name", "console:gnb:navRail")
	stat := testkit.Req{Path: uc + "stat", Body: m("query", m("aggregate", []any{m("count", m("name", "n"))}))}
	testkit.Tenancy{
		Handler: h.handler, Coll: h.coll(core.UserConfigs), ID: id, Domain: "domain-a",
		Get: testkit.Req{Path: uc + "get", Body: body}, Stat: &stat,
		List:    testkit.Req{Path: uc + "list", Body: m("query", m("filter", []any{cond("name", "console:gnb:navRail", "eq")}))},
		Changes: []testkit.Req{{Path: uc + "update", Body: m("name", "console:gnb:navRail", "data", m("x", 1))}, {Path: uc + "delete", Body: body}},
		Insider: auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"},
	}.Run(t)
	for _, c := range []*testkit.Client{h.bob, h.adminA, h.adminB, h.owner1} {
		c.Call(uc+"get", body).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.Call(uc+"update", m("name", "console:gnb:navRail", "data", m("x", 1))).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.Call(uc+"delete", body).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	// bob's set of the same name is bob's own record: alice's is untouched.
	h.bob.Call(uc+"set", m("name", "console:gnb:navRail", "data", m("bob", true))).OK(nil)
	var got info
	h.alice.Call(uc+"get", body).OK(&got)
	if got.Data["isHideNavRail"] != true || got.Data["bob"] != nil {
		t.Fatalf("alice's record after bob's set: %+v", got)
	}
}

func TestSharedConfig(t *testing.T) {
	t.Parallel()
	h := setup(t, config.Limits{})
	coll := h.coll(core.SharedConfigs)
	var d, w, p info
	h.adminA.Call(sc+"create", m("name", "console:bookmark:Team", "data", m("link", nil, "isGlobal", true), "resource_group", "DOMAIN")).OK(&d)
	if d.WorkspaceID != "*" || d.ProjectID != "*" || d.ResourceGroup != "DOMAIN" {
		t.Fatalf("DOMAIN record %+v", d)
	}
	h.owner1.Call(sc+"create", m("name", "console:bookmark:Team", "data", m("link", nil, "workspaceId", "workspace-1"), "resource_group", "WORKSPACE")).OK(&w)
	if w.WorkspaceID != "workspace-1" || w.ProjectID != "*" {
		t.Fatalf("WORKSPACE record %+v", w)
	}
	h.member1.Call(sc+"create", m("name", "project-note", "data", m("n", 1), "resource_group", "PROJECT", "project_id", "project-1")).OK(&p)
	if p.WorkspaceID != "workspace-1" || p.ProjectID != "project-1" {
		t.Fatalf("PROJECT record %+v", p)
	}
	// A domain admin names the workspace; an unknown one is 404.
	h.adminA.Call(sc+"create", m("name", "ws2", "data", m(), "resource_group", "WORKSPACE", "workspace_id", "workspace-2")).OK(nil)
	n := testkit.Count(t, coll)
	for _, tc := range []struct {
		name   string
		c      *testkit.Client
		body   map[string]any
		status int
		code   string
	}{
		{"taken name at a level", h.owner1, m("name", "console:bookmark:Team", "data", m(), "resource_group", "WORKSPACE"), 409, errs.SaveUniqueValues},
		{"owner creates for the domain", h.owner1, m("name", "d2", "data", m(), "resource_group", "DOMAIN"), 403, errs.PermissionDenied},
		{"member creates for the workspace", h.member1, m("name", "w2", "data", m(), "resource_group", "WORKSPACE"), 403, errs.PermissionDenied},
		{"member outside the project", h.member1, m("name", "p2", "data", m(), "resource_group", "PROJECT", "project_id", "project-2"), 403, errs.PermissionDenied},
		{"owner names another workspace", h.owner1, m("name", "w3", "data", m(), "resource_group", "WORKSPACE", "workspace_id", "workspace-2"), 403, errs.PermissionDenied},
		{"project of another workspace", h.owner1, m("name", "p3", "data", m(), "resource_group", "PROJECT", "project_id", "project-9"), 404, errs.NotFoundCode},
		{"project required", h.owner1, m("name", "p4", "data", m(), "resource_group", "PROJECT"), 400, errs.RequiredParameter},
		{"workspace required of an admin", h.adminA, m("name", "w4", "data", m(), "resource_group", "WORKSPACE"), 400, errs.RequiredParameter},
		{"unknown workspace", h.adminA, m("name", "w5", "data", m(), "resource_group", "WORKSPACE", "workspace_id", "workspace-x"), 404, errs.NotFoundCode},
		{"bad resource group", h.adminA, m("name", "x", "data", m(), "resource_group", "USER"), 400, errs.InvalidParameter},
		{"no data", h.adminA, m("name", "x", "resource_group", "DOMAIN"), 400, errs.RequiredParameter},
		{"a plain user", h.userA, m("name", "x", "data", m(), "resource_group", "DOMAIN"), 403, errs.PermissionDenied},
		{"no token", h.anon, m("name", "x", "data", m(), "resource_group", "DOMAIN"), 401, errs.AuthenticateFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Call(sc+"create", tc.body).Fails(tc.status, tc.code)
			if got := testkit.Count(t, coll); got != n {
				t.Fatalf("%d records, %d before", got, n)
			}
		})
	}
	// Reads: the narrowest level of a name wins for the workspace's owner;
	// another workspace's owner sees the domain's record.
	var got info
	h.owner1.Call(sc+"get", m("name", "console:bookmark:Team")).OK(&got)
	if got.WorkspaceID != "workspace-1" {
		t.Fatalf("owner 1 reads %+v", got)
	}
	h.owner2.Call(sc+"get", m("name", "console:bookmark:Team")).OK(&got)
	if got.WorkspaceID != "*" {
		t.Fatalf("owner 2 reads %+v", got)
	}
	// The domain's admin reaches both: two levels, the narrowest wins;
	// workspace_id picks the other.
	h.adminA.Call(sc+"get", m("name", "console:bookmark:Team", "workspace_id", "*")).OK(&got)
	if got.WorkspaceID != "*" {
		t.Fatalf("admin picks the domain's: %+v", got)
	}
	// The console's shared bookmark list: filter_or on the domain's or the workspace's.
	var l list
	h.owner1.Call(sc+"list", m("query", m("filter", []any{cond("name", "console:bookmark", "contain")},
		"filter_or", []any{cond("workspace_id", "*", "eq"), cond("data.workspaceId", "workspace-1", "eq")}))).OK(&l)
	if l.TotalCount != 2 {
		t.Fatalf("owner 1's bookmarks: %+v", l)
	}
	h.owner2.Call(sc+"list", m()).OK(&l)
	if l.TotalCount != 2 { // the domain's record and its own workspace's
		t.Fatalf("owner 2 lists %+v", l)
	}
	h.member1.Call(sc+"list", m()).OK(&l)
	if l.TotalCount != 3 { // domain, workspace-1, project-1
		t.Fatalf("member lists %+v", l)
	}
	// Changes: a narrower caller reads the domain's record but does not change it.
	h.owner2.Call(sc+"update", m("name", "console:bookmark:Team", "data", m("x", 1))).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.owner2.Call(sc+"delete", m("name", "console:bookmark:Team")).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.member1.Call(sc+"update", m("name", "console:bookmark:Team", "data", m("x", 1))).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.owner1.Call(sc+"update", m("name", "console:bookmark:Team", "data", m("link", nil, "renamed", true))).OK(&got)
	if got.WorkspaceID != "workspace-1" || got.Data["renamed"] != true {
		t.Fatalf("owner 1 updated %+v", got)
	}
	h.member1.Call(sc+"update", m("name", "project-note", "tags", m("t", "1"))).OK(&got)
	h.owner2.Call(sc+"get", m("name", "project-note")).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.adminB.Call(sc+"get", m("name", "console:bookmark:Team")).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.owner1.Call(sc+"delete", m("name", "console:bookmark:Team")).OK(nil)
	h.owner1.Call(sc+"get", m("name", "console:bookmark:Team")).OK(&got) // the domain's is left
	if got.WorkspaceID != "*" {
		t.Fatalf("after the delete owner 1 reads %+v", got)
	}
}

// The kit's matrix over a project's shared config.
func TestSharedConfigTenancy(t *testing.T) {
	t.Parallel()
	h := setup(t, config.Limits{})
	var p info
	h.owner1.Call(sc+"create", m("name", "matrix", "data", m("n", 1), "resource_group", "PROJECT", "project_id", "project-1")).OK(&p)
	id := core.Key("domain-a", "workspace-1", "project-1", "matrix")
	body := m("name", "matrix")
	stat := testkit.Req{Path: sc + "stat", Body: m("query", m("filter", []any{cond("name", "matrix", "eq")}, "aggregate", []any{m("count", m("name", "n"))}))}
	testkit.Tenancy{
		Handler: h.handler, Coll: h.coll(core.SharedConfigs), ID: id, Domain: "domain-a", Workspace: "workspace-1", Project: "project-1",
		Get: testkit.Req{Path: sc + "get", Body: body}, Stat: &stat,
		List:    testkit.Req{Path: sc + "list", Body: body},
		Changes: []testkit.Req{{Path: sc + "update", Body: m("name", "matrix", "data", m("x", 1))}, {Path: sc + "delete", Body: body}},
		Insider: member("insider", "project-1"),
	}.Run(t)
}

func TestDomainConfig(t *testing.T) {
	t.Parallel()
	h := setup(t, config.Limits{})
	coll := h.coll(core.DomainConfigs)
	var got info
	// The console's v1 settings store: list, create, update.
	h.adminA.Call("/config/v1/domain-config/create", m("name", "settings", "data", m("timezone", "UTC", "unified_cost_config", m("currency", "USD")))).OK(&got)
	if got.DomainID != "domain-a" || got.Data["timezone"] != "UTC" {
		t.Fatalf("create %+v", got)
	}
	h.adminA.Call("/config/v1/domain-config/create", m("name", "settings", "data", m())).Fails(http.StatusConflict, errs.SaveUniqueValues)
	h.adminA.Call("/config/v1/domain-config/update", m("name", "settings", "data", m("timezone", "Asia/Seoul"))).OK(&got)
	var l list
	h.adminA.Call("/config/v1/domain-config/list", m("name", "settings")).OK(&l)
	if l.TotalCount != 1 || l.Results[0].Data["timezone"] != "Asia/Seoul" {
		t.Fatalf("list %+v", l)
	}
	// v2 get and set (the anomaly page).
	h.adminA.Call(dc+"get", m("name", "anomaly_detection_configuration")).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.adminA.Call(dc+"set", m("name", "anomaly_detection_configuration", "data", m("enabled", true))).OK(nil)
	h.adminA.Call(dc+"set", m("name", "anomaly_detection_configuration", "data", m("enabled", false))).OK(nil)
	h.adminA.Call(dc+"get", m("name", "anomaly_detection_configuration")).OK(&got)
	if got.Data["enabled"] != false {
		t.Fatalf("get after set %+v", got)
	}
	if n := testkit.Count(t, coll); n != 2 {
		t.Fatalf("%d records", n)
	}
	// Domain admins only, reads included; another domain reaches nothing.
	for _, c := range []*testkit.Client{h.owner1, h.member1, h.alice} {
		c.Call(dc+"get", m("name", "settings")).Fails(http.StatusForbidden, errs.PermissionDenied)
		c.Call(dc+"list", m()).Fails(http.StatusForbidden, errs.PermissionDenied)
		c.Call(dc+"set", m("name", "settings", "data", m())).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	h.adminB.Call(dc+"get", m("name", "settings")).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.adminB.Call(dc+"update", m("name", "settings", "data", m())).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.adminB.Call(dc+"delete", m("name", "settings")).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.adminB.Call(dc+"list", m()).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("another domain lists %+v", l)
	}
	h.adminA.Call(dc+"set", m("name", "x", "data", "no")).Fails(http.StatusBadRequest, errs.InvalidParameterType)
	if n := testkit.Count(t, coll); n != 2 {
		t.Fatalf("%d records after refused calls", n)
	}
	h.adminA.Call(dc+"delete", m("name", "settings")).OK(nil)
}

func TestPublicConfig(t *testing.T) {
	t.Parallel()
	h := setup(t, config.Limits{})
	coll := h.coll(core.PublicConfigs)
	h.adminA.Call(pc+"create", m("name", "console:ext-menu", "data", m("anomaly_detection", m("enabled", true)))).OK(nil)
	h.adminB.Call(pc+"set", m("name", "console:ext-menu", "data", m("anomaly_detection", m("enabled", false)))).OK(nil)
	// No credential: get and list by the named domain.
	var got info
	h.anon.Call(pc+"get", m("name", "console:ext-menu", "domain_id", "domain-a")).OK(&got)
	if got.DomainID != "domain-a" || got.Data["anomaly_detection"].(map[string]any)["enabled"] != true {
		t.Fatalf("public get %+v", got)
	}
	h.anon.Call(pc+"get", m("name", "console:override-service-setting", "domain_id", "domain-a")).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.anon.Call(pc+"get", m("name", "console:ext-menu")).Fails(http.StatusBadRequest, errs.RequiredParameter)
	var l list
	h.anon.Call(pc+"list", m("domain_id", "domain-b")).OK(&l)
	if l.TotalCount != 1 || l.Results[0].DomainID != "domain-b" {
		t.Fatalf("public list %+v", l)
	}
	// A filter on another domain stays inside the named one.
	h.anon.Call(pc+"list", m("domain_id", "domain-b", "query", m("filter", []any{cond("domain_id", "domain-a", "eq")}))).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("list escaped its domain: %+v", l)
	}
	// Writes: domain admins only, and only their own domain's.
	n := testkit.Count(t, coll)
	h.anon.Call(pc+"set", m("name", "x", "data", m())).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	h.owner1.Call(pc+"set", m("name", "x", "data", m())).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.alice.Call(pc+"delete", m("name", "console:ext-menu")).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.adminB.Call(pc+"update", m("name", "x-only-in-a", "data", m())).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.adminA.Call(pc+"create", m("name", "console:ext-menu", "data", m())).Fails(http.StatusConflict, errs.SaveUniqueValues)
	if got := testkit.Count(t, coll); got != n {
		t.Fatalf("%d records, %d before", got, n)
	}
	h.adminB.Call(pc+"delete", m("name", "console:ext-menu")).OK(nil)
	h.anon.Call(pc+"get", m("name", "console:ext-menu", "domain_id", "domain-a")).OK(nil)
}

// Concurrent sets of one name make one record: the insert of the key is
// atomic. Each later write is a compare-and-set on the revision, so on
// MongoDB the revision counts them all; the embedded FerretDB applies a
// conditional replace as a read and a write, so it may count fewer until
// pkg/devinfra runs such commands one at a time (the lead's change in
// progress). strictRevision turns the count on once it has landed.
func TestUserConfigConcurrentSet(t *testing.T) {
	t.Parallel()
	h := setup(t, config.Limits{})
	const n = 12
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if r := h.alice.Call(uc+"set", m("name", "console:gnb:navRail", "data", m("i", i))); r.Status != http.StatusOK {
				t.Errorf("set %d: %d %s", i, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	coll := h.coll(core.UserConfigs)
	if c := testkit.Count(t, coll); c != 1 {
		t.Fatalf("%d records, want 1", c)
	}
	doc := testkit.Raw(t, coll, core.Key("domain-a", "alice", "console:gnb:navRail"))
	rev, _ := doc["revision"].(int64)
	if rev < 1 || rev > n || (strictRevision && rev != n) {
		t.Fatalf("revision %v after %d sets", doc["revision"], n)
	}
	t.Logf("revision %d after %d concurrent sets", rev, n)
}

// strictRevision: the embedded store orders its writes (issue 35), so
// every guarded replace lands.
const strictRevision = true
