package costanalysis_test

import (
	"fmt"
	"net/http"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// The rows of a job that has not finished are stored but not shown, a
// finished task's included: cost list, get, stat and analyze leave them
// out until the job succeeds, then show all of them.
func TestUnfinishedJobCostsHidden(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, workers: heldTasks})
	ds := e.register(t, e.adminA, domainSource("aws"))
	// Two tasks: one streams three rows and ends; the other streams two
	// rows and holds its stream open. When its worker goes away, the
	// task's next delivery streams those two and three more, and ends.
	e.plugin.Script(getTasksMethod, tasksReply(2))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-06", "done")}},
		fakeplugin.Reply{Stream: []M{rows(2, "2024-06", "held")}, Hang: true},
		fakeplugin.Reply{Stream: []M{rows(2, "2024-06", "held"), rows(3, "2024-06", "rest")}})
	j := e.sync(t, e.adminA, ds.DataSourceID, "")

	// Wait until one task is done and the other has stored its chunk.
	var held JobTask
	var running, done taskList
	if err := testkit.Within(waitBound, func() bool {
		running = e.jobTasks(t, e.adminA, M{"job_id": j.JobID, "status": "IN_PROGRESS"})
		done = e.jobTasks(t, e.adminA, M{"job_id": j.JobID, "status": "SUCCESS"})
		// (list counts, then reads: a task may change in between)
		if running.TotalCount == 1 && len(running.Results) == 1 && running.Results[0].CreatedCount == 2 && done.TotalCount == 1 &&
			e.count(t, costs, bson.E{Key: "tags.batch", Value: "held"}) == 2 {
			held = running.Results[0]
			return true
		}
		return false
	}); err != nil {
		t.Fatalf("the tasks did not get there: running %+v, done %+v", running, done)
	}
	if held.StartedAt == nil || held.FinishedAt != nil {
		t.Fatalf("running task %+v", held)
	}
	var heldRow struct {
		ID string `bson:"_id"`
	}
	if err := e.db.Collection(costs).FindOne(t.Context(), bson.D{{Key: "job_task_id", Value: held.JobTaskID}}).Decode(&heldRow); err != nil {
		t.Fatal(err)
	}

	byBatch := M{"data_source_id": ds.DataSourceID, "query": M{"aggregate": []M{{"group": M{"keys": []M{{"key": "tags.batch", "name": "b"}},
		"fields": []M{{"key": "cost", "operator": "sum", "name": "total"}, {"operator": "count", "name": "n"}}}}, {"sort": M{"key": "b"}}}}}
	monthly := M{"data_source_id": ds.DataSourceID, "query": M{"granularity": "MONTHLY", "fields": M{"total": M{"key": "cost", "operator": "sum"}, "n": M{"operator": "count"}}}}
	shown := func(when string, list int, stat, analyze string) {
		t.Helper()
		l := e.costs(t, e.adminA, ds.DataSourceID, M{"query": M{"page": M{"limit": 100}}})
		if l.TotalCount != list || len(l.Results) != list {
			t.Errorf("%s: cost/list shows %d rows, want %d", when, l.TotalCount, list)
		}
		if got := fmt.Sprint(e.adminA.Call(costBase+"stat", byBatch).OK(nil).JSON()["results"]); got != stat {
			t.Errorf("%s: cost/stat %s, want %s", when, got, stat)
		}
		if got := fmt.Sprint(e.adminA.Call(costBase+"analyze", monthly).OK(nil).JSON()["results"]); got != analyze {
			t.Errorf("%s: cost/analyze %s, want %s", when, got, analyze)
		}
	}
	hidden := func(when string) {
		t.Helper()
		shown(when, 0, "[]", "[]")
		l := e.costs(t, e.adminA, ds.DataSourceID, M{"job_task_id": held.JobTaskID})
		if l.TotalCount != 0 {
			t.Errorf("%s: the running task's rows listed by its id: %+v", when, l)
		}
		for _, c := range e.costs(t, e.adminA, ds.DataSourceID, M{}).Results {
			if c.JobTaskID == held.JobTaskID {
				t.Errorf("%s: a row of the running task: %+v", when, c)
			}
		}
		e.adminA.Call(costBase+"get", M{"cost_id": heldRow.ID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	hidden("while the stream is held")

	// The worker goes away mid-task: its rows stay stored, still hidden.
	e.stopWorkers()
	if n := e.count(t, costs, bson.E{Key: "job_task_id", Value: held.JobTaskID}); n != 2 {
		t.Fatalf("%d rows of the held task stored after the stop", n)
	}
	hidden("with the worker gone")

	// Another replica runs the task to its end: all its rows show.
	e.start(t)
	if j = e.waitJob(t, e.adminA, j.JobID, finished); j.Status != "SUCCESS" {
		t.Fatalf("job %+v", j)
	}
	shown("once the task finished", 8, "[map[b:done n:3 total:4.5] map[b:held n:2 total:2] map[b:rest n:3 total:4.5]]",
		"[map[date:2024-06 n:8 total:11]]")
	if l := e.costs(t, e.adminA, ds.DataSourceID, M{"job_task_id": held.JobTaskID}); l.TotalCount != 5 {
		t.Errorf("the finished task's rows: %d, want 5", l.TotalCount)
	}
	e.adminA.Call(costBase+"get", M{"cost_id": heldRow.ID}).OK(nil)
	var task JobTask
	e.adminA.Call(taskBase+"get", M{"job_task_id": held.JobTaskID}).OK(&task)
	if task.Status != "SUCCESS" || task.CreatedCount != 5 || task.StartedAt == nil || task.FinishedAt == nil {
		t.Errorf("finished task %+v", task)
	}
}
