package inventory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/inventory"
	"github.com/nubes-io/nubes/services/inventory/internal/worker"
)

type jobOut struct {
	JobID              string `json:"job_id"`
	Status             string `json:"status"`
	TotalTasks         int    `json:"total_tasks"`
	RemainedTasks      int    `json:"remained_tasks"`
	SuccessTasks       int    `json:"success_tasks"`
	FailureTasks       int    `json:"failure_tasks"`
	RequestSecretID    string `json:"request_secret_id"`
	RequestWorkspaceID string `json:"request_workspace_id"`
	SecretID           string `json:"secret_id"`
	ResourceGroup      string `json:"resource_group"`
	DomainID           string `json:"domain_id"`
	WorkspaceID        string `json:"workspace_id"`
	CollectorID        string `json:"collector_id"`
	PluginID           string `json:"plugin_id"`
	CreatedAt          string `json:"created_at"`
	UpdatedAt          string `json:"updated_at"`
	FinishedAt         string `json:"finished_at"`
}

type errorOut struct {
	ErrorCode  string         `json:"error_code"`
	Message    string         `json:"message"`
	Additional map[string]any `json:"additional"`
}

type taskOut struct {
	JobTaskID         string     `json:"job_task_id"`
	Status            string     `json:"status"`
	Provider          string     `json:"provider"`
	CreatedCount      int        `json:"created_count"`
	UpdatedCount      int        `json:"updated_count"`
	FailureCount      int        `json:"failure_count"`
	DeletedCount      int        `json:"deleted_count"`
	DisconnectedCount int        `json:"disconnected_count"`
	Errors            []errorOut `json:"errors"`
	TotalSubTasks     int        `json:"total_sub_tasks"`
	RemainedSubTasks  int        `json:"remained_sub_tasks"`
	DomainID          string     `json:"domain_id"`
	WorkspaceID       string     `json:"workspace_id"`
	ProjectID         string     `json:"project_id"`
	ServiceAccountID  string     `json:"service_account_id"`
	JobID             string     `json:"job_id"`
	SecretID          string     `json:"secret_id"`
	CreatedAt         string     `json:"created_at"`
	StartedAt         string     `json:"started_at"`
	FinishedAt        string     `json:"finished_at"`
}

type serviceOut struct {
	CloudServiceID    string         `json:"cloud_service_id"`
	Name              string         `json:"name"`
	State             string         `json:"state"`
	Account           string         `json:"account"`
	CloudServiceType  string         `json:"cloud_service_type"`
	CloudServiceGroup string         `json:"cloud_service_group"`
	Provider          string         `json:"provider"`
	Data              map[string]any `json:"data"`
	Reference         map[string]any `json:"reference"`
	Tags              map[string]any `json:"tags"`
	RegionCode        string         `json:"region_code"`
	WorkspaceID       string         `json:"workspace_id"`
	DomainID          string         `json:"domain_id"`
	CollectionInfo    struct {
		CollectorID      string `json:"collector_id"`
		SecretID         string `json:"secret_id"`
		ServiceAccountID string `json:"service_account_id"`
	} `json:"collection_info"`
}

var instanceRules = map[string]any{"1": []any{"reference.resource_id", "provider", "cloud_service_type", "cloud_service_group", "account"}}

// instance is a ResourceInfo of one EC2 instance.
func instance(n int, extra ...map[string]any) map[string]any {
	res := map[string]any{"name": fmt.Sprintf("vm-%d", n), "provider": "aws", "cloud_service_group": "EC2", "cloud_service_type": "Instance",
		"account": "123456789012", "region_code": "us-east-1", "reference": map[string]any{"resource_id": fmt.Sprintf("i-%04d", n)},
		"data": map[string]any{"size": float64(n)}, "tags": []any{map[string]any{"key": "env", "value": "prod"}}}
	for _, e := range extra {
		for k, v := range e {
			res[k] = v
		}
	}
	return map[string]any{"state": "SUCCESS", "resource_type": "inventory.CloudService", "match_rules": instanceRules, "resource": res}
}

func instances(from, to int) []map[string]any {
	var out []map[string]any
	for i := from; i <= to; i++ {
		out = append(out, instance(i))
	}
	return out
}

func (s *stack) collect(c *testkit.Client, collectorID string, secretID string) jobOut {
	s.t.Helper()
	body := map[string]any{"collector_id": collectorID}
	if secretID != "" {
		body["secret_id"] = secretID
	}
	var j jobOut
	c.Call("/inventory/v1/collector/collect", body).OK(&j)
	return j
}

// wait polls a job until it leaves IN_PROGRESS.
func (s *stack) wait(jobID string, within time.Duration) jobOut {
	s.t.Helper()
	return s.waitAs(s.system, jobID, within)
}

