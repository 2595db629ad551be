package dashboard_test

import (
	"net/http"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/dashboard/internal/projectdashboard"
)

// The kit's tenancy matrix over a project dashboard: another domain's
// admin, a plain user, an owner without or of another workspace and a
// member outside the project read nothing and change nothing.
func TestTenancyMatrix(t *testing.T) {
	t.Parallel()
	c := setup(t)
	d := c.create(t, c.adminA, "domain-a", "project-a1", "Matrix", "PUBLIC", "layouts", layout("m"))
	id := d.ProjectDashboardID
	stat := testkit.Req{Path: prefix + "stat", Body: body("domain-a", "query", map[string]any{
		"filter":    []any{map[string]any{"k": "project_dashboard_id", "v": id, "o": "eq"}},
		"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "name", "name": "n"}}}}}})}
	testkit.Tenancy{
		Handler: c.handler, NamesDomain: true, Coll: c.db.Collection(projectdashboard.DashboardsCollection), ID: id,
		Domain: "domain-a", Workspace: "workspace-1", Project: "project-a1",
		Get:  testkit.Req{Path: prefix + "get", Body: body("domain-a", "project_dashboard_id", id)},
		List: testkit.Req{Path: prefix + "list", Body: body("domain-a", "project_dashboard_id", id)},
		Stat: &stat,
		Changes: []testkit.Req{
			{Path: prefix + "update", Body: body("domain-a", "project_dashboard_id", id, "layouts", layout("x"))},
			{Path: prefix + "delete", Body: body("domain-a", "project_dashboard_id", id)},
			{Path: prefix + "revert-version", Body: body("domain-a", "project_dashboard_id", id, "version", 1)},
			{Path: prefix + "delete-version", Body: body("domain-a", "project_dashboard_id", id, "version", 1)},
			{Path: prefix + "get-version", Body: body("domain-a", "project_dashboard_id", id, "version", 1)},
			{Path: prefix + "list-versions", Body: body("domain-a", "project_dashboard_id", id)},
		},
		Insider: memberOf("insider", "project-a1"),
		Watch:   []*mongo.Collection{c.db.Collection(projectdashboard.VersionsCollection)},
	}.Run(t)
}

// A member outside a project neither reads its dashboards nor creates
// one in it (issue 16: it could), even when identity answers the project.
func TestMemberOutsideTheProject(t *testing.T) {
	t.Parallel()
	c := setup(t)
	d := c.create(t, c.adminA, "domain-a", "project-a1", "In A1", "PUBLIC")
	outside := c.anon.For(memberOf("otto", "project-a2"))
	before := c.snap(t, d.ProjectDashboardID)
	outside.Call(prefix+"create", body("domain-a", "project_id", "project-a1", "name", "Sneaky", "viewers", "PUBLIC")).Fails(http.StatusForbidden, errs.PermissionDenied)
	outside.Call(prefix+"get", body("domain-a", "project_dashboard_id", d.ProjectDashboardID)).Fails(http.StatusNotFound, errs.NotFoundCode)
	outside.Call(prefix+"update", body("domain-a", "project_dashboard_id", d.ProjectDashboardID, "name", "Taken")).Fails(http.StatusNotFound, errs.NotFoundCode)
	var l list[dashInfo]
	outside.Call(prefix+"list", body("domain-a")).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("a member outside the project lists %+v", l)
	}
	if after := c.snap(t, d.ProjectDashboardID); after != before {
		t.Fatalf("refused calls changed the store: %+v -> %+v", before, after)
	}
	// In its own project it creates, and reads only that one.
	c.create(t, outside, "domain-a", "project-a2", "In A2", "PUBLIC")
	outside.Call(prefix+"list", body("domain-a")).OK(&l)
	if l.TotalCount != 1 || l.Results[0].ProjectID != "project-a2" {
		t.Fatalf("own list %+v", l)
	}
}
