package costanalysis_test

import (
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/job"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/worker"
)

// rows is a chunk of n cost rows of a month, labelled tag so a test can
// tell which reply stored them.
func rows(n int, month, tag string) M {
	out := make([]any, n)
	for i := range n {
		out[i] = M{"cost": float64(i) + 0.5, "usage_quantity": 2, "usage_unit": "Hrs", "provider": "aws", "region_code": "us-east-1",
			"product": "Amazon EC2", "usage_type": "BoxUsage", "resource": fmt.Sprintf("i-%s-%d", tag, i),
			"tags": M{"batch": tag, "team": []string{"web", "db"}[i%2]}, "additional_info": M{"Account ID": "111"},
			"data": M{"raw": i}, "billed_date": fmt.Sprintf("%s-%02d", month, i%28+1)}
	}
	return M{"results": out}
}

func tasksReply(n int, changed ...M) fakeplugin.Reply {
	ts := make([]any, n)
	for i := range n {
		ts[i] = M{"task_options": M{"account_id": fmt.Sprintf("acct-%d", i), "start": "2024-01-01"}}
	}
	ch := make([]any, len(changed))
	for i, c := range changed {
		ch[i] = c
	}
	return fakeplugin.Reply{Result: M{"tasks": ts, "changed": ch, "synced_accounts": []any{M{"account_id": "111", "name": "prod"}}}}
}

type costList struct {
	Results    []Cost `json:"results"`
	TotalCount int    `json:"total_count"`
}

// costs lists the costs of data source dsID (upstream requires one).
func (e *env) costs(t *testing.T, c *testkit.Client, dsID string, body M) costList {
	t.Helper()
	var l costList
	body = maps.Clone(body)
	body["data_source_id"] = dsID
	c.Call(costBase+"list", body).OK(&l)
	return l
}

func (e *env) sync(t *testing.T, c *testkit.Client, dsID string, start string) Job {
	t.Helper()
	body := M{"data_source_id": dsID}
	if start != "" {
		body["start"] = start
	}
	var j Job
	c.Call(dsBase+"sync", body).OK(&j)
	return j
}