func (s *stack) waitAs(c *testkit.Client, jobID string, within time.Duration) jobOut {
	s.t.Helper()
	var j jobOut
	testkit.Eventually(s.t, within, "job "+jobID, func() bool {
		c.Call("/inventory/v1/job/get", map[string]any{"job_id": jobID}).OK(&j)
		return j.Status != "IN_PROGRESS"
	})
	return j
}

func (s *stack) tasksOf(jobID string) []taskOut {
	s.t.Helper()
	var l list[taskOut]
	s.system.Call("/inventory/v1/job-task/list", map[string]any{"job_id": jobID, "query": map[string]any{"sort": []any{map[string]any{"key": "secret_id"}}}}).OK(&l)
	return l.Results
}

func TestCollect(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 10)})

	j := s.collect(s.adminA, c.CollectorID, "")
	if !strings.HasPrefix(j.JobID, "job-") || j.Status != "IN_PROGRESS" || j.TotalTasks != 3 || j.RemainedTasks != 3 ||
		j.PluginID != collectorPlugin || j.CollectorID != c.CollectorID || j.WorkspaceID != "*" || j.ResourceGroup != "DOMAIN" || j.SecretID != "" {
		t.Fatalf("job: %+v", j)
	}
	done := s.wait(j.JobID, time.Minute)
	if done.Status != "SUCCESS" || done.SuccessTasks != 3 || done.FailureTasks != 0 || done.RemainedTasks != 0 || done.FinishedAt == "" {
		t.Fatalf("finished job: %+v", done)
	}
	tasks := s.tasksOf(j.JobID)
	if len(tasks) != 3 {
		t.Fatalf("%d tasks", len(tasks))
	}
	wantWS := map[string]string{"trusted-secret-adom": "*", "trusted-secret-aw1": "workspace-1", "trusted-secret-aw2": "workspace-2"}
	for _, tk := range tasks {
		if !strings.HasPrefix(tk.JobTaskID, "job-task-") || tk.Status != "SUCCESS" || tk.CreatedCount != 10 || tk.UpdatedCount != 0 ||
			tk.FailureCount != 0 || tk.WorkspaceID != wantWS[tk.SecretID] || tk.Provider != "aws" || tk.StartedAt == "" || tk.FinishedAt == "" ||
			tk.TotalSubTasks != 1 || tk.RemainedSubTasks != 0 || len(tk.Errors) != 0 {
			t.Fatalf("task: %+v", tk)
		}
	}
	// Each secret's data went to the plugin, with the options and an empty filter.
	seen := map[string]bool{}
	for _, call := range s.plugin.Calls(collectMethod) {
		sd, _ := call.Request["secret_data"].(map[string]any)
		seen[fmt.Sprint(sd["access_key"])] = true
		if f, ok := call.Request["filter"].(map[string]any); !ok || len(f) != 0 {
			t.Fatalf("filter sent: %v", call.Request)
		}
		if o, _ := call.Request["options"].(map[string]any); o["region"] != "us-east-1" {
			t.Fatalf("options sent: %v", call.Request)
		}
		if _, ok := call.Request["task_options"]; ok {
			t.Fatalf("task_options sent without a sub-task: %v", call.Request)
		}
	}
	if len(seen) != 3 || !seen["AK-ta-a-dom"] || !seen["AK-ta-a-w2"] {
		t.Fatalf("secrets sent: %v", seen)
	}
	if n := len(s.plugin.Calls(getTasksMethod)); n != 3 {
		t.Fatalf("%d get_tasks calls", n)
	}
	if n := s.count(servicesColl, nil); n != 30 {
		t.Fatalf("%d cloud services", n)
	}
	var got collectorOut
	s.adminA.Call("/inventory/v1/collector/get", map[string]any{"collector_id": c.CollectorID}).OK(&got)
	if got.LastCollectedAt == "" {
		t.Fatal("last_collected_at not set")
	}

	// Collected again: the same resources are updated, none created.
	j2 := s.wait(s.collect(s.adminA, c.CollectorID, "").JobID, time.Minute)
	if j2.Status != "SUCCESS" {
		t.Fatalf("second job: %+v", j2)
	}
	for _, tk := range s.tasksOf(j2.JobID) {
		if tk.CreatedCount != 0 || tk.UpdatedCount != 10 || tk.DisconnectedCount != 0 {
			t.Fatalf("second run task: %+v", tk)
		}
	}
	if n := s.count(servicesColl, nil); n != 30 {
		t.Fatalf("%d cloud services after a second run", n)
	}

	// What was collected reads back, confined to each caller's reach.
	var l list[serviceOut]
	s.ownerA1.Call("/inventory/v1/cloud-service/list", map[string]any{"query": map[string]any{"sort": []any{map[string]any{"key": "name"}}}}).OK(&l)
	if l.TotalCount != 20 {
		t.Fatalf("owner of workspace-1 sees %d", l.TotalCount)
	}
	cs := l.Results[0]
	if !strings.HasPrefix(cs.CloudServiceID, "cloud-svc-") || cs.State != "ACTIVE" || cs.Tags["env"] != "prod" || cs.Reference["resource_id"] == nil ||
		cs.CollectionInfo.CollectorID != c.CollectorID || cs.DomainID != "domain-a" {
		t.Fatalf("cloud service: %+v", cs)
	}
	s.adminB.Call("/inventory/v1/cloud-service/list", nil).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("domain b sees %d", l.TotalCount)
	}
	s.adminB.Call("/inventory/v1/cloud-service/get", map[string]any{"cloud_service_id": cs.CloudServiceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var one serviceOut
	s.memberA1.Call("/inventory/v1/cloud-service/get", map[string]any{"cloud_service_id": cs.CloudServiceID}).OK(&one)
	s.adminA.Call("/inventory/v1/cloud-service/list", map[string]any{"workspace_id": "workspace-2", "cloud_service_group": "EC2"}).OK(&l)
	if l.TotalCount != 10 {
		t.Fatalf("workspace-2 by the admin: %d", l.TotalCount)
	}
	var w2 serviceOut
	for _, r := range l.Results {
		w2 = r
	}
	s.ownerA1.Call("/inventory/v1/cloud-service/get", map[string]any{"cloud_service_id": w2.CloudServiceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var st struct {
		Results []map[string]any `json:"results"`
	}
	s.adminA.Call("/inventory/v1/cloud-service/stat", map[string]any{"query": map[string]any{"aggregate": []any{
		map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "workspace_id", "name": "ws"}},
			"fields": []any{map[string]any{"name": "n", "operator": "count"}}}},
		map[string]any{"sort": []any{map[string]any{"key": "ws"}}}}}}).OK(&st)
	if len(st.Results) != 3 || st.Results[0]["n"] != float64(10) {
		t.Fatalf("stat: %v", st.Results)
	}
	s.adminA.Call("/inventory/v1/cloud-service/list", map[string]any{"state": "GONE"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	s.adminA.Call("/inventory/v1/cloud-service/get", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	s.adminA.Call("/inventory/v1/cloud-service/stat", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	// match_keys is stored but not shown: it answers as a field no row has.
	var hidden struct {
		TotalCount int `json:"total_count"`
	}
	s.adminA.Call("/inventory/v1/cloud-service/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "match_keys", "v": true, "o": "exists"}}}}).OK(&hidden)
	if hidden.TotalCount != 0 {
		t.Fatalf("match_keys exists: %d rows", hidden.TotalCount)
	}
	s.userA.Call("/inventory/v1/cloud-service/list", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	// A job that succeeds notifies no one. A failure's request is recorded
	// before its job ends, and both jobs ended: it would be in the outbox
	// now or, relayed (published, then deleted), on the stream.
	if n := s.count("inventory_outbox", bson.D{{Key: "subject", Value: events.NotificationRequestSubject}}); n != 0 {
		t.Fatalf("%d notification requests in the outbox for successful jobs", n)
	}
	if got := s.notifications(1, 0); len(got) != 0 {
		t.Fatalf("notification requests for a successful job: %+v", got)
	}
}

// TestCollectResourceHandling: each streamed resource is handled as
// plugin-protocols.md section 3 says.
func TestCollectResourceHandling(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	noRules := instance(3)
	delete(noRules, "match_rules")
	noValue := instance(4)
	noValue["match_rules"] = map[string]any{"1": []any{"reference.missing"}}
	typ := map[string]any{"state": "SUCCESS", "resource_type": "inventory.CloudServiceType", "match_rules": map[string]any{"1": []any{"name", "group", "provider"}},
		"resource": map[string]any{"name": "Instance", "group": "EC2", "provider": "aws", "is_primary": true, "json_metadata": `{"view":{"table":1}}`}}
	region := map[string]any{"state": "SUCCESS", "resource_type": "inventory.Region", "match_rules": map[string]any{"1": []any{"provider", "region_code"}},
		"resource": map[string]any{"name": "N. Virginia", "provider": "aws", "region_code": "us-east-1"}}
	jsonData := instance(5, map[string]any{"json_data": `{"from_json": true}`})
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: []map[string]any{
		instance(1), instance(2),
		{"state": "FAILURE", "message": "AccessDenied on ec2:DescribeInstances", "resource_type": "inventory.ErrorResource",
			"resource": map[string]any{"cloud_service_group": "EC2", "cloud_service_type": "Instance"}},
		{"state": "FAILURE", "resource_type": "inventory.CloudService", "resource": map[string]any{}},
		noRules, noValue, typ, region, jsonData,
		{"state": "SUCCESS", "resource_type": "inventory.Unknown", "match_rules": instanceRules, "resource": map[string]any{}},
		{"state": "SUCCESS", "resource_type": "inventory.Namespace", "resource": map[string]any{"namespace_id": "ns-1"}},
		instance(1), // the same resource again in one run: updated
	}})
	j := s.wait(s.collect(s.adminA, c.CollectorID, "trusted-secret-adom").JobID, time.Minute)
	if j.Status != "FAILURE" || j.FailureTasks != 1 || j.TotalTasks != 1 || j.SecretID != "trusted-secret-adom" || j.RequestSecretID != "trusted-secret-adom" {
		t.Fatalf("job: %+v", j)
	}
	tk := s.tasksOf(j.JobID)[0]
	if tk.Status != "FAILURE" || tk.CreatedCount != 3 || tk.UpdatedCount != 1 || tk.FailureCount != 5 {
		t.Fatalf("task counts: %+v", tk)
	}
	codes := map[string]int{}
	for _, e := range tk.Errors {
		codes[e.ErrorCode]++
	}
	if codes["ERROR_PLUGIN"] != 2 || codes["ERROR_MATCH_RULE"] != 2 || codes["ERROR_UNKNOWN"] != 1 {
		t.Fatalf("errors: %+v", tk.Errors)
	}
	for _, e := range tk.Errors {
		if e.ErrorCode == "ERROR_PLUGIN" && strings.Contains(e.Message, "AccessDenied") {
			if e.Additional["cloud_service_group"] != "EC2" || e.Additional["resource_type"] != "inventory.ErrorResource" {
				t.Fatalf("additional: %v", e.Additional)
			}
		}
		if e.ErrorCode == "ERROR_PLUGIN" && !strings.Contains(e.Message, "AccessDenied") && e.Message != "Unknown error." {
			t.Fatalf("default message: %+v", e)
		}
	}
	// The type and the region are written but not counted.
	var types list[typeOut]
	s.adminA.Call("/inventory/v1/cloud-service-type/list", map[string]any{"cloud_service_type_key": "aws.EC2.Instance"}).OK(&types)
	if types.TotalCount != 1 || !types.Results[0].IsPrimary || types.Results[0].Metadata["view"] == nil {
		t.Fatalf("reported type: %+v", types)
	}
	if n := s.count(regionsColl, nil); n != 1 {
		t.Fatalf("%d regions", n)
	}
	var l list[serviceOut]
	s.adminA.Call("/inventory/v1/cloud-service/list", map[string]any{"name": "vm-5"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].Data["from_json"] != true {
		t.Fatalf("json_data: %+v", l)
	}
	if n := s.count(servicesColl, nil); n != 3 {
		t.Fatalf("%d cloud services", n)
	}
	// A run again reports the type again: updated, not duplicated.
	s.wait(s.collect(s.adminA, c.CollectorID, "trusted-secret-adom").JobID, time.Minute)
	if n := s.count(typesColl, nil); n != 1 {
		t.Fatalf("%d types after a second run", n)
	}
	if n := s.count(regionsColl, nil); n != 1 {
		t.Fatalf("%d regions after a second run", n)
	}
}

func TestCollectBrokenStream(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 3), Err: fakeplugin.Fail(codes.Internal, "ERROR_AWS_THROTTLING", "Rate exceeded")})
	j := s.wait(s.collect(s.adminA, c.CollectorID, "trusted-secret-aw1").JobID, time.Minute)
	if j.Status != "FAILURE" || j.FailureTasks != 1 {
		t.Fatalf("job: %+v", j)
	}
	tk := s.tasksOf(j.JobID)[0]
	if tk.Status != "FAILURE" || tk.FailureCount != 1 || tk.CreatedCount != 0 || tk.UpdatedCount != 0 || len(tk.Errors) != 1 ||
		tk.Errors[0].ErrorCode != "ERROR_COLLECTOR_PLUGIN" || !strings.Contains(tk.Errors[0].Message, "Rate exceeded") {
		t.Fatalf("task: %+v", tk)
	}
	if n := s.count(servicesColl, nil); n != 3 {
		t.Fatalf("what came before the break: %d", n)
	}
	// The domain's admins are told, once.
	checkFailureNotice(t, s.notifications(1, time.Minute), j.JobID, j.DomainID)
}

func TestCollectSubTasks(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	s.plugin.Script(getTasksMethod, fakeplugin.Reply{Result: map[string]any{"tasks": []any{
		map[string]any{"task_options": map[string]any{"service": "ec2"}},
		map[string]any{"task_options": map[string]any{"service": "s3"}},
		map[string]any{"task_options": map[string]any{"service": "rds"}},
	}}})
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 2)}, fakeplugin.Reply{Stream: instances(3, 5)}, fakeplugin.Reply{Stream: instances(6, 9)})
	j := s.wait(s.collect(s.adminA, c.CollectorID, "trusted-secret-aw2").JobID, time.Minute)
	tk := s.tasksOf(j.JobID)[0]
	if j.Status != "SUCCESS" || tk.TotalSubTasks != 3 || tk.RemainedSubTasks != 0 || tk.CreatedCount != 9 || tk.Status != "SUCCESS" {
		t.Fatalf("job %+v task %+v", j, tk)
	}
	got := map[string]bool{}
	for _, call := range s.plugin.Calls(collectMethod) {
		to, _ := call.Request["task_options"].(map[string]any)
		got[fmt.Sprint(to["service"])] = true
	}
	if !got["ec2"] || !got["s3"] || !got["rds"] {
		t.Fatalf("task_options sent: %v", got)
	}
	gt := s.plugin.Calls(getTasksMethod)[0].Request
	if sd, _ := gt["secret_data"].(map[string]any); sd["access_key"] != "AK-ta-a-w2" {
		t.Fatalf("get_tasks request: %v", gt)
	}
}

