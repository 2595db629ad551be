package datasourcerule

import (
	"reflect"
	"slices"
	"testing"

	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

type M = map[string]any

func cond(key, op, value string) core.Condition {
	return core.Condition{Key: key, Operator: op, Value: value}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	row := M{"provider": "aws", "region_code": "us-east-1", "product": "Amazon EC2", "tags": M{"env": "prod", "n": 3.0},
		"additional_info": M{"Account ID": "123456789012"}}
	cases := []struct {
		name   string
		policy string
		conds  []core.Condition
		want   bool
	}{
		{"always, no conditions", "ALWAYS", nil, true},
		{"always ignores conditions", "ALWAYS", []core.Condition{cond("provider", "eq", "gcp")}, true},
		{"eq holds", "ALL", []core.Condition{cond("provider", "eq", "aws")}, true},
		{"eq fails", "ALL", []core.Condition{cond("provider", "eq", "azure")}, false},
		{"contain holds", "ALL", []core.Condition{cond("product", "contain", "EC2")}, true},
		{"contain is case-sensitive", "ALL", []core.Condition{cond("product", "contain", "ec2")}, false},
		{"not holds", "ALL", []core.Condition{cond("region_code", "not", "eu-west-1")}, true},
		{"not fails", "ALL", []core.Condition{cond("region_code", "not", "us-east-1")}, false},
		{"not_contain holds", "ALL", []core.Condition{cond("product", "not_contain", "S3")}, true},
		{"not_contain fails", "ALL", []core.Condition{cond("product", "not_contain", "Amazon")}, false},
		{"nested tag", "ALL", []core.Condition{cond("tags.env", "eq", "prod")}, true},
		{"whole float as int", "ALL", []core.Condition{cond("tags.n", "eq", "3")}, true},
		{"key with a space", "ALL", []core.Condition{cond("additional_info.Account ID", "eq", "123456789012")}, true},
		{"missing key eq", "ALL", []core.Condition{cond("tags.team", "eq", "")}, false},
		{"missing key contain", "ALL", []core.Condition{cond("usage_type", "contain", "")}, false},
		{"missing key not", "ALL", []core.Condition{cond("tags.team", "not", "x")}, true},
		{"missing key not_contain", "ALL", []core.Condition{cond("tags.team", "not_contain", "x")}, true},
		{"all: one fails", "ALL", []core.Condition{cond("provider", "eq", "aws"), cond("tags.env", "eq", "dev")}, false},
		{"all: every holds", "ALL", []core.Condition{cond("provider", "eq", "aws"), cond("tags.env", "eq", "prod")}, true},
		{"any: one holds", "ANY", []core.Condition{cond("provider", "eq", "gcp"), cond("tags.env", "eq", "prod")}, true},
		{"any: none holds", "ANY", []core.Condition{cond("provider", "eq", "gcp"), cond("tags.env", "eq", "dev")}, false},
		{"any of nothing", "ANY", nil, false},
		{"unknown operator", "ALL", []core.Condition{cond("provider", "gt", "a")}, false},
		{"unknown policy", "SOME", nil, false},
	}
	for _, tc := range cases {
		if got := Matches(tc.policy, tc.conds, row); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func rule(id, typ string, order int, policy string, conds []core.Condition, a core.Actions, stop bool) core.Rule {
	return core.Rule{DataSourceRuleID: id, RuleType: typ, Order: order, ConditionsPolicy: policy, Conditions: conds, Actions: a,
		Options: core.RuleOptions{StopProcessing: stop}}
}

// Rules apply in order (MANAGED first, then CUSTOM, each by order), one
// row at a time; stop_processing ends them for a row it matched.
func TestApplyRowByRow(t *testing.T) {
	t.Parallel()
	dir := Directory{
		Projects: []Project{{ProjectID: "project-web", Name: "web", WorkspaceID: "workspace-1"},
			{ProjectID: "project-db", Name: "db", WorkspaceID: "workspace-2"}},
		ServiceAccounts: []ServiceAccount{{ServiceAccountID: "sa-1", Name: "prod", WorkspaceID: "workspace-1", Data: M{"account_id": "111"}}},
	}
	rules := []core.Rule{
		// listed out of order on purpose
		rule("c2", core.Custom, 2, "ALWAYS", nil, core.Actions{AddAdditionalInfo: M{"seen": "c2"}}, false),
		rule("c1", core.Custom, 1, "ALL", []core.Condition{cond("tags.team", "eq", "db")},
			core.Actions{MatchProject: &core.MatchRule{Source: "tags.team", Target: "name", AllWorkspaces: true}}, true),
		rule("m1", core.Managed, 1, "ALWAYS", nil,
			core.Actions{MatchServiceAccount: &core.MatchRule{Source: "additional_info.Account ID", Target: "data.account_id", AllWorkspaces: true}}, false),
		rule("c3", core.Custom, 3, "ANY", []core.Condition{cond("provider", "eq", "gcp"), cond("region_code", "contain", "asia")},
			core.Actions{ChangeProject: "project-db"}, false),
	}
	e := NewEngine(rules, dir, core.Global)
	cases := []struct {
		name    string
		row     M
		matched []string
		project string
		ws      string
		sa      string
		info    M
	}{
		{"service account matched, then c2", M{"provider": "aws", "additional_info": M{"Account ID": "111"}},
			[]string{"m1", "c2"}, "", "workspace-1", "sa-1", M{"Account ID": "111", "seen": "c2"}},
		{"c1 stops the rules", M{"provider": "aws", "tags": M{"team": "db"}},
			[]string{"m1", "c1"}, "project-db", "workspace-2", "", nil},
		{"c3 changes the project", M{"provider": "gcp", "additional_info": M{"Account ID": "999"}},
			[]string{"m1", "c2", "c3"}, "project-db", "workspace-2", "", M{"Account ID": "999", "seen": "c2"}},
		{"no account, no project", M{"provider": "aws"},
			[]string{"m1", "c2"}, "", "", "", M{"seen": "c2"}},
	}
	for _, tc := range cases {
		row := tc.row
		got := e.Apply(row)
		if !slices.Equal(got, tc.matched) {
			t.Errorf("%s: matched %v, want %v", tc.name, got, tc.matched)
		}
		str := func(k string) string { s, _ := row[k].(string); return s }
		if str("project_id") != tc.project || str("workspace_id") != tc.ws || str("service_account_id") != tc.sa {
			t.Errorf("%s: project %q workspace %q sa %q", tc.name, str("project_id"), str("workspace_id"), str("service_account_id"))
		}
		info, _ := row["additional_info"].(map[string]any)
		if tc.info != nil && !reflect.DeepEqual(info, tc.info) {
			t.Errorf("%s: additional_info %v, want %v", tc.name, info, tc.info)
		}
	}
	// add_additional_info never changes the plugin's map in place.
	orig := M{"k": "v"}
	row := M{"provider": "aws", "additional_info": orig}
	e.Apply(row)
	if len(orig) != 1 {
		t.Errorf("plugin's map changed: %v", orig)
	}
}

// Without all_workspaces a match stays in the data source's workspace.
func TestMatchInWorkspace(t *testing.T) {
	t.Parallel()
	dir := Directory{Projects: []Project{{ProjectID: "project-db", Name: "db", WorkspaceID: "workspace-2"},
		{ProjectID: "project-db1", Name: "db", WorkspaceID: "workspace-1"}}}
	r := rule("c1", core.Custom, 1, "ALWAYS", nil, core.Actions{MatchProject: &core.MatchRule{Source: "tags.team", Target: "name"}}, false)
	row := M{"tags": M{"team": "db"}}
	NewEngine([]core.Rule{r}, dir, "workspace-1").Apply(row)
	if row["project_id"] != "project-db1" || row["workspace_id"] != "workspace-1" {
		t.Fatalf("row %v: want the project of workspace-1", row)
	}
	row = M{"tags": M{"team": "db"}}
	NewEngine([]core.Rule{r}, Directory{Projects: dir.Projects[:1]}, "workspace-1").Apply(row)
	if row["project_id"] != nil {
		t.Fatalf("row %v: a project of another workspace matched", row)
	}
}

// match_service_account, row by row: the target is service_account_id,
// name or data.<path>; a matched row gets the account's id, and its
// workspace when the account has one and the data source is domain-wide;
// the row's project is never changed (trusted service accounts have none).
func TestMatchServiceAccount(t *testing.T) {
	t.Parallel()
	dir := Directory{ServiceAccounts: []ServiceAccount{
		{ServiceAccountID: "tsa-dom", Name: "shared", WorkspaceID: core.Global, Data: M{"account_id": "100", "org": M{"id": "o-1"}}},
		{ServiceAccountID: "tsa-w1", Name: "prod", WorkspaceID: "workspace-1", Data: M{"account_id": "111", "n": 7.0}},
		{ServiceAccountID: "tsa-w2", Name: "dev", WorkspaceID: "workspace-2", Data: M{"account_id": "222"}},
		{ServiceAccountID: "tsa-nows", Name: "loose", Data: M{"account_id": "333"}},
	}}
	match := func(source, target string, all bool) []core.Rule {
		return []core.Rule{rule("m", core.Managed, 1, "ALWAYS", nil,
			core.Actions{MatchServiceAccount: &core.MatchRule{Source: source, Target: target, AllWorkspaces: all}}, false)}
	}
	cases := []struct {
		name      string
		rules     []core.Rule
		dsWS      string // the data source's workspace ("*": DOMAIN)
		row       M
		sa, ws    string // "" ws: the row's workspace_id unset
		projectID string
	}{
		{"data.account_id", match("additional_info.Account ID", "data.account_id", false), core.Global,
			M{"additional_info": M{"Account ID": "111"}}, "tsa-w1", "workspace-1", ""},
		{"the row keeps its project", match("account", "data.account_id", false), core.Global,
			M{"account": "111", "project_id": "project-x"}, "tsa-w1", "workspace-1", "project-x"},
		{"by id", match("tags.sa", "service_account_id", false), core.Global,
			M{"tags": M{"sa": "tsa-w2"}}, "tsa-w2", "workspace-2", ""},
		{"by name", match("tags.name", "name", false), core.Global,
			M{"tags": M{"name": "prod"}}, "tsa-w1", "workspace-1", ""},
		{"nested data path", match("tags.org", "data.org.id", false), core.Global,
			M{"tags": M{"org": "o-1"}}, "tsa-dom", "", ""},
		{"number in data", match("tags.n", "data.n", false), core.Global,
			M{"tags": M{"n": "7"}}, "tsa-w1", "workspace-1", ""},
		{"domain-wide account: no workspace", match("account", "data.account_id", false), core.Global,
			M{"account": "100"}, "tsa-dom", "", ""},
		{"account without workspace", match("account", "data.account_id", false), core.Global,
			M{"account": "333"}, "tsa-nows", "", ""},
		{"no such account", match("account", "data.account_id", false), core.Global,
			M{"account": "999"}, "", "", ""},
		{"source missing", match("account", "data.account_id", false), core.Global,
			M{"product": "x"}, "", "", ""},
		{"unknown target", match("account", "project_id", false), core.Global,
			M{"account": "111"}, "", "", ""},
		{"workspace data source: its workspace's account", match("account", "data.account_id", false), "workspace-1",
			M{"account": "111", "workspace_id": "workspace-1"}, "tsa-w1", "workspace-1", ""},
		{"workspace data source: another workspace's account does not match", match("account", "data.account_id", false), "workspace-1",
			M{"account": "222", "workspace_id": "workspace-1"}, "", "workspace-1", ""},
		{"workspace data source: all_workspaces matches, the workspace stays", match("account", "data.account_id", true), "workspace-1",
			M{"account": "222", "workspace_id": "workspace-1"}, "tsa-w2", "workspace-1", ""},
		{"workspace data source: a domain-wide account matches", match("account", "data.account_id", false), "workspace-1",
			M{"account": "100", "workspace_id": "workspace-1"}, "tsa-dom", "workspace-1", ""},
	}
	for _, tc := range cases {
		row := tc.row
		NewEngine(tc.rules, dir, tc.dsWS).Apply(row)
		str := func(k string) string { s, _ := row[k].(string); return s }
		if str("service_account_id") != tc.sa || str("workspace_id") != tc.ws || str("project_id") != tc.projectID {
			t.Errorf("%s: service account %q workspace %q project %q, want %q %q %q", tc.name,
				str("service_account_id"), str("workspace_id"), str("project_id"), tc.sa, tc.ws, tc.projectID)
		}
	}
}