func TestSyncStoresCosts(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	e.services.projects["domain-a"] = []M{{"project_id": "project-web", "name": "web", "workspace_id": "workspace-1"},
		{"project_id": "project-db", "name": "db", "workspace_id": "workspace-2"}}
	ds := e.register(t, e.adminA, domainSource("aws"))
	// Rows of team web go to project web (workspace-1); every row gets a label.
	e.createRule(t, e.adminA, M{"data_source_id": ds.DataSourceID, "name": "web", "conditions_policy": "ALL", "resource_group": "DOMAIN",
		"conditions": []M{{"key": "tags.team", "value": "web", "operator": "eq"}},
		"actions":    M{"match_project": M{"source": "tags.team", "target": "name"}}, "options": M{"stop_processing": true}})
	e.createRule(t, e.adminA, M{"data_source_id": ds.DataSourceID, "name": "label", "conditions_policy": "ALWAYS", "resource_group": "DOMAIN",
		"actions": M{"add_additional_info": M{"label": "custom"}}})
	e.plugin.Script(getTasksMethod, tasksReply(2))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-01", "a"), rows(2, "2024-01", "b")}})
	j := e.sync(t, e.adminA, ds.DataSourceID, "2024-01")
	if !strings.HasPrefix(j.JobID, "job-") || j.TotalTasks != 2 || j.DataSourceID != ds.DataSourceID || j.WorkspaceID != "*" ||
		j.ResourceGroup != "DOMAIN" || j.Options["start"] != "2024-01" || len(j.SyncedAccounts) != 1 || j.SyncedAccounts[0]["account_id"] != "111" {
		t.Fatalf("job %+v", j)
	}
	j = e.waitJob(t, e.adminA, j.JobID, finished)
	if j.Status != "SUCCESS" || j.RemainedTasks != 0 || j.FinishedAt == nil || j.ErrorCode != "" {
		t.Fatalf("finished job %+v", j)
	}
	// What the plugin was sent.
	gt := e.plugin.Calls(getTasksMethod)
	if len(gt) != 1 || gt[0].Request["start"] != "2024-01" || gt[0].Request["domain_id"] != "domain-a" ||
		!reflect.DeepEqual(gt[0].Request["secret_data"], M{"aws_secret_access_key": "hunter2-secret"}) ||
		!reflect.DeepEqual(gt[0].Request["options"], M{"region": "us-east-1", "secret_type": "MANUAL"}) {
		t.Errorf("get_tasks %+v", gt)
	}
	gd := e.plugin.Calls(getDataMethod)
	var accounts []string
	for _, c := range gd {
		to, _ := c.Request["task_options"].(map[string]any)
		accounts = append(accounts, fmt.Sprint(to["account_id"]))
		if c.Request["domain_id"] != "domain-a" || c.Request["secret_data"] == nil {
			t.Errorf("get_data request %+v", c.Request)
		}
	}
	slices.Sort(accounts)
	if !slices.Equal(accounts, []string{"acct-0", "acct-1"}) {
		t.Errorf("get_data task options %v", accounts)
	}
	// Ten rows, each stamped, each changed by the rules in order.
	l := e.costs(t, e.adminA, ds.DataSourceID, M{"query": M{"page": M{"limit": 100}}})
	if l.TotalCount != 10 {
		t.Fatalf("%d costs", l.TotalCount)
	}
	ids := map[string]bool{}
	for _, c := range l.Results {
		ids[c.CostID] = true
		if c.JobID != j.JobID || !strings.HasPrefix(c.JobTaskID, "job-task-") || c.DataSourceID != ds.DataSourceID || c.DomainID != "domain-a" ||
			c.Currency != "USD" || c.BilledMonth != "2024-01" || c.BilledYear != "2024" || c.UsageQuantity != 2 || c.Provider != "aws" {
			t.Errorf("cost %+v", c)
		}
		if c.AdditionalInfo["managed"] != "yes" { // the MANAGED rule, first
			t.Errorf("cost %s: no managed label: %v", c.CostID, c.AdditionalInfo)
		}
		switch c.Tags["team"] {
		case "web": // matched project web, then stop_processing: no label
			if c.ProjectID != "project-web" || c.WorkspaceID != "workspace-1" || c.AdditionalInfo["label"] != nil {
				t.Errorf("web row %+v", c)
			}
		case "db":
			if c.ProjectID != "" || c.WorkspaceID != "*" || c.AdditionalInfo["label"] != "custom" {
				t.Errorf("db row %+v", c)
			}
		default:
			t.Errorf("row without team %+v", c)
		}
	}
	if len(ids) != 10 {
		t.Errorf("%d distinct ids", len(ids))
	}
	// Workspace callers see the rows mapped to their workspace only.
	if n := e.costs(t, e.ownerA1, ds.DataSourceID, M{}).TotalCount; n != 6 { // team web: rows 0 and 2 of a, row 0 of b, per task
		t.Errorf("workspace-1 sees %d costs", n)
	}
	if n := e.costs(t, e.ownerA2, ds.DataSourceID, M{}).TotalCount; n != 0 {
		t.Errorf("workspace-2 sees %d costs", n)
	}
	if n := e.costs(t, e.adminB, ds.DataSourceID, M{}).TotalCount; n != 0 {
		t.Errorf("domain-b sees %d costs", n)
	}
	var one Cost
	e.adminA.Call(costBase+"get", M{"cost_id": l.Results[0].CostID}).OK(&one)
	e.adminB.Call(costBase+"get", M{"cost_id": l.Results[0].CostID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// stat: the sum by project.
	st := e.adminA.Call(costBase+"stat", M{"data_source_id": ds.DataSourceID, "query": M{"aggregate": []M{{"group": M{"keys": []M{{"key": "project_id", "name": "p"}},
		"fields": []M{{"key": "cost", "operator": "sum", "name": "total"}}}}, {"sort": M{"key": "p"}}}}}).OK(nil).JSON()
	if fmt.Sprint(st["results"]) != "[map[p: total:6] map[p:project-web total:7]]" {
		t.Errorf("stat %v", st["results"])
	}
	// The data source knows the sync and the keys seen.
	var got DataSource
	e.adminA.Call(dsBase+"get", M{"data_source_id": ds.DataSourceID}).OK(&got)
	if got.LastSynchronizedAt == nil || !slices.Equal(got.CostTagKeys, []string{"batch", "team"}) ||
		!slices.Equal(got.CostAdditionalInfoKeys, []string{"Account ID", "label", "managed"}) || !slices.Equal(got.CostDataKeys, []string{"raw"}) {
		t.Errorf("data source after sync %+v", got)
	}
	// job list and stat
	var jl struct {
		Results    []Job `json:"results"`
		TotalCount int   `json:"total_count"`
	}
	e.memberA1.Call(jobBase+"list", M{"data_source_id": ds.DataSourceID, "status": "SUCCESS"}).OK(&jl)
	if jl.TotalCount != 1 || jl.Results[0].JobID != j.JobID {
		t.Errorf("job list %+v", jl)
	}
	e.adminB.Call(jobBase+"list", M{}).OK(&jl)
	if jl.TotalCount != 0 {
		t.Errorf("domain-b sees jobs %+v", jl)
	}
	e.adminA.Call(jobBase+"stat", M{"query": M{"aggregate": []M{{"count": M{"name": "n"}}}}}).OK(nil)
	// A second sync that says January changed replaces January's costs.
	e.plugin.Script(getTasksMethod, tasksReply(1, M{"start": "2024-01"}))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(4, "2024-01", "new")}})
	j2 := e.waitJob(t, e.adminA, e.sync(t, e.adminA, ds.DataSourceID, "").JobID, finished)
	if j2.Status != "SUCCESS" || len(j2.Changed) != 1 || j2.Changed[0]["start"] != "2024-01" {
		t.Fatalf("second job %+v", j2)
	}
	l = e.costs(t, e.adminA, ds.DataSourceID, M{})
	if l.TotalCount != 4 {
		t.Fatalf("%d costs after the January resync, want 4", l.TotalCount)
	}
	for _, c := range l.Results {
		if c.JobID != j2.JobID || c.Tags["batch"] != "new" {
			t.Errorf("old cost kept %+v", c)
		}
	}
	// No task: SUCCESS at once.
	e.plugin.Script(getTasksMethod, tasksReply(0))
	if j3 := e.sync(t, e.adminA, ds.DataSourceID, ""); j3.Status != "SUCCESS" || j3.TotalTasks != 0 {
		t.Fatalf("job without tasks %+v", j3)
	}
	// deregister removes jobs, tasks and costs.
	e.adminA.Call(dsBase+"deregister", M{"data_source_id": ds.DataSourceID}).OK(nil)
	for _, c := range []string{jobs, tasks, costs, rules, dataSources} {
		if n := e.count(t, c); n != 0 {
			t.Errorf("%s: %d left after deregister", c, n)
		}
	}
}