// TestCollectSecrets: which trusted accounts a collect uses.
func TestCollectSecrets(t *testing.T) {
	t.Parallel()
	s := setup(t)
	secretsOf := func(jobID string) string {
		var out []string
		for _, tk := range s.tasksOf(jobID) {
			out = append(out, tk.SecretID+"@"+tk.WorkspaceID+"/"+tk.ServiceAccountID)
		}
		return strings.Join(out, " ")
	}
	dom := s.createCollector(s.adminA, domainCollector())
	w1 := s.createCollector(s.ownerA1, map[string]any{"name": "W1", "resource_group": "WORKSPACE", "plugin_info": map[string]any{"plugin_id": collectorPlugin}})
	w2 := s.createCollector(s.ownerA2, map[string]any{"name": "W2", "resource_group": "WORKSPACE", "plugin_info": map[string]any{"plugin_id": collectorPlugin}})
	filtered := s.createCollector(s.adminA, domainCollector(map[string]any{"secret_filter": map[string]any{"state": "ENABLED",
		"schemas": []string{"aws_access_key"}, "exclude_service_accounts": []string{"ta-a-w2"}}}))
	gcp := s.createCollector(s.adminA, domainCollector(map[string]any{"provider": "google_cloud", "plugin_info": map[string]any{"plugin_id": "plugin-multi-provider"}}))
	for _, tt := range []struct {
		name      string
		caller    *testkit.Client
		collector string
		secret    string
		want      string
	}{
		{"domain collector: every aws account of the domain", s.adminA, dom.CollectorID, "",
			"trusted-secret-adom@*/ta-a-dom trusted-secret-aw1@workspace-1/ta-a-w1 trusted-secret-aw2@workspace-2/ta-a-w2"},
		{"one secret", s.adminA, dom.CollectorID, "trusted-secret-aw1", "trusted-secret-aw1@workspace-1/ta-a-w1"},
		{"workspace collector: its workspace's and the domain's, in its workspace", s.ownerA1, w1.CollectorID, "",
			"trusted-secret-adom@workspace-1/ta-a-dom trusted-secret-aw1@workspace-1/ta-a-w1"},
		{"a member collects too (semantics.md §4.4)", s.memberA1, w1.CollectorID, "",
			"trusted-secret-adom@workspace-1/ta-a-dom trusted-secret-aw1@workspace-1/ta-a-w1"},
		{"secret filter", s.adminA, filtered.CollectorID, "", "trusted-secret-adom@*/ta-a-dom"},
		{"another provider", s.adminA, gcp.CollectorID, "", "trusted-secret-agcp@*/ta-a-gcp"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := s.collect(tt.caller, tt.collector, tt.secret)
			if got := secretsOf(j.JobID); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			s.wait(j.JobID, time.Minute)
		})
	}
	t.Run("no secret: SUCCESS at once", func(t *testing.T) {
		before := s.raw(collectorsColl, w1.CollectorID)["last_collected_at"]
		j := s.collect(s.ownerA1, w1.CollectorID, "trusted-secret-aw2") // another workspace's secret
		if j.Status != "SUCCESS" || j.TotalTasks != 0 || j.FinishedAt == "" || j.RequestWorkspaceID != "workspace-1" {
			t.Fatalf("job: %+v", j)
		}
		if after := s.raw(collectorsColl, w1.CollectorID)["last_collected_at"]; fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("last_collected_at moved without a secret: %v -> %v", before, after)
		}
	})
	t.Run("refused", func(t *testing.T) {
		jobs := s.count(jobsColl, nil)
		for _, tt := range []struct {
			name   string
			caller *testkit.Client
			body   map[string]any
			status int
			code   string
		}{
			{"no collector_id", s.adminA, map[string]any{}, http.StatusBadRequest, errs.RequiredParameter},
			{"secret_id too long", s.adminA, map[string]any{"collector_id": dom.CollectorID, "secret_id": strings.Repeat("s", 65)}, http.StatusBadRequest, errs.InvalidParameter},
			{"unknown field", s.adminA, map[string]any{"collector_id": dom.CollectorID, "filter": map[string]any{}}, http.StatusBadRequest, errs.InvalidParameter},
			{"another domain", s.adminB, map[string]any{"collector_id": dom.CollectorID}, http.StatusNotFound, errs.NotFoundCode},
			{"another workspace", s.ownerA2, map[string]any{"collector_id": w1.CollectorID}, http.StatusNotFound, errs.NotFoundCode},
			{"domain collector by an owner", s.ownerA1, map[string]any{"collector_id": dom.CollectorID}, http.StatusForbidden, errs.PermissionDenied},
			{"domain collector by a member", s.memberA1, map[string]any{"collector_id": dom.CollectorID}, http.StatusForbidden, errs.PermissionDenied},
			{"another workspace's by a member", s.memberA1, map[string]any{"collector_id": w2.CollectorID}, http.StatusNotFound, errs.NotFoundCode},
			{"a plain user", s.userA, map[string]any{"collector_id": w1.CollectorID}, http.StatusForbidden, errs.PermissionDenied},
			{"anonymous", s.anon, map[string]any{"collector_id": w1.CollectorID}, http.StatusUnauthorized, errs.AuthenticateFailure},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tt.caller.Call("/inventory/v1/collector/collect", tt.body).Fails(tt.status, tt.code)
				if n := s.count(jobsColl, nil); n != jobs {
					t.Fatalf("%d jobs, want %d", n, jobs)
				}
			})
		}
		s.identity.setDown(true)
		s.adminA.Call("/inventory/v1/collector/collect", map[string]any{"collector_id": dom.CollectorID}).Fails(http.StatusServiceUnavailable, errs.Unavailable)
		s.identity.setDown(false)
		if n := s.count(jobsColl, nil); n != jobs {
			t.Fatalf("identity down stored a job: %d", n)
		}
	})
}

