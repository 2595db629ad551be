package costanalysis_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// storedDeny is a data source's permissions.deny as stored.
func (e *env) storedDeny(t *testing.T, id string) any {
	t.Helper()
	perms, _ := e.raw(t, core.DataSourcesCollection, id)["permissions"].(bson.M)
	if deny, ok := perms["deny"].(bson.A); ok {
		return []any(deny)
	}
	return perms["deny"]
}

// TestUpdatePermissions: update-permissions replaces a data source's
// permissions as the console sends them, data-source/list answers them
// (also with only naming them), and bad or unauthorised calls change
// nothing.
func TestUpdatePermissions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ds := e.register(t, e.adminA, domainSource("aws"))
	got := e.adminA.Call(dsBase+"get", M{"data_source_id": ds.DataSourceID}).OK(nil).JSON()
	if !reflect.DeepEqual(got["permissions"], map[string]any{"deny": []any{}}) {
		t.Fatalf("a new data source's permissions: %v", got["permissions"])
	}
	res := e.adminA.Call("/cost-analysis/data-source/update-permissions", M{"data_source_id": ds.DataSourceID,
		"permissions": M{"deny": []string{"data.Secret", "tags.Owner", "data.Secret"}}}).OK(nil).JSON()
	want := map[string]any{"deny": []any{"data.Secret", "tags.Owner"}}
	if !reflect.DeepEqual(res["permissions"], want) || res["data_source_id"] != ds.DataSourceID {
		t.Fatalf("update-permissions answered %v", res)
	}
	// The console's reference list: only naming permissions.
	l := e.memberA1.Call("/cost-analysis/data-source/list", M{"query": M{"only": []string{"data_source_id", "name", "plugin_info",
		"cost_additional_info_keys", "cost_tag_keys", "workspace_id", "cost_data_keys", "permissions"}, "sort": []M{{"key": "workspace_id"}}}}).OK(nil).JSON()
	rows := l["results"].([]any)
	if len(rows) != 1 || !reflect.DeepEqual(rows[0].(map[string]any)["permissions"], want) {
		t.Fatalf("list only permissions: %v", l)
	}
	l = e.adminA.Call(dsBase+"list", M{"query": M{"filter": []M{{"k": "permissions.deny", "v": "tags.Owner", "o": "eq"}}}}).OK(nil).JSON()
	if l["total_count"] != float64(1) {
		t.Fatalf("filter on permissions.deny: %v", l)
	}

	wds := e.register(t, e.ownerA1, workspaceSource("mine", ""))
	up := func(id string, perms any) M { return M{"data_source_id": id, "permissions": perms} }
	for _, c := range []struct {
		name   string
		as     string
		body   M
		status int
		code   string
	}{
		{"a cost field that is not a key family", "admin", up(ds.DataSourceID, M{"deny": []string{"cost"}}), 400, errs.InvalidParameter},
		{"an empty key", "admin", up(ds.DataSourceID, M{"deny": []string{"data."}}), 400, errs.InvalidParameter},
		{"the family names of the keys lists", "admin", up(ds.DataSourceID, M{"deny": []string{"cost_data_keys"}}), 400, errs.InvalidParameter},
		{"deny not a list", "admin", up(ds.DataSourceID, M{"deny": "data.Secret"}), 400, errs.InvalidParameterType},
		{"deny of numbers", "admin", up(ds.DataSourceID, M{"deny": []int{1}}), 400, errs.InvalidParameterType},
		{"an unknown permission", "admin", up(ds.DataSourceID, M{"allow": []string{"data.x"}}), 400, errs.InvalidParameter},
		{"no permissions", "admin", M{"data_source_id": ds.DataSourceID}, 400, errs.RequiredParameter},
		{"no data source", "admin", M{"permissions": M{"deny": []string{}}}, 400, errs.RequiredParameter},
		{"unknown data source", "admin", up("ds-000000000000", M{"deny": []string{}}), 404, errs.NotFoundCode},
		{"another domain", "adminB", up(ds.DataSourceID, M{"deny": []string{}}), 404, errs.NotFoundCode},
		{"a workspace owner on the domain's", "ownerA1", up(ds.DataSourceID, M{"deny": []string{}}), 403, errs.PermissionDenied},
		{"another workspace's owner", "ownerA2", up(wds.DataSourceID, M{"deny": []string{"tags"}}), 404, errs.NotFoundCode},
		{"a member", "memberA1", up(ds.DataSourceID, M{"deny": []string{}}), 403, errs.PermissionDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			as := map[string]*testkit.Client{"admin": e.adminA, "adminB": e.adminB, "ownerA1": e.ownerA1, "ownerA2": e.ownerA2, "memberA1": e.memberA1}[c.as]
			as.Call(dsBase+"update-permissions", c.body).Fails(c.status, c.code)
			if d := e.storedDeny(t, ds.DataSourceID); !reflect.DeepEqual(d, []any{"data.Secret", "tags.Owner"}) {
				t.Fatalf("stored deny changed: %v", d)
			}
			if d := e.storedDeny(t, wds.DataSourceID); !reflect.DeepEqual(d, []any{}) {
				t.Fatalf("the workspace data source's deny changed: %v", d)
			}
		})
	}
	// Its own workspace's owner may; an empty list clears.
	e.ownerA1.Call(dsBase+"update-permissions", up(wds.DataSourceID, M{"deny": []string{"additional_info"}})).OK(nil)
	e.adminA.Call(dsBase+"update-permissions", up(ds.DataSourceID, M{"deny": []string{}})).OK(nil)
	if d := e.storedDeny(t, ds.DataSourceID); !reflect.DeepEqual(d, []any{}) {
		t.Fatalf("cleared deny: %v", d)
	}
}

