package inventory_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// TestJobAndTaskOperations: job and job-task get, list, stat and delete,
// confined to the caller's domain and workspace.
func TestJobAndTaskOperations(t *testing.T) {
	t.Parallel()
	s := setup(t)
	started := time.Now().UTC().Add(-time.Second)
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 2)})
	dom := s.createCollector(s.adminA, domainCollector())
	w1 := s.createCollector(s.ownerA1, map[string]any{"name": "W1", "resource_group": "WORKSPACE", "plugin_info": map[string]any{"plugin_id": collectorPlugin}})
	b := s.createCollector(s.adminB, domainCollector())
	jd := s.wait(s.collect(s.adminA, dom.CollectorID, "trusted-secret-adom").JobID, time.Minute)
	jw := s.wait(s.collect(s.ownerA1, w1.CollectorID, "").JobID, time.Minute)
	jb := s.waitAs(s.adminB, s.collect(s.adminB, b.CollectorID, "").JobID, time.Minute)
	if jd.Status != "SUCCESS" || jw.Status != "SUCCESS" || jb.Status != "SUCCESS" || jw.TotalTasks != 2 || jb.TotalTasks != 1 {
		t.Fatalf("jobs: %+v %+v %+v", jd, jw, jb)
	}

	ids := func(c *testkit.Client, path string, body any, field string) string {
		var l list[map[string]any]
		c.Call(path, body).OK(&l)
		var out []string
		for _, r := range l.Results {
			out = append(out, r[field].(string))
		}
		if l.TotalCount != len(out) {
			t.Fatalf("total_count %d for %d", l.TotalCount, len(out))
		}
		return strings.Join(out, " ")
	}
	byAge := map[string]any{"query": map[string]any{"sort": []any{map[string]any{"key": "created_at"}}}}
	for _, tt := range []struct {
		name   string
		caller *testkit.Client
		body   any
		want   string
	}{
		{"admin", s.adminA, byAge, jd.JobID + " " + jw.JobID},
		{"owner sees its workspace's and the domain's", s.ownerA1, byAge, jd.JobID + " " + jw.JobID},
		{"owner of workspace-2 sees the domain's", s.ownerA2, byAge, jd.JobID},
		{"domain b", s.adminB, nil, jb.JobID},
		{"by collector_id (the console's top-level filter)", s.adminA, map[string]any{"collector_id": w1.CollectorID}, jw.JobID},
		{"by status", s.adminA, map[string]any{"status": "FAILURE"}, ""},
		{"status in, created_at after", s.adminA, map[string]any{"query": map[string]any{"filter": []any{
			map[string]any{"k": "status", "v": []string{"SUCCESS", "FAILURE"}, "o": "in"},
			map[string]any{"k": "created_at", "v": "2020-01-01T00:00:00.000Z", "o": "datetime_gt"},
			map[string]any{"k": "secret_id", "v": "trusted-secret-adom", "o": "eq"}}}}, jd.JobID},
		// The console's collector page: created_at gt an ISO string compares as a date.
		{"created_at gt an ISO time", s.adminA, createdAt("gt", started.Format("2006-01-02T15:04:05.000Z")), jd.JobID + " " + jw.JobID},
		{"created_at gt an ISO time with an offset", s.adminA, createdAt("gt", started.In(time.FixedZone("KST", 9*3600)).Format(time.RFC3339)), jd.JobID + " " + jw.JobID},
		{"created_at lt an ISO time", s.adminA, createdAt("lt", started.Format(time.RFC3339)), ""},
		{"created_at gte a later ISO time", s.adminA, createdAt("gte", time.Now().UTC().Add(time.Hour).Format(time.RFC3339)), ""},
		{"created_at lte a later ISO date", s.adminA, createdAt("lte", time.Now().UTC().AddDate(0, 0, 2).Format("2006-01-02")), jd.JobID + " " + jw.JobID},
		{"created_at gt an ISO time, another domain's job", s.adminB, createdAt("gt", started.Format(time.RFC3339)), jb.JobID},
	} {
		t.Run("job list "+tt.name, func(t *testing.T) {
			if got := ids(tt.caller, "/inventory/v1/job/list", tt.body, "job_id"); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	if got := ids(s.ownerA1, "/inventory/v1/job-task/list", map[string]any{"job_id": jw.JobID, "query": map[string]any{"sort": []any{map[string]any{"key": "secret_id"}}}}, "secret_id"); got != "trusted-secret-adom trusted-secret-aw1" {
		t.Fatalf("tasks of the workspace job: %q", got)
	}
	if got := ids(s.ownerA2, "/inventory/v1/job-task/list", nil, "job_id"); got != jd.JobID {
		t.Fatalf("owner of workspace-2 sees the tasks of %q, want the domain job's only", got)
	}
	if got := ids(s.adminB, "/inventory/v1/job-task/list", map[string]any{"secret_id": "trusted-secret-b"}, "secret_id"); got != "trusted-secret-b" {
		t.Fatalf("domain b tasks %q", got)
	}
	var st struct {
		Results []map[string]any `json:"results"`
	}
	s.adminA.Call("/inventory/v1/job/stat", map[string]any{"query": map[string]any{"aggregate": []any{
		map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "status", "name": "status"}},
			"fields": []any{map[string]any{"name": "n", "operator": "count"}, map[string]any{"name": "tasks", "key": "total_tasks", "operator": "sum"}}}}}}}).OK(&st)
	if len(st.Results) != 1 || st.Results[0]["n"] != float64(2) || st.Results[0]["tasks"] != float64(3) {
		t.Fatalf("job stat: %v", st.Results)
	}
	s.adminA.Call("/inventory/v1/job-task/stat", map[string]any{"query": map[string]any{"aggregate": []any{
		map[string]any{"group": map[string]any{"fields": []any{map[string]any{"name": "created", "key": "created_count", "operator": "sum"}}}}}}}).OK(&st)
	if len(st.Results) != 1 || st.Results[0]["created"] != float64(4) {
		t.Fatalf("task stat: %v", st.Results) // 2 resources in "*" and 2 in workspace-1; the domain secret in workspace-1 updates none
	}

	var tasks list[taskOut]
	s.adminA.Call("/inventory/v1/job-task/list", map[string]any{"job_id": jw.JobID}).OK(&tasks)
	someTask := tasks.Results[0].JobTaskID
	for _, tt := range []struct {
		name   string
		caller *testkit.Client
		path   string
		body   any
		status int
		code   string
	}{
		{"job get of another domain", s.adminB, "job/get", map[string]any{"job_id": jd.JobID}, http.StatusNotFound, errs.NotFoundCode},
		{"job get of another workspace", s.ownerA2, "job/get", map[string]any{"job_id": jw.JobID}, http.StatusNotFound, errs.NotFoundCode},
		{"job get without id", s.adminA, "job/get", map[string]any{}, http.StatusBadRequest, errs.RequiredParameter},
		{"job list bad status", s.adminA, "job/list", map[string]any{"status": "DONE"}, http.StatusBadRequest, errs.InvalidParameter},
		{"job list unknown field", s.adminA, "job/list", map[string]any{"data_source_id": "ds-1"}, http.StatusBadRequest, errs.InvalidParameter},
		{"job list bad value on a hidden field", s.adminA, "job/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "task_ids", "v": "x", "o": "in"}}}}, http.StatusBadRequest, errs.OperatorListType},
		{"job stat without query", s.adminA, "job/stat", map[string]any{}, http.StatusBadRequest, errs.RequiredParameter},
		{"job delete by a member", s.memberA1, "job/delete", map[string]any{"job_id": jw.JobID}, http.StatusForbidden, errs.PermissionDenied},
		{"domain job delete by an owner", s.ownerA1, "job/delete", map[string]any{"job_id": jd.JobID}, http.StatusForbidden, errs.PermissionDenied},
		{"job delete of another domain", s.adminB, "job/delete", map[string]any{"job_id": jd.JobID}, http.StatusNotFound, errs.NotFoundCode},
		{"task get of another domain", s.adminB, "job-task/get", map[string]any{"job_task_id": someTask}, http.StatusNotFound, errs.NotFoundCode},
		{"task get of another workspace", s.ownerA2, "job-task/get", map[string]any{"job_task_id": someTask}, http.StatusNotFound, errs.NotFoundCode},
		{"task list bad status", s.adminA, "job-task/list", map[string]any{"status": "DONE"}, http.StatusBadRequest, errs.InvalidParameter},
		{"task delete by a member", s.memberA1, "job-task/delete", map[string]any{"job_task_id": someTask}, http.StatusForbidden, errs.PermissionDenied},
		{"task delete of another domain", s.adminB, "job-task/delete", map[string]any{"job_task_id": someTask}, http.StatusNotFound, errs.NotFoundCode},
		{"task stat without query", s.adminA, "job-task/stat", map[string]any{}, http.StatusBadRequest, errs.RequiredParameter},
		{"anonymous", s.anon, "job/list", nil, http.StatusUnauthorized, errs.AuthenticateFailure},
		{"user without role", s.userA, "job-task/list", nil, http.StatusForbidden, errs.PermissionDenied},
	} {
		t.Run(tt.name, func(t *testing.T) {
			jobs, tasks := s.count(jobsColl, nil), s.count(tasksColl, nil)
			tt.caller.Call("/inventory/v1/"+tt.path, tt.body).Fails(tt.status, tt.code)
			if s.count(jobsColl, nil) != jobs || s.count(tasksColl, nil) != tasks {
				t.Fatal("a refused call deleted something")
			}
		})
	}
	var tk taskOut
	s.memberA1.Call("/inventory/v1/job-task/get", map[string]any{"job_task_id": someTask}).OK(&tk)
	if tk.JobID != jw.JobID {
		t.Fatalf("task get: %+v", tk)
	}

	t.Run("deletes", func(t *testing.T) {
		s.adminA.Call("/inventory/v1/job-task/delete", map[string]any{"job_task_id": someTask}).OK(nil)
		s.adminA.Call("/inventory/v1/job-task/get", map[string]any{"job_task_id": someTask}).Fails(http.StatusNotFound, errs.NotFoundCode)
		s.ownerA1.Call("/inventory/v1/job/delete", map[string]any{"job_id": jw.JobID}).OK(nil)
		s.ownerA1.Call("/inventory/v1/job/get", map[string]any{"job_id": jw.JobID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		if n := s.count(tasksColl, nil); n != 2 { // the domain job's task and domain b's
			t.Fatalf("%d tasks after deleting a job", n)
		}
		// A collector's delete takes its jobs and tasks with it.
		s.adminA.Call("/inventory/v1/collector/delete", map[string]any{"collector_id": dom.CollectorID}).OK(nil)
		if n := s.count(jobsColl, nil); n != 1 {
			t.Fatalf("%d jobs after deleting the collector", n)
		}
		if n := s.count(tasksColl, nil); n != 1 {
			t.Fatalf("%d tasks after deleting the collector", n)
		}
		// What it collected stays.
		if n := s.count(servicesColl, nil); n != 6 {
			t.Fatalf("%d cloud services", n)
		}
	})
}

// TestJobAnalyze: the console's collector page query (jobs of the last
// five days grouped by collector, each with its jobs' statuses), confined
// to the caller's reach.
func TestJobAnalyze(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 1)})
	dom := s.createCollector(s.adminA, domainCollector())
	w1 := s.createCollector(s.ownerA1, map[string]any{"name": "W1", "resource_group": "WORKSPACE", "plugin_info": map[string]any{"plugin_id": collectorPlugin}})
	for range 2 {
		s.wait(s.collect(s.adminA, dom.CollectorID, "trusted-secret-adom").JobID, time.Minute)
	}
	s.wait(s.collect(s.ownerA1, w1.CollectorID, "trusted-secret-aw1").JobID, time.Minute)
	consoleQuery := map[string]any{"query": map[string]any{
		"filter": []any{map[string]any{"k": "created_at", "v": "now - 5d", "o": "timediff_gte"},
			map[string]any{"k": "collector_id", "v": []string{dom.CollectorID, w1.CollectorID}, "o": "in"}},
		"group_by": []any{"collector_id"},
		"fields": map[string]any{"job_status": map[string]any{"operator": "push", "fields": map[string]any{
			"status": "status", "job_id": "job_id", "total_tasks": "total_tasks", "remained_tasks": "remained_tasks", "finished_at": "finished_at"}}},
		"sort": []any{map[string]any{"key": "collector_id"}},
	}}
	var out struct {
		Results []struct {
			CollectorID string           `json:"collector_id"`
			JobStatus   []map[string]any `json:"job_status"`
		} `json:"results"`
	}
	s.adminA.Call("/inventory/v1/job/analyze", consoleQuery).OK(&out)
	perCollector := map[string]int{}
	for _, r := range out.Results {
		perCollector[r.CollectorID] = len(r.JobStatus)
		for _, js := range r.JobStatus {
			if js["status"] != "SUCCESS" || js["job_id"] == nil {
				t.Fatalf("job_status: %v", js)
			}
		}
	}
	if len(out.Results) != 2 || perCollector[dom.CollectorID] != 2 || perCollector[w1.CollectorID] != 1 {
		t.Fatalf("admin: %+v", out.Results)
	}
	s.ownerA2.Call("/inventory/v1/job/analyze", consoleQuery).OK(&out)
	if len(out.Results) != 1 || out.Results[0].CollectorID != dom.CollectorID {
		t.Fatalf("owner of workspace-2 sees the domain collector's jobs only: %+v", out.Results)
	}
	s.adminB.Call("/inventory/v1/job/analyze", consoleQuery).OK(&out)
	if len(out.Results) != 0 {
		t.Fatalf("domain b: %+v", out.Results)
	}
	var paged struct {
		Results []map[string]any `json:"results"`
		More    bool             `json:"more"`
	}
	s.adminA.Call("/inventory/v1/job/analyze", map[string]any{"query": map[string]any{"group_by": []any{"collector_id"},
		"fields": map[string]any{"n": map[string]any{"operator": "count"}}, "sort": []any{map[string]any{"key": "n", "desc": true}},
		"page": map[string]any{"limit": 1}}}).OK(&paged)
	if len(paged.Results) != 1 || !paged.More || paged.Results[0]["n"] != float64(2) {
		t.Fatalf("paged: %+v", paged)
	}
	s.adminA.Call("/inventory/v1/job/analyze", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	s.adminA.Call("/inventory/v1/job/analyze", map[string]any{"query": map[string]any{"fields": map[string]any{"n": map[string]any{"operator": "median"}}}}).Fails(http.StatusBadRequest, errs.DBQuery)
	s.adminA.Call("/inventory/v1/job/analyze", map[string]any{"query": map[string]any{"group_by": []any{"task_ids"}, "fields": map[string]any{"n": map[string]any{"operator": "count"}}}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	s.userA.Call("/inventory/v1/job/analyze", map[string]any{"query": map[string]any{}}).Fails(http.StatusForbidden, errs.PermissionDenied)
}

// createdAt is the console's job/list body with one created_at condition
// (sorted by age, a page of 15).
func createdAt(op, iso string) map[string]any {
	return map[string]any{"query": map[string]any{
		"filter": []any{map[string]any{"k": "created_at", "v": iso, "o": op}},
		"sort":   []any{map[string]any{"key": "created_at"}},
		"page":   map[string]any{"start": 1, "limit": 15},
	}}
}