func TestCollectCancelsRunning(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 1), Hang: true})
	first := s.collect(s.adminA, c.CollectorID, "trusted-secret-aw1")
	other := s.collect(s.adminA, c.CollectorID, "trusted-secret-aw2") // another secret: not the same job
	testkit.Eventually(t, time.Minute, "the first task running", func() bool {
		return len(s.tasksOf(first.JobID)) == 1 && s.tasksOf(first.JobID)[0].Status == "IN_PROGRESS"
	})
	second := s.collect(s.adminA, c.CollectorID, "trusted-secret-aw1")
	var j jobOut
	s.adminA.Call("/inventory/v1/job/get", map[string]any{"job_id": first.JobID}).OK(&j)
	if j.Status != "CANCELED" || j.FinishedAt == "" {
		t.Fatalf("first job: %+v", j)
	}
	if tk := s.tasksOf(first.JobID)[0]; tk.Status != "CANCELED" {
		t.Fatalf("first job's task: %+v", tk)
	}
	s.adminA.Call("/inventory/v1/job/get", map[string]any{"job_id": other.JobID}).OK(&j)
	if j.Status != "IN_PROGRESS" {
		t.Fatalf("a job of another secret was touched: %+v", j)
	}
	// The worker running the canceled job lets its stream go.
	testkit.Eventually(t, time.Minute, "the canceled stream to end", func() bool {
		for _, call := range s.plugin.Calls(collectMethod) {
			if sd, _ := call.Request["secret_data"].(map[string]any); sd["access_key"] == "AK-ta-a-w1" && call.Cancelled {
				return true
			}
		}
		return false
	})
	s.adminA.Call("/inventory/v1/job/get", map[string]any{"job_id": second.JobID}).OK(&j)
	if j.Status != "IN_PROGRESS" {
		t.Fatalf("second job: %+v", j)
	}
}

