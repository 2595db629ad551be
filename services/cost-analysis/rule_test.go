package costanalysis_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
)

type ruleList struct {
	Results    []Rule `json:"results"`
	TotalCount int    `json:"total_count"`
}

// orders lists the data source's rules of a type by order, as names.
func (e *env) orders(t *testing.T, dsID, ruleType string) []string {
	t.Helper()
	var l ruleList
	e.adminA.Call(ruleBase+"list", M{"data_source_id": dsID, "rule_type": ruleType, "query": M{"sort": M{"key": "order"}}}).OK(&l)
	out := make([]string, len(l.Results))
	for i, r := range l.Results {
		if r.Order != i+1 {
			t.Fatalf("orders not 1..n: %+v", l.Results)
		}
		out[i] = r.Name
	}
	return out
}

func TestRuleCreateAndManaged(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ds := e.register(t, e.adminA, domainSource("aws"))
	// The plugin's metadata made two MANAGED rules, numbered 1..2.
	if got := e.orders(t, ds.DataSourceID, "MANAGED"); !slices.Equal(got, []string{"match service account", "managed label"}) {
		t.Fatalf("managed rules %v", got)
	}
	a := e.createRule(t, e.adminA, customRule(ds.DataSourceID, "a"))
	if !strings.HasPrefix(a.DataSourceRuleID, "rule-") || len(a.DataSourceRuleID) != len("rule-")+12 {
		t.Errorf("id %q", a.DataSourceRuleID)
	}
	if a.RuleType != "CUSTOM" || a.Order != 1 || !a.IsDefault || a.WorkspaceID != "*" || a.ResourceGroup != "DOMAIN" ||
		a.DomainID != "domain-a" || a.DataSourceID != ds.DataSourceID || a.Options["stop_processing"] != false {
		t.Errorf("rule %+v", a)
	}
	b := e.createRule(t, e.adminA, customRule(ds.DataSourceID, "b"))
	w := customRule(ds.DataSourceID, "w1")
	w["resource_group"], w["conditions_policy"], w["conditions"] = "WORKSPACE", "ALWAYS", []M{{"key": "provider", "value": "x", "operator": "eq"}}
	w["workspace_id"] = "workspace-1" // a DOMAIN data source's rules are the admin's alone
	c := e.createRule(t, e.adminA, w)
	if b.Order != 2 || c.Order != 3 || c.IsDefault || c.WorkspaceID != "workspace-1" || len(c.Conditions) != 0 {
		t.Errorf("orders %d %d, workspace rule %+v", b.Order, c.Order, c)
	}
	var got Rule
	e.memberA1.Call(ruleBase+"get", M{"data_source_rule_id": c.DataSourceRuleID}).OK(&got)
	if got.Name != "w1" {
		t.Errorf("get %+v", got)
	}
	// stat over the rules
	st := e.adminA.Call(ruleBase+"stat", M{"query": M{"aggregate": []M{{"group": M{"keys": []M{{"key": "rule_type", "name": "t"}},
		"fields": []M{{"operator": "count", "name": "n"}}}}, {"sort": M{"key": "t"}}}}}).OK(nil).JSON()
	if fmt.Sprint(st["results"]) != "[map[n:3 t:CUSTOM] map[n:2 t:MANAGED]]" {
		t.Errorf("stat %v", st)
	}
}

