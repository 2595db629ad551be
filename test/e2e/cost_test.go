package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// testCostPlugin is the plugin id the cost-analysis container maps to the
// test plugin at cost-plugin (NUBES_PLUGIN_ENDPOINTS in stack_test.go).
const testCostPlugin = "plugin-test-cost"

const (
	costInitMethod     = "spaceone.api.cost_analysis.plugin.DataSource/init"
	costGetTasksMethod = "spaceone.api.cost_analysis.plugin.Job/get_tasks"
	costGetDataMethod  = "spaceone.api.cost_analysis.plugin.Cost/get_data"
	costDataSource     = "/cost-analysis/v1/data-source/"
)

// costChunk is a CostsInfo message of n rows labelled tag.
func costChunk(n int, tag string) map[string]any {
	rows := make([]any, n)
	for i := range n {
		rows[i] = map[string]any{"cost": 1.5, "provider": "aws", "product": "EC2", "billed_date": fmt.Sprintf("2024-06-%02d", i%28+1),
			"tags": map[string]any{"batch": tag}}
	}
	return map[string]any{"results": rows}
}

type costJob struct {
	JobID         string `json:"job_id"`
	Status        string `json:"status"`
	TotalTasks    int    `json:"total_tasks"`
	RemainedTasks int    `json:"remained_tasks"`
}