// TestCollectsAtOnce: collects of one secret at once leave exactly one
// job running, the others CANCELED: each replaces one other through one
// atomic write on the collector, whatever the order.
func TestCollectsAtOnce(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 1), Hang: true})
	const n = 4
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { s.collect(s.adminA, c.CollectorID, "trusted-secret-aw1") })
	}
	wg.Wait()
	mine := bson.D{{Key: "collector_id", Value: c.CollectorID}}
	if got := s.count(jobsColl, mine); got != n {
		t.Fatalf("jobs: %d, want %d", got, n)
	}
	running := s.count(jobsColl, append(mine, bson.E{Key: "status", Value: "IN_PROGRESS"}))
	canceled := s.count(jobsColl, append(mine, bson.E{Key: "status", Value: "CANCELED"}))
	if running != 1 || canceled != n-1 {
		t.Fatalf("%d jobs running, %d canceled, want 1 and %d", running, canceled, n-1)
	}
}

func TestJobTimeout(t *testing.T) {
	t.Parallel()
	s := setupWith(t, options{cfg: func(c *inventory.Config) { c.JobTimeout = 1500 * time.Millisecond }})
	c := s.createCollector(s.adminA, domainCollector())
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 1), Hang: true})
	j := s.wait(s.collect(s.adminA, c.CollectorID, "trusted-secret-adom").JobID, time.Minute)
	if j.Status != "FAILURE" || j.FinishedAt == "" {
		t.Fatalf("job: %+v", j)
	}
	tk := s.tasksOf(j.JobID)[0]
	if tk.Status != "FAILURE" || len(tk.Errors) != 1 || tk.Errors[0].ErrorCode != "ERROR_JOB_TIMEOUT" {
		t.Fatalf("task: %+v", tk)
	}
	checkFailureNotice(t, s.notifications(1, time.Minute), j.JobID, j.DomainID)
}

