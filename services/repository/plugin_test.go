package repository_test

import (
	"bytes"
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/repository"
)

// TestLocalRepositoryCreatedOnce: replicas starting together on a new
// database make one local repository, and all answer with it.
func TestLocalRepositoryCreatedOnce(t *testing.T) {
	t.Parallel()
	db := testkit.Get().Database(t)
	const replicas = 8
	ids := make(chan string, replicas)
	var wg sync.WaitGroup
	for range replicas {
		wg.Go(func() {
			_, h := build(t, db, repository.Config{})
			var l list[repoInfo]
			c := testkit.NewClient(t, h).As(testkit.Get().Token(t, adminOf("domain-a")))
			c.Call("/repository/repository/list", map[string]any{}).OK(&l) // the console's unversioned path
			if l.TotalCount != 1 || l.Results[0].RepositoryType != "local" || l.Results[0].Name != "local" {
				t.Errorf("repository/list = %+v", l)
				ids <- ""
				return
			}
			ids <- l.Results[0].RepositoryID
		})
	}
	wg.Wait()
	close(ids)
	var first string
	for id := range ids {
		if first == "" {
			first = id
		}
		if id != first || !repoIDPattern.MatchString(id) {
			t.Fatalf("replicas answer different local repositories: %q and %q", first, id)
		}
	}
	n, err := db.Collection(repository.RepositoriesCollection).CountDocuments(context.Background(), bson.D{})
	if err != nil || n != 1 {
		t.Fatalf("%d repository records (%v), want 1", n, err)
	}
	// A later start keeps it.
	_, h := build(t, db, repository.Config{})
	var got repoInfo
	testkit.NewClient(t, h).As(testkit.Get().Token(t, adminOf("domain-b"))).
		Call("/repository/v1/repository/get", map[string]any{"repository_id": first}).OK(&got)
	if got.RepositoryID != first || got.RepositoryType != "local" {
		t.Fatalf("repository/get = %+v", got)
	}
}

var ec2 = map[string]any{
	"name": "AWS EC2", "service_type": "inventory.Collector", "image": "cloudforet/plugin-aws-ec2",
	"provider": "aws", "capability": map[string]any{"supported_schema": []any{"aws_access_key"}},
	"template": map[string]any{"options": map[string]any{"schema": map[string]any{
		"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
		"properties": map[string]any{"region.name": map[string]any{"type": "string", "$comment": "dotted"}}}}},
	"labels": []any{"compute", "aws"}, "tags": map[string]any{"icon": "https://example.com/ec2.svg", "description": "EC2"},
}