func TestSyncDuplicateAndCancel(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, workers: heldTasks})
	ds := e.register(t, e.adminA, domainSource("aws"))
	// Two tasks: the first call streams and ends, the second streams one
	// chunk and then hangs.
	e.plugin.Script(getTasksMethod, tasksReply(2))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-02", "fast")}},
		fakeplugin.Reply{Stream: []M{rows(2, "2024-02", "slow")}, Hang: true})
	j := e.sync(t, e.adminA, ds.DataSourceID, "")
	// A second sync while it runs is refused, and stores no job.
	e.adminA.Call(dsBase+"sync", M{"data_source_id": ds.DataSourceID}).Fails(http.StatusConflict, errs.DuplicateJob)
	if n := e.count(t, jobs); n != 1 {
		t.Fatalf("%d jobs", n)
	}
	// Wait for the fast task to finish and the slow one to store its chunk.
	testkit.Eventually(t, waitBound, "the fast task done and the slow one's chunk stored", func() bool {
		return e.count(t, tasks, bson.E{Key: "status", Value: "SUCCESS"}) == 1 && e.count(t, costs, bson.E{Key: "tags.batch", Value: "slow"}) == 2
	})
	// Cancel by someone who may not: refused.
	e.ownerA1.Call(jobBase+"cancel", M{"job_id": j.JobID}).Fails(http.StatusForbidden, errs.PermissionDenied)
	e.adminB.Call(jobBase+"cancel", M{"job_id": j.JobID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var c Job
	e.adminA.Call(jobBase+"cancel", M{"job_id": j.JobID}).OK(&c)
	if c.Status != "CANCELED" || c.FinishedAt == nil {
		t.Fatalf("cancelled %+v", c)
	}
	e.adminA.Call(jobBase+"cancel", M{"job_id": j.JobID}).Fails(http.StatusConflict, errs.JobState)
	// The job shows no row from the cancel on; the slow task stops, and
	// then every row of the job is deleted, the finished task's too.
	if l := e.costs(t, e.adminA, ds.DataSourceID, M{}); l.TotalCount != 0 {
		t.Fatalf("%d costs shown after cancel, want none", l.TotalCount)
	}
	testkit.Eventually(t, waitBound, "the hanging task stopped", func() bool { return e.count(t, tasks, bson.E{Key: "status", Value: "CANCELED"}) == 1 })
	if err := testkit.Within(waitBound, func() bool { return e.count(t, costs) == 0 }); err != nil {
		t.Fatalf("%d rows of the cancelled job left (%v)", e.count(t, costs), err)
	}
	// The plugin sees the cut when its stream's context ends, which may
	// come a moment after the task is CANCELED: waited for, bounded.
	cut := func() bool {
		for _, call := range e.plugin.Calls(getDataMethod) {
			if call.Cancelled {
				return true
			}
		}
		return false
	}
	testkit.Eventually(t, waitBound, "the hanging stream cut", cut)
	final := e.waitJob(t, e.adminA, j.JobID, func(j Job) bool { return j.RemainedTasks == 0 })
	if final.Status != "CANCELED" {
		t.Fatalf("job %+v", final)
	}
	// A new sync may start now.
	e.plugin.Script(getTasksMethod, tasksReply(0))
	e.sync(t, e.adminA, ds.DataSourceID, "")
}

// The data source's running job is one claim on its document: of
// concurrent syncs one starts; a claim whose job was never stored holds
// for a minute, then frees; a claim whose job finished without clearing
// it frees at once.
func TestSyncRunningClaim(t *testing.T) {
	e := setupWith(t, options{bus: true, workers: heldTasks})
	ds := e.register(t, e.adminA, domainSource("aws"))
	claim := func(job string, since time.Time) {
		t.Helper()
		if _, err := e.db.Collection(dataSources).UpdateOne(t.Context(), bson.D{{Key: "_id", Value: ds.DataSourceID}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "running_job", Value: job}, {Key: "running_since", Value: since}}}}); err != nil {
			t.Fatal(err)
		}
	}
	claim("job-ghost", time.Now().UTC())
	e.adminA.Call(dsBase+"sync", M{"data_source_id": ds.DataSourceID}).Fails(http.StatusConflict, errs.DuplicateJob)
	if n := e.count(t, jobs); n != 0 {
		t.Fatalf("%d jobs stored by a refused sync", n)
	}
	claim("job-ghost", time.Now().UTC().Add(-2*time.Minute))
	e.plugin.Script(getTasksMethod, tasksReply(0))
	first := e.sync(t, e.adminA, ds.DataSourceID, "")
	if first.Status != "SUCCESS" {
		t.Fatalf("sync after a stale claim: %+v", first)
	}
	if got := e.raw(t, dataSources, ds.DataSourceID)["running_job"]; got != nil {
		t.Fatalf("a finished job left its claim: %v", got)
	}
	claim(first.JobID, time.Now().UTC()) // its clear lost
	e.plugin.Script(getTasksMethod, tasksReply(0))
	e.sync(t, e.adminA, ds.DataSourceID, "")
	// Concurrent syncs while the first one started runs: one wins.
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(1, "2024-02", "slow")}, Hang: true})
	before := e.count(t, jobs)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	var won []*testkit.Response
	for range 6 {
		wg.Go(func() {
			r := e.adminA.CallQueued(dsBase+"sync", M{"data_source_id": ds.DataSourceID})
			mu.Lock()
			codes[r.Status]++
			if r.Status == http.StatusOK {
				won = append(won, r)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, r := range won { // its hanging task stops with it
		var j Job
		r.OK(&j)
		e.adminA.Call(jobBase+"cancel", M{"job_id": j.JobID}).OK(nil)
	}
	if codes[http.StatusOK] != 1 || codes[http.StatusConflict] != 5 {
		t.Fatalf("concurrent syncs answered %v, want one 200 and five 409", codes)
	}
	if n := e.count(t, jobs); n != before+1 {
		t.Fatalf("%d jobs stored by concurrent syncs, want one", n-before)
	}
}

func TestJobTimeout(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, jobTimeout: 1500 * time.Millisecond})
	ds := e.register(t, e.adminA, domainSource("aws"))
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(2, "2024-03", "t")}, Hang: true})
	j := e.sync(t, e.adminA, ds.DataSourceID, "")
	j = e.waitJob(t, e.adminA, j.JobID, finished)
	if j.Status != "TIMEOUT" || j.ErrorCode != "ERROR_JOB_TIMEOUT" {
		t.Fatalf("job %+v", j)
	}
	if err := testkit.Within(waitBound, func() bool {
		return e.count(t, tasks, bson.E{Key: "status", Value: "CANCELED"}) == 1 && e.count(t, costs) == 0
	}); err != nil {
		t.Fatalf("task not stopped or rows kept: %d rows (%v)", e.count(t, costs), err)
	}
	e.adminA.Call(jobBase+"cancel", M{"job_id": j.JobID}).Fails(http.StatusConflict, errs.JobState)
}

