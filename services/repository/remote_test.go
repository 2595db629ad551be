package repository_test

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/repository"
)

// remotes is a local repository service (a) whose configuration names a
// second one (b, on its own database, served over HTTP) as a remote.
type remotes struct {
	a, b    *harness
	bURL    string
	bID     string
	reg     *testRegistry
	partner repoInfo
}

func setupRemotes(t *testing.T, extra ...repository.Remote) *remotes {
	t.Helper()
	r := &remotes{reg: startRegistry(t, "")}
	r.reg.pushTags(t, "partner/plugin-remote", "0.1.0", "0.2.0", "latest")
	r.b = setup(t, repository.Config{Outward: loopback})
	r.bURL, r.bID = r.b.serve(t), r.b.local
	// b holds: a global plugin, one of the partner domain, one of a domain
	// a's credential does not reach, and one whose id a also uses.
	r.b.register(t, r.b.system, private(r.reg.URL, "partner/plugin-remote", nil))
	r.b.register(t, r.b.adminA, map[string]any{"name": "Partner only", "resource_type": "inventory.Collector", "image": "partner/plugin-partner", "provider": "gcp"})
	r.b.register(t, r.b.adminB, map[string]any{"name": "Hidden", "resource_type": "inventory.Collector", "image": "partner/plugin-hidden"})
	r.b.register(t, r.b.system, map[string]any{"name": "Shared (remote)", "resource_type": "inventory.Collector", "image": "partner/plugin-shared"})
	// a reaches b as b's domain-a admin.
	token := testkit.Get().Token(t, auth.Principal{DomainID: "domain-a", UserID: "a-service", Role: auth.DomainAdmin})
	cfg := repository.Config{Outward: loopback, Remotes: append(extra, repository.Remote{Name: "partner", URL: r.bURL, Token: token})}
	r.a = setup(t, cfg)
	r.a.register(t, r.a.adminA, map[string]any{"name": "Local one", "resource_type": "inventory.Collector", "image": "own/plugin-local", "provider": "aws"})
	r.a.register(t, r.a.adminA, map[string]any{"name": "Shared (local)", "resource_type": "inventory.Collector", "image": "own/plugin-shared"})
	r.partner = repoInfo{RepositoryID: r.bID, Name: "partner", RepositoryType: "remote"}
	return r
}

