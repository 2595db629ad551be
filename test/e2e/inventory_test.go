package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// testCollectorPlugin is the plugin id the inventory containers map to
// the test plugin at inv-plugin (NUBES_PLUGIN_ENDPOINTS in stack_test.go).
const testCollectorPlugin = "plugin-test-collector"

const (
	invInitMethod     = "spaceone.api.inventory.plugin.Collector/init"
	invGetTasksMethod = "spaceone.api.inventory.plugin.Job/get_tasks"
	invCollectMethod  = "spaceone.api.inventory.plugin.Collector/collect"
)

// invResource is a ResourceInfo of one cloud service.
func invResource(n int) map[string]any {
	return map[string]any{"state": "SUCCESS", "resource_type": "inventory.CloudService",
		"match_rules": map[string]any{"1": []any{"reference.resource_id", "provider", "cloud_service_type", "cloud_service_group"}},
		"resource": map[string]any{"name": fmt.Sprintf("vm-%d", n), "provider": "aws", "cloud_service_group": "EC2",
			"cloud_service_type": "Instance", "reference": map[string]any{"resource_id": fmt.Sprintf("i-%04d", n)}}}
}

type invJob struct {
	JobID         string `json:"job_id"`
	Status        string `json:"status"`
	TotalTasks    int    `json:"total_tasks"`
	RemainedTasks int    `json:"remained_tasks"`
	SuccessTasks  int    `json:"success_tasks"`
}