// TestCanceledTaskEndsTimeout: a task its worker left CANCELED because
// the job's time was up (the worker's watcher saw it before the sweeper
// did; TestJobTimeout met it under load) ends the job TIMEOUT, never
// SUCCESS: the task's rows are gone. The sweeper is held off, so the
// task's settling alone decides.
func TestCanceledTaskEndsTimeout(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	e := setupWith(t, options{bus: true, noWorkers: true, jobTimeout: timeout,
		jobs: func(c *job.Config) { c.SweepEvery = time.Hour }})
	ds := e.register(t, e.adminA, domainSource("aws"))
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(2, "2024-03", "t")}})
	j := e.sync(t, e.adminA, ds.DataSourceID, "")
	// What the worker writes when its watcher stops the task at the
	// job's timeout (worker.abandon), once that time has passed.
	if _, err := e.db.Collection(tasks).UpdateMany(t.Context(), bson.D{{Key: "job_id", Value: j.JobID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "CANCELED"}, {Key: "error_message", Value: "The job stopped."}}}}); err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse(time.RFC3339Nano, j.CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	// The job's time is up: it was created a timeout ago (the test moves
	// its start back rather than wait through the timeout).
	if _, err := e.db.Collection(jobs).UpdateOne(t.Context(), bson.D{{Key: "_id", Value: j.JobID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "created_at", Value: created.Add(-timeout)}}}}); err != nil {
		t.Fatal(err)
	}
	// A worker now receives the task, finds it finished and settles the job.
	e.cfg.NoWorkers = false
	e.start(t)
	if j = e.waitJob(t, e.adminA, j.JobID, finished); j.Status != "TIMEOUT" || j.ErrorCode != "ERROR_JOB_TIMEOUT" {
		t.Fatalf("job %+v", j)
	}
}

