package costanalysis_test

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
)

const taskBase = "/cost-analysis/v1/job-task/"

// JobTask is the JobTaskInfo as a client reads it.
type JobTask struct {
	JobTaskID    string  `json:"job_task_id"`
	Status       string  `json:"status"`
	Options      M       `json:"options"`
	CreatedCount int     `json:"created_count"`
	ErrorCode    string  `json:"error_code"`
	ErrorMessage string  `json:"error_message"`
	JobID        string  `json:"job_id"`
	DataSourceID string  `json:"data_source_id"`
	DomainID     string  `json:"domain_id"`
	WorkspaceID  string  `json:"workspace_id"`
	CreatedAt    string  `json:"created_at"`
	StartedAt    *string `json:"started_at"`
	FinishedAt   *string `json:"finished_at"`
}

type taskList struct {
	Results    []JobTask `json:"results"`
	TotalCount int       `json:"total_count"`
}

func (e *env) jobTasks(t *testing.T, c *testkit.Client, body M) taskList {
	t.Helper()
	var l taskList
	c.Call(taskBase+"list", body).OK(&l)
	return l
}

// workspacesOf is the sorted workspace_id of each task.
func workspacesOf(l taskList) []string {
	var out []string
	for _, x := range l.Results {
		out = append(out, x.WorkspaceID)
	}
	slices.Sort(out)
	return out
}

