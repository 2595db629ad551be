package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testCostAccountsPlugin is the plugin id the cost-analysis container maps
// to the test plugin at cost-acct-plugin (NUBES_PLUGIN_ENDPOINTS in
// stack_test.go).
const testCostAccountsPlugin = "plugin-test-cost-accounts"

// TestCostTrustedAccounts syncs a USE_SERVICE_ACCOUNT_SECRET data source
// with trusted accounts made in the identity container, and maps its
// costs to a project made there: cost analysis reads the accounts, their
// secret data and the projects with the service token identity's
// system-token command printed. Each account gets its own task, its
// secret data reaches the plugin for that task only, its costs carry its
// id, and no answer of cost analysis shows the secret data.
func TestCostTrustedAccounts(t *testing.T) {
	needs(t, "cost-analysis", "repository", "identity")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	startRegistry(ctx, t, "cost-acct-registry", "1.0.0")

	admin := rootAdmin(t, identityAt(t))
	var ws struct {
		WorkspaceID string `json:"workspace_id"`
	}
	admin.call("/identity/v2/workspace/create", map[string]any{"name": "E2E costs " + randHex(3)}).OK(&ws)
	var proj struct {
		ProjectID   string `json:"project_id"`
		Name        string `json:"name"`
		WorkspaceID string `json:"workspace_id"`
	}
	admin.call("/identity/v2/project/create", map[string]any{"name": "E2E cost project " + randHex(3), "workspace_id": ws.WorkspaceID}).OK(&proj)
	if proj.WorkspaceID != ws.WorkspaceID {
		t.Fatalf("project = %+v", proj)
	}

	// Two accounts of the data source's provider, one domain-wide and one
	// of the workspace, and one of another provider the sync must leave
	// alone.
	provider := "e2e-cloud-" + randHex(3)
	type account struct {
		ID, Workspace, Secret string
	}
	// A trusted account's data and keys are checked against its provider's
	// schemas: the run's providers get theirs (the domain's own).
	keySchema := "e2e-api-key-" + randHex(3)
	admin.call("/identity/v2/schema/create", map[string]any{"schema_id": keySchema, "name": "E2E key", "schema_type": "SECRET",
		"provider": provider, "schema": map[string]any{"type": "object", "required": []string{"api_key"}}}).OK(nil)
	for _, p := range []string{provider, provider + "-other"} {
		admin.call("/identity/v2/schema/create", map[string]any{"schema_id": p + "-trusted", "name": "E2E trusted", "schema_type": "TRUSTED_ACCOUNT",
			"provider": p, "schema": map[string]any{"type": "object"}}).OK(nil)
	}
	trustedAccount := func(name, provider, group, workspace string) account {
		t.Helper()
		secret := "e2e-" + name + "-hunter2-" + randHex(4)
		body := map[string]any{"name": "E2E " + name, "data": map[string]any{}, "provider": provider,
			"secret_schema_id": keySchema, "secret_data": map[string]any{"api_key": secret}, "resource_group": group}
		if workspace != "" {
			body["workspace_id"] = workspace
		}
		var ta struct {
			TrustedAccountID string `json:"trusted_account_id"`
			WorkspaceID      string `json:"workspace_id"`
		}
		res := admin.call("/identity/v2/trusted-account/create", body).OK(&ta)
		if strings.Contains(string(res.body), secret) {
			t.Fatalf("identity answered the secret data: %s", res.body)
		}
		return account{ID: ta.TrustedAccountID, Workspace: ta.WorkspaceID, Secret: secret}
	}
	domainWide := trustedAccount("domain-acct", provider, "DOMAIN", "")
	inWorkspace := trustedAccount("ws-acct", provider, "WORKSPACE", ws.WorkspaceID)
	other := trustedAccount("other-acct", provider+"-other", "DOMAIN", "")
	if domainWide.Workspace != "*" || inWorkspace.Workspace != ws.WorkspaceID {
		t.Fatalf("trusted accounts = %+v %+v", domainWide, inWorkspace)
	}
	bySecret := map[string]account{domainWide.Secret: domainWide, inWorkspace.Secret: inWorkspace, other.Secret: other}

	// get_tasks answers each call with the next reply: the n-th call, made
	// with one account's secret data, gets the task "part-n". A third
	// call (an account the sync should not use) would get "part-3".
	const rowsPerTask, mappedPerTask = 5, 3
	tasksReply := func(part string) map[string]any {
		return map[string]any{"result": map[string]any{"tasks": []any{map[string]any{"task_options": map[string]any{"part": part}}},
			"changed": []any{map[string]any{"start": "2024-07"}}}}
	}
	rows := make([]any, rowsPerTask)
	for i := range rows {
		project := proj.Name // the rule maps these rows by the project's name
		if i >= mappedPerTask {
			project = "no-such-project"
		}
		rows[i] = map[string]any{"cost": 2.5, "provider": provider, "product": "Compute", "billed_date": fmt.Sprintf("2024-07-%02d", i+1),
			"tags": map[string]any{"project": project}}
	}
	script, _ := json.Marshal(map[string]any{
		costInitMethod:     []any{map[string]any{"result": map[string]any{"metadata": map[string]any{"currency": "USD"}}}},
		costGetTasksMethod: []any{tasksReply("part-1"), tasksReply("part-2"), tasksReply("part-3")},
		costGetDataMethod:  []any{map[string]any{"stream": []any{map[string]any{"results": rows}}}},
	})
	control := startTestPlugin(ctx, t, "cost-acct-plugin", string(script))

	admin.with(direct(st.first(t, "repository").url)).call("/repository/v1/plugin/register", map[string]any{
		"name": "Test cost accounts", "plugin_id": testCostAccountsPlugin, "image": "nubes/test-plugin", "provider": provider,
		"resource_type": "cost_analysis.DataSource", "registry_type": "PRIVATE_REGISTRY", "registry_url": "http://cost-acct-registry:5000",
		"capability": map[string]any{}}).OK(nil)
	ca := admin.with(direct(st.first(t, "cost-analysis").url))
	var ds struct {
		DataSourceID string `json:"data_source_id"`
		SecretType   string `json:"secret_type"`
		Provider     string `json:"provider"`
	}
	ca.call(costDataSource+"register", map[string]any{"name": "E2E account costs", "resource_group": "DOMAIN",
		"secret_type": "USE_SERVICE_ACCOUNT_SECRET", "provider": provider,
		"plugin_info": map[string]any{"plugin_id": testCostAccountsPlugin}}).OK(&ds)
	if ds.SecretType != "USE_SERVICE_ACCOUNT_SECRET" || ds.Provider != provider {
		t.Fatalf("data source = %+v", ds)
	}
	var rule struct {
		DataSourceRuleID string `json:"data_source_rule_id"`
	}
	ca.call("/cost-analysis/v1/data-source-rule/create", map[string]any{"data_source_id": ds.DataSourceID, "name": "project by tag",
		"conditions_policy": "ALWAYS", "resource_group": "DOMAIN",
		"actions": map[string]any{"match_project": map[string]any{"source": "tags.project", "target": "name"}}}).OK(&rule)

	var j costJob
	res := ca.call(costDataSource+"sync", map[string]any{"data_source_id": ds.DataSourceID}).OK(&j)
	answers := []result{res}
	deadline := time.Now().Add(3 * time.Minute)
	for j.Status == "IN_PROGRESS" {
		if time.Now().After(deadline) {
			t.Fatalf("job = %+v", j)
		}
		time.Sleep(500 * time.Millisecond)
		ca.call("/cost-analysis/v1/job/get", map[string]any{"job_id": j.JobID}).OK(&j)
	}
	if j.Status != "SUCCESS" || j.TotalTasks != 2 || j.RemainedTasks != 0 {
		t.Fatalf("job = %+v, want SUCCESS with one task per trusted account of %s", j, provider)
	}

	// Which account each task is: the n-th get_tasks call carried its
	// secret data and got the task part-n.
	accountOf := map[string]account{} // by task part
	calls := pluginCalls(t, control, costGetTasksMethod)
	if len(calls) != 2 {
		t.Fatalf("get_tasks called %d times, want once per trusted account of the provider", len(calls))
	}
	for i, c := range calls {
		a, ok := bySecret[secretKey(c.Request)]
		if !ok || a == other {
			t.Fatalf("get_tasks call %d: secret_data %v is no account of %s", i, c.Request["secret_data"], provider)
		}
		accountOf[fmt.Sprintf("part-%d", i+1)] = a
	}
	if accountOf["part-1"] == accountOf["part-2"] {
		t.Fatalf("both get_tasks calls had the secret data of %s", accountOf["part-1"].ID)
	}
	// Every get_data call (a task run again after a redelivery calls
	// again) has the secret data of its task's account.
	dataCalls := pluginCalls(t, control, costGetDataMethod)
	seen := map[string]bool{}
	for i, c := range dataCalls {
		opts, _ := c.Request["task_options"].(map[string]any)
		part, _ := opts["part"].(string)
		a, ok := accountOf[part]
		if !ok || secretKey(c.Request) != a.Secret {
			t.Fatalf("get_data call %d: task %q ran with secret_data %v", i, part, c.Request["secret_data"])
		}
		seen[part] = true
	}
	if len(seen) != 2 {
		t.Fatalf("get_data ran for tasks %v, want both", seen)
	}

	var tl struct {
		Results []struct {
			JobTaskID    string         `json:"job_task_id"`
			Status       string         `json:"status"`
			CreatedCount int            `json:"created_count"`
			Options      map[string]any `json:"options"`
		} `json:"results"`
	}
	res = ca.call("/cost-analysis/v1/job-task/list", map[string]any{"job_id": j.JobID}).OK(&tl)
	answers = append(answers, res)
	if len(tl.Results) != 2 {
		t.Fatalf("job tasks = %s", res.body)
	}
	taskAccount := map[string]account{} // by job_task_id
	for _, tk := range tl.Results {
		part, _ := tk.Options["part"].(string)
		a, ok := accountOf[part]
		if !ok || tk.Status != "SUCCESS" || tk.CreatedCount != rowsPerTask {
			t.Fatalf("job task = %+v", tk)
		}
		taskAccount[tk.JobTaskID] = a
	}

	// The costs: stamped with their task's trusted account; the rows the
	// rule matched are in the project (and its workspace), the others in
	// the account's workspace ("*" for the domain-wide account).
	var cl struct {
		Results []struct {
			CostID           string         `json:"cost_id"`
			ServiceAccountID string         `json:"service_account_id"`
			ProjectID        string         `json:"project_id"`
			WorkspaceID      string         `json:"workspace_id"`
			JobTaskID        string         `json:"job_task_id"`
			Tags             map[string]any `json:"tags"`
		} `json:"results"`
		TotalCount int `json:"total_count"`
	}
	res = ca.call("/cost-analysis/v1/cost/list", map[string]any{"data_source_id": ds.DataSourceID,
		"query": map[string]any{"page": map[string]any{"limit": 1000}}}).OK(&cl)
	answers = append(answers, res)
	if cl.TotalCount != 2*rowsPerTask || len(cl.Results) != cl.TotalCount {
		t.Fatalf("%d costs (%d listed), want %d", cl.TotalCount, len(cl.Results), 2*rowsPerTask)
	}
	mapped := map[string]int{} // by service account
	for _, c := range cl.Results {
		a, ok := taskAccount[c.JobTaskID]
		if !ok || c.ServiceAccountID != a.ID {
			t.Fatalf("cost %s of task %s has service_account_id %q, want %q", c.CostID, c.JobTaskID, c.ServiceAccountID, a.ID)
		}
		want := struct{ project, workspace string }{"", a.Workspace}
		if c.Tags["project"] == proj.Name {
			want.project, want.workspace = proj.ProjectID, proj.WorkspaceID
			mapped[a.ID]++
		}
		if c.ProjectID != want.project || c.WorkspaceID != want.workspace {
			t.Fatalf("cost %+v: want project %q in workspace %q", c, want.project, want.workspace)
		}
	}
	if want := map[string]int{domainWide.ID: mappedPerTask, inWorkspace.ID: mappedPerTask}; !reflect.DeepEqual(mapped, want) {
		t.Fatalf("costs mapped to the project per account %v, want %v", mapped, want)
	}

	// The secret data is in no answer of cost analysis.
	for _, q := range []struct {
		path string
		body map[string]any
	}{
		{costDataSource + "get", map[string]any{"data_source_id": ds.DataSourceID}},
		{costDataSource + "list", map[string]any{}},
		{"/cost-analysis/v1/job/get", map[string]any{"job_id": j.JobID}},
		{"/cost-analysis/v1/job/list", map[string]any{"data_source_id": ds.DataSourceID}},
		{"/cost-analysis/v1/job-task/get", map[string]any{"job_task_id": tl.Results[0].JobTaskID}},
		{"/cost-analysis/v1/data-source-rule/list", map[string]any{"data_source_id": ds.DataSourceID}},
	} {
		answers = append(answers, ca.call(q.path, q.body).OK(nil))
	}
	for _, r := range answers {
		if strings.Contains(string(r.body), "hunter2") {
			t.Fatalf("%s answered secret data: %s", r.path, r.body)
		}
	}
}

// secretKey is the api_key of a plugin request's secret_data.
func secretKey(req map[string]any) string {
	sd, _ := req["secret_data"].(map[string]any)
	s, _ := sd["api_key"].(string)
	return s
}
