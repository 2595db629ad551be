package costanalysis_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

func toString(t *testing.T, doc bson.M) string {
	t.Helper()
	raw, err := bson.MarshalExtJSON(doc, false, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestDataSourceRegister(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.register(t, e.adminA, domainSource("AWS costs"))
	if !strings.HasPrefix(d.DataSourceID, "ds-") || len(d.DataSourceID) != len("ds-")+12 {
		t.Errorf("id %q", d.DataSourceID)
	}
	if d.State != "ENABLED" || d.DataSourceType != "EXTERNAL" || d.SecretType != "MANUAL" || d.Provider != "aws" ||
		d.ResourceGroup != "DOMAIN" || d.WorkspaceID != "*" || d.DomainID != "domain-a" || d.LastSynchronizedAt != nil {
		t.Errorf("data source %+v", d)
	}
	if d.PluginInfo.Version != "2.0.1" || d.PluginInfo.UpgradeMode != "AUTO" || d.PluginInfo.Metadata["currency"] != "USD" ||
		!strings.HasPrefix(d.PluginInfo.SecretID, "secret-") {
		t.Errorf("plugin_info %+v", d.PluginInfo)
	}
	inits := e.plugin.Calls(initMethod)
	if len(inits) != 1 || !reflect.DeepEqual(inits[0].Request, M{"options": M{"region": "us-east-1"}, "domain_id": "domain-a"}) {
		t.Errorf("init calls %+v", inits)
	}
	verifies := e.plugin.Calls(verifyMethod)
	if len(verifies) != 1 || !reflect.DeepEqual(verifies[0].Request["secret_data"], M{"aws_secret_access_key": "hunter2-secret"}) {
		t.Errorf("verify calls %+v", verifies)
	}
	// Secret data is sealed: never in an answer, never in clear in the store.
	for _, body := range [][]byte{
		e.adminA.Call(dsBase+"get", M{"data_source_id": d.DataSourceID}).OK(nil).Body,
		e.adminA.Call(dsBase+"list", M{}).OK(nil).Body,
	} {
		if strings.Contains(string(body), "hunter2") || strings.Contains(string(body), "sealed") {
			t.Errorf("secret data in an answer: %s", body)
		}
	}
	raw := e.raw(t, dataSources, d.DataSourceID)
	if raw["sealed"] == nil || strings.Contains(toString(t, raw), "hunter2") {
		t.Errorf("secret data not sealed: %s", toString(t, raw))
	}
	// MANAGED rules from the metadata.
	if n := e.count(t, rules, bson.E{Key: "data_source_id", Value: d.DataSourceID}, bson.E{Key: "rule_type", Value: "MANAGED"}); n != 2 {
		t.Errorf("%d managed rules", n)
	}
	// A workspace owner registers in its workspace; a version is kept.
	b := workspaceSource("mine", "")
	b["plugin_info"] = M{"plugin_id": awsCE, "version": "2.0.0", "upgrade_mode": "MANUAL"}
	b["schedule"] = M{"state": "ENABLED", "hours": []int{3, 15}}
	w := e.register(t, e.ownerA1, b)
	if w.WorkspaceID != "workspace-1" || w.ResourceGroup != "WORKSPACE" || w.PluginInfo.Version != "2.0.0" || w.PluginInfo.SecretID != "" ||
		w.Schedule.State != "ENABLED" || !reflect.DeepEqual(w.Schedule.Hours, []int{3, 15}) {
		t.Errorf("workspace data source %+v", w)
	}
	if e.raw(t, dataSources, w.DataSourceID)["sealed"] != nil {
		t.Error("sealed without secret data")
	}
}

func TestDataSourceLifecycle(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.register(t, e.adminA, domainSource("aws"))
	var got DataSource
	e.adminA.Call(dsBase+"update", M{"data_source_id": d.DataSourceID, "name": "renamed", "tags": M{"a": "b"},
		"schedule": M{"state": "ENABLED", "hours": []int{1}}}).OK(&got)
	if got.Name != "renamed" || got.Tags["a"] != "b" || got.Schedule.State != "ENABLED" || got.PluginInfo.Version != "2.0.1" {
		t.Fatalf("update %+v", got)
	}
	e.adminA.Call(dsBase+"disable", M{"data_source_id": d.DataSourceID}).OK(&got)
	if got.State != "DISABLED" {
		t.Fatalf("disable %+v", got)
	}
	e.adminA.Call(dsBase+"sync", M{"data_source_id": d.DataSourceID}).Fails(http.StatusConflict, errs.DataSourceState)
	e.adminA.Call(dsBase+"enable", M{"data_source_id": d.DataSourceID}).OK(&got)
	if got.State != "ENABLED" {
		t.Fatalf("enable %+v", got)
	}
	// update_plugin: a new version, options replaced, init again; the
	// MANAGED rules follow the new metadata.
	e.plugin.Script(initMethod, fakeplugin.Reply{Result: M{"metadata": M{"currency": "KRW", "data_source_rules": []any{
		M{"name": "only one", "conditions_policy": "ALWAYS", "actions": M{"change_project": "project-x"}}}}}})
	e.adminA.Call(dsBase+"update-plugin", M{"data_source_id": d.DataSourceID, "version": "2.0.0", "options": M{"region": "eu"}}).OK(&got)
	if got.PluginInfo.Version != "2.0.0" || got.PluginInfo.Options["region"] != "eu" || got.PluginInfo.Metadata["currency"] != "KRW" {
		t.Fatalf("update_plugin %+v", got.PluginInfo)
	}
	var l ruleList
	e.adminA.Call(ruleBase+"list", M{"data_source_id": d.DataSourceID, "rule_type": "MANAGED"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].Name != "only one" || l.Results[0].Order != 1 {
		t.Fatalf("managed rules after update_plugin %+v", l)
	}
	// verify_plugin sends the unsealed secret data and the options.
	e.adminA.Call(dsBase+"verify-plugin", M{"data_source_id": d.DataSourceID}).OK(nil)
	v := e.plugin.Calls(verifyMethod)
	last := v[len(v)-1].Request
	if !reflect.DeepEqual(last["secret_data"], M{"aws_secret_access_key": "hunter2-secret"}) || last["domain_id"] != "domain-a" ||
		!reflect.DeepEqual(last["options"], M{"region": "eu", "secret_type": "MANUAL"}) {
		t.Fatalf("verify request %+v", last)
	}
	e.plugin.Script(verifyMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_INVALID_CREDENTIALS", "bad key")})
	e.adminA.Call(dsBase+"verify-plugin", M{"data_source_id": d.DataSourceID}).Fails(http.StatusBadRequest, errs.PluginFailed)
	// list and stat
	var dl struct {
		Results    []DataSource `json:"results"`
		TotalCount int          `json:"total_count"`
	}
	e.memberA1.Call(dsBase+"list", M{"query": M{"filter": []M{{"k": "state", "v": "ENABLED", "o": "eq"}}}}).OK(&dl)
	if dl.TotalCount != 1 || dl.Results[0].DataSourceID != d.DataSourceID {
		t.Fatalf("list %+v", dl)
	}
	e.adminA.Call(dsBase+"stat", M{"query": M{"aggregate": []M{{"count": M{"name": "n"}}}}}).OK(nil)
	// deregister takes the rules with it.
	e.createRule(t, e.adminA, customRule(d.DataSourceID, "c"))
	e.adminA.Call(dsBase+"deregister", M{"data_source_id": d.DataSourceID}).OK(nil)
	e.adminA.Call(dsBase+"get", M{"data_source_id": d.DataSourceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := e.count(t, rules); n != 0 {
		t.Fatalf("%d rules left", n)
	}
}

func TestDataSourceRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.register(t, e.adminA, domainSource("aws"))
	wds := e.register(t, e.ownerA1, workspaceSource("w", ""))
	before, beforeRules := e.count(t, dataSources), e.count(t, rules)
	with := func(mod func(M)) M { b := domainSource("x"); mod(b); return b }
	plug := func(mod func(M)) M {
		return with(func(b M) { p := b["plugin_info"].(M); mod(p) })
	}
	cases := []struct {
		name   string
		c      *testkit.Client
		path   string
		body   any
		status int
		code   string
	}{
		{"no name", e.adminA, "register", with(func(b M) { delete(b, "name") }), 400, errs.RequiredParameter},
		{"long name", e.adminA, "register", with(func(b M) { b["name"] = strings.Repeat("x", 256) }), 400, errs.InvalidParameter},
		{"no plugin_info", e.adminA, "register", with(func(b M) { delete(b, "plugin_info") }), 400, errs.RequiredParameter},
		{"no plugin id", e.adminA, "register", plug(func(p M) { delete(p, "plugin_id") }), 400, errs.RequiredParameter},
		{"manual without version", e.adminA, "register", plug(func(p M) { p["upgrade_mode"] = "MANUAL" }), 400, errs.RequiredParameter},
		{"bad upgrade mode", e.adminA, "register", plug(func(p M) { p["upgrade_mode"] = "NEVER" }), 400, errs.InvalidParameter},
		{"unknown version", e.adminA, "register", plug(func(p M) { p["version"] = "9.9.9" }), 400, errs.InvalidParameter},
		{"unknown plugin", e.adminA, "register", plug(func(p M) { p["plugin_id"] = "plugin-nope" }), 400, "ERROR_NO_PLUGIN"},
		{"plugin of another kind", e.adminA, "register", plug(func(p M) { p["plugin_id"] = "plugin-email-noti-protocol" }), 404, errs.NotFoundCode},
		{"unreachable plugin", e.adminA, "register", plug(func(p M) { p["plugin_id"] = "plugin-unreachable" }), 503, errs.GRPCConnection},
		{"secret data a string", e.adminA, "register", plug(func(p M) { p["secret_data"] = "x" }), 400, errs.InvalidParameterType},
		{"no resource group", e.adminA, "register", with(func(b M) { delete(b, "resource_group") }), 400, errs.RequiredParameter},
		{"project resource group", e.adminA, "register", with(func(b M) { b["resource_group"] = "PROJECT" }), 400, errs.InvalidParameter},
		{"workspace without workspace_id", e.adminA, "register", with(func(b M) { b["resource_group"] = "WORKSPACE" }), 400, errs.RequiredParameter},
		{"service account secrets", e.adminA, "register", with(func(b M) { b["secret_type"] = "USE_SERVICE_ACCOUNT_SECRET" }), 400, errs.InvalidParameter},
		{"bad hours", e.adminA, "register", with(func(b M) { b["schedule"] = M{"hours": []int{24}} }), 400, errs.InvalidParameter},
		{"twice the same hour", e.adminA, "register", with(func(b M) { b["schedule"] = M{"hours": []int{2, 2}} }), 400, errs.InvalidParameter},
		{"unknown field", e.adminA, "register", with(func(b M) { b["bogus"] = true }), 400, errs.InvalidParameter},
		{"owner registers for the domain", e.ownerA1, "register", domainSource("x"), 403, errs.PermissionDenied},
		{"owner names another workspace", e.ownerA1, "register", workspaceSource("x", "workspace-2"), 403, errs.PermissionDenied},
		{"member registers", e.memberA1, "register", workspaceSource("x", ""), 403, errs.PermissionDenied},
		{"anonymous", e.anon, "register", domainSource("x"), 401, errs.AuthenticateFailure},
		{"update another domain's", e.adminB, "update", M{"data_source_id": d.DataSourceID, "name": "x"}, 404, errs.NotFoundCode},
		{"update domain source by owner", e.ownerA1, "update", M{"data_source_id": d.DataSourceID, "name": "x"}, 403, errs.PermissionDenied},
		{"update other workspace's", e.ownerA2, "update", M{"data_source_id": wds.DataSourceID, "name": "x"}, 404, errs.NotFoundCode},
		{"update bad hours", e.adminA, "update", M{"data_source_id": d.DataSourceID, "schedule": M{"hours": []int{-1}}}, 400, errs.InvalidParameter},
		{"update missing id", e.adminA, "update", M{"name": "x"}, 400, errs.RequiredParameter},
		{"update-plugin unknown version", e.adminA, "update-plugin", M{"data_source_id": d.DataSourceID, "version": "0.1"}, 400, errs.InvalidParameter},
		{"update-plugin another domain's", e.adminB, "update-plugin", M{"data_source_id": d.DataSourceID}, 404, errs.NotFoundCode},
		{"verify another domain's", e.adminB, "verify-plugin", M{"data_source_id": d.DataSourceID}, 404, errs.NotFoundCode},
		{"enable by member", e.memberA1, "enable", M{"data_source_id": wds.DataSourceID}, 403, errs.PermissionDenied},
		{"disable another domain's", e.adminB, "disable", M{"data_source_id": d.DataSourceID}, 404, errs.NotFoundCode},
		{"deregister domain source by owner", e.ownerA1, "deregister", M{"data_source_id": d.DataSourceID}, 403, errs.PermissionDenied},
		{"deregister another domain's", e.adminB, "deregister", M{"data_source_id": d.DataSourceID}, 404, errs.NotFoundCode},
		{"get unknown", e.adminA, "get", M{"data_source_id": "ds-000000000000"}, 404, errs.NotFoundCode},
		{"get other workspace's", e.ownerA2, "get", M{"data_source_id": wds.DataSourceID}, 404, errs.NotFoundCode},
		{"list bad state", e.adminA, "list", M{"state": "ON"}, 400, errs.InvalidParameter},
		{"stat without query", e.adminA, "stat", M{}, 400, errs.RequiredParameter},
		{"sync bad start", e.adminA, "sync", M{"data_source_id": d.DataSourceID, "start": "2024-13"}, 400, errs.InvalidParameter},
		{"sync a day", e.adminA, "sync", M{"data_source_id": d.DataSourceID, "start": "2024-01-01"}, 400, errs.InvalidParameter},
		{"sync another domain's", e.adminB, "sync", M{"data_source_id": d.DataSourceID}, 404, errs.NotFoundCode},
		{"sync domain source by owner", e.ownerA1, "sync", M{"data_source_id": d.DataSourceID}, 403, errs.PermissionDenied},
		{"sync without a bus", e.adminA, "sync", M{"data_source_id": d.DataSourceID}, 503, errs.Unavailable},
	}
	for _, tc := range cases {
		tc.c.Call(dsBase+tc.path, tc.body).Fails(tc.status, tc.code)
		if n := e.count(t, dataSources); n != before {
			t.Fatalf("%s: %d data sources, want %d", tc.name, n, before)
		}
		if n := e.count(t, rules); n != beforeRules {
			t.Fatalf("%s: %d rules, want %d", tc.name, n, beforeRules)
		}
		if n := e.count(t, jobs); n != 0 {
			t.Fatalf("%s: %d jobs", tc.name, n)
		}
	}
	var got DataSource
	e.adminA.Call(dsBase+"get", M{"data_source_id": d.DataSourceID}).OK(&got)
	if got.Name != "aws" || got.State != "ENABLED" || got.PluginInfo.Version != "2.0.1" {
		t.Fatalf("refused calls changed it: %+v", got)
	}
	// The plugin refusing init stores nothing either.
	e.plugin.Script(initMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_INVALID_OPTIONS", "region")})
	e.adminA.Call(dsBase+"register", domainSource("x")).Fails(http.StatusBadRequest, errs.PluginFailed)
	e.plugin.Script(initMethod, fakeplugin.Reply{Result: M{"metadata": initMetadata}})
	e.plugin.Script(verifyMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.PermissionDenied, "ERROR_AUTH", "denied")})
	e.adminA.Call(dsBase+"register", domainSource("x")).Fails(http.StatusBadRequest, errs.PluginFailed)
	if e.count(t, dataSources) != before || e.count(t, rules) != beforeRules {
		t.Fatal("a refused register stored something")
	}
}

func TestDataSourceIsolation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.register(t, e.adminA, domainSource("domain-wide"))
	e.register(t, e.ownerA1, workspaceSource("w1", ""))
	e.register(t, e.adminA, workspaceSource("w2", "workspace-2"))
	e.register(t, e.adminB, domainSource("b"))
	names := func(c *testkit.Client) string {
		var l struct {
			Results []DataSource `json:"results"`
		}
		c.Call(dsBase+"list", M{"query": M{"sort": M{"key": "name"}}}).OK(&l)
		var out []string
		for _, d := range l.Results {
			out = append(out, d.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		c    *testkit.Client
		want string
	}{{e.adminA, "domain-wide,w1,w2"}, {e.ownerA1, "domain-wide,w1"}, {e.memberA1, "domain-wide,w1"}, {e.ownerA2, "domain-wide,w2"}, {e.adminB, "b"}} {
		if got := names(tc.c); got != tc.want {
			t.Errorf("sees %q, want %q", got, tc.want)
		}
	}
}
