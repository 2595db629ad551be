package costanalysis_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// TestTenancy runs the tenancy matrix over every cost-analysis resource:
// a record of workspace-1 (project-1 for a cost row) is read and changed
// by no outsider.
func TestTenancy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	owner := auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"}
	member := auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1", Projects: []string{"project-1"}}
	var watch []*mongo.Collection
	for _, c := range []string{core.DataSourcesCollection, core.RulesCollection, core.JobsCollection, core.TasksCollection, core.CostsCollection} {
		watch = append(watch, e.db.Collection(c))
	}
	matrix := func(coll, id, project string, insider auth.Principal, get, list testkit.Req, stat string, changes ...testkit.Req) testkit.Tenancy {
		return testkit.Tenancy{Handler: e.handler, Coll: e.db.Collection(coll), ID: id, Domain: "domain-a", Workspace: "workspace-1",
			Project: project, Insider: insider, Get: get, List: list, Changes: changes, Watch: watch,
			Stat: &testkit.Req{Path: stat}}
	}
	insert := func(coll string, doc bson.D) {
		if _, err := e.db.Collection(coll).InsertOne(context.Background(), doc); err != nil {
			t.Fatal(err)
		}
	}
	// stat bodies name the id key of each resource.
	withDistinct := func(m testkit.Tenancy, key string) testkit.Tenancy {
		m.Stat.Body = M{"query": M{"distinct": key}}
		return m
	}

	ds := e.register(t, e.ownerA1, workspaceSource("AWS one", ""))
	dsID := M{"data_source_id": ds.DataSourceID}
	t.Run("data source", func(t *testing.T) {
		withDistinct(matrix(core.DataSourcesCollection, ds.DataSourceID, "", owner,
			testkit.Req{Path: dsBase + "get", Body: dsID}, testkit.Req{Path: dsBase + "list", Body: dsID}, dsBase+"stat",
			testkit.Req{Path: dsBase + "update", Body: M{"data_source_id": ds.DataSourceID, "name": "taken"}},
			testkit.Req{Path: dsBase + "update-plugin", Body: M{"data_source_id": ds.DataSourceID, "options": M{"region": "eu-west-1"}}},
			testkit.Req{Path: dsBase + "verify-plugin", Body: dsID},
			testkit.Req{Path: dsBase + "disable", Body: dsID},
			testkit.Req{Path: dsBase + "sync", Body: dsID},
			testkit.Req{Path: dsBase + "deregister", Body: dsID},
		), "data_source_id").Run(t)
	})
	t.Run("data source rule", func(t *testing.T) {
		body := customRule(ds.DataSourceID, "mine")
		body["resource_group"] = "WORKSPACE"
		r := e.createRule(t, e.ownerA1, body)
		id := M{"data_source_rule_id": r.DataSourceRuleID}
		withDistinct(matrix(core.RulesCollection, r.DataSourceRuleID, "", owner,
			testkit.Req{Path: ruleBase + "get", Body: id}, testkit.Req{Path: ruleBase + "list", Body: id}, ruleBase+"stat",
			testkit.Req{Path: ruleBase + "update", Body: M{"data_source_rule_id": r.DataSourceRuleID, "name": "taken"}},
			testkit.Req{Path: ruleBase + "change-order", Body: M{"data_source_rule_id": r.DataSourceRuleID, "order": 1}},
			testkit.Req{Path: ruleBase + "delete", Body: id},
		), "data_source_rule_id").Run(t)
	})
	t.Run("job", func(t *testing.T) {
		insert(core.JobsCollection, bson.D{{Key: "_id", Value: "job-t1"}, {Key: "job_id", Value: "job-t1"}, {Key: "status", Value: "IN_PROGRESS"},
			{Key: "domain_id", Value: "domain-a"}, {Key: "workspace_id", Value: "workspace-1"}, {Key: "data_source_id", Value: ds.DataSourceID}})
		id := M{"job_id": "job-t1"}
		withDistinct(matrix(core.JobsCollection, "job-t1", "", owner,
			testkit.Req{Path: jobBase + "get", Body: id}, testkit.Req{Path: jobBase + "list", Body: id}, jobBase+"stat",
			testkit.Req{Path: jobBase + "cancel", Body: id},
		), "job_id").Run(t)
	})
	t.Run("job task", func(t *testing.T) {
		insert(core.TasksCollection, bson.D{{Key: "_id", Value: "job-task-t1"}, {Key: "job_task_id", Value: "job-task-t1"}, {Key: "status", Value: "SUCCESS"},
			{Key: "domain_id", Value: "domain-a"}, {Key: "workspace_id", Value: "workspace-1"}, {Key: "data_source_id", Value: ds.DataSourceID}})
		id := M{"job_task_id": "job-task-t1"}
		withDistinct(matrix(core.TasksCollection, "job-task-t1", "", owner,
			testkit.Req{Path: taskBase + "get", Body: id}, testkit.Req{Path: taskBase + "list", Body: id}, taskBase+"stat",
		), "job_task_id").Run(t)
	})
	t.Run("cost", func(t *testing.T) {
		insert(core.CostsCollection, bson.D{{Key: "_id", Value: "cost-t1"}, {Key: "cost_id", Value: "cost-t1"}, {Key: "cost", Value: 1.5},
			{Key: "provider", Value: "aws"}, {Key: "billed_date", Value: "2026-11-01"}, {Key: "billed_month", Value: "2026-11"}, {Key: "billed_year", Value: "2026"},
			{Key: "domain_id", Value: "domain-a"}, {Key: "workspace_id", Value: "workspace-1"}, {Key: "project_id", Value: "project-1"},
			{Key: "data_source_id", Value: ds.DataSourceID}})
		id := M{"cost_id": "cost-t1"}
		m := matrix(core.CostsCollection, "cost-t1", "project-1", member,
			testkit.Req{Path: costBase + "get", Body: id}, testkit.Req{Path: costBase + "list", Body: M{"cost_id": "cost-t1", "data_source_id": ds.DataSourceID}}, costBase+"stat")
		m.Stat.Body = M{"data_source_id": ds.DataSourceID, "query": M{"distinct": "cost_id"}}
		m.Run(t)
		m.List = testkit.Req{Path: costBase + "analyze", Body: M{"data_source_id": ds.DataSourceID, "query": M{"granularity": "MONTHLY", "start": "2026-11", "end": "2026-11",
			"group_by": []string{"provider"}, "fields": M{"total": M{"key": "cost", "operator": "sum"}}}}}
		m.Run(t)
	})
}