// TestGarbageCollection: a resource of the collector and secret that
// three successful runs in a row did not see is deleted.
func TestGarbageCollection(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	run := func(from, to int) taskOut {
		s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(from, to)})
		j := s.wait(s.collect(s.adminA, c.CollectorID, "trusted-secret-adom").JobID, time.Minute)
		return s.tasksOf(j.JobID)[0]
	}
	if tk := run(1, 4); tk.CreatedCount != 4 {
		t.Fatalf("first run: %+v", tk)
	}
	state := func(n int) string {
		var l list[serviceOut]
		s.adminA.Call("/inventory/v1/cloud-service/list", map[string]any{"name": fmt.Sprintf("vm-%d", n)}).OK(&l)
		if l.TotalCount == 0 {
			return "gone"
		}
		return l.Results[0].State
	}
	if tk := run(1, 2); tk.UpdatedCount != 2 || tk.DisconnectedCount != 2 || tk.DeletedCount != 0 || state(3) != "DISCONNECTED" {
		t.Fatalf("second run: %+v, vm-3 %s", tk, state(3))
	}
	if tk := run(1, 3); tk.UpdatedCount != 3 || tk.DisconnectedCount != 1 || state(3) != "ACTIVE" {
		t.Fatalf("third run (vm-3 back): %+v, vm-3 %s", tk, state(3))
	}
	if tk := run(1, 3); tk.DisconnectedCount != 0 || tk.DeletedCount != 1 || state(4) != "gone" {
		t.Fatalf("fourth run (vm-4 unseen three times): %+v, vm-4 %s", tk, state(4))
	}
	if n := s.count(servicesColl, nil); n != 3 {
		t.Fatalf("%d cloud services", n)
	}
	// vm-4's match key went with it: seen again, it is created anew.
	if tk := run(1, 4); tk.CreatedCount != 1 || tk.UpdatedCount != 3 {
		t.Fatalf("vm-4 back: %+v", tk)
	}
	// A failed run collects no garbage.
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: []map[string]any{instance(1), {"state": "FAILURE", "resource_type": "inventory.CloudService"}}})
	j := s.wait(s.collect(s.adminA, c.CollectorID, "trusted-secret-adom").JobID, time.Minute)
	if tk := s.tasksOf(j.JobID)[0]; tk.Status != "FAILURE" || tk.DisconnectedCount != 0 || state(2) != "ACTIVE" {
		t.Fatalf("failed run: %+v", tk)
	}
}