func TestRuleChangeOrderAndDelete(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ds := e.register(t, e.adminA, domainSource("aws"))
	ids := map[string]string{}
	for _, n := range []string{"a", "b", "c", "d"} {
		ids[n] = e.createRule(t, e.adminA, customRule(ds.DataSourceID, n)).DataSourceRuleID
	}
	var r Rule
	e.adminA.Call(ruleBase+"change-order", M{"data_source_rule_id": ids["d"], "order": 1}).OK(&r)
	if r.Order != 1 || r.Name != "d" {
		t.Fatalf("moved %+v", r)
	}
	if got := e.orders(t, ds.DataSourceID, "CUSTOM"); !slices.Equal(got, []string{"d", "a", "b", "c"}) {
		t.Fatalf("after d→1: %v", got)
	}
	e.adminA.Call(ruleBase+"change-order", M{"data_source_rule_id": ids["d"], "order": 3}).OK(&r)
	if got := e.orders(t, ds.DataSourceID, "CUSTOM"); !slices.Equal(got, []string{"a", "b", "d", "c"}) {
		t.Fatalf("after d→3: %v", got)
	}
	e.adminA.Call(ruleBase+"change-order", M{"data_source_rule_id": ids["d"], "order": 3}).OK(&r) // unchanged
	if r.Order != 3 {
		t.Fatalf("same order %+v", r)
	}
	e.adminA.Call(ruleBase+"delete", M{"data_source_rule_id": ids["a"]}).OK(nil)
	if got := e.orders(t, ds.DataSourceID, "CUSTOM"); !slices.Equal(got, []string{"b", "d", "c"}) {
		t.Fatalf("after delete: %v", got)
	}
	// The MANAGED rules kept their own numbering.
	if got := e.orders(t, ds.DataSourceID, "MANAGED"); len(got) != 2 {
		t.Fatalf("managed %v", got)
	}
	// update changes what it is given.
	e.adminA.Call(ruleBase+"update", M{"data_source_rule_id": ids["b"], "name": "b2", "conditions_policy": "ANY",
		"conditions": []M{{"key": "tags.env", "value": "prod", "operator": "contain"}}, "options": M{"stop_processing": true}, "tags": M{"x": "y"}}).OK(&r)
	if r.Name != "b2" || r.ConditionsPolicy != "ANY" || r.Conditions[0]["key"] != "tags.env" || r.Options["stop_processing"] != true ||
		r.Tags["x"] != "y" || r.Actions["add_additional_info"] == nil || r.Order != 1 {
		t.Fatalf("update %+v", r)
	}
}

// Concurrent change_order and create calls never leave two rules with one
// order: the orders stay a permutation of 1..n.
func TestRuleConcurrentOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ds := e.register(t, e.adminA, domainSource("aws"))
	const n = 6
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for i := range n { // concurrent creates
		wg.Go(func() {
			var r Rule
			e.adminA.CallQueued(ruleBase+"create", customRule(ds.DataSourceID, fmt.Sprintf("r%d", i))).OK(&r)
			mu.Lock()
			ids = append(ids, r.DataSourceRuleID)
			mu.Unlock()
		})
	}
	wg.Wait()
	check := func(when string) {
		t.Helper()
		cur, err := e.db.Collection(rules).Find(t.Context(), bson.D{{Key: "data_source_id", Value: ds.DataSourceID}, {Key: "rule_type", Value: "CUSTOM"}})
		if err != nil {
			t.Fatal(err)
		}
		var rs []struct {
			Order int `bson:"order"`
		}
		if err := cur.All(t.Context(), &rs); err != nil {
			t.Fatal(err)
		}
		var orders []int
		for _, r := range rs {
			orders = append(orders, r.Order)
		}
		slices.Sort(orders)
		for i, o := range orders {
			if o != i+1 {
				t.Fatalf("%s: orders %v, want 1..%d", when, orders, len(orders))
			}
		}
	}
	check("after concurrent creates")
	for round := range 3 { // concurrent moves of every rule to various places
		for i, id := range ids {
			wg.Go(func() {
				e.adminA.CallQueued(ruleBase+"change-order", M{"data_source_rule_id": id, "order": (i+round)%n + 1}).OK(nil)
			})
		}
		wg.Wait()
		check(fmt.Sprintf("after round %d of concurrent change_order", round))
	}
	// Moves and deletes at once.
	for i, id := range ids[:3] {
		wg.Go(func() { e.adminA.CallQueued(ruleBase+"delete", M{"data_source_rule_id": id}).OK(nil) })
		wg.Go(func() {
			e.adminA.CallQueued(ruleBase+"change-order", M{"data_source_rule_id": ids[3+i], "order": 1}).OK(nil)
		})
	}
	wg.Wait()
	check("after concurrent deletes and moves")
	if e.count(t, rules, bson.E{Key: "rule_type", Value: "CUSTOM"}) != n-3 {
		t.Fatal("deletes lost")
	}
}