func TestTaskFailures(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	ds := e.register(t, e.adminA, domainSource("aws"))
	// A row without billed_date fails its task and the job; nothing is kept.
	bad := rows(3, "2024-04", "bad")
	delete(bad["results"].([]any)[2].(M), "billed_date")
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(2, "2024-04", "ok"), bad}})
	j := e.waitJob(t, e.adminA, e.sync(t, e.adminA, ds.DataSourceID, "").JobID, func(j Job) bool { return finished(j) && j.RemainedTasks == 0 })
	if j.Status != "FAILURE" || j.ErrorCode != "ERROR_JOB_TASK" || !strings.Contains(j.ErrorMessage, "billed_date") {
		t.Fatalf("job %+v", j)
	}
	var task struct {
		Status    string `bson:"status"`
		ErrorCode string `bson:"error_code"`
	}
	if err := e.db.Collection(tasks).FindOne(t.Context(), bson.D{}).Decode(&task); err != nil || task.Status != "FAILURE" || task.ErrorCode != errs.RequiredParameter {
		t.Fatalf("task %+v %v", task, err)
	}
	if n := e.count(t, costs); n != 0 {
		t.Fatalf("%d rows kept of a failed task", n)
	}
	// The plugin's own error code is kept.
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(1, "2024-04", "x")}, Err: fakeplugin.Fail(codes.PermissionDenied, "ERROR_AWS_ACCESS", "denied")})
	j = e.waitJob(t, e.adminA, e.sync(t, e.adminA, ds.DataSourceID, "").JobID, finished)
	if j.Status != "FAILURE" || !strings.Contains(j.ErrorMessage, "ERROR_AWS_ACCESS") || e.count(t, costs) != 0 {
		t.Fatalf("job %+v, %d rows", j, e.count(t, costs))
	}
	// get_tasks failing: the job is FAILURE at once.
	e.plugin.Script(getTasksMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.Internal, "ERROR_UNKNOWN", "boom")})
	j = e.sync(t, e.adminA, ds.DataSourceID, "")
	if j.Status != "FAILURE" || j.ErrorCode != "ERROR_GET_JOB_TASKS" || j.FinishedAt == nil {
		t.Fatalf("job %+v", j)
	}
	// Each failed job tells the domain's admins, once.
	got := e.notifications(t, 3, 10*time.Second)
	r, ok := got["failed-"+j.JobID]
	if len(got) != 3 || !ok || r.DomainID != "domain-a" || !r.DomainAdmins || r.Topic != "cost_analysis.Job" || r.NotificationType != "ERROR" ||
		r.Message.Description != "ERROR_GET_JOB_TASKS "+j.ErrorMessage || r.Check() != nil {
		t.Fatalf("notification requests %+v", got)
	}
	// The notice is marked pending by the write that fails the job and
	// cleared once recorded (sendFailureNotice alone clears it); one left
	// by a crash in between is recorded by the sweep.
	if n := e.count(t, jobs, bson.E{Key: "failure_notice", Value: true}); n != 0 {
		t.Fatalf("%d failed jobs left with their notice pending", n)
	}
	old := time.Now().UTC().Add(-2 * time.Minute)
	if _, err := e.db.Collection(jobs).UpdateOne(t.Context(), bson.D{{Key: "_id", Value: j.JobID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "failure_notice", Value: true}, {Key: "finished_at", Value: old}}}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, waitBound, "the sweep sends the notice left pending", func() bool {
		return e.count(t, jobs, bson.E{Key: "failure_notice", Value: true}) == 0
	})
	if got := e.notifications(t, 3, time.Second); len(got) != 3 {
		t.Fatalf("the notice sent again is one notice: %d requests", len(got))
	}
}