// TestCollectConcurrency: at most the plugin's concurrency of a job's
// sub-tasks run at once, across replicas.
func TestCollectConcurrency(t *testing.T) {
	t.Parallel()
	s := setupWith(t, options{replicas: 2})
	s.plugin.Script(initMethod, fakeplugin.Reply{Result: map[string]any{"metadata": map[string]any{"concurrency": 1}}})
	c := s.createCollector(s.adminA, domainCollector())
	var subs []any
	for i := range 4 {
		subs = append(subs, map[string]any{"task_options": map[string]any{"n": i}})
	}
	s.plugin.Script(getTasksMethod, fakeplugin.Reply{Result: map[string]any{"tasks": subs}})
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 2), Interval: 150 * time.Millisecond})
	j := s.collect(s.adminA, c.CollectorID, "trusted-secret-adom")
	slots := s.db.Collection("inventory_leases")
	most := 0
	testkit.Eventually(t, time.Minute, "the job's end", func() bool {
		n := 0
		for i := 1; i <= 4; i++ { // a slot past the concurrency counts too
			held, err := lease.Held(context.Background(), slots, worker.SlotKey(j.JobID, i))
			if err != nil {
				t.Fatal(err)
			}
			if held {
				n++
			}
		}
		most = max(most, n)
		var cur jobOut
		s.system.Call("/inventory/v1/job/get", map[string]any{"job_id": j.JobID}).OK(&cur)
		if cur.Status != "IN_PROGRESS" && cur.Status != "SUCCESS" {
			t.Fatalf("job: %+v", cur)
		}
		return cur.Status == "SUCCESS"
	})
	if most != 1 {
		t.Fatalf("%d slots held at once, want 1", most)
	}
	if tk := s.tasksOf(j.JobID)[0]; tk.TotalSubTasks != 4 || tk.UpdatedCount+tk.CreatedCount != 8 || tk.CreatedCount != 2 {
		t.Fatalf("task: %+v", tk)
	}
}

