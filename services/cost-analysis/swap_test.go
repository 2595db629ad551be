package costanalysis_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// twoTasks is a get_tasks reply of two tasks, with the job's changed
// windows and, when taskChanged is set, that window on each task.
func twoTasks(jobChanged []any, taskChanged M) fakeplugin.Reply {
	ts := make([]any, 2)
	for i := range ts {
		t := M{"task_options": M{"account_id": fmt.Sprintf("acct-%d", i)}}
		if taskChanged != nil {
			t["task_changed"] = taskChanged
		}
		ts[i] = t
	}
	return fakeplugin.Reply{Result: M{"tasks": ts, "changed": jobChanged}}
}

// A job's rows show only once it succeeds, and its changed windows swap in
// one step: a job cancelled or failed mid-way (one task done, one
// streaming) shows none of its rows at any moment and leaves none behind,
// and a job that succeeds shows either the old rows or the new ones,
// never both and never neither. cost/analyze totals are checked at every
// step.
func TestChangedWindowSwap(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, workers: heldTasks})
	ds := e.register(t, e.adminA, domainSource("aws"))
	monthly := M{"data_source_id": ds.DataSourceID, "query": M{"granularity": "MONTHLY", "fields": M{"total": M{"key": "cost", "operator": "sum"}, "n": M{"operator": "count"}}}}
	totals := func() string {
		t.Helper()
		return fmt.Sprint(e.adminA.Call(costBase+"analyze", monthly).OK(nil).JSON()["results"])
	}
	check := func(step, want string) {
		t.Helper()
		if got := totals(); got != want {
			t.Fatalf("%s: cost/analyze %s, want %s", step, got, want)
		}
	}
	waitFor := func(what string, cond func() bool) { t.Helper(); testkit.Eventually(t, waitBound, what, cond) }
	rowsOf := func(jobID string) int64 { return e.count(t, costs, bson.E{Key: "job_id", Value: jobID}) }
	// One task done, the other has stored a chunk and streams on.
	midway := func(jobID string) {
		t.Helper()
		waitFor("one task done, one streaming", func() bool {
			return e.count(t, tasks, bson.E{Key: "job_id", Value: jobID}, bson.E{Key: "status", Value: "SUCCESS"}) == 1 &&
				e.count(t, costs, bson.E{Key: "job_id", Value: jobID}, bson.E{Key: "tags.batch", Value: "held"}) == 2
		})
	}

	// The first sync: January and February.
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(4, "2024-01", "old"), rows(2, "2024-02", "feb")}})
	j1 := e.waitJob(t, e.adminA, e.sync(t, e.adminA, ds.DataSourceID, "").JobID, finished)
	if j1.Status != "SUCCESS" {
		t.Fatalf("first job %+v", j1)
	}
	const before = "[map[date:2024-01 n:4 total:8] map[date:2024-02 n:2 total:2]]"
	check("after the first sync", before)

	// A resync of January, cancelled mid-way.
	jan := []any{M{"start": "2024-01", "end": "2024-01"}}
	e.plugin.Script(getTasksMethod, twoTasks(jan, nil))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-01", "new")}},
		fakeplugin.Reply{Stream: []M{rows(2, "2024-01", "held")}, Hang: true})
	j2 := e.sync(t, e.adminA, ds.DataSourceID, "")
	check("resync started", before)
	midway(j2.JobID)
	check("resync mid-way", before)
	e.adminA.Call(jobBase+"cancel", M{"job_id": j2.JobID}).OK(nil)
	check("resync cancelled", before)
	waitFor("the cancelled job's tasks end", func() bool { return e.waitJob(t, e.adminA, j2.JobID, finished).RemainedTasks == 0 })
	check("cancelled job's tasks ended", before)
	waitFor("the cancelled job's rows deleted", func() bool { return rowsOf(j2.JobID) == 0 })
	check("cancelled job tidied", before)

	// A resync whose tasks replace January (task_changed), failed mid-way:
	// the streaming task's worker goes away, and its next delivery fails.
	e.plugin.Script(getTasksMethod, twoTasks(nil, M{"start": "2024-01", "filter": M{"provider": "aws"}}))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-01", "new")}},
		fakeplugin.Reply{Stream: []M{rows(2, "2024-01", "held")}, Hang: true})
	j3 := e.sync(t, e.adminA, ds.DataSourceID, "")
	midway(j3.JobID)
	check("task-window resync mid-way", before)
	e.stopWorkers()
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.PermissionDenied, "ERROR_AWS_ACCESS", "denied")})
	check("workers gone", before)
	e.start(t)
	if j := e.waitJob(t, e.adminA, j3.JobID, func(j Job) bool { return finished(j) && j.RemainedTasks == 0 }); j.Status != "FAILURE" {
		t.Fatalf("failed job %+v", j)
	}
	check("resync failed", before)
	waitFor("the failed job's rows deleted", func() bool { return rowsOf(j3.JobID) == 0 })
	check("failed job tidied", before)

	// A resync that succeeds: every read shows the old January or the new
	// one, whole.
	const after = "[map[date:2024-01 n:5 total:5.5] map[date:2024-02 n:2 total:2]]"
	e.plugin.Script(getTasksMethod, twoTasks(jan, nil))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-01", "new")}},
		fakeplugin.Reply{Stream: []M{rows(1, "2024-01", "more"), rows(1, "2024-01", "more")}, Interval: 50 * time.Millisecond})
	j4 := e.sync(t, e.adminA, ds.DataSourceID, "")
	seen := map[string]int{}
	for {
		var j Job
		e.adminA.Call(jobBase+"get", M{"job_id": j4.JobID}).OK(&j)
		got := totals()
		seen[got]++
		if got != before && got != after {
			t.Fatalf("resync: cost/analyze %s mixes old and new (job %s)", got, j.Status)
		}
		if j.Status == "SUCCESS" && got != after {
			t.Fatalf("read after SUCCESS: %s", got)
		}
		if finished(j) {
			if j.Status != "SUCCESS" {
				t.Fatalf("resync %+v", j)
			}
			break
		}
	}
	waitFor("the replaced rows deleted", func() bool { return rowsOf(j1.JobID) == 2 })
	check("replaced rows deleted", after)
	t.Logf("reads during the resync: %v", seen)
}