// A worker that stops in the middle of a task (its process killed): the
// task runs again elsewhere and no cost row is stored twice.
func TestTaskRunsAgainAfterWorkerStops(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, workers: heldTasks})
	ds := e.register(t, e.adminA, domainSource("aws"))
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-05", "1"), rows(3, "2024-05", "2")}, Hang: true},
		fakeplugin.Reply{Stream: []M{rows(3, "2024-05", "1"), rows(3, "2024-05", "2"), rows(3, "2024-05", "3")}})
	j := e.sync(t, e.adminA, ds.DataSourceID, "")
	testkit.Eventually(t, waitBound, "the first attempt's 6 rows", func() bool { return e.count(t, costs) == 6 })
	e.stopWorkers() // the replica goes away mid-task, its rows left behind
	if n := e.count(t, costs); n != 6 {
		t.Fatalf("%d rows after the stop", n)
	}
	e.start(t) // another replica
	j = e.waitJob(t, e.adminA, j.JobID, finished)
	if j.Status != "SUCCESS" {
		t.Fatalf("job %+v", j)
	}
	l := e.costs(t, e.adminA, ds.DataSourceID, M{"query": M{"page": M{"limit": 100}}})
	ids := map[string]bool{}
	for _, c := range l.Results {
		ids[c.CostID] = true
	}
	if l.TotalCount != 9 || len(ids) != 9 {
		t.Fatalf("%d rows (%d ids), want 9 once each", l.TotalCount, len(ids))
	}
	var task struct {
		Attempt      int `bson:"attempt"`
		CreatedCount int `bson:"created_count"`
	}
	_ = e.db.Collection(tasks).FindOne(t.Context(), bson.D{}).Decode(&task)
	if task.Attempt < 2 || task.CreatedCount != 9 {
		t.Fatalf("task %+v", task)
	}
}