// Tasks are read as jobs are: a workspace caller sees its workspace's and
// the domain's, never another workspace's or another domain's.
func TestJobTaskReads(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, noWorkers: true}) // the tasks stay PENDING
	dsA := e.register(t, e.adminA, domainSource("aws"))
	w1 := e.register(t, e.ownerA1, workspaceSource("w1", ""))
	w2 := e.register(t, e.ownerA2, workspaceSource("w2", ""))
	dsB := e.register(t, e.adminB, domainSource("b"))
	e.plugin.Script(getTasksMethod, tasksReply(2))
	jA := e.sync(t, e.adminA, dsA.DataSourceID, "")
	j1 := e.sync(t, e.ownerA1, w1.DataSourceID, "")
	e.sync(t, e.ownerA2, w2.DataSourceID, "")
	jB := e.sync(t, e.adminB, dsB.DataSourceID, "")

	all := e.jobTasks(t, e.adminA, M{})
	if got := workspacesOf(all); !slices.Equal(got, []string{"*", "*", "workspace-1", "workspace-1", "workspace-2", "workspace-2"}) {
		t.Fatalf("domain admin sees %v", got)
	}
	for _, x := range all.Results {
		if x.DomainID != "domain-a" || x.Status != "PENDING" || x.StartedAt != nil || x.FinishedAt != nil || x.CreatedAt == "" {
			t.Errorf("task %+v", x)
		}
	}
	for _, c := range []struct {
		name   string
		c      *testkit.Client
		want   []string
		domain string
	}{
		{"member of workspace-1", e.memberA1, []string{"*", "*", "workspace-1", "workspace-1"}, "domain-a"},
		{"owner of workspace-2", e.ownerA2, []string{"*", "*", "workspace-2", "workspace-2"}, "domain-a"},
		{"domain-b", e.adminB, []string{"*", "*"}, "domain-b"},
	} {
		l := e.jobTasks(t, c.c, M{})
		if got := workspacesOf(l); !slices.Equal(got, c.want) {
			t.Errorf("%s sees %v", c.name, got)
		}
		for _, x := range l.Results {
			if x.DomainID != c.domain {
				t.Errorf("%s sees %+v", c.name, x)
			}
		}
	}
	// The filters, ANDed with the caller's scope.
	var w1Task, domainTask, bTask JobTask
	for _, f := range []struct {
		c    *testkit.Client
		body M
		want int
	}{
		{e.adminA, M{"job_id": j1.JobID}, 2},
		{e.adminA, M{"data_source_id": w2.DataSourceID}, 2},
		{e.adminA, M{"workspace_id": "workspace-1"}, 2},
		{e.adminA, M{"status": "PENDING"}, 6},
		{e.adminA, M{"status": "SUCCESS"}, 0},
		{e.adminA, M{"job_id": jB.JobID}, 0},
		{e.ownerA1, M{"workspace_id": "workspace-2"}, 0},
		{e.adminA, M{"query": M{"filter": []M{{"k": "options.account_id", "v": "acct-1", "o": "eq"}}}}, 3},
	} {
		if l := e.jobTasks(t, f.c, f.body); l.TotalCount != f.want || len(l.Results) != f.want {
			t.Errorf("list %v: %d tasks, want %d", f.body, l.TotalCount, f.want)
		}
	}
	w1Task = e.jobTasks(t, e.memberA1, M{"job_id": j1.JobID}).Results[0]
	domainTask = e.jobTasks(t, e.adminA, M{"job_id": jA.JobID}).Results[0]
	bTask = e.jobTasks(t, e.adminB, M{}).Results[0]
	if l := e.jobTasks(t, e.adminA, M{"job_task_id": w1Task.JobTaskID}); l.TotalCount != 1 || l.Results[0].JobTaskID != w1Task.JobTaskID {
		t.Errorf("list by job_task_id %+v", l)
	}
	only := e.adminA.Call(taskBase+"list", M{"query": M{"only": []string{"job_task_id", "status"}, "page": M{"limit": 1}}}).OK(nil).JSON()
	// only keeps the fields asked for and the sort key.
	if r := only["results"].([]any); len(r) != 1 || len(r[0].(map[string]any)) != 3 || r[0].(map[string]any)["created_at"] == nil ||
		only["total_count"] != float64(6) {
		t.Errorf("only: %v", only)
	}

	// get answers JobTaskInfo's fields, no bookkeeping, and no secret.
	res := e.memberA1.Call(taskBase+"get", M{"job_task_id": w1Task.JobTaskID}).OK(nil)
	var keys []string
	for k := range res.JSON() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"created_at", "created_count", "data_source_id", "domain_id", "error_code", "error_message", "finished_at",
		"job_id", "job_task_id", "options", "started_at", "status", "workspace_id"}; !slices.Equal(keys, want) {
		t.Errorf("JobTaskInfo fields %v, want %v", keys, want)
	}
	if bytes.Contains(res.Body, []byte("hunter2")) {
		t.Errorf("a task shows the secret data: %s", res.Body)
	}
	var got JobTask
	e.memberA1.Call(taskBase+"get", M{"job_task_id": w1Task.JobTaskID}).OK(&got)
	if !reflect.DeepEqual(got, w1Task) || got.JobID != j1.JobID || got.DataSourceID != w1.DataSourceID || got.WorkspaceID != "workspace-1" ||
		!reflect.DeepEqual(got.Options, M{"account_id": got.Options["account_id"], "start": "2024-01-01"}) {
		t.Errorf("get %+v, listed %+v", got, w1Task)
	}
	e.ownerA1.Call(taskBase+"get", M{"job_task_id": domainTask.JobTaskID}).OK(nil)
	e.adminB.Call(taskBase+"get", M{"job_task_id": bTask.JobTaskID}).OK(nil)

	// stat, scoped the same way.
	byWorkspace := M{"query": M{"aggregate": []M{{"group": M{"keys": []M{{"key": "workspace_id", "name": "w"}},
		"fields": []M{{"operator": "count", "name": "n"}}}}, {"sort": M{"key": "w"}}}}}
	for _, s := range []struct {
		name string
		c    *testkit.Client
		want string
	}{
		{"domain admin", e.adminA, "[map[n:2 w:*] map[n:2 w:workspace-1] map[n:2 w:workspace-2]]"},
		{"member of workspace-1", e.memberA1, "[map[n:2 w:*] map[n:2 w:workspace-1]]"},
		{"owner of workspace-2", e.ownerA2, "[map[n:2 w:*] map[n:2 w:workspace-2]]"},
		{"domain-b", e.adminB, "[map[n:2 w:*]]"},
	} {
		if got := fmt.Sprint(s.c.Call(taskBase+"stat", byWorkspace).OK(nil).JSON()["results"]); got != s.want {
			t.Errorf("stat by %s: %s, want %s", s.name, got, s.want)
		}
	}

	cases := []struct {
		name   string
		c      *testkit.Client
		path   string
		body   any
		status int
		code   string
	}{
		{"get without id", e.adminA, "get", M{}, 400, errs.RequiredParameter},
		{"get id of wrong type", e.adminA, "get", M{"job_task_id": 5}, 400, errs.InvalidParameterType},
		{"get unknown field", e.adminA, "get", M{"job_task_id": w1Task.JobTaskID, "attempt": 1}, 400, errs.InvalidParameter},
		{"get not JSON", e.adminA, "get", "[1]", 400, errs.JSONFormat},
		{"get unknown", e.adminA, "get", M{"job_task_id": "job-task-000000000000"}, 404, errs.NotFoundCode},
		{"get other workspace's", e.ownerA2, "get", M{"job_task_id": w1Task.JobTaskID}, 404, errs.NotFoundCode},
		{"get other domain's", e.adminB, "get", M{"job_task_id": w1Task.JobTaskID}, 404, errs.NotFoundCode},
		{"get other domain's by admin a", e.adminA, "get", M{"job_task_id": bTask.JobTaskID}, 404, errs.NotFoundCode},
		{"list unknown field", e.adminA, "list", M{"bogus": 1}, 400, errs.InvalidParameter},
		{"list bad status", e.adminA, "list", M{"status": "DONE"}, 400, errs.InvalidParameter},
		{"list job_id of wrong type", e.adminA, "list", M{"job_id": 7}, 400, errs.InvalidParameterType},
		{"list bad query", e.adminA, "list", M{"query": M{"page": "x"}}, 400, errs.InvalidParameterType},
		{"list bad value on the attempt", e.adminA, "list", M{"query": M{"filter": []M{{"k": "attempt", "v": "1", "o": "in"}}}}, 400, errs.OperatorListType},
		{"stat without query", e.adminA, "stat", M{}, 400, errs.RequiredParameter},
		{"stat unknown field", e.adminA, "stat", M{"query": M{"aggregate": []M{{"count": M{"name": "n"}}}}, "job_id": "x"}, 400, errs.InvalidParameter},
		{"stat query of wrong type", e.adminA, "stat", M{"query": "count"}, 400, errs.InvalidParameterType},
		{"stat over the attempt", e.adminA, "stat", M{"query": M{"aggregate": []M{{"group": M{"fields": []M{{"key": "attempt", "operator": "max", "name": "a"}}}}}}}, 400, errs.InvalidParameter},
		{"anonymous get", e.anon, "get", M{"job_task_id": w1Task.JobTaskID}, 401, errs.AuthenticateFailure},
		{"anonymous list", e.anon, "list", M{}, 401, errs.AuthenticateFailure},
		{"anonymous stat", e.anon, "stat", byWorkspace, 401, errs.AuthenticateFailure},
	}
	for _, tc := range cases {
		t.Log(tc.name)
		tc.c.Call(taskBase+tc.path, tc.body).Fails(tc.status, tc.code)
	}
	// Stored fields the Info leaves out (attempt, the keys seen) answer as
	// a field no task has: nothing is read from them.
	var every, hidden struct {
		TotalCount int `json:"total_count"`
	}
	e.adminA.Call(taskBase+"list", M{}).OK(&every)
	e.adminA.Call(taskBase+"list", M{"query": M{"filter": []M{{"k": "attempt", "v": true, "o": "exists"}}}}).OK(&hidden)
	if every.TotalCount == 0 || hidden.TotalCount != 0 {
		t.Fatalf("attempt exists: %d of %d tasks", hidden.TotalCount, every.TotalCount)
	}
	e.adminA.Call(taskBase+"list", M{"query": M{"filter": []M{{"k": "attempt", "v": nil, "o": "eq"}}, "sort": []M{{"key": "tag_keys"}}}}).OK(&hidden)
	if hidden.TotalCount != every.TotalCount {
		t.Fatalf("attempt eq null: %d of %d tasks", hidden.TotalCount, every.TotalCount)
	}
	// Reads change nothing: the same eight tasks, all still waiting.
	if n, p := e.count(t, tasks), e.count(t, tasks, bson.E{Key: "status", Value: "PENDING"}); n != 8 || p != 8 {
		t.Fatalf("%d tasks, %d PENDING after the reads", n, p)
	}
}