// The list on the data source is what numbers the rules: a data source
// stored before it had lists takes them from its rules' orders, an id
// listed without its rule takes no number, and concurrent replaces of the
// MANAGED rules leave exactly one set.
func TestRuleOrderList(t *testing.T) {
	e := setup(t)
	ds := e.register(t, e.adminA, domainSource("aws"))
	ids := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		ids[n] = e.createRule(t, e.adminA, customRule(ds.DataSourceID, n)).DataSourceRuleID
	}
	sources := e.db.Collection(dataSources)
	// As stored before the lists: no list, orders c, a, b.
	if _, err := sources.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: ds.DataSourceID}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "rule_order", Value: ""}, {Key: "rule_order_version", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	for n, o := range map[string]int{"c": 1, "a": 2, "b": 3} {
		if _, err := e.db.Collection(rules).UpdateOne(t.Context(), bson.D{{Key: "_id", Value: ids[n]}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "order", Value: o}}}, {Key: "$unset", Value: bson.D{{Key: "order_version", Value: ""}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if d := e.createRule(t, e.adminA, customRule(ds.DataSourceID, "d")); d.Order != 4 {
		t.Fatalf("created after the stored orders: %+v", d)
	}
	if got := e.orders(t, ds.DataSourceID, "CUSTOM"); !slices.Equal(got, []string{"c", "a", "b", "d"}) {
		t.Fatalf("orders from the stored ones: %v", got)
	}
	// A listed id without its rule (a create whose insert failed).
	if _, err := sources.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: ds.DataSourceID}},
		bson.D{{Key: "$push", Value: bson.D{{Key: "rule_order.CUSTOM", Value: "rule-gone"}}}}); err != nil {
		t.Fatal(err)
	}
	e.adminA.Call(ruleBase+"change-order", M{"data_source_rule_id": ids["c"], "order": 5}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	var r Rule
	e.adminA.Call(ruleBase+"change-order", M{"data_source_rule_id": ids["c"], "order": 4}).OK(&r)
	if r.Order != 4 {
		t.Fatalf("moved %+v", r)
	}
	if got := e.orders(t, ds.DataSourceID, "CUSTOM"); !slices.Equal(got, []string{"a", "b", "d", "c"}) {
		t.Fatalf("after the move past a gone id: %v", got)
	}
	// Replaces of the plugin's MANAGED rules at once: one set is left.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			e.adminA.CallQueued(dsBase+"update-plugin", M{"data_source_id": ds.DataSourceID, "version": "2.0.0"}).OK(nil)
		})
	}
	wg.Wait()
	if got := e.orders(t, ds.DataSourceID, "MANAGED"); !slices.Equal(got, []string{"match service account", "managed label"}) {
		t.Fatalf("managed rules after concurrent replaces: %v", got)
	}
	if n := e.count(t, rules, bson.E{Key: "rule_type", Value: "MANAGED"}); n != 2 {
		t.Fatalf("%d MANAGED rules stored", n)
	}
}

func TestRuleRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ds := e.register(t, e.adminA, domainSource("aws"))
	wds := e.register(t, e.ownerA1, workspaceSource("ws1", ""))
	other := e.register(t, e.adminB, domainSource("b"))
	domainRule := e.createRule(t, e.adminA, customRule(ds.DataSourceID, "default"))
	var managed ruleList
	e.adminA.Call(ruleBase+"list", M{"data_source_id": ds.DataSourceID, "rule_type": "MANAGED"}).OK(&managed)
	mid := managed.Results[0].DataSourceRuleID
	before := e.count(t, rules)
	with := func(mod func(M)) M { b := customRule(ds.DataSourceID, "x"); mod(b); return b }
	cases := []struct {
		name   string
		c      *testkit.Client
		path   string
		body   any
		status int
		code   string
	}{
		// create
		{"no data source", e.adminA, "create", with(func(b M) { delete(b, "data_source_id") }), 400, errs.RequiredParameter},
		{"no policy", e.adminA, "create", with(func(b M) { delete(b, "conditions_policy") }), 400, errs.RequiredParameter},
		{"bad policy", e.adminA, "create", with(func(b M) { b["conditions_policy"] = "SOME" }), 400, errs.InvalidParameter},
		{"no actions", e.adminA, "create", with(func(b M) { delete(b, "actions") }), 400, errs.RequiredParameter},
		{"empty actions", e.adminA, "create", with(func(b M) { b["actions"] = M{} }), 400, errs.RequiredParameter},
		{"unknown action", e.adminA, "create", with(func(b M) { b["actions"] = M{"explode": true} }), 400, errs.InvalidParameter},
		{"bad match target", e.adminA, "create", with(func(b M) { b["actions"] = M{"match_project": M{"source": "a", "target": "zzz"}} }), 400, errs.InvalidParameter},
		{"match without source", e.adminA, "create", with(func(b M) { b["actions"] = M{"match_project": M{"target": "name"}} }), 400, errs.RequiredParameter},
		{"no resource group", e.adminA, "create", with(func(b M) { delete(b, "resource_group") }), 400, errs.RequiredParameter},
		{"bad resource group", e.adminA, "create", with(func(b M) { b["resource_group"] = "PROJECT" }), 400, errs.InvalidParameter},
		{"ALL without conditions", e.adminA, "create", with(func(b M) { delete(b, "conditions") }), 400, errs.RequiredParameter},
		{"bad operator", e.adminA, "create", with(func(b M) { b["conditions"] = []M{{"key": "provider", "value": "a", "operator": "gt"}} }), 400, errs.InvalidParameter},
		{"bad condition key", e.adminA, "create", with(func(b M) { b["conditions"] = []M{{"key": "password", "value": "a", "operator": "eq"}} }), 400, errs.InvalidParameter},
		{"condition without key", e.adminA, "create", with(func(b M) { b["conditions"] = []M{{"value": "a", "operator": "eq"}} }), 400, errs.RequiredParameter},
		{"name too long", e.adminA, "create", with(func(b M) { b["name"] = strings.Repeat("n", 256) }), 400, errs.InvalidParameter},
		{"unknown field", e.adminA, "create", with(func(b M) { b["order"] = 1 }), 400, errs.InvalidParameter},
		{"workspace rule without workspace", e.adminA, "create", with(func(b M) { b["resource_group"] = "WORKSPACE" }), 400, errs.RequiredParameter},
		{"domain rule on a workspace source", e.adminA, "create", M{"data_source_id": wds.DataSourceID, "conditions_policy": "ALWAYS", "resource_group": "DOMAIN",
			"actions": M{"change_project": "project-1"}}, 400, errs.InvalidParameter},
		{"other workspace's rule on a workspace source", e.adminA, "create", M{"data_source_id": wds.DataSourceID, "conditions_policy": "ALWAYS",
			"resource_group": "WORKSPACE", "workspace_id": "workspace-2", "actions": M{"change_project": "project-1"}}, 400, errs.InvalidParameter},
		{"owner creates a domain rule", e.ownerA1, "create", with(func(b M) {}), 403, errs.PermissionDenied},
		{"owner names another workspace", e.ownerA1, "create", with(func(b M) { b["resource_group"], b["workspace_id"] = "WORKSPACE", "workspace-2" }), 403, errs.PermissionDenied},
		{"member creates", e.memberA1, "create", with(func(b M) { b["resource_group"] = "WORKSPACE" }), 403, errs.PermissionDenied},
		{"other domain's data source", e.adminA, "create", customRule(other.DataSourceID, "x"), 404, errs.NotFoundCode},
		{"other workspace's data source", e.ownerA2, "create", M{"data_source_id": wds.DataSourceID, "conditions_policy": "ALWAYS",
			"resource_group": "WORKSPACE", "actions": M{"change_project": "project-1"}}, 404, errs.NotFoundCode},
		{"anonymous", e.anon, "create", with(func(b M) {}), 401, errs.AuthenticateFailure},
		// change_order
		{"order 0", e.adminA, "change-order", M{"data_source_rule_id": domainRule.DataSourceRuleID, "order": 0}, 400, errs.InvalidParameter},
		{"order negative", e.adminA, "change-order", M{"data_source_rule_id": domainRule.DataSourceRuleID, "order": -2}, 400, errs.InvalidParameter},
		{"order past the count", e.adminA, "change-order", M{"data_source_rule_id": domainRule.DataSourceRuleID, "order": 2}, 400, errs.InvalidParameter},
		{"order missing", e.adminA, "change-order", M{"data_source_rule_id": domainRule.DataSourceRuleID}, 400, errs.RequiredParameter},
		{"order a string", e.adminA, "change-order", M{"data_source_rule_id": domainRule.DataSourceRuleID, "order": "1"}, 400, errs.InvalidParameterType},
		{"managed order", e.adminA, "change-order", M{"data_source_rule_id": mid, "order": 2}, 400, errs.NotAllowedToChangeOrder},
		{"default rule order by owner", e.ownerA1, "change-order", M{"data_source_rule_id": domainRule.DataSourceRuleID, "order": 1}, 403, errs.PermissionDenied},
		{"order of another domain's", e.adminB, "change-order", M{"data_source_rule_id": domainRule.DataSourceRuleID, "order": 1}, 404, errs.NotFoundCode},
		// update
		{"update managed", e.adminA, "update", M{"data_source_rule_id": mid, "name": "x"}, 400, errs.NotAllowedToChangeManagedRule},
		{"update default by owner", e.ownerA1, "update", M{"data_source_rule_id": domainRule.DataSourceRuleID, "name": "x"}, 403, errs.PermissionDenied},
		{"update by member", e.memberA1, "update", M{"data_source_rule_id": domainRule.DataSourceRuleID, "name": "x"}, 403, errs.PermissionDenied},
		{"update bad policy", e.adminA, "update", M{"data_source_rule_id": domainRule.DataSourceRuleID, "conditions_policy": "X"}, 400, errs.InvalidParameter},
		{"update empty conditions", e.adminA, "update", M{"data_source_rule_id": domainRule.DataSourceRuleID, "conditions": []M{}}, 400, errs.RequiredParameter},
		{"update empty actions", e.adminA, "update", M{"data_source_rule_id": domainRule.DataSourceRuleID, "actions": M{}}, 400, errs.RequiredParameter},
		{"update another domain's", e.adminB, "update", M{"data_source_rule_id": domainRule.DataSourceRuleID, "name": "x"}, 404, errs.NotFoundCode},
		{"update missing id", e.adminA, "update", M{"name": "x"}, 400, errs.RequiredParameter},
		// delete
		{"delete managed", e.adminA, "delete", M{"data_source_rule_id": mid}, 400, errs.NotAllowedToChangeManagedRule},
		{"delete default by owner", e.ownerA1, "delete", M{"data_source_rule_id": domainRule.DataSourceRuleID}, 403, errs.PermissionDenied},
		{"delete another domain's", e.adminB, "delete", M{"data_source_rule_id": domainRule.DataSourceRuleID}, 404, errs.NotFoundCode},
		{"delete unknown", e.adminA, "delete", M{"data_source_rule_id": "rule-000000000000"}, 404, errs.NotFoundCode},
		// reads
		{"get another domain's", e.adminB, "get", M{"data_source_rule_id": domainRule.DataSourceRuleID}, 404, errs.NotFoundCode},
		{"get missing id", e.adminA, "get", M{}, 400, errs.RequiredParameter},
		{"list bad rule type", e.adminA, "list", M{"rule_type": "OTHER"}, 400, errs.InvalidParameter},
		{"list bad filter", e.adminA, "list", M{"query": M{"filter": []M{{"k": "name", "v": "x", "o": "near"}}}}, 400, errs.DBQuery},
		{"stat without query", e.adminA, "stat", M{}, 400, errs.RequiredParameter},
	}
	for _, tc := range cases {
		tc.c.Call(ruleBase+tc.path, tc.body).Fails(tc.status, tc.code)
		if n := e.count(t, rules); n != before {
			t.Fatalf("%s: %d rules, want %d", tc.name, n, before)
		}
	}
	var r Rule
	e.adminA.Call(ruleBase+"get", M{"data_source_rule_id": domainRule.DataSourceRuleID}).OK(&r)
	if r.Name != "default" || r.Order != 1 {
		t.Fatalf("refused calls changed the rule: %+v", r)
	}
	e.adminA.Call(ruleBase+"get", M{"data_source_rule_id": mid}).OK(&r)
	if r.Order != 1 {
		t.Fatalf("managed rule moved: %+v", r)
	}
}

