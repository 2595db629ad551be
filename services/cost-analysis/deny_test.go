package costanalysis_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// readPaths are the operations of the service a workspace member may call
// that read (get, list, stat, analyze), from the served /openapi.json:
// the walk below must cover each, so a read added later is walked too.
func (e *env) readPaths(t *testing.T) []string {
	t.Helper()
	w := httptest.NewRecorder()
	e.handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	var doc struct {
		Paths map[string]map[string]struct {
			Roles   []string `json:"x-roles"`
			Summary string   `json:"summary"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for path, ops := range doc.Paths {
		verb := path[strings.LastIndex(path, "/")+1:]
		if !slices.Contains([]string{"get", "list", "stat", "analyze"}, verb) {
			continue
		}
		for _, op := range ops {
			if slices.Contains(op.Roles, "WORKSPACE_MEMBER") && !strings.HasPrefix(op.Summary, "Not implemented") {
				out = append(out, path)
			}
		}
	}
	slices.Sort(out)
	return out
}

// opKey is "resource/verb" of an operation's path.
func opKey(path string) string {
	parts := strings.Split(path, "/")
	return strings.Join(parts[len(parts)-2:], "/")
}

// TestDeniedKeyEverywhere: once update-permissions denies a key
// (additional_info.cost_center, tags.Owner), no read open to workspace
// roles shows its value: not the cost rows, not a rule's conditions or
// add_additional_info (CUSTOM and MANAGED), not the plugin's metadata
// that made the MANAGED rules; a query on those paths is 403, and a stat
// leaves them out. Every read of the service is walked as the workspace's
// member and owner; another workspace, another domain and no token see
// nothing; the domain admin sees all.
func TestDeniedKeyEverywhere(t *testing.T) {
	t.Parallel()
	const secret, owner = "CC-SECRET-42", "alice-secret"
	e := setup(t)
	e.plugin.Script(initMethod, fakeplugin.Reply{Result: M{"metadata": M{"currency": "USD", "data_source_rules": []any{
		M{"name": "managed centre", "conditions_policy": "ALL", "conditions": []any{M{"key": "additional_info.cost_center", "value": secret, "operator": "eq"}},
			"actions": M{"add_additional_info": M{"cost_center": secret, "managed": "yes"}}, "options": M{"stop_processing": false}},
	}}}})
	ds := e.register(t, e.adminA, domainSource("aws"))
	custom := customRule(ds.DataSourceID, "centre")
	custom["conditions"] = []M{{"key": "provider", "value": "aws", "operator": "eq"}, {"key": "additional_info.cost_center", "value": secret, "operator": "eq"},
		{"key": "tags.Owner", "value": owner, "operator": "eq"}}
	custom["actions"] = M{"add_additional_info": M{"cost_center": secret, "team": "visible-team"}}
	rule := e.createRule(t, e.adminA, custom)
	if _, err := e.db.Collection(costs).InsertOne(t.Context(), M{"_id": "cost-1", "cost_id": "cost-1", "cost": 10.0, "provider": "aws",
		"billed_date": "2024-01-05", "billed_month": "2024-01", "billed_year": "2024", "domain_id": "domain-a", "workspace_id": "workspace-1",
		"data_source_id": ds.DataSourceID, "tags": M{"Owner": owner, "env": "prod"}, "additional_info": M{"cost_center": secret, "Account": "111"}, "data": M{}}); err != nil {
		t.Fatal(err)
	}
	var managed ruleList
	e.adminA.Call(ruleBase+"list", M{"rule_type": "MANAGED"}).OK(&managed)
	if len(managed.Results) != 1 {
		t.Fatalf("managed rules %+v", managed)
	}
	// Before the deny, a member reads the value (the walk below would
	// prove nothing otherwise).
	if b := e.memberA1.Call(ruleBase+"get", M{"data_source_rule_id": rule.DataSourceRuleID}).OK(nil).Body; !strings.Contains(string(b), secret) {
		t.Fatalf("before the deny the member's get shows no value: %s", b)
	}
	e.adminA.Call(dsBase+"update-permissions", M{"data_source_id": ds.DataSourceID,
		"permissions": M{"deny": []string{"additional_info.cost_center", "tags.Owner"}}}).OK(nil)

	an := M{"granularity": "MONTHLY", "start": "2024-01", "end": "2024-02", "fields": M{"total": M{"key": "cost", "operator": "sum"}}}
	agg := M{"aggregate": []M{{"limit": 10}}}
	bodies := map[string]M{
		"cost/get": {"cost_id": "cost-1"}, "cost/list": {"data_source_id": ds.DataSourceID},
		"cost/stat": {"data_source_id": ds.DataSourceID, "query": agg}, "cost/analyze": {"data_source_id": ds.DataSourceID, "query": an},
		"data-source/get": {"data_source_id": ds.DataSourceID}, "data-source/list": {}, "data-source/stat": {"query": agg},
		"data-source-rule/get": {"data_source_rule_id": rule.DataSourceRuleID}, "data-source-rule/list": {}, "data-source-rule/stat": {"query": agg},
		// Jobs and tasks hold no cost key's value (a window filters on
		// WindowFields only): walked for their answers all the same.
		"job/get": {"job_id": "job-000000000000"}, "job/list": {}, "job/stat": {"query": agg},
		"job-task/get": {"job_task_id": "job-task-000000000000"}, "job-task/list": {}, "job-task/stat": {"query": agg},
		"exchange-rate/get": {"currency": "KRW"}, "exchange-rate/list": {},
	}
	leaks := func(t *testing.T, what string, body []byte) {
		t.Helper()
		for _, hidden := range []string{secret, owner} {
			if strings.Contains(string(body), hidden) {
				t.Errorf("%s shows %q: %s", what, hidden, body)
			}
		}
	}
	paths := e.readPaths(t)
	if len(paths) < len(bodies) {
		t.Fatalf("reads %v", paths)
	}
	for _, who := range []struct {
		name string
		c    *testkit.Client
	}{{"member", e.memberA1}, {"owner", e.ownerA1}, {"another workspace", e.ownerA2}, {"another domain", e.adminB}} {
		t.Run(who.name, func(t *testing.T) {
			for _, path := range paths {
				body, ok := bodies[opKey(path)]
				if !ok {
					t.Fatalf("read %s is not walked", path)
				}
				r := who.c.Call(path, body)
				if r.Status >= 500 || r.Status == 400 || r.Status == 403 {
					t.Errorf("%s: %d %s", path, r.Status, r.Body)
				}
				leaks(t, path, r.Body)
			}
		})
	}
	// No token: 401 everywhere.
	for _, path := range paths {
		e.anon.Call(path, bodies[opKey(path)]).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	}

	// What is left is shown: the other condition, the other keys.
	var got Rule
	e.memberA1.Call(ruleBase+"get", M{"data_source_rule_id": rule.DataSourceRuleID}).OK(&got)
	if len(got.Conditions) != 1 || got.Conditions[0]["key"] != "provider" || got.Actions["add_additional_info"].(map[string]any)["team"] != "visible-team" {
		t.Errorf("the member's rule %+v", got)
	}
	if b := e.memberA1.Call(dsBase+"get", M{"data_source_id": ds.DataSourceID}).OK(nil).Body; !strings.Contains(string(b), `"managed":"yes"`) {
		t.Errorf("the member's data source hides more than denied: %s", b)
	}
	// A query on the paths that hold values is 403, for the member;
	// whatever the value, so no count answers for it.
	for _, q := range []struct {
		path string
		body M
	}{
		{ruleBase + "list", M{"query": M{"filter": []M{{"k": "conditions.value", "v": secret, "o": "eq"}}}}},
		{ruleBase + "list", M{"query": M{"filter": []M{{"k": "actions.add_additional_info.cost_center", "v": "x", "o": "eq"}}}}},
		{ruleBase + "list", M{"query": M{"sort": []M{{"key": "conditions"}}}}},
		{ruleBase + "stat", M{"query": M{"distinct": "conditions.value"}}},
		{ruleBase + "stat", M{"query": M{"aggregate": []M{{"group": M{"keys": []M{{"key": "actions", "name": "a"}}, "fields": []M{{"operator": "count", "name": "n"}}}}}}}},
		{dsBase + "list", M{"query": M{"filter": []M{{"k": "plugin_info.metadata.data_source_rules.conditions.value", "v": secret, "o": "eq"}}}}},
		{dsBase + "stat", M{"query": M{"distinct": "plugin_info.metadata"}}},
	} {
		e.memberA1.Call(q.path, q.body).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	// The only of the console's lists still works, its rows left out the same way.
	r := e.memberA1.Call(ruleBase+"list", M{"query": M{"only": []string{"data_source_rule_id", "conditions", "actions"}}})
	leaks(t, "list only", r.OK(nil).Body)
	r = e.memberA1.Call(dsBase+"list", M{"query": M{"only": []string{"data_source_id", "plugin_info"}}})
	leaks(t, "data source list only", r.OK(nil).Body)

	// The domain admin reads every value, and filters on it.
	for _, path := range []string{ruleBase + "get", dsBase + "get"} {
		body := bodies[opKey(path)]
		if b := e.adminA.Call(path, body).OK(nil).Body; !strings.Contains(string(b), secret) {
			t.Errorf("the admin's %s: %s", path, b)
		}
	}
	l := e.adminA.Call(ruleBase+"list", M{"query": M{"filter": []M{{"k": "conditions.value", "v": secret, "o": "eq"}}}}).OK(nil).JSON()
	if l["total_count"] != float64(2) {
		t.Errorf("the admin's filter: %v", l)
	}
}