func TestPluginLifecycle(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{PublicHubURL: "hub.example.com"})
	p := h.register(t, h.adminA, ec2)
	if p.PluginID != "plugin-aws-ec2" || p.ResourceType != "inventory.Collector" || p.State != "ENABLED" ||
		p.RegistryType != "PUBLIC_HUB" || p.RegistryURL != "https://hub.example.com" || p.DomainID != "domain-a" ||
		p.RepositoryInfo != (repoInfo{h.local, "local", "local"}) || p.Provider != "aws" ||
		!strings.HasSuffix(p.CreatedAt, "Z") || p.UpdatedAt != p.CreatedAt || len(p.Labels) != 2 {
		t.Fatalf("registered: %+v", p)
	}
	if !reflect.DeepEqual(p.Template, ec2["template"]) {
		t.Fatalf("template not carried as given: %v", p.Template)
	}
	var got pluginInfo
	h.userA.Call("/repository/v1/plugin/get", map[string]any{"plugin_id": p.PluginID}).OK(&got)
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("get = %+v\nwant %+v", got, p)
	}
	h.userA.Call("/repository/plugin/get", map[string]any{"plugin_id": p.PluginID, "repository_id": h.local}).OK(&got)
	if got.PluginID != p.PluginID {
		t.Fatalf("get in the local repository = %+v", got)
	}

	// An explicit plugin_id, a private registry with credentials.
	q := h.register(t, h.adminA, map[string]any{
		"name": "Mail", "resource_type": "notification.Protocol", "image": "registry.example.com:5000/team/mail:1.0",
		"plugin_id": "Mail-Protocol", "registry_type": "PRIVATE_REGISTRY", "registry_url": "registry.example.com:5000",
		"registry_config": map[string]any{"username": "u", "password": "p4ss", "api_token": "t0k"},
	})
	if q.PluginID != "Mail-Protocol" || q.RegistryURL != "registry.example.com:5000" || q.Provider != "" ||
		q.RegistryConfig["username"] != "u" || q.RegistryConfig["password"] != "********" || q.RegistryConfig["api_token"] != "********" {
		t.Fatalf("registered: %+v", q)
	}
	raw, err := h.db.Collection(repository.PluginsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: "Mail-Protocol"}}).Raw()
	if err != nil || bytes.Contains(raw, []byte("p4ss")) || bytes.Contains(raw, []byte("t0k")) || raw.Lookup("registry_sealed", "data").Type == 0 {
		t.Fatalf("the registry credentials must be stored sealed, never in clear: %v (%v)", raw, err)
	}

	// The console's collector picker: repository_id "" means every
	// repository, provider null means any.
	var l list[pluginInfo]
	h.memberA.Call("/repository/plugin/list", map[string]any{"repository_id": "", "provider": nil, "resource_type": "inventory.Collector",
		"query": map[string]any{"page": map[string]any{"start": 1, "limit": 15}, "sort": map[string]any{"key": "name"}, "keyword": "ec2"}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].PluginID != p.PluginID || l.Results[0].RepositoryInfo.RepositoryID != h.local || l.Results[0].Tags["icon"] == nil {
		t.Fatalf("picker list = %+v", l)
	}
	h.userA.Call("/repository/plugin/list", map[string]any{}).OK(&l)
	if l.TotalCount != 2 || l.Results[0].Name != "AWS EC2" || l.Results[1].Name != "Mail" {
		t.Fatalf("list = %+v", l)
	}
	h.userA.Call("/repository/plugin/list", map[string]any{"service_type": "notification.Protocol", "repository_id": h.local}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].PluginID != "Mail-Protocol" {
		t.Fatalf("list by service_type = %+v", l)
	}
	h.userA.Call("/repository/plugin/list", map[string]any{"provider": "aws", "query": map[string]any{"only": []string{"plugin_id", "name", "tags"}}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].PluginID != p.PluginID || l.Results[0].Image != "" {
		t.Fatalf("list by provider with only = %+v", l)
	}

	var up pluginInfo
	h.adminA.Call("/repository/v1/plugin/update", map[string]any{"plugin_id": p.PluginID, "name": "EC2", "tags": map[string]any{"k": "v"}, "labels": []any{}}).OK(&up)
	if up.Name != "EC2" || up.Tags["k"] != "v" || len(up.Labels) != 0 || up.Image != p.Image || up.UpdatedAt < p.UpdatedAt || up.CreatedAt != p.CreatedAt {
		t.Fatalf("update = %+v", up)
	}
	h.adminA.Call("/repository/v1/plugin/disable", map[string]any{"plugin_id": p.PluginID}).OK(&up)
	if up.State != "DISABLED" || up.Name != "EC2" {
		t.Fatalf("disable = %+v", up)
	}
	h.adminA.Call("/repository/v1/plugin/disable", map[string]any{"plugin_id": p.PluginID}).OK(&up) // harmless again
	h.userA.Call("/repository/plugin/list", map[string]any{"state": "DISABLED"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].PluginID != p.PluginID {
		t.Fatalf("list DISABLED = %+v", l)
	}
	h.adminA.Call("/repository/v1/plugin/enable", map[string]any{"plugin_id": p.PluginID}).OK(&up)
	if up.State != "ENABLED" {
		t.Fatalf("enable = %+v", up)
	}
	h.adminA.Call("/repository/v1/plugin/deregister", map[string]any{"plugin_id": p.PluginID}).OK(nil)
	h.adminA.Call("/repository/v1/plugin/get", map[string]any{"plugin_id": p.PluginID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.adminA.Call("/repository/v1/plugin/deregister", map[string]any{"plugin_id": p.PluginID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := h.count(t, repository.PluginsCollection); n != 1 {
		t.Fatalf("%d plugins after deregister, want 1", n)
	}
	// Its plugin_id is free again.
	h.register(t, h.adminA, ec2)
}

func TestPluginRegisterRules(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	kept := h.register(t, h.adminA, ec2)
	priv := map[string]any{"name": "P", "resource_type": "inventory.Collector", "image": "team/plugin-p",
		"registry_type": "PRIVATE_REGISTRY", "registry_url": "https://registry.example.com"}
	cases := []struct {
		name   string
		as     *testkit.Client
		body   map[string]any
		status int
		code   string
	}{
		{"image over 40 characters", h.adminA, merge(ec2, map[string]any{"image": "cloudforet/" + strings.Repeat("x", 30)}), 400, errs.InvalidParameter},
		{"image name with an underscore", h.adminA, merge(ec2, map[string]any{"image": "cloudforet/plugin_aws"}), 400, errs.InvalidParameter},
		{"image name with a dot", h.adminA, merge(ec2, map[string]any{"image": "cloudforet/plugin.aws"}), 400, errs.InvalidParameter},
		{"image ending in a slash", h.adminA, merge(ec2, map[string]any{"image": "cloudforet/"}), 400, errs.InvalidParameter},
		{"plugin_id with a space", h.adminA, merge(ec2, map[string]any{"plugin_id": "my plugin"}), 400, errs.InvalidParameter},
		{"plugin_id over 40", h.adminA, merge(ec2, map[string]any{"plugin_id": strings.Repeat("p", 41)}), 400, errs.InvalidParameter},
		{"duplicate plugin_id", h.adminA, ec2, 409, errs.NotUnique},
		{"duplicate plugin_id in another domain", h.adminB, ec2, 409, errs.NotUnique},
		{"duplicate explicit plugin_id", h.adminA, merge(priv, map[string]any{"plugin_id": kept.PluginID}), 409, errs.NotUnique},
		{"no resource_type", h.adminA, merge(ec2, map[string]any{"service_type": nil, "image": "x/other"}), 400, errs.RequiredParameter},
		{"service_type differs from resource_type", h.adminA, merge(ec2, map[string]any{"resource_type": "a.B", "image": "x/other"}), 400, errs.InvalidParameter},
		{"no name", h.adminA, merge(ec2, map[string]any{"name": nil, "image": "x/other"}), 400, errs.RequiredParameter},
		{"no image", h.adminA, merge(ec2, map[string]any{"image": nil}), 400, errs.RequiredParameter},
		{"private registry without registry_url", h.adminA, merge(priv, map[string]any{"registry_url": nil}), 400, errs.RequiredParameter},
		{"public hub with a registry_url", h.adminA, merge(ec2, map[string]any{"image": "x/other", "registry_url": "https://r.example.com"}), 400, errs.InvalidParameter},
		{"registry_url not http", h.adminA, merge(priv, map[string]any{"registry_url": "ftp://r.example.com"}), 400, errs.InvalidParameter},
		{"registry_url with credentials", h.adminA, merge(priv, map[string]any{"registry_url": "https://u:p@r.example.com"}), 400, errs.InvalidParameter},
		{"unknown registry_type", h.adminA, merge(priv, map[string]any{"registry_type": "DOCKER_HUB"}), 400, errs.InvalidParameter},
		{"registry password not a string", h.adminA, merge(priv, map[string]any{"registry_config": map[string]any{"password": 5}}), 400, errs.InvalidParameterType},
		{"template with an invalid schema", h.adminA, merge(priv, map[string]any{"template": map[string]any{"options": map[string]any{"schema": map[string]any{"type": "strin"}}}}), 400, errs.InvalidSchema},
		{"tags empty key", h.adminA, merge(priv, map[string]any{"tags": map[string]any{"": 1}}), 400, errs.InvalidParameter},
		{"capability key holding NUL", h.adminA, merge(priv, map[string]any{"capability": map[string]any{"a\x00b": 1}}), 400, errs.InvalidParameter},
		{"labels with an empty key", h.adminA, merge(priv, map[string]any{"labels": []any{map[string]any{"": 1}}}), 400, errs.InvalidParameter},
		{"supported_schema not a list", h.adminA, merge(priv, map[string]any{"capability": map[string]any{"supported_schema": "x"}}), 400, errs.InvalidParameterType},
		{"labels over 100", h.adminA, merge(priv, map[string]any{"labels": make([]any, 101)}), 400, errs.InvalidParameter},
		{"workspace owner cannot register", h.ownerA, priv, 403, errs.PermissionDenied},
		{"member cannot register", h.memberA, priv, 403, errs.PermissionDenied},
		{"user cannot register", h.userA, priv, 403, errs.PermissionDenied},
		{"anonymous", h.anon, priv, 401, errs.AuthenticateFailure},
	}
	before := h.snapshot(t, repository.PluginsCollection)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.as.Call("/repository/v1/plugin/register", tc.body).Fails(tc.status, tc.code)
			if after := h.snapshot(t, repository.PluginsCollection); !reflect.DeepEqual(after, before) {
				t.Fatalf("a refused register changed the store:\n%v\nwant %v", after, before)
			}
		})
	}
	// service_type and resource_type may both be sent when they agree; a
	// tag or digest on the image is not part of the plugin_id.
	p := h.register(t, h.adminA, merge(priv, map[string]any{"service_type": "inventory.Collector", "image": "team/plugin-q:1.2.3"}))
	if p.PluginID != "plugin-q" || p.ResourceType != "inventory.Collector" {
		t.Fatalf("registered: %+v", p)
	}
	p = h.register(t, h.adminA, merge(priv, map[string]any{"image": "plugin-r@sha256:abc"}))
	if p.PluginID != "plugin-r" {
		t.Fatalf("registered: %+v", p)
	}
}

func TestPluginWritesAndDomains(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	a := h.register(t, h.adminA, ec2)
	global := h.register(t, h.system, merge(ec2, map[string]any{"image": "cloudforet/plugin-global", "name": "Global"}))
	if global.DomainID != "*" {
		t.Fatalf("a SYSTEM plugin is global: %+v", global)
	}
	global2 := h.register(t, h.system, merge(ec2, map[string]any{"image": "cloudforet/plugin-global-2", "name": "Global 2"}))
	if global2.DomainID != "*" {
		t.Fatalf("a SYSTEM plugin is global: %+v", global2)
	}
	before := h.snapshot(t, repository.PluginsCollection)
	refused := []struct {
		name   string
		as     *testkit.Client
		path   string
		body   map[string]any
		status int
		code   string
	}{
		{"B gets A's plugin", h.adminB, "/repository/v1/plugin/get", map[string]any{"plugin_id": a.PluginID}, 404, errs.NotFoundCode},
		{"B gets A's plugin in the local repository", h.adminB, "/repository/v1/plugin/get", map[string]any{"plugin_id": a.PluginID, "repository_id": h.local}, 404, errs.NotFoundCode},
		{"B updates A's plugin", h.adminB, "/repository/v1/plugin/update", map[string]any{"plugin_id": a.PluginID, "name": "taken"}, 404, errs.NotFoundCode},
		{"B disables A's plugin", h.adminB, "/repository/v1/plugin/disable", map[string]any{"plugin_id": a.PluginID}, 404, errs.NotFoundCode},
		{"B enables A's plugin", h.adminB, "/repository/v1/plugin/enable", map[string]any{"plugin_id": a.PluginID}, 404, errs.NotFoundCode},
		{"B deregisters A's plugin", h.adminB, "/repository/v1/plugin/deregister", map[string]any{"plugin_id": a.PluginID}, 404, errs.NotFoundCode},
		{"B reads A's versions", h.adminB, "/repository/v1/plugin/get-versions", map[string]any{"plugin_id": a.PluginID}, 404, errs.NotFoundCode},
		{"a domain admin updates a global plugin", h.adminA, "/repository/v1/plugin/update", map[string]any{"plugin_id": global.PluginID, "name": "x"}, 403, errs.PermissionDenied},
		{"a domain admin disables a global plugin", h.adminB, "/repository/v1/plugin/disable", map[string]any{"plugin_id": global.PluginID}, 403, errs.PermissionDenied},
		{"a domain admin deregisters a global plugin", h.adminB, "/repository/v1/plugin/deregister", map[string]any{"plugin_id": global.PluginID}, 403, errs.PermissionDenied},
		{"member updates", h.memberA, "/repository/v1/plugin/update", map[string]any{"plugin_id": a.PluginID, "name": "x"}, 403, errs.PermissionDenied},
		{"owner disables", h.ownerA, "/repository/v1/plugin/disable", map[string]any{"plugin_id": a.PluginID}, 403, errs.PermissionDenied},
		{"user deregisters", h.userA, "/repository/v1/plugin/deregister", map[string]any{"plugin_id": a.PluginID}, 403, errs.PermissionDenied},
		{"user reads versions", h.userA, "/repository/v1/plugin/get-versions", map[string]any{"plugin_id": a.PluginID}, 403, errs.PermissionDenied},
		{"anonymous list", h.anon, "/repository/v1/plugin/list", map[string]any{}, 401, errs.AuthenticateFailure},
		{"unknown plugin update", h.adminA, "/repository/v1/plugin/update", map[string]any{"plugin_id": "nope", "name": "x"}, 404, errs.NotFoundCode},
		{"unknown plugin enable", h.adminA, "/repository/v1/plugin/enable", map[string]any{"plugin_id": "nope"}, 404, errs.NotFoundCode},
		{"unknown repository", h.adminA, "/repository/v1/plugin/get", map[string]any{"plugin_id": a.PluginID, "repository_id": "repo-000000000000"}, 404, errs.NotFoundCode},
		{"list of an unknown repository", h.adminA, "/repository/v1/plugin/list", map[string]any{"repository_id": "repo-000000000000"}, 404, errs.NotFoundCode},
		{"update with a bad tags key", h.adminA, "/repository/v1/plugin/update", map[string]any{"plugin_id": a.PluginID, "tags": map[string]any{"": 1}}, 400, errs.InvalidParameter},
		{"update cannot change the image", h.adminA, "/repository/v1/plugin/update", map[string]any{"plugin_id": a.PluginID, "image": "x/y"}, 400, errs.InvalidParameter},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			r.as.Call(r.path, r.body).Fails(r.status, r.code)
			if after := h.snapshot(t, repository.PluginsCollection); !reflect.DeepEqual(after, before) {
				t.Fatalf("a refused call changed the store")
			}
		})
	}
	// B sees the global plugins, not A's; A sees its own and the global ones.
	var l list[pluginInfo]
	h.adminB.Call("/repository/v1/plugin/list", map[string]any{}).OK(&l)
	if l.TotalCount != 2 || l.Results[0].DomainID != "*" || l.Results[1].DomainID != "*" {
		t.Fatalf("B's list = %+v", l)
	}
	h.adminB.Call("/repository/v1/plugin/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "domain_id", "v": "domain-a", "o": "eq"}}}}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("B's list filtered on A's domain = %+v", l)
	}
	h.adminA.Call("/repository/v1/plugin/list", map[string]any{"query": map[string]any{"count_only": true}}).OK(&l)
	if l.TotalCount != 3 || len(l.Results) != 0 {
		t.Fatalf("A's count = %+v", l)
	}
	var got pluginInfo
	h.userA.Call("/repository/v1/plugin/get", map[string]any{"plugin_id": global.PluginID}).OK(&got)
	// A SYSTEM token acts in its own domain, as every caller (pkg/tenancy):
	// another domain's plugin is 404 to it and stays as it was.
	h.system.Call("/repository/v1/plugin/disable", map[string]any{"plugin_id": a.PluginID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if after := h.snapshot(t, repository.PluginsCollection); !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused call changed the store")
	}
	h.system.Call("/repository/v1/plugin/update", map[string]any{"plugin_id": global.PluginID, "name": "Renamed"}).OK(&got)
	if got.Name != "Renamed" {
		t.Fatalf("system update = %+v", got)
	}
	var all list[pluginInfo]
	h.system.Call("/repository/v1/plugin/list", map[string]any{}).OK(&all)
	if all.TotalCount != 2 || all.Results[0].DomainID != "*" || all.Results[1].DomainID != "*" {
		t.Fatalf("system list = %+v", all)
	}
}