// TestCostSync drives cost jobs end to end on the test plugin: a data
// source registered from a repository plugin syncs its costs through the
// NATS work queue; a job cancelled midway stops and keeps what finished;
// a worker container killed during a sync leaves a task that runs again,
// and no cost row is stored twice.
func TestCostSync(t *testing.T) {
	needs(t, "cost-analysis", "repository", "identity")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	startRegistry(ctx, t, "cost-registry", "1.0.0")

	script := func(getData ...map[string]any) string {
		b, _ := json.Marshal(map[string]any{
			costInitMethod: []any{map[string]any{"result": map[string]any{"metadata": map[string]any{"currency": "USD", "data_source_rules": []any{
				map[string]any{"name": "label", "conditions_policy": "ALWAYS", "actions": map[string]any{"add_additional_info": map[string]any{"e2e": "yes"}}}}}}}},
			costGetTasksMethod: []any{map[string]any{"result": map[string]any{"tasks": []any{
				map[string]any{"task_options": map[string]any{"account_id": "a"}}, map[string]any{"task_options": map[string]any{"account_id": "b"}}},
				"changed": []any{map[string]any{"start": "2024-06"}}}}},
			costGetDataMethod: getData,
		})
		return string(b)
	}
	fast := map[string]any{"stream": []any{costChunk(5, "fast"), costChunk(5, "fast")}}
	control := startTestPlugin(ctx, t, "cost-plugin", script(fast))
	setScript := func(s string) {
		t.Helper()
		send(t, http.MethodPut, control+"/script", "application/json", []byte(s), http.StatusNoContent)
	}

	admin := rootAdmin(t, identityAt(t))
	admin.with(direct(st.first(t, "repository").url)).call("/repository/v1/plugin/register", map[string]any{
		"name": "Test cost", "plugin_id": testCostPlugin, "image": "nubes/test-plugin",
		"resource_type": "cost_analysis.DataSource", "registry_type": "PRIVATE_REGISTRY", "registry_url": "http://cost-registry:5000",
		"capability": map[string]any{}}).OK(nil)
	cost := st.first(t, "cost-analysis")
	ca := admin.with(direct(cost.url))
	var ds struct {
		DataSourceID string `json:"data_source_id"`
		PluginInfo   struct {
			Version string `json:"version"`
		} `json:"plugin_info"`
	}
	res := ca.call(costDataSource+"register", map[string]any{"name": "E2E costs", "resource_group": "DOMAIN",
		"plugin_info": map[string]any{"plugin_id": testCostPlugin, "secret_data": map[string]any{"key": "e2e-hunter2"}}}).OK(&ds)
	if ds.PluginInfo.Version != "1.0.0" || strings.Contains(string(res.body), "e2e-hunter2") {
		t.Fatalf("data source = %s", res.body)
	}
	waitJob := func(id string, done func(costJob) bool) costJob {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		var j costJob
		for {
			admin.with(direct(st.first(t, "cost-analysis").url)).call("/cost-analysis/v1/job/get", map[string]any{"job_id": id}).OK(&j)
			if done(j) {
				return j
			}
			if time.Now().After(deadline) {
				t.Fatalf("job = %+v", j)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	costs := func() (int, int) {
		t.Helper()
		var l struct {
			Results []struct {
				CostID         string         `json:"cost_id"`
				AdditionalInfo map[string]any `json:"additional_info"`
			} `json:"results"`
			TotalCount int `json:"total_count"`
		}
		admin.with(direct(st.first(t, "cost-analysis").url)).call("/cost-analysis/v1/cost/list", map[string]any{
			"data_source_id": ds.DataSourceID, "query": map[string]any{"page": map[string]any{"limit": 1000}}}).OK(&l)
		ids := map[string]bool{}
		for _, c := range l.Results {
			ids[c.CostID] = true
			if c.AdditionalInfo["e2e"] != "yes" {
				t.Fatalf("a row without the MANAGED rule's label: %+v", c)
			}
		}
		return l.TotalCount, len(ids)
	}

	// 1. A sync: two tasks of ten rows each.
	var j costJob
	ca.call(costDataSource+"sync", map[string]any{"data_source_id": ds.DataSourceID}).OK(&j)
	if j = waitJob(j.JobID, func(j costJob) bool { return j.Status != "IN_PROGRESS" }); j.Status != "SUCCESS" || j.TotalTasks != 2 {
		t.Fatalf("job = %+v", j)
	}
	if n, ids := costs(); n != 20 || ids != 20 {
		t.Fatalf("%d costs (%d ids), want 20", n, ids)
	}

	// 2. Cancelled midway: one task finishes, the other streams slowly;
	// neither shows while the job runs, and the cancel keeps none of them.
	slow := map[string]any{"stream": []any{costChunk(2, "slow"), costChunk(2, "slow"), costChunk(2, "slow"), costChunk(2, "slow")},
		"interval": "2s", "hang": true}
	setScript(script(map[string]any{"stream": []any{costChunk(7, "fast")}}, slow))
	ca.call(costDataSource+"sync", map[string]any{"data_source_id": ds.DataSourceID}).OK(&j)
	// Wait for the fast task to finish and the slow one to store a chunk,
	// which is not shown while its task runs.
	progressed := func() bool {
		var l struct {
			Results []struct {
				Status       string `json:"status"`
				CreatedCount int    `json:"created_count"`
			} `json:"results"`
		}
		ca.call("/cost-analysis/v1/job-task/list", map[string]any{"job_id": j.JobID}).OK(&l)
		done, held := 0, 0
		for _, x := range l.Results {
			if x.Status == "SUCCESS" {
				done++
			} else if x.Status == "IN_PROGRESS" && x.CreatedCount >= 2 {
				held++
			}
		}
		return done == 1 && held == 1
	}
	deadline := time.Now().Add(time.Minute)
	for !progressed() {
		if time.Now().After(deadline) {
			n, _ := costs()
			t.Fatalf("the second sync did not progress: %d costs", n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	// A job's rows, its finished task's included, show only once it succeeds.
	if n, _ := costs(); n != 20 {
		t.Fatalf("%d costs while a task runs, want the first job's 20: the running job's rows are not shown", n)
	}
	var c costJob
	ca.call("/cost-analysis/v1/job/cancel", map[string]any{"job_id": j.JobID}).OK(&c)
	if c.Status != "CANCELED" {
		t.Fatalf("cancelled job = %+v", c)
	}
	ca.call("/cost-analysis/v1/job/cancel", map[string]any{"job_id": j.JobID}).Fails(http.StatusConflict, "ERROR_JOB_STATE")
	waitJob(j.JobID, func(j costJob) bool { return j.RemainedTasks == 0 })
	if n, ids := costs(); n != 20 || ids != n {
		t.Fatalf("%d costs (%d ids) after the cancel, want the 20 of the first job: a cancelled job keeps no row", n, ids)
	}

	// 3. The worker container killed in the middle of a sync: the task
	// runs again after the restart and every row is there once.
	setScript(script(map[string]any{"stream": []any{costChunk(4, "k1"), costChunk(4, "k2"), costChunk(4, "k3"), costChunk(4, "k4")}, "interval": "1s"}))
	ca.call(costDataSource+"sync", map[string]any{"data_source_id": ds.DataSourceID, "start": "2024-06"}).OK(&j)
	time.Sleep(1500 * time.Millisecond) // mid-stream
	restart(t, cost, true, time.Second)
	j = waitJob(j.JobID, func(j costJob) bool { return j.Status != "IN_PROGRESS" })
	if j.Status != "SUCCESS" {
		t.Fatalf("job after the kill = %+v", j)
	}
	// June was replaced: the rows of the two tasks of this job only.
	if n, ids := costs(); n != 32 || ids != 32 {
		t.Fatalf("%d costs (%d ids) after the killed sync, want 32 once each", n, ids)
	}
	// setScript replaced the script and so forgot earlier calls: this
	// job's two tasks, and at least one of them run again.
	if calls := pluginCalls(t, control, costGetDataMethod); len(calls) < 3 {
		t.Fatalf("get_data called %d times: the killed task did not run again", len(calls))
	}
}