func TestJobRefused(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, noWorkers: true})
	ds := e.register(t, e.adminA, domainSource("aws"))
	wds := e.register(t, e.ownerA1, workspaceSource("w", ""))
	e.plugin.Script(getTasksMethod, tasksReply(1))
	j := e.sync(t, e.adminA, ds.DataSourceID, "")
	wj := e.sync(t, e.ownerA1, wds.DataSourceID, "2024-01")
	cases := []struct {
		name   string
		c      *testkit.Client
		path   string
		body   any
		status int
		code   string
	}{
		{"cancel without id", e.adminA, "cancel", M{}, 400, errs.RequiredParameter},
		{"cancel unknown", e.adminA, "cancel", M{"job_id": "job-000000000000"}, 404, errs.NotFoundCode},
		{"member cancels the domain's", e.memberA1, "cancel", M{"job_id": j.JobID}, 403, errs.PermissionDenied},
		{"owner cancels the domain's", e.ownerA1, "cancel", M{"job_id": j.JobID}, 403, errs.PermissionDenied},
		{"cancel other workspace's", e.ownerA2, "cancel", M{"job_id": wj.JobID}, 404, errs.NotFoundCode},
		{"cancel other domain's", e.adminB, "cancel", M{"job_id": j.JobID}, 404, errs.NotFoundCode},
		{"cancel unknown field", e.adminA, "cancel", M{"job_id": j.JobID, "force": true}, 400, errs.InvalidParameter},
		{"get other domain's", e.adminB, "get", M{"job_id": j.JobID}, 404, errs.NotFoundCode},
		{"get other workspace's", e.ownerA2, "get", M{"job_id": wj.JobID}, 404, errs.NotFoundCode},
		{"list bad status", e.adminA, "list", M{"status": "DONE"}, 400, errs.InvalidParameter},
		{"list bad query", e.adminA, "list", M{"query": M{"page": "x"}}, 400, errs.InvalidParameterType},
		{"stat without query", e.adminA, "stat", M{}, 400, errs.RequiredParameter},
		{"anonymous", e.anon, "get", M{"job_id": j.JobID}, 401, errs.AuthenticateFailure},
	}
	for _, tc := range cases {
		tc.c.Call(jobBase+tc.path, tc.body).Fails(tc.status, tc.code)
	}
	for _, id := range []string{j.JobID, wj.JobID} {
		var got Job
		e.adminA.Call(jobBase+"get", M{"job_id": id}).OK(&got)
		if got.Status != "IN_PROGRESS" {
			t.Fatalf("a refused call changed job %+v", got)
		}
	}
	// The owner sees its workspace's job and the domain's; a member of the
	// workspace cancels its job (semantics.md §4.4: Job.cancel DA, WO, WM).
	var l struct {
		TotalCount int `json:"total_count"`
	}
	e.ownerA2.Call(jobBase+"list", M{}).OK(&l)
	if l.TotalCount != 1 {
		t.Fatalf("workspace-2 sees %d jobs", l.TotalCount)
	}
	var canceled Job
	e.memberA1.Call(jobBase+"cancel", M{"job_id": wj.JobID}).OK(&canceled)
	if canceled.Status != "CANCELED" {
		t.Fatalf("member's cancel answered %+v", canceled)
	}
	// cost reads refuse bad input too.
	e.adminA.Call(costBase+"list", M{"bogus": 1}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	e.adminA.Call(costBase+"list", M{"data_source_id": ds.DataSourceID, "query": M{"filter": []M{{"k": "secret", "v": []M{}, "o": "eq"}}}}).Fails(http.StatusBadRequest, errs.OperatorValueType)
	e.adminA.Call(costBase+"list", M{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	e.adminA.Call(costBase+"stat", M{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	e.adminA.Call(costBase+"get", M{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	e.adminA.Call(costBase+"get", M{"cost_id": "cost-x"}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// Deregister while a task streams: the worker notices the job is gone at
// its next look (every Poll), and the chunks it stored in between, after
// deregister deleted the costs, must go too: nothing of the data source
// is left.
func TestDeregisterWhileStreaming(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, workers: func(c *worker.Config) { c.Poll = 2 * time.Second }})
	ds := e.register(t, e.adminA, domainSource("aws"))
	chunks := make([]M, 400)
	for i := range chunks {
		chunks[i] = rows(1, "2024-01", fmt.Sprint(i))
	}
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: chunks, Interval: 5 * time.Millisecond})
	e.sync(t, e.adminA, ds.DataSourceID, "")
	mine := bson.E{Key: "data_source_id", Value: ds.DataSourceID}
	testkit.Eventually(t, waitBound, "a chunk stored by the task", func() bool { return e.count(t, costs, mine) != 0 })
	e.adminA.Call(dsBase+"deregister", M{"data_source_id": ds.DataSourceID}).OK(nil)
	if err := testkit.Within(waitBound, func() bool { return e.count(t, costs, mine) == 0 }); err != nil {
		t.Fatalf("%d costs of the deregistered data source left (%v)", e.count(t, costs, mine), err)
	}
	for _, c := range []string{jobs, tasks} {
		if n := e.count(t, c, mine); n != 0 {
			t.Errorf("%s: %d left after deregister", c, n)
		}
	}
}