// A deregister whose deletes fail after its mark (here: the delete of its
// costs, injected) answers 503 and leaves the data source and its costs
// out of every read; a retry finishes the work.
func TestDeregisterMarkedFirst(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	e := setupWith(t, options{bus: true})
	ds := e.register(t, e.adminA, domainSource("aws"))
	other := e.register(t, e.adminA, domainSource("gcp"))
	e.createRule(t, e.adminA, customRule(ds.DataSourceID, "label"))
	for _, d := range []string{ds.DataSourceID, other.DataSourceID} {
		e.plugin.Script(getTasksMethod, tasksReply(1))
		e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(2, "2024-01", "x")}})
		if j := e.waitJob(t, e.adminA, e.sync(t, e.adminA, d, "").JobID, finished); j.Status != "SUCCESS" {
			t.Fatalf("job %+v", j)
		}
	}
	if n, m := e.costs(t, e.adminA, ds.DataSourceID, M{}).TotalCount, e.costs(t, e.adminA, other.DataSourceID, M{}).TotalCount; n != 2 || m != 2 {
		t.Fatalf("%d and %d costs", n, m)
	}
	restore := store.FailChildDeletes(costs)
	e.adminA.Call(dsBase+"deregister", M{"data_source_id": ds.DataSourceID}).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	restore()
	if e.count(t, costs, bson.E{Key: "data_source_id", Value: ds.DataSourceID}) != 2 {
		t.Fatal("the failed deregister deleted costs")
	}
	e.adminA.Call(dsBase+"get", M{"data_source_id": ds.DataSourceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := e.adminA.Call(dsBase+"stat", M{"query": M{"aggregate": []M{{"count": M{"name": "n"}}}}}).OK(nil).JSON()["results"]; fmt.Sprint(n) != "[map[n:1]]" {
		t.Errorf("stat counts %v data sources", n)
	}
	e.adminA.Call(dsBase+"sync", M{"data_source_id": ds.DataSourceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.adminA.Call(dsBase+"update", M{"data_source_id": ds.DataSourceID, "name": "x"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.adminA.Call(ruleBase+"create", customRule(ds.DataSourceID, "late")).Fails(http.StatusNotFound, errs.NotFoundCode)
	var l struct {
		Results []DataSource `json:"results"`
	}
	e.adminA.Call(dsBase+"list", M{}).OK(&l)
	if len(l.Results) != 1 || l.Results[0].DataSourceID != other.DataSourceID {
		t.Errorf("data sources listed %+v", l.Results)
	}
	if cl := e.costs(t, e.adminA, ds.DataSourceID, M{}); cl.TotalCount != 0 || len(cl.Results) != 0 {
		t.Errorf("costs of the marked data source shown %+v", cl)
	}
	cl := e.costs(t, e.adminA, other.DataSourceID, M{})
	if cl.TotalCount != 2 || slices.ContainsFunc(cl.Results, func(c Cost) bool { return c.DataSourceID != other.DataSourceID }) {
		t.Errorf("costs shown %+v", cl)
	}
	for d, want := range map[string]string{ds.DataSourceID: "[]", other.DataSourceID: "[map[date:2024-01 n:2]]"} {
		if got := fmt.Sprint(e.adminA.Call(costBase+"analyze", M{"data_source_id": d, "query": M{"granularity": "MONTHLY",
			"fields": M{"n": M{"operator": "count"}}}}).OK(nil).JSON()["results"]); got != want {
			t.Errorf("analyze of %s: %s, want %s", d, got, want)
		}
	}
	// The retry finishes: everything of the data source goes, the record last.
	e.adminA.Call(dsBase+"deregister", M{"data_source_id": ds.DataSourceID}).OK(nil)
	for _, c := range []string{jobs, tasks, costs, rules, dataSources} {
		if n := e.count(t, c, bson.E{Key: "data_source_id", Value: ds.DataSourceID}); n != 0 {
			t.Errorf("%s: %d left", c, n)
		}
	}
	if e.count(t, dataSources, bson.E{Key: "_id", Value: ds.DataSourceID}) != 0 {
		t.Error("the record stays")
	}
	e.adminA.Call(dsBase+"deregister", M{"data_source_id": ds.DataSourceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := e.costs(t, e.adminA, other.DataSourceID, M{}).TotalCount; n != 2 {
		t.Errorf("%d costs of the other data source", n)
	}
}

// A changed window's filter goes into a delete of costs: a get_tasks reply
// whose window names a field that is not a cost field a window may filter
// on, or compares with anything but a scalar, fails the job at once, with
// no task stored and no row deleted.
func TestChangedFilterRefused(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	ds := e.register(t, e.adminA, domainSource("aws"))
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(2, "2024-01", "old")}})
	if j := e.waitJob(t, e.adminA, e.sync(t, e.adminA, ds.DataSourceID, "").JobID, finished); j.Status != "SUCCESS" {
		t.Fatalf("job %+v", j)
	}
	for _, c := range []struct {
		name string
		win  M
	}{
		{"operator", M{"start": "2024-01", "filter": M{"provider": M{"$ne": "gcp"}}}},
		{"top-level operator", M{"start": "2024-01", "filter": M{"$where": "true"}}},
		{"unknown field", M{"start": "2024-01", "filter": M{"job_id": "job-x"}}},
		{"nested field", M{"start": "2024-01", "filter": M{"tags.team": "web"}}},
		{"list value", M{"start": "2024-01", "filter": M{"provider": []any{"aws"}}}},
		{"not an object", M{"start": "2024-01", "filter": "provider"}},
		{"no start", M{"filter": M{"provider": "aws"}}},
		{"bad end", M{"start": "2024-01", "end": "soon"}},
	} {
		for _, asTask := range []bool{false, true} {
			reply := tasksReply(1, c.win)
			if asTask {
				reply = twoTasks(nil, c.win)
			}
			e.plugin.Script(getTasksMethod, reply)
			tasksBefore := e.count(t, tasks)
			j := e.sync(t, e.adminA, ds.DataSourceID, "")
			if j.Status != "FAILURE" || j.ErrorCode != "ERROR_GET_JOB_TASKS" {
				t.Errorf("%s (task %v): job %+v", c.name, asTask, j)
			}
			if n := e.count(t, tasks); n != tasksBefore {
				t.Errorf("%s (task %v): %d tasks stored", c.name, asTask, n-tasksBefore)
			}
			if n := e.costs(t, e.adminA, ds.DataSourceID, M{}).TotalCount; n != 2 || e.count(t, costs) != 2 {
				t.Errorf("%s (task %v): %d costs shown, %d stored", c.name, asTask, n, e.count(t, costs))
			}
		}
	}
}