func TestRuleIsolation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ds := e.register(t, e.adminA, domainSource("aws"))
	w1 := customRule(ds.DataSourceID, "w1")
	w1["resource_group"], w1["workspace_id"] = "WORKSPACE", "workspace-1" // a DOMAIN data source's rules are the admin's alone
	r1 := e.createRule(t, e.adminA, w1)
	w2 := customRule(ds.DataSourceID, "w2")
	w2["resource_group"], w2["workspace_id"] = "WORKSPACE", "workspace-2"
	r2 := e.createRule(t, e.adminA, w2)
	dflt := e.createRule(t, e.adminA, customRule(ds.DataSourceID, "domain"))
	names := func(c *testkit.Client) []string {
		var l ruleList
		c.Call(ruleBase+"list", M{"rule_type": "CUSTOM"}).OK(&l)
		var out []string
		for _, r := range l.Results {
			out = append(out, r.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := names(e.ownerA1); !slices.Equal(got, []string{"domain", "w1"}) {
		t.Errorf("owner 1 sees %v", got)
	}
	if got := names(e.ownerA2); !slices.Equal(got, []string{"domain", "w2"}) {
		t.Errorf("owner 2 sees %v", got)
	}
	if got := names(e.adminA); !slices.Equal(got, []string{"domain", "w1", "w2"}) {
		t.Errorf("admin sees %v", got)
	}
	if got := names(e.adminB); len(got) != 0 {
		t.Errorf("another domain sees %v", got)
	}
	e.ownerA2.Call(ruleBase+"get", M{"data_source_rule_id": r1.DataSourceRuleID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.ownerA2.Call(ruleBase+"update", M{"data_source_rule_id": r1.DataSourceRuleID, "name": "x"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.ownerA2.Call(ruleBase+"delete", M{"data_source_rule_id": r1.DataSourceRuleID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// An owner reads its workspace's rules of a DOMAIN data source but
	// changes none (TestDomainDataSourceRules); a domain admin does.
	e.ownerA2.Call(ruleBase+"change-order", M{"data_source_rule_id": r2.DataSourceRuleID, "order": 1}).Fails(http.StatusForbidden, errs.PermissionDenied)
	e.adminA.Call(ruleBase+"change-order", M{"data_source_rule_id": r2.DataSourceRuleID, "order": 1}).OK(nil)
	e.adminA.Call(ruleBase+"delete", M{"data_source_rule_id": r2.DataSourceRuleID}).OK(nil)
	e.adminA.Call(ruleBase+"update", M{"data_source_rule_id": dflt.DataSourceRuleID, "name": "domain2"}).OK(nil)
	e.adminA.Call(ruleBase+"delete", M{"data_source_rule_id": dflt.DataSourceRuleID}).OK(nil)
	if got := e.orders(t, ds.DataSourceID, "CUSTOM"); !slices.Equal(got, []string{"w1"}) {
		t.Fatalf("left %v", got)
	}
}