// TestDomainDataSourceRules: the rules of a DOMAIN data source are the
// domain admin's alone: a workspace owner creates none (even for its own
// workspace), and changes none the admin made for its workspace.
func TestDomainDataSourceRules(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ds := e.register(t, e.adminA, domainSource("AWS all"))
	body := customRule(ds.DataSourceID, "sneak")
	body["resource_group"] = "WORKSPACE"
	before := e.count(t, core.RulesCollection)
	e.ownerA1.Call(ruleBase+"create", body).Fails(http.StatusForbidden, errs.PermissionDenied)
	if n := e.count(t, core.RulesCollection); n != before {
		t.Fatalf("%d rules stored, %d before", n, before)
	}
	body["workspace_id"] = "workspace-1"
	r := e.createRule(t, e.adminA, body)
	stored := e.raw(t, core.RulesCollection, r.DataSourceRuleID)
	for _, q := range []testkit.Req{
		{Path: ruleBase + "update", Body: M{"data_source_rule_id": r.DataSourceRuleID, "name": "taken"}},
		{Path: ruleBase + "change-order", Body: M{"data_source_rule_id": r.DataSourceRuleID, "order": 1}},
		{Path: ruleBase + "delete", Body: M{"data_source_rule_id": r.DataSourceRuleID}},
	} {
		e.ownerA1.Call(q.Path, q.Body).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	if after := e.raw(t, core.RulesCollection, r.DataSourceRuleID); !equalDocs(stored, after) {
		t.Fatalf("rule changed: %v -> %v", stored, after)
	}
	// The owner still reads the rule the admin made for its workspace.
	e.ownerA1.Call(ruleBase+"get", M{"data_source_rule_id": r.DataSourceRuleID}).OK(nil)
}

func equalDocs(a, b bson.M) bool { return reflect.DeepEqual(a, b) }