// TestDeniedCostKeys: a workspace caller reads no key its data source's
// permissions deny: list, get and stat rows leave them out, and any query
// naming one (filter, sort, only, distinct, group, fields, push) is 403,
// so no answer depends on a hidden value. A domain admin reads all.
func TestDeniedCostKeys(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ds := e.register(t, e.adminA, domainSource("aws"))
	other := e.register(t, e.adminA, domainSource("gcp"))
	var docs []any
	add := func(id, dsID, date, owner string, cost, secret float64) {
		docs = append(docs, M{"_id": id, "cost_id": id, "cost": cost, "provider": "aws", "billed_date": date, "billed_month": date[:7],
			"billed_year": date[:4], "domain_id": "domain-a", "workspace_id": "workspace-1", "data_source_id": dsID,
			"tags": M{"Owner": owner, "env": "prod"}, "additional_info": M{"Account": "111"},
			"data": M{"Secret": secret, "Public": 1.0, "nested": M{"deep": "x", "kept": "y"}}})
	}
	add("cost-1", ds.DataSourceID, "2024-01-05", "alice", 10, 7771)
	add("cost-2", ds.DataSourceID, "2024-02-05", "bob", 20, 8882)
	add("cost-3", ds.DataSourceID, "2024-02-06", "alice", 5, 9993)
	add("cost-9", other.DataSourceID, "2024-02-06", "carol", 7, 909)
	if _, err := e.db.Collection(costs).InsertMany(t.Context(), docs); err != nil {
		t.Fatal(err)
	}
	e.adminA.Call(dsBase+"update-permissions", M{"data_source_id": ds.DataSourceID,
		"permissions": M{"deny": []string{"data.Secret", "tags.Owner", "data.nested.deep"}}}).OK(nil)
	dsID := ds.DataSourceID
	leaks := func(t *testing.T, what string, body []byte) {
		t.Helper()
		for _, hidden := range []string{"Secret", "Owner", "alice", "bob", "7771", "8882", "9993", "deep"} {
			if strings.Contains(string(body), hidden) {
				t.Errorf("%s shows %q: %s", what, hidden, body)
			}
		}
	}

	for _, who := range []struct {
		name string
		c    *testkit.Client
	}{{"owner", e.ownerA1}, {"member", e.memberA1}} {
		t.Run(who.name, func(t *testing.T) {
			c := who.c
			r := c.Call(costBase+"list", M{"data_source_id": dsID})
			var l costList
			_ = json.Unmarshal(r.OK(nil).Body, &l)
			if l.TotalCount != 3 {
				t.Fatalf("list: %+v", l)
			}
			leaks(t, "list", r.Body)
			if !strings.Contains(string(r.Body), `"Public":1`) || !strings.Contains(string(r.Body), `"env":"prod"`) || !strings.Contains(string(r.Body), `"kept":"y"`) {
				t.Errorf("list hides more than denied: %s", r.Body)
			}
			r = c.Call(costBase+"get", M{"cost_id": "cost-1"})
			leaks(t, "get", r.OK(nil).Body)
			// The other data source denies nothing.
			if r := c.Call(costBase+"get", M{"cost_id": "cost-9"}); !strings.Contains(string(r.OK(nil).Body), "carol") {
				t.Errorf("get of another data source: %s", r.Body)
			}
			// A stat that builds no rows answers rows without the fields
			// holding a denied key.
			r = c.Call(costBase+"stat", M{"data_source_id": dsID, "query": M{"aggregate": []M{{"limit": 10}}}})
			leaks(t, "stat rows", r.OK(nil).Body)
			// Grouping without a denied key works.
			st := c.Call(costBase+"stat", M{"data_source_id": dsID, "query": M{"distinct": "tags.env"}}).OK(nil).JSON()
			if !reflect.DeepEqual(st["results"], []any{"prod"}) {
				t.Errorf("distinct tags.env: %v", st)
			}
			an := M{"granularity": "MONTHLY", "start": "2024-01", "end": "2024-02", "fields": M{"total": M{"key": "cost", "operator": "sum"}}}
			if res := c.Call(costBase+"analyze", M{"data_source_id": dsID, "query": an}).OK(nil).JSON(); len(res["results"].([]any)) != 2 {
				t.Errorf("analyze: %v", res)
			}

			refused := []struct {
				path string
				body M
			}{
				{"list", M{"data_source_id": dsID, "query": M{"filter": []M{{"k": "tags.Owner", "v": "alice", "o": "eq"}}}}},
				{"list", M{"data_source_id": dsID, "query": M{"filter_or": []M{{"k": "data.Secret", "v": 100, "o": "gt"}}}}},
				{"list", M{"data_source_id": dsID, "query": M{"sort": []M{{"key": "data.Secret"}}}}},
				{"list", M{"data_source_id": dsID, "query": M{"only": []string{"data"}}}},
				{"list", M{"query": M{"filter": []M{{"k": "data_source_id", "v": dsID, "o": "eq"}, {"k": "data.nested.deep", "v": "x", "o": "eq"}}}}},
				{"stat", M{"data_source_id": dsID, "query": M{"distinct": "tags.Owner"}}},
				{"stat", M{"data_source_id": dsID, "query": M{"filter": []M{{"k": "data.Secret", "v": 7771, "o": "eq"}}, "distinct": "cost_id"}}},
				{"stat", M{"data_source_id": dsID, "query": M{"aggregate": []M{{"group": M{"keys": []M{{"key": "tags", "name": "t"}},
					"fields": []M{{"operator": "count", "name": "n"}}}}}}}},
				{"stat", M{"data_source_id": dsID, "query": M{"aggregate": []M{{"group": M{"fields": []M{{"key": "data.Secret", "operator": "sum", "name": "s"}}}}}}}},
				{"analyze", M{"data_source_id": dsID, "query": M{"granularity": "MONTHLY", "group_by": []string{"tags.Owner"}, "fields": M{"n": M{"operator": "count"}}}}},
				{"analyze", M{"data_source_id": dsID, "query": M{"granularity": "MONTHLY", "fields": M{"s": M{"key": "data.Secret", "operator": "sum"}}}}},
				{"analyze", M{"data_source_id": dsID, "query": M{"granularity": "MONTHLY", "filter": []M{{"k": "tags.Owner", "v": "bob", "o": "eq"}},
					"fields": M{"n": M{"operator": "count"}}}}},
				{"analyze", M{"data_source_id": dsID, "query": M{"group_by": []string{"provider"},
					"fields": M{"rows": M{"operator": "push", "fields": M{"who": "tags.Owner"}}}}}},
			}
			for _, q := range refused {
				c.Call(costBase+q.path, q.body).Fails(http.StatusForbidden, errs.PermissionDenied)
			}
		})
	}

	// The domain admin reads every key and groups by it.
	r := e.adminA.Call(costBase+"list", M{"data_source_id": dsID})
	if b := string(r.OK(nil).Body); !strings.Contains(b, `"Secret":7771`) || !strings.Contains(b, `"Owner":"alice"`) || !strings.Contains(b, `"deep":"x"`) {
		t.Errorf("admin's list: %s", b)
	}
	res := e.adminA.Call(costBase+"analyze", M{"data_source_id": dsID, "query": M{"granularity": "MONTHLY",
		"group_by": []string{"tags.Owner"}, "fields": M{"s": M{"key": "data.Secret", "operator": "sum"}}, "sort": []M{{"key": "Owner"}, {"key": "date"}}}}).OK(nil).JSON()
	if len(res["results"].([]any)) != 3 {
		t.Errorf("admin's analyze by tags.Owner: %v", res)
	}
}