// A job cancelled while the plugin splits it (get_tasks) never queues its
// tasks: they are CANCELED with it, not PENDING for good.
func TestCancelWhileGetTasks(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	ds := e.register(t, e.adminA, domainSource("aws"))
	reply := tasksReply(2)
	reply.Delay = time.Second
	e.plugin.Script(getTasksMethod, reply)
	done := make(chan *testkit.Response, 1)
	go func() { done <- e.adminA.Call(dsBase+"sync", M{"data_source_id": ds.DataSourceID}) }()
	var running struct {
		Results []Job `json:"results"`
	}
	testkit.Eventually(t, waitBound, "a running job", func() bool {
		e.adminA.Call(jobBase+"list", M{"data_source_id": ds.DataSourceID, "status": "IN_PROGRESS"}).OK(&running)
		return len(running.Results) != 0
	})
	id := running.Results[0].JobID
	e.adminA.Call(jobBase+"cancel", M{"job_id": id}).OK(nil)
	var r *testkit.Response
	select {
	case r = <-done:
	case <-time.After(waitBound):
		t.Fatal("sync did not answer")
	}
	var j Job
	r.OK(&j)
	if j.JobID != id || j.Status != "CANCELED" || j.TotalTasks != 2 {
		t.Fatalf("sync answered %+v", j)
	}
	l := e.jobTasks(t, e.adminA, M{"job_id": id})
	if l.TotalCount != 2 {
		t.Fatalf("%d tasks", l.TotalCount)
	}
	for _, x := range l.Results {
		if x.Status != "CANCELED" || x.FinishedAt == nil {
			t.Fatalf("task %+v of a job cancelled before its tasks were queued", x)
		}
	}
	e.adminA.Call(jobBase+"get", M{"job_id": id}).OK(&j)
	if j.RemainedTasks != 0 {
		t.Fatalf("job %+v: no task remains", j)
	}
}
