package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/dashboard/internal/projectdashboard"
)

// TestDeleteMarkedFirst: a delete whose versions' delete fails answers
// 503 and leaves the dashboard marked: out of get, list, stat and the
// version calls, refusing update, its name still taken; another domain
// cannot finish it; a retry deletes its versions and the dashboard (404
// from then on).
func TestDeleteMarkedFirst(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	c := setup(t)
	d := c.create(t, c.adminA, "domain-a", "project-a1", "Costs", "PUBLIC", "layouts", layout("first"))
	other := c.create(t, c.adminA, "domain-a", "project-a1", "Other", "PUBLIC")
	id := d.ProjectDashboardID
	c.adminA.Call(prefix+"update", body("domain-a", "project_dashboard_id", id, "layouts", layout("second"))).OK(nil)
	versions := func() int64 {
		n, err := c.db.Collection(projectdashboard.VersionsCollection).CountDocuments(context.Background(), bson.D{{Key: "project_dashboard_id", Value: id}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if versions() != 2 {
		t.Fatalf("%d versions", versions())
	}

	restore := store.FailChildDeletes(projectdashboard.VersionsCollection)
	c.adminA.Call(prefix+"delete", body("domain-a", "project_dashboard_id", id)).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	restore()
	if versions() != 2 || c.count(t, projectdashboard.DashboardsCollection) != 2 {
		t.Fatal("the failed delete deleted something")
	}
	for _, op := range []string{"get", "list-versions"} {
		c.adminA.Call(prefix+op, body("domain-a", "project_dashboard_id", id)).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	c.adminA.Call(prefix+"get-version", body("domain-a", "project_dashboard_id", id, "version", 1)).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.adminA.Call(prefix+"update", body("domain-a", "project_dashboard_id", id, "name", "x")).Fails(http.StatusNotFound, errs.NotFoundCode)
	var dl list[dashInfo]
	c.adminA.Call(prefix+"list", body("domain-a")).OK(&dl)
	if dl.TotalCount != 1 || dl.Results[0].ProjectDashboardID != other.ProjectDashboardID {
		t.Fatalf("list = %+v", dl)
	}
	st := c.adminA.Call(prefix+"stat", body("domain-a", "query", map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}})).JSON()
	if fmt.Sprint(st["results"]) != "[map[n:1]]" {
		t.Fatalf("stat = %v", st)
	}
	c.adminB.Call(prefix+"delete", body("domain-b", "project_dashboard_id", id)).Fails(http.StatusNotFound, errs.NotFoundCode)
	if versions() != 2 {
		t.Fatal("another domain's delete went on")
	}

	c.adminA.Call(prefix+"delete", body("domain-a", "project_dashboard_id", id)).OK(nil)
	if versions() != 0 || c.count(t, projectdashboard.DashboardsCollection) != 1 {
		t.Fatal("the retry left versions or the dashboard")
	}
	c.adminA.Call(prefix+"delete", body("domain-a", "project_dashboard_id", id)).Fails(http.StatusNotFound, errs.NotFoundCode)
}