// TestCostExplorerAnalyze: cost/analyze as the upstream console's cost
// explorer sends it (data_source_id at the top level, field_group date,
// the sort on _total_value_sum, a page) answers what it reads: each row's
// value_sum as {date, value} cells, _total_value_sum, and more.
func TestCostExplorerAnalyze(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.seedCosts(t)
	body := M{"data_source_id": "ds-1", "query": M{
		"granularity": "MONTHLY", "group_by": []string{"provider"}, "start": "2024-01", "end": "2024-02",
		"fields":      M{"value_sum": M{"key": "cost", "operator": "sum"}},
		"sort":        []M{{"key": "_total_value_sum", "desc": true}},
		"field_group": []string{"date"},
		"page":        M{"start": 1, "limit": 1},
	}}
	res := e.adminA.Call("/cost-analysis/cost/analyze", body).OK(nil).JSON()
	want := []any{map[string]any{"provider": "aws", "_total_value_sum": float64(31), "value_sum": []any{
		map[string]any{"date": "2024-01", "value": float64(10)}, map[string]any{"date": "2024-02", "value": float64(21)}}}}
	if !reflect.DeepEqual(res["results"], want) || res["more"] != true {
		t.Fatalf("cost explorer analyze: %v", res)
	}
	body["query"].(M)["page"] = M{"start": 2, "limit": 1}
	res = e.adminA.Call("/cost-analysis/cost/analyze", body).OK(nil).JSON()
	want = []any{map[string]any{"provider": "gcp", "_total_value_sum": float64(5), "value_sum": []any{map[string]any{"date": "2024-02", "value": float64(5)}}}}
	if !reflect.DeepEqual(res["results"], want) || res["more"] != false {
		t.Fatalf("page 2: %v", res)
	}
	// data_source_id as a filter (upstream's stat reads it there too).
	res = e.adminA.Call(costBase+"analyze", M{"query": M{"granularity": "YEARLY", "fields": M{"n": M{"operator": "count"}},
		"filter": []M{{"k": "data_source_id", "v": "ds-1", "o": "eq"}}}}).OK(nil).JSON()
	if !reflect.DeepEqual(res["results"], []any{map[string]any{"date": "2024", "n": float64(4)}}) {
		t.Fatalf("data_source_id in the filter: %v", res)
	}
	// Another data source's costs are not this one's; one the caller does
	// not see reads as empty.
	if res := e.adminA.Call(costBase+"analyze", M{"data_source_id": "ds-2", "query": M{"fields": M{"n": M{"operator": "count"}}}}).OK(nil).JSON(); len(res["results"].([]any)) != 0 {
		t.Fatalf("ds-2: %v", res)
	}
	if l := e.costs(t, e.ownerA2, "ds-other", M{}); l.TotalCount != 0 {
		t.Fatalf("ds-other: %+v", l)
	}
}