func TestRemoteRepositories(t *testing.T) {
	t.Parallel()
	r := setupRemotes(t)
	a := r.a

	var repos list[repoInfo]
	a.userA.Call("/repository/repository/list", map[string]any{}).OK(&repos)
	if repos.TotalCount != 2 || repos.Results[0].RepositoryID != a.local || repos.Results[1] != r.partner {
		t.Fatalf("repository/list = %+v", repos)
	}
	a.userA.Call("/repository/repository/list", map[string]any{"repository_type": "remote"}).OK(&repos)
	if repos.TotalCount != 1 || repos.Results[0] != r.partner {
		t.Fatalf("remote repositories = %+v", repos)
	}
	var one repoInfo
	a.userA.Call("/repository/v1/repository/get", map[string]any{"repository_id": r.bID}).OK(&one)
	if one != r.partner {
		t.Fatalf("repository/get = %+v", one)
	}
	a.userA.Call("/repository/v1/repository/get", map[string]any{"repository_id": "repo-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)

	// get: local first, then the remote, which names itself.
	var p pluginInfo
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-remote"}).OK(&p)
	if p.RepositoryInfo != r.partner || p.Name != "partner/plugin-remote" || p.RegistryURL != r.reg.URL {
		t.Fatalf("remote plugin = %+v", p)
	}
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-shared"}).OK(&p)
	if p.RepositoryInfo.RepositoryID != a.local || p.Name != "Shared (local)" {
		t.Fatalf("the local plugin must win: %+v", p)
	}
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-shared", "repository_id": r.bID}).OK(&p)
	if p.RepositoryInfo != r.partner || p.Name != "Shared (remote)" {
		t.Fatalf("the remote's plugin by repository_id: %+v", p)
	}
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-partner"}).OK(&p)
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-hidden"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-local", "repository_id": r.bID}).Fails(http.StatusNotFound, errs.NotFoundCode)

	// list: every repository in order, paged over the whole sequence.
	var l list[pluginInfo]
	a.userA.Call("/repository/plugin/list", map[string]any{"repository_id": "", "provider": nil}).OK(&l)
	names := func(l list[pluginInfo]) []string {
		var out []string
		for _, p := range l.Results {
			out = append(out, p.Name+"@"+p.RepositoryInfo.Name)
		}
		return out
	}
	all := []string{"Local one@local", "Shared (local)@local", "Partner only@partner", "Shared (remote)@partner", "partner/plugin-remote@partner"}
	if l.TotalCount != 5 || !reflect.DeepEqual(names(l), all) {
		t.Fatalf("list = %d %v", l.TotalCount, names(l))
	}
	for _, page := range []struct{ start, limit int }{{1, 2}, {2, 2}, {3, 2}, {5, 10}, {6, 2}, {2, 0}} {
		a.userA.Call("/repository/plugin/list", map[string]any{"query": map[string]any{"page": map[string]any{"start": page.start, "limit": page.limit}}}).OK(&l)
		end := len(all)
		if page.limit > 0 {
			end = min(page.start-1+page.limit, len(all))
		}
		want := all[min(page.start-1, len(all)):end]
		if l.TotalCount != 5 || !reflect.DeepEqual(names(l), want) && !(len(want) == 0 && len(l.Results) == 0) {
			t.Fatalf("page %+v = %d %v, want %v", page, l.TotalCount, names(l), want)
		}
	}
	a.userA.Call("/repository/plugin/list", map[string]any{"query": map[string]any{"count_only": true}}).OK(&l)
	if l.TotalCount != 5 || len(l.Results) != 0 {
		t.Fatalf("count_only = %+v", l)
	}
	a.userA.Call("/repository/plugin/list", map[string]any{"repository_id": r.bID}).OK(&l)
	if l.TotalCount != 3 || l.Results[0].RepositoryInfo != r.partner {
		t.Fatalf("list of the remote = %d %v", l.TotalCount, names(l))
	}
	a.userA.Call("/repository/plugin/list", map[string]any{"provider": "gcp"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].Name != "Partner only" {
		t.Fatalf("filter forwarded to the remote: %v", names(l))
	}
	a.userA.Call("/repository/plugin/list", map[string]any{"query": map[string]any{"keyword": "shared", "only": []string{"plugin_id", "repository_info"}}}).OK(&l)
	if l.TotalCount != 2 || l.Results[1].RepositoryInfo != r.partner || l.Results[1].Image != "" || l.Results[0].Image != "" {
		t.Fatalf("keyword and only forwarded: %+v", l)
	}
	// A key plugins do not have answers as for a field no plugin has, here and at the remote.
	a.userA.Call("/repository/plugin/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "nope", "v": 1, "o": "eq"}}}}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("nope eq 1 = %d", l.TotalCount)
	}
	a.userA.Call("/repository/plugin/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "nope", "v": nil, "o": "eq"}}}}).OK(&l)
	if l.TotalCount != 5 {
		t.Fatalf("nope eq null = %d", l.TotalCount)
	}
	a.userA.Call("/repository/plugin/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "nope", "v": 1, "o": "in"}}}}).Fails(http.StatusBadRequest, errs.OperatorListType)

	// get_versions is forwarded to the remote, which asks its registry.
	var v versionsInfo
	a.memberA.Call("/repository/plugin/get-versions", map[string]any{"plugin_id": "plugin-remote"}).OK(&v)
	if !reflect.DeepEqual(v.Results, []string{"0.2.0", "0.1.0", "latest"}) || v.TotalCount != 3 {
		t.Fatalf("remote versions = %+v", v)
	}
	a.memberA.Call("/repository/plugin/get-versions", map[string]any{"plugin_id": "plugin-remote", "repository_id": r.bID}).OK(&v)
	a.memberA.Call("/repository/plugin/get-versions", map[string]any{"plugin_id": "plugin-nowhere"}).Fails(http.StatusNotFound, errs.NotFoundCode)

	// Writes to a remote plugin are refused and change nothing there.
	before := r.b.snapshot(t, repository.PluginsCollection)
	for _, w := range []struct {
		path string
		body map[string]any
	}{
		{"/repository/v1/plugin/update", map[string]any{"plugin_id": "plugin-remote", "name": "taken"}},
		{"/repository/v1/plugin/enable", map[string]any{"plugin_id": "plugin-remote"}},
		{"/repository/v1/plugin/disable", map[string]any{"plugin_id": "plugin-remote"}},
		{"/repository/v1/plugin/deregister", map[string]any{"plugin_id": "plugin-remote"}},
	} {
		a.adminA.Call(w.path, w.body).Fails(http.StatusForbidden, errs.RemoteRepository)
	}
	if after := r.b.snapshot(t, repository.PluginsCollection); !reflect.DeepEqual(after, before) {
		t.Fatal("a refused write changed the remote")
	}
	// The local plugin of the same id is the one written.
	a.adminA.Call("/repository/v1/plugin/disable", map[string]any{"plugin_id": "plugin-shared"}).OK(&p)
	if p.State != "DISABLED" || p.RepositoryInfo.RepositoryID != a.local {
		t.Fatalf("local write = %+v", p)
	}
}

func TestRemoteRepositoryDown(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	r := setupRemotes(t, repository.Remote{Name: "dead", URL: deadURL, Token: "x"})
	a := r.a

	var repos list[repoInfo]
	a.userA.Call("/repository/repository/list", map[string]any{}).OK(&repos)
	if repos.TotalCount != 2 || repos.Results[1] != r.partner {
		t.Fatalf("a remote that does not answer is left out of repository/list: %+v", repos)
	}
	// A later remote still answers; a plugin nobody has is a 503, not a
	// possibly wrong 404.
	var p pluginInfo
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-remote"}).OK(&p)
	if p.RepositoryInfo != r.partner {
		t.Fatalf("get past the dead remote = %+v", p)
	}
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-nowhere"}).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	a.memberA.Call("/repository/plugin/get-versions", map[string]any{"plugin_id": "plugin-nowhere"}).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-x", "repository_id": "repo-000000000000"}).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	var l list[pluginInfo]
	a.userA.Call("/repository/plugin/list", map[string]any{}).OK(&l)
	if l.TotalCount != 5 {
		t.Fatalf("list past the dead remote = %+v", l)
	}
	// The local repository never depends on the remotes.
	a.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": "plugin-local"}).OK(&p)
	a.userA.Call("/repository/plugin/list", map[string]any{"repository_id": a.local}).OK(&l)
	if l.TotalCount != 2 {
		t.Fatalf("local list = %+v", l)
	}
}

func TestRemoteConfiguration(t *testing.T) {
	t.Parallel()
	r := setupRemotes(t)
	// A pinned repository_id is used as given, without asking.
	pinned := setup(t, repository.Config{Outward: loopback, Remotes: []repository.Remote{{Name: "pinned", URL: r.bURL, RepositoryID: "repo-0123456789ab",
		Token: testkit.Get().Token(t, adminOf("domain-a"))}}})
	var repos list[repoInfo]
	pinned.userA.Call("/repository/repository/list", map[string]any{"repository_type": "remote"}).OK(&repos)
	if repos.TotalCount != 1 || repos.Results[0].RepositoryID != "repo-0123456789ab" {
		t.Fatalf("pinned = %+v", repos)
	}
	for _, bad := range [][]repository.Remote{
		{{Name: "", URL: r.bURL}},
		{{Name: "x", URL: ""}},
		{{Name: "x", URL: "ftp://x"}},
		{{Name: "x", URL: r.bURL}, {Name: "x", URL: r.bURL}},
		{{Name: "local", URL: r.bURL}},
	} {
		if _, err := repository.New(repository.Config{Outward: loopback, Remotes: bad})(t.Context(), appDeps(t)); err == nil {
			t.Errorf("remotes %+v accepted", bad)
		}
	}
	got, err := repository.ParseRemotes(`[{"name":"hub","url":"https://repo.example.com","token":"t"}]`)
	if err != nil || len(got) != 1 || got[0].Name != "hub" || got[0].Token != "t" {
		t.Fatalf("ParseRemotes(JSON) = %+v, %v", got, err)
	}
	got, err = repository.ParseRemotes([]any{map[string]any{"name": "hub", "url": "https://repo.example.com", "repository_id": "repo-1"}})
	if err != nil || len(got) != 1 || got[0].RepositoryID != "repo-1" {
		t.Fatalf("ParseRemotes(list) = %+v, %v", got, err)
	}
	for _, bad := range []any{"not json", []any{map[string]any{"name": "x", "colour": "red"}}} {
		if _, err := repository.ParseRemotes(bad); err == nil {
			t.Errorf("ParseRemotes(%v) accepted", bad)
		}
	}
}