// TestInventoryCollect drives a collector end to end on the test plugin:
// registered in the repository, its secret a trusted account of
// identity, its job's sub-tasks shared by two inventory replicas over the
// NATS work queue; one replica is killed in the middle of a sub-task, the
// sub-task runs again, and the job completes with every resource counted
// once.
func TestInventoryCollect(t *testing.T) {
	needs(t, "inventory", "repository", "identity")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	startRegistry(ctx, t, "inv-registry", "1.0.0")

	// Every sub-task streams the same ten resources, slowly: the first to
	// write one creates it, the others update it, so a job of six
	// sub-tasks creates 10 and updates 50 whatever runs where.
	const resources, subTasks = 10, 6
	stream := make([]any, resources)
	for i := range stream {
		stream[i] = invResource(i + 1)
	}
	tasks := make([]any, subTasks)
	for i := range tasks {
		tasks[i] = map[string]any{"task_options": map[string]any{"part": i}}
	}
	script, _ := json.Marshal(map[string]any{
		invInitMethod:     []any{map[string]any{"result": map[string]any{"metadata": map[string]any{"supported_resource_type": []any{"inventory.CloudService"}}}}},
		invGetTasksMethod: []any{map[string]any{"result": map[string]any{"tasks": tasks}}},
		invCollectMethod:  []any{map[string]any{"stream": stream, "interval": "400ms"}},
	})
	control := startTestPlugin(ctx, t, "inv-plugin", string(script))

	admin := rootAdmin(t, identityAt(t))
	admin.with(direct(st.first(t, "repository").url)).call("/repository/v1/plugin/register", map[string]any{
		"name": "Test collector", "plugin_id": testCollectorPlugin, "image": "nubes/test-plugin", "provider": "aws",
		"resource_type": "inventory.Collector", "registry_type": "PRIVATE_REGISTRY", "registry_url": "http://inv-registry:5000",
		"capability": map[string]any{}}).OK(nil)
	var ta struct {
		TrustedAccountID string `json:"trusted_account_id"`
		TrustedSecretID  string `json:"trusted_secret_id"`
	}
	admin.call("/identity/v2/trusted-account/create", map[string]any{"name": "E2E AWS", "data": map[string]any{"account_id": "123456789012"}, "provider": "aws",
		"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIAE2E", "aws_secret_access_key": "e2e-inv-hunter2"},
		"resource_group": "DOMAIN"}).OK(&ta)

	first := st.first(t, "inventory")
	second := st.extraReplica(t, "inventory")
	inv := admin.with(direct(first.url))
	var c struct {
		CollectorID string `json:"collector_id"`
		Provider    string `json:"provider"`
		PluginInfo  struct {
			Version string `json:"version"`
		} `json:"plugin_info"`
	}
	inv.call("/inventory/v1/collector/create", map[string]any{"name": "E2E collector", "resource_group": "DOMAIN",
		"plugin_info": map[string]any{"plugin_id": testCollectorPlugin}}).OK(&c)
	if c.Provider != "aws" || c.PluginInfo.Version != "1.0.0" {
		t.Fatalf("collector = %+v", c)
	}
	var j invJob
	res := inv.call("/inventory/v1/collector/collect", map[string]any{"collector_id": c.CollectorID}).OK(&j)
	if j.Status != "IN_PROGRESS" || j.TotalTasks != 1 || strings.Contains(string(res.body), "hunter2") {
		t.Fatalf("collect = %s", res.body)
	}

	// Each replica runs one message at a time (NUBES_INVENTORY_WORKERS=1)
	// and a sub-task streams for 4 s: two collect calls begun within 3 s
	// of each other ran on the two replicas at once. Then the second is
	// killed in the middle of its sub-task.
	var firstCall time.Time
	shared := time.Now().Add(time.Minute)
	for time.Now().Before(shared) {
		n := len(pluginCalls(t, control, invCollectMethod))
		if n >= 1 && firstCall.IsZero() {
			firstCall = time.Now()
		}
		if n >= 2 {
			if time.Since(firstCall) > 3*time.Second {
				t.Fatalf("the second sub-task began %s after the first: the replicas did not share them", time.Since(firstCall))
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	restart(t, second, true, time.Second)

	deadline := time.Now().Add(3 * time.Minute)
	for {
		admin.with(direct(st.first(t, "inventory").url)).call("/inventory/v1/job/get", map[string]any{"job_id": j.JobID}).OK(&j)
		if j.Status != "IN_PROGRESS" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job = %+v", j)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if j.Status != "SUCCESS" || j.SuccessTasks != 1 || j.RemainedTasks != 0 {
		t.Fatalf("job after the kill = %+v", j)
	}
	var tl struct {
		Results []struct {
			Status        string `json:"status"`
			CreatedCount  int    `json:"created_count"`
			UpdatedCount  int    `json:"updated_count"`
			FailureCount  int    `json:"failure_count"`
			TotalSubTasks int    `json:"total_sub_tasks"`
			SecretID      string `json:"secret_id"`
		} `json:"results"`
	}
	inv.call("/inventory/v1/job-task/list", map[string]any{"job_id": j.JobID}).OK(&tl)
	if len(tl.Results) != 1 {
		t.Fatalf("tasks = %+v", tl)
	}
	tk := tl.Results[0]
	if tk.Status != "SUCCESS" || tk.CreatedCount != resources || tk.UpdatedCount != resources*(subTasks-1) || tk.FailureCount != 0 ||
		tk.TotalSubTasks != subTasks || tk.SecretID != ta.TrustedSecretID {
		t.Fatalf("task after the kill = %+v (want %d created, %d updated)", tk, resources, resources*(subTasks-1))
	}
	var cl struct {
		TotalCount int `json:"total_count"`
	}
	inv.call("/inventory/v1/cloud-service/list", map[string]any{"query": map[string]any{"count_only": true}}).OK(&cl)
	if cl.TotalCount != resources {
		t.Fatalf("%d cloud services, want %d", cl.TotalCount, resources)
	}
	if calls := pluginCalls(t, control, invCollectMethod); len(calls) < subTasks+1 {
		t.Fatalf("collect called %d times: the killed sub-task did not run again", len(calls))
	} else if sd, _ := calls[0].Request["secret_data"].(map[string]any); sd["aws_secret_access_key"] != "e2e-inv-hunter2" {
		t.Fatalf("the plugin did not get the trusted account's secret data: %v", calls[0].Request)
	}
	// Every sub-task is recorded once, by one replica or the other.
	done := 0
	for _, r := range []*replica{first, second} {
		n := 0
		for _, line := range strings.Split(containerLogs(t, r.c), "\n") {
			if strings.Contains(line, "inventory sub-task done") && strings.Contains(line, j.JobID) {
				n++
			}
		}
		t.Logf("replica %s recorded %d sub-tasks of the job", r.name, n)
		done += n
	}
	if done != subTasks {
		t.Errorf("%d sub-tasks recorded, want %d", done, subTasks)
	}
	// The secret data is in no answer.
	for _, path := range []string{"/inventory/v1/job-task/list", "/inventory/v1/collector/list", "/inventory/v1/cloud-service/list"} {
		if r := inv.call(path, map[string]any{}); r.status != http.StatusOK || strings.Contains(string(r.body), "hunter2") {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
	}
}

// containerLogs is what a container wrote so far (across restarts).
func containerLogs(t *testing.T, c testcontainers.Container) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := c.Logs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