// TestCollectWorkerKilled: a replica dies in the middle of a sub-task;
// another one runs it again and nothing is counted twice.
func TestCollectWorkerKilled(t *testing.T) {
	t.Parallel()
	s := setupWith(t, options{cfg: func(c *inventory.Config) { c.NoWorkers = true }})
	c := s.createCollector(s.adminA, domainCollector())
	const n = 40
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, n), Interval: 25 * time.Millisecond})
	doomedCfg := func(c *inventory.Config) { c.AckWait = time.Second }
	_, kill := s.startStoppable("doomed", doomedCfg)
	j := s.collect(s.adminA, c.CollectorID, "trusted-secret-adom")
	testkit.Eventually(t, time.Minute, "some resources written", func() bool { return s.count(servicesColl, nil) >= 15 })
	kill()
	written := s.count(servicesColl, nil)
	if written >= n {
		t.Fatalf("the doomed replica finished (%d) before it was killed", written)
	}
	s.start("survivor", doomedCfg)
	done := s.wait(j.JobID, time.Minute)
	tk := s.tasksOf(j.JobID)[0]
	if done.Status != "SUCCESS" || tk.CreatedCount != n || tk.UpdatedCount != 0 || tk.FailureCount != 0 {
		t.Fatalf("after the kill: job %+v task %+v (%d written before)", done, tk, written)
	}
	if got := s.count(servicesColl, nil); got != n {
		t.Fatalf("%d cloud services, want %d", got, n)
	}
}

// TestSecretDataNeverKept: the secret data reaches the plugin and no
// document, answer or task error.
func TestSecretDataNeverKept(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 2), Err: fakeplugin.Fail(codes.Internal, "ERROR_X", "x")})
	j := s.collect(s.adminA, c.CollectorID, "")
	s.wait(j.JobID, time.Minute)
	cols, err := s.db.ListCollectionNames(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range cols {
		cur, err := s.db.Collection(name).Find(context.Background(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		var docs []bson.M
		if err := cur.All(context.Background(), &docs); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(docs)
		if strings.Contains(string(raw), "S3CR3T") {
			t.Fatalf("secret data stored in %s", name)
		}
	}
	for _, path := range []string{"/inventory/v1/job/list", "/inventory/v1/job-task/list", "/inventory/v1/collector/list", "/inventory/v1/cloud-service/list"} {
		if r := s.adminA.Call(path, nil); strings.Contains(string(r.Body), "S3CR3T") {
			t.Fatalf("secret data in %s", path)
		}
	}
}

// TestCollectSameResourcesAtOnce: two secrets of one workspace report the
// same resources at the same time on two replicas; each resource is
// stored once, created by one task and updated by the other.
func TestCollectSameResourcesAtOnce(t *testing.T) {
	t.Parallel()
	s := setupWith(t, options{replicas: 2})
	w1 := s.createCollector(s.ownerA1, map[string]any{"name": "W1", "resource_group": "WORKSPACE", "plugin_info": map[string]any{"plugin_id": collectorPlugin}})
	const n = 30
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, n), Interval: 5 * time.Millisecond})
	for round := range 2 {
		j := s.wait(s.collect(s.ownerA1, w1.CollectorID, "").JobID, time.Minute)
		created, updated := 0, 0
		for _, tk := range s.tasksOf(j.JobID) {
			created, updated = created+tk.CreatedCount, updated+tk.UpdatedCount
		}
		wantCreated := n
		if round == 1 {
			wantCreated = 0
		}
		if j.Status != "SUCCESS" || created != wantCreated || created+updated != 2*n {
			t.Fatalf("round %d: job %+v, created %d, updated %d", round, j, created, updated)
		}
		if got := s.count(servicesColl, nil); got != n {
			t.Fatalf("round %d: %d cloud services, want %d", round, got, n)
		}
	}
}

// TestCollectSameNewKeyAtOnce: the two sub-tasks of a collect (two
// secrets, two replicas) report the same new resource at the same time;
// each inserts its key without reading it first, and the key's unique
// index leaves one resource, created once and updated once. Each round
// brings a key no run has seen, beside those of the rounds before (which
// a re-collect finds held: updates; and which stay reported, so none is
// garbage).
func TestCollectSameNewKeyAtOnce(t *testing.T) {
	t.Parallel()
	s := setupWith(t, options{replicas: 2})
	w1 := s.createCollector(s.ownerA1, map[string]any{"name": "W1", "resource_group": "WORKSPACE", "plugin_info": map[string]any{"plugin_id": collectorPlugin}})
	const rounds = 4
	for round := 1; round <= rounds; round++ {
		s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, round)})
		j := s.wait(s.collect(s.ownerA1, w1.CollectorID, "").JobID, time.Minute)
		created, updated := 0, 0
		for _, tk := range s.tasksOf(j.JobID) {
			created, updated = created+tk.CreatedCount, updated+tk.UpdatedCount
		}
		if j.Status != "SUCCESS" || created != 1 || updated != 2*round-1 {
			t.Fatalf("round %d: job %+v, created %d, updated %d, want 1 and %d", round, j, created, updated, 2*round-1)
		}
		if got := s.count(servicesColl, nil); got != int64(round) {
			t.Fatalf("round %d: %d cloud services, want %d", round, got, round)
		}
	}
}
