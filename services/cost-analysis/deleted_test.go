package costanalysis_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// A deleted workspace's data sources go with their rules, jobs, tasks
// and costs; another workspace's stay (issue 38).
func TestDeletedWorkspaceEndsItsCosts(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	doomed := e.register(t, e.ownerA1, workspaceSource("doomed", ""))
	kept := e.register(t, e.ownerA2, workspaceSource("kept", ""))
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-01", "a")}})
	j := e.sync(t, e.ownerA1, doomed.DataSourceID, "2024-01")
	if j = e.waitJob(t, e.ownerA1, j.JobID, finished); j.Status != "SUCCESS" {
		t.Fatalf("job %+v", j)
	}
	ws1 := bson.E{Key: "workspace_id", Value: "workspace-1"}
	for _, coll := range []string{dataSources, rules, jobs, tasks, costs} {
		if e.count(t, coll, ws1) == 0 {
			t.Fatalf("nothing of workspace-1 in %s before the delete", coll)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := events.Deleted{ID: events.DeletedID(events.DeletedWorkspace, "domain-a", "workspace-1", "t0"), Kind: events.DeletedWorkspace,
		DomainID: "domain-a", WorkspaceID: "workspace-1"}
	if err := e.bus.Publish(ctx, events.DeletedSubject, d.ID, d); err != nil {
		t.Fatal(err)
	}
	left := int64(0)
	if err := testkit.Within(waitBound, func() bool {
		left = 0
		for _, coll := range []string{dataSources, rules, jobs, tasks, costs} {
			left += e.count(t, coll, ws1)
		}
		return left == 0
	}); err != nil {
		t.Fatalf("%d records of workspace-1 left (%v)", left, err)
	}
	e.adminA.Call(dsBase+"get", M{"data_source_id": doomed.DataSourceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.ownerA2.Call(dsBase+"get", M{"data_source_id": kept.DataSourceID}).OK(nil)
	if e.count(t, rules, bson.E{Key: "data_source_id", Value: kept.DataSourceID}) == 0 {
		t.Error("the other workspace's rules went")
	}
}
