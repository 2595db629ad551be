package costanalysis_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// Identity's trusted-account operations.
const (
	trustedListPath = "/identity/v2/trusted-account/list"
	secretDataPath  = "/identity/v2/trusted-account/get-secret-data"
	tsaListPath     = "/identity/v2/trusted-service-account/list"
)

// trustedCall is a call the fake identity received.
type trustedCall struct {
	path   string
	system bool
	req    M
}

// fakeTrusted answers identity's trusted accounts as identity does:
// list by domain_id for SYSTEM callers (others: their own domain),
// get-secret-data for SYSTEM callers only, trusted-service-account/list
// with a required domain_id. down makes every identity path answer 502;
// sloppy makes the lists answer every domain's rows (what the service
// keeps must still be the data source's domain's).
type fakeTrusted struct {
	mu              sync.Mutex
	accounts        []M
	secrets         map[string]M // trusted_account_id -> secret data
	serviceAccounts []M
	down, sloppy    bool
	calls           []trustedCall
	// gate, when set, holds trusted-account/list until it is closed;
	// held gets a value when a list is held.
	gate, held chan struct{}
}

func (f *fakeTrusted) serve(w http.ResponseWriter, path string, p *auth.Principal, body []byte) bool {
	if !strings.HasPrefix(path, "/identity/") {
		return false
	}
	f.mu.Lock()
	gate, held := f.gate, f.held
	f.mu.Unlock()
	if gate != nil && path == trustedListPath {
		held <- struct{}{}
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		w.WriteHeader(http.StatusBadGateway)
		return true
	}
	if path != trustedListPath && path != secretDataPath && path != tsaListPath {
		return false
	}
	var req M
	_ = json.Unmarshal(body, &req)
	f.calls = append(f.calls, trustedCall{path: path, system: p.IsSystem(), req: req})
	str := func(k string) string { s, _ := req[k].(string); return s }
	domain := str("domain_id")
	if domain == "" && path != tsaListPath {
		domain = p.DomainID
	}
	switch {
	case domain == "":
		writeError(w, http.StatusBadRequest, errs.RequiredParameter)
		return true
	case domain != p.DomainID && !p.IsSystem():
		writeError(w, http.StatusNotFound, errs.NotFoundCode)
		return true
	}
	switch path {
	case trustedListPath:
		out := []M{}
		for _, a := range f.accounts {
			if f.sloppy || (a["domain_id"] == domain && (str("provider") == "" || a["provider"] == str("provider"))) {
				out = append(out, a)
			}
		}
		_ = json.NewEncoder(w).Encode(M{"results": out, "total_count": len(out)})
	case tsaListPath:
		out := []M{}
		for _, a := range f.serviceAccounts {
			if f.sloppy || a["domain_id"] == domain {
				out = append(out, a)
			}
		}
		_ = json.NewEncoder(w).Encode(M{"results": out, "total_count": len(out)})
	case secretDataPath:
		if !p.IsSystem() {
			writeError(w, http.StatusForbidden, errs.PermissionDenied)
			return true
		}
		for _, a := range f.accounts {
			if a["trusted_account_id"] == str("trusted_account_id") && a["domain_id"] == domain {
				_ = json.NewEncoder(w).Encode(M{"trusted_account_id": a["trusted_account_id"], "domain_id": domain,
					"workspace_id": a["workspace_id"], "data": f.secrets[str("trusted_account_id")]})
				return true
			}
		}
		writeError(w, http.StatusNotFound, errs.NotFoundCode)
	}
	return true
}

func (f *fakeTrusted) set(fn func(f *fakeTrusted)) { f.mu.Lock(); defer f.mu.Unlock(); fn(f) }

// callsOf are the calls of one path so far.
func (f *fakeTrusted) callsOf(path string) []trustedCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []trustedCall
	for _, c := range f.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

func trustedAccount(id, provider, domain, workspace, schema string) M {
	group := "WORKSPACE"
	if workspace == "*" {
		group = "DOMAIN"
	}
	return M{"trusted_account_id": id, "name": "account " + id, "data": M{"account_id": "acct-" + id}, "provider": provider,
		"resource_group": group, "domain_id": domain, "workspace_id": workspace, "secret_schema_id": schema,
		"trusted_secret_id": "trusted-secret-" + id, "schedule": M{"state": "DISABLED", "hours": []int{}}, "tags": M{}}
}

// trust gives the fake identity its trusted accounts, each with secret
// data holding stamp (so a leak is found by it).
func (e *env) trust(stamp string) {
	e.services.trusted.set(func(f *fakeTrusted) {
		f.accounts = []M{
			trustedAccount("ta-dom", "aws", "domain-a", "*", "aws_access_key"),
			trustedAccount("ta-w1", "aws", "domain-a", "workspace-1", "aws_assume_role"),
			trustedAccount("ta-w2", "aws", "domain-a", "workspace-2", "aws_access_key"),
			trustedAccount("ta-gcp", "google_cloud", "domain-a", "*", "google_oauth_client_id"),
			trustedAccount("ta-b", "aws", "domain-b", "*", "aws_access_key"),
		}
		f.secrets = map[string]M{}
		for _, a := range f.accounts {
			id := a["trusted_account_id"].(string)
			f.secrets[id] = secretOf(stamp, id)
		}
	})
}

func secretOf(stamp, id string) M {
	return M{"aws_access_key_id": "AK-" + id, "aws_secret_access_key": "S3CR3T-" + stamp + "-" + id}
}

// saSource is the register body of a DOMAIN data source syncing with the
// aws trusted accounts (filter omitted when nil).
func saSource(name string, filter M) M {
	b := M{"name": name, "resource_group": "DOMAIN", "secret_type": "USE_SERVICE_ACCOUNT_SECRET", "provider": "aws",
		"plugin_info": M{"plugin_id": awsCE, "options": M{"region": "us-east-1"}}}
	if filter != nil {
		b["secret_filter"] = filter
	}
	return b
}

// secretKeys are the aws_secret_access_key values of the requests.
func secretKeys(calls []fakeplugin.Call) []string {
	var out []string
	for _, c := range calls {
		sd, _ := c.Request["secret_data"].(map[string]any)
		out = append(out, fmt.Sprint(sd["aws_secret_access_key"]))
	}
	slices.Sort(out)
	return out
}

func TestServiceAccountSecretRegister(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.register(t, e.adminA, saSource("trusted", M{"state": "ENABLED", "exclude_service_accounts": []string{"ta-w2"}}))
	if d.SecretType != "USE_SERVICE_ACCOUNT_SECRET" || d.Provider != "aws" || d.PluginInfo.SecretID != "" || d.WorkspaceID != "*" {
		t.Fatalf("data source %+v", d)
	}
	got := e.adminA.Call(dsBase+"get", M{"data_source_id": d.DataSourceID}).OK(nil).JSON()["secret_filter"]
	want := map[string]any{"state": "ENABLED", "secrets": []any{}, "service_accounts": []any{}, "schemas": []any{},
		"exclude_secrets": []any{}, "exclude_service_accounts": []any{"ta-w2"}, "exclude_schemas": []any{}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("secret_filter %v, want %v", got, want)
	}
	if raw := e.raw(t, dataSources, d.DataSourceID); raw["sealed"] != nil {
		t.Fatal("a USE_SERVICE_ACCOUNT_SECRET data source keeps secret data")
	}
	if n := len(e.plugin.Calls(verifyMethod)); n != 0 {
		t.Fatalf("%d verify calls: nothing to verify at register", n)
	}
	if n := e.count(t, rules, bson.E{Key: "data_source_id", Value: d.DataSourceID}); n != 2 {
		t.Fatalf("%d MANAGED rules", n)
	}
	plain := e.register(t, e.adminA, saSource("no filter", nil))
	if f := e.adminA.Call(dsBase+"get", M{"data_source_id": plain.DataSourceID}).OK(nil).JSON()["secret_filter"].(map[string]any); f["state"] != "DISABLED" {
		t.Fatalf("default secret_filter %v", f)
	}
	manual := e.register(t, e.adminA, domainSource("manual"))
	if f := e.adminA.Call(dsBase+"get", M{"data_source_id": manual.DataSourceID}).OK(nil).JSON()["secret_filter"].(map[string]any); f["state"] != "DISABLED" {
		t.Fatalf("MANUAL secret_filter %v", f)
	}

	before, beforeRules := e.count(t, dataSources), e.count(t, rules)
	with := func(mod func(M)) M { b := saSource("bad", nil); mod(b); return b }
	filter := func(f M) M { return with(func(b M) { b["secret_filter"] = f }) }
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf("ta-%d", i)
	}
	for _, tc := range []struct {
		name   string
		body   M
		status int
		code   string
	}{
		{"filter state", filter(M{"state": "ON"}), 400, errs.InvalidParameter},
		{"filter list a string", filter(M{"secrets": "trusted-secret-ta-dom"}), 400, errs.InvalidParameterType},
		{"filter list of numbers", filter(M{"schemas": []int{1}}), 400, errs.InvalidParameterType},
		{"filter empty id", filter(M{"service_accounts": []string{"ta-dom", " "}}), 400, errs.InvalidParameter},
		{"filter long id", filter(M{"exclude_secrets": []string{strings.Repeat("s", 256)}}), 400, errs.InvalidParameter},
		{"filter too many ids", filter(M{"exclude_schemas": many}), 400, errs.InvalidParameter},
		{"filter unknown key", filter(M{"state": "ENABLED", "accounts": []string{"ta-dom"}}), 400, errs.InvalidParameter},
		{"filter not an object", filter(M{"state": []string{"ENABLED"}}), 400, errs.InvalidParameterType},
		{"no provider", with(func(b M) { delete(b, "provider") }), 400, errs.RequiredParameter},
		{"own secret data", with(func(b M) { b["plugin_info"].(M)["secret_data"] = M{"k": "v"} }), 400, errs.InvalidParameter},
		{"unknown secret type", with(func(b M) { b["secret_type"] = "SHARED" }), 400, errs.InvalidParameter},
		{"MANUAL with a filter", with(func(b M) { b["secret_type"] = "MANUAL"; b["secret_filter"] = M{"state": "ENABLED"} }), 400, errs.InvalidParameter},
		{"default MANUAL with a filter", func() M { b := domainSource("x"); b["secret_filter"] = M{"state": "DISABLED"}; return b }(), 400, errs.InvalidParameter},
	} {
		e.adminA.Call(dsBase+"register", tc.body).Fails(tc.status, tc.code)
		if e.count(t, dataSources) != before || e.count(t, rules) != beforeRules {
			t.Fatalf("%s: a refused register stored something", tc.name)
		}
	}

	// update takes a secret filter (upstream), for such a data source only.
	var u DataSource
	e.adminA.Call(dsBase+"update", M{"data_source_id": d.DataSourceID, "secret_filter": M{"state": "ENABLED", "service_accounts": []string{"ta-dom"}}}).OK(&u)
	got = e.adminA.Call(dsBase+"get", M{"data_source_id": d.DataSourceID}).OK(nil).JSON()["secret_filter"]
	if f := got.(map[string]any); f["state"] != "ENABLED" || !reflect.DeepEqual(f["service_accounts"], []any{"ta-dom"}) ||
		!reflect.DeepEqual(f["exclude_service_accounts"], []any{}) {
		t.Fatalf("updated secret_filter %v", got)
	}
	snap, snapManual := e.raw(t, dataSources, d.DataSourceID), e.raw(t, dataSources, manual.DataSourceID)
	for _, tc := range []struct {
		name string
		body M
		code string
	}{
		{"bad state", M{"data_source_id": d.DataSourceID, "name": "renamed", "secret_filter": M{"state": "YES"}}, errs.InvalidParameter},
		{"empty id", M{"data_source_id": d.DataSourceID, "name": "renamed", "secret_filter": M{"secrets": []string{""}}}, errs.InvalidParameter},
		{"a string", M{"data_source_id": d.DataSourceID, "name": "renamed", "secret_filter": "ENABLED"}, errs.InvalidParameterType},
		{"MANUAL data source", M{"data_source_id": manual.DataSourceID, "name": "renamed", "secret_filter": M{"state": "ENABLED"}}, errs.InvalidParameter},
	} {
		e.adminA.Call(dsBase+"update", tc.body).Fails(400, tc.code)
		if !reflect.DeepEqual(e.raw(t, dataSources, d.DataSourceID), snap) || !reflect.DeepEqual(e.raw(t, dataSources, manual.DataSourceID), snapManual) {
			t.Fatalf("%s: a refused update changed the data source", tc.name)
		}
	}
}

// A sync of a USE_SERVICE_ACCOUNT_SECRET data source asks the plugin for
// tasks once per trusted account its filter selects, with that account's
// secret data; each task reads it again when it runs and stamps its costs
// with the account. A failing account does not fail the job. The secret
// data is never stored, logged or answered.
func TestSyncWithTrustedAccounts(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, logs: true})
	stamp := time.Now().Format("150405.000000")
	e.trust(stamp)
	var answers [][]byte
	call := func(c *testkit.Client, path string, body M) *testkit.Response {
		r := c.Call(path, body)
		answers = append(answers, r.Body)
		return r
	}
	var d DataSource
	call(e.adminA, dsBase+"register", saSource("trusted", M{"state": "ENABLED", "exclude_service_accounts": []string{"ta-w2"}})).OK(&d)
	e.plugin.Script(getTasksMethod, fakeplugin.Reply{Result: M{"tasks": []any{M{"task_options": M{"start": "2024-01-01"}}},
		"changed": []any{M{"start": "2024-01"}}, "synced_accounts": []any{M{"account_id": "111"}}}})
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(2, "2024-01", "x")}})
	var j Job
	call(e.adminA, dsBase+"sync", M{"data_source_id": d.DataSourceID}).OK(&j)
	if j.TotalTasks != 2 || len(j.Changed) != 2 || len(j.SyncedAccounts) != 2 {
		t.Fatalf("job %+v: a task, a window and an account per trusted account", j)
	}
	var windowed []string
	for _, c := range j.Changed {
		f, _ := c["filter"].(map[string]any)
		windowed = append(windowed, fmt.Sprint(f["trusted_account_id"]))
	}
	slices.Sort(windowed)
	if !slices.Equal(windowed, []string{"ta-dom", "ta-w1"}) {
		t.Fatalf("changed %v: each account's window names the account", j.Changed)
	}
	j = e.waitJob(t, e.adminA, j.JobID, finished)
	if j.Status != "SUCCESS" || j.ErrorCode != "" {
		t.Fatalf("job %+v", j)
	}
	wantKeys := []string{"S3CR3T-" + stamp + "-ta-dom", "S3CR3T-" + stamp + "-ta-w1"}
	gt := e.plugin.Calls(getTasksMethod)
	if got := secretKeys(gt); !slices.Equal(got, wantKeys) {
		t.Fatalf("get_tasks secret data %v, want %v", got, wantKeys)
	}
	for _, c := range gt {
		if !reflect.DeepEqual(c.Request["options"], M{"region": "us-east-1", "secret_type": "USE_SERVICE_ACCOUNT_SECRET"}) || c.Request["domain_id"] != "domain-a" {
			t.Fatalf("get_tasks request %v", c.Request)
		}
	}
	if got := secretKeys(e.plugin.Calls(getDataMethod)); !slices.Equal(got, wantKeys) {
		t.Fatalf("get_data secret data %v, want %v", got, wantKeys)
	}
	// Identity was asked with the service credential for domain-a; each
	// secret read twice: for get_tasks, and again by the task's run.
	reads := e.services.trusted.callsOf(secretDataPath)
	if len(reads) != 4 {
		t.Fatalf("%d secret data reads, want 4", len(reads))
	}
	for _, c := range append(reads, e.services.trusted.callsOf(trustedListPath)...) {
		if !c.system || c.req["domain_id"] != "domain-a" {
			t.Fatalf("identity call %+v: want the service credential naming domain-a", c)
		}
	}
	// Costs carry their account: the domain-wide one stays the domain's,
	// workspace-1's goes to workspace-1.
	l := e.costs(t, e.adminA, d.DataSourceID, M{"query": M{"page": M{"limit": 100}}})
	byAccount := map[string][]string{}
	for _, c := range l.Results {
		byAccount[c.ServiceAccountID] = append(byAccount[c.ServiceAccountID], c.WorkspaceID)
	}
	if l.TotalCount != 4 || !slices.Equal(byAccount["ta-dom"], []string{"*", "*"}) || !slices.Equal(byAccount["ta-w1"], []string{"workspace-1", "workspace-1"}) {
		t.Fatalf("costs by account %v", byAccount)
	}
	if l := e.costs(t, e.ownerA1, d.DataSourceID, M{}); l.TotalCount != 2 || l.Results[0].ServiceAccountID != "ta-w1" {
		t.Fatalf("workspace-1 sees %+v", l)
	}
	cur, err := e.db.Collection(tasks).Find(t.Context(), bson.D{{Key: "job_id", Value: j.JobID}})
	if err != nil {
		t.Fatal(err)
	}
	var stored []bson.M
	if err := cur.All(t.Context(), &stored); err != nil {
		t.Fatal(err)
	}
	var taskAccounts []string
	for _, s := range stored {
		taskAccounts = append(taskAccounts, fmt.Sprint(s["trusted_account_id"]))
	}
	slices.Sort(taskAccounts)
	if !slices.Equal(taskAccounts, []string{"ta-dom", "ta-w1"}) {
		t.Fatalf("tasks keep the accounts %v", taskAccounts)
	}

	// get_tasks failing for one account (ta-dom, asked first): the other
	// account's task runs, the job succeeds, ta-dom's costs stay.
	first := j.JobID
	e.plugin.Script(getTasksMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.Internal, "ERROR_AWS", "throttled")},
		fakeplugin.Reply{Result: M{"tasks": []any{M{"task_options": M{"start": "2024-01-01"}}}, "changed": []any{M{"start": "2024-01"}}}})
	call(e.adminA, dsBase+"sync", M{"data_source_id": d.DataSourceID}).OK(&j)
	if j.TotalTasks != 1 {
		t.Fatalf("job %+v: one account had no task", j)
	}
	j = e.waitJob(t, e.adminA, j.JobID, finished)
	if j.Status != "SUCCESS" {
		t.Fatalf("job %+v", j)
	}
	jobOf := func() map[string][]string {
		out := map[string][]string{}
		for _, c := range e.costs(t, e.adminA, d.DataSourceID, M{"query": M{"page": M{"limit": 100}}}).Results {
			out[c.ServiceAccountID] = append(out[c.ServiceAccountID], c.JobID)
		}
		return out
	}
	if got := jobOf(); !slices.Equal(got["ta-dom"], []string{first, first}) || !slices.Equal(got["ta-w1"], []string{j.JobID, j.JobID}) {
		t.Fatalf("costs by account and job %v (first job %s, second %s)", got, first, j.JobID)
	}

	// A task failing: the job still succeeds (not ERROR_JOB_TASK); the
	// failed account keeps its earlier costs, the other's are replaced.
	e.plugin.Script(getTasksMethod, fakeplugin.Reply{Result: M{"tasks": []any{M{"task_options": M{"start": "2024-01-01"}}}, "changed": []any{M{"start": "2024-01"}}}})
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.PermissionDenied, "ERROR_AWS_ACCESS", "denied")},
		fakeplugin.Reply{Stream: []M{rows(2, "2024-01", "y")}})
	before := jobOf()
	call(e.adminA, dsBase+"sync", M{"data_source_id": d.DataSourceID}).OK(&j)
	j = e.waitJob(t, e.adminA, j.JobID, finished)
	if j.Status != "SUCCESS" || j.ErrorCode != "" || j.TotalTasks != 2 {
		t.Fatalf("job %+v: a failed task of a USE_SERVICE_ACCOUNT_SECRET job does not fail it", j)
	}
	var failed struct {
		Status           string `bson:"status"`
		ErrorCode        string `bson:"error_code"`
		TrustedAccountID string `bson:"trusted_account_id"`
	}
	if err := e.db.Collection(tasks).FindOne(t.Context(), bson.D{{Key: "job_id", Value: j.JobID}, {Key: "status", Value: "FAILURE"}}).Decode(&failed); err != nil ||
		failed.ErrorCode != "ERROR_AWS_ACCESS" {
		t.Fatalf("failed task %+v %v", failed, err)
	}
	other := map[string]string{"ta-dom": "ta-w1", "ta-w1": "ta-dom"}[failed.TrustedAccountID]
	if got := jobOf(); !slices.Equal(got[failed.TrustedAccountID], before[failed.TrustedAccountID]) || !slices.Equal(got[other], []string{j.JobID, j.JobID}) {
		t.Fatalf("costs by account and job %v (before %v, failed %s, job %s)", got, before, failed.TrustedAccountID, j.JobID)
	}

	// Nothing held the secret data but the plugin's requests.
	call(e.adminA, jobBase+"list", M{})
	call(e.adminA, dsBase+"list", M{})
	call(e.adminA, costBase+"list", M{"data_source_id": d.DataSourceID})
	secrets := []string{"S3CR3T-" + stamp}
	for _, b := range answers {
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Fatalf("an answer holds secret data: %s", b)
			}
		}
	}
	names, err := e.db.ListCollectionNames(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		cur, err := e.db.Collection(name).Find(t.Context(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		for cur.Next(t.Context()) {
			for _, s := range secrets {
				if strings.Contains(cur.Current.String(), s) || bytes.Contains(cur.Current, []byte(s)) {
					t.Fatalf("%s holds secret data: %s", name, cur.Current)
				}
			}
		}
		_ = cur.Close(t.Context())
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "ta-dom") || !strings.Contains(logs, "get_tasks failed") {
		t.Fatalf("the log lines were not captured: the leak check would prove nothing: %.500s", logs)
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Fatalf("the logs hold secret data: %s", logs)
		}
	}
}

// No trusted account: the job is SUCCESS at once, without asking the
// plugin. A WORKSPACE data source uses its workspace's and the domain-wide
// accounts and keeps every cost in its workspace. Identity down at sync:
// 503 and no job.
func TestSyncTrustedAccountsScope(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	e.trust("x")
	none := e.register(t, e.adminA, saSource("none", M{"state": "ENABLED", "service_accounts": []string{"ta-gcp", "ta-b"}}))
	j := e.sync(t, e.adminA, none.DataSourceID, "")
	if j.Status != "SUCCESS" || j.TotalTasks != 0 || len(e.plugin.Calls(getTasksMethod)) != 0 {
		t.Fatalf("job %+v, %d get_tasks", j, len(e.plugin.Calls(getTasksMethod)))
	}
	var got DataSource
	e.adminA.Call(dsBase+"get", M{"data_source_id": none.DataSourceID}).OK(&got)
	if got.LastSynchronizedAt == nil {
		t.Fatal("a sync without tasks is a sync: last_synchronized_at")
	}

	b := saSource("mine", nil)
	b["resource_group"] = "WORKSPACE"
	ws := e.register(t, e.ownerA1, b)
	e.plugin.Script(getTasksMethod, fakeplugin.Reply{Result: M{"tasks": []any{M{"task_options": M{"start": "2024-02-01"}}}}})
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(1, "2024-02", "w")}})
	j = e.waitJob(t, e.ownerA1, e.sync(t, e.ownerA1, ws.DataSourceID, "").JobID, finished)
	if j.Status != "SUCCESS" || j.TotalTasks != 2 {
		t.Fatalf("job %+v", j)
	}
	if got := secretKeys(e.plugin.Calls(getTasksMethod)); !slices.Equal(got, []string{"S3CR3T-x-ta-dom", "S3CR3T-x-ta-w1"}) {
		t.Fatalf("a WORKSPACE data source synced with %v", got)
	}
	l := e.costs(t, e.ownerA1, ws.DataSourceID, M{})
	var accounts []string
	for _, c := range l.Results {
		accounts = append(accounts, c.ServiceAccountID)
		if c.WorkspaceID != "workspace-1" {
			t.Fatalf("cost %+v left its data source's workspace", c)
		}
	}
	slices.Sort(accounts)
	if !slices.Equal(accounts, []string{"ta-dom", "ta-w1"}) {
		t.Fatalf("costs of %v", accounts)
	}
	// verify-plugin verifies with the first account.
	e.ownerA1.Call(dsBase+"verify-plugin", M{"data_source_id": ws.DataSourceID}).OK(nil)
	if v := e.plugin.Calls(verifyMethod); len(v) != 1 || secretKeys(v)[0] != "S3CR3T-x-ta-dom" {
		t.Fatalf("verify calls %+v", v)
	}
	e.adminA.Call(dsBase+"verify-plugin", M{"data_source_id": none.DataSourceID}).Fails(404, errs.NotFoundCode)

	// Identity down: 503 and no job; a MANUAL data source whose MANAGED
	// rule matches service accounts cannot read them either.
	manual := e.register(t, e.adminA, domainSource("manual"))
	jobsBefore := e.count(t, jobs)
	e.services.trusted.set(func(f *fakeTrusted) { f.down = true })
	e.adminA.Call(dsBase+"sync", M{"data_source_id": none.DataSourceID}).Fails(503, errs.Unavailable)
	e.ownerA1.Call(dsBase+"sync", M{"data_source_id": ws.DataSourceID}).Fails(503, errs.Unavailable)
	e.adminA.Call(dsBase+"sync", M{"data_source_id": manual.DataSourceID}).Fails(503, errs.Unavailable)
	if e.count(t, jobs) != jobsBefore || e.count(t, jobs, bson.E{Key: "status", Value: "IN_PROGRESS"}) != 0 {
		t.Fatal("a sync refused for identity left a job")
	}
	e.services.trusted.set(func(f *fakeTrusted) { f.down = false })
	if j := e.sync(t, e.adminA, none.DataSourceID, ""); j.Status != "SUCCESS" {
		t.Fatalf("job after identity came back %+v", j)
	}
}

// match_service_account: the rule's trusted service accounts come from
// identity (service credential, the data source's domain only, whatever
// identity answers); a matched cost gets the account and its workspace
// (the account has no project: the project rules decide it).
func TestMatchServiceAccountSync(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	e.services.trusted.set(func(f *fakeTrusted) {
		f.sloppy = true
		f.serviceAccounts = []M{
			{"trusted_service_account_id": "tsa-b", "name": "b", "data": M{"account_id": "111"}, "provider": "aws", "scope": "DOMAIN",
				"domain_id": "domain-b", "workspace_id": "*"},
			{"trusted_service_account_id": "tsa-1", "name": "prod", "data": M{"account_id": "111"}, "provider": "aws", "scope": "WORKSPACE",
				"domain_id": "domain-a", "workspace_id": "workspace-1"},
			{"trusted_service_account_id": "tsa-2", "name": "dev", "data": M{"account_id": "222"}, "provider": "aws", "scope": "WORKSPACE",
				"domain_id": "domain-a", "workspace_id": "workspace-2"},
		}
	})
	e.services.projects["domain-a"] = []M{{"project_id": "project-web", "name": "web", "workspace_id": "workspace-1"}}
	ds := e.register(t, e.adminA, domainSource("aws")) // its MANAGED rule: additional_info.Account ID -> data.account_id
	e.createRule(t, e.adminA, M{"data_source_id": ds.DataSourceID, "name": "111 is web", "conditions_policy": "ALL", "resource_group": "DOMAIN",
		"conditions": []M{{"key": "additional_info.Account ID", "value": "111", "operator": "eq"}}, "actions": M{"change_project": "project-web"}})
	r := rows(3, "2024-03", "m")
	r["results"].([]any)[2].(M)["additional_info"] = M{"Account ID": "222"}
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{r}})
	j := e.waitJob(t, e.adminA, e.sync(t, e.adminA, ds.DataSourceID, "").JobID, finished)
	if j.Status != "SUCCESS" {
		t.Fatalf("job %+v", j)
	}
	l := e.costs(t, e.adminA, ds.DataSourceID, M{})
	got := map[string]int{}
	for _, c := range l.Results {
		got[c.ServiceAccountID+"@"+c.WorkspaceID+"@"+c.ProjectID]++
	}
	if l.TotalCount != 3 || got["tsa-1@workspace-1@project-web"] != 2 || got["tsa-2@workspace-2@"] != 1 {
		t.Fatalf("costs by account %v", got)
	}
	calls := e.services.trusted.callsOf(tsaListPath)
	if len(calls) != 1 || !calls[0].system || calls[0].req["domain_id"] != "domain-a" {
		t.Fatalf("trusted service account list calls %+v", calls)
	}
	// What the job kept for its rules: domain-a's accounts only.
	dir := e.raw(t, "cost_job_directories", j.JobID)
	if s := toString(t, dir); !strings.Contains(s, "tsa-1") || strings.Contains(s, "tsa-b") {
		t.Fatalf("directory %s", s)
	}
}

// A trusted account's rows matched by match_service_account (the aws
// plugin's MANAGED rule) carry the matched service account, not the
// trusted account: the account's window must still replace them, so a
// second sync of the same month leaves that sync's rows only.
func TestTrustedAccountWindowAfterMatchServiceAccount(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	e.trust("w")
	e.services.trusted.set(func(f *fakeTrusted) {
		f.serviceAccounts = []M{{"trusted_service_account_id": "tsa-1", "name": "prod", "data": M{"account_id": "111"}, "provider": "aws",
			"scope": "WORKSPACE", "domain_id": "domain-a", "workspace_id": "workspace-1"}}
	})
	d := e.register(t, e.adminA, saSource("matched", M{"state": "ENABLED", "service_accounts": []string{"ta-dom"}}))
	var last Job
	for _, tag := range []string{"first", "second"} {
		e.plugin.Script(getTasksMethod, fakeplugin.Reply{Result: M{"tasks": []any{M{"task_options": M{"start": "2024-01-01"}}},
			"changed": []any{M{"start": "2024-01"}}}})
		e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(2, "2024-01", tag)}})
		last = e.waitJob(t, e.adminA, e.sync(t, e.adminA, d.DataSourceID, "").JobID, finished)
		if last.Status != "SUCCESS" {
			t.Fatalf("%s job %+v", tag, last)
		}
	}
	l := e.costs(t, e.adminA, d.DataSourceID, M{"query": M{"page": M{"limit": 100}}})
	for _, c := range l.Results {
		if c.ServiceAccountID != "tsa-1" {
			t.Fatalf("cost %+v: the MANAGED rule did not match", c)
		}
		if c.JobID != last.JobID {
			t.Fatalf("cost %+v of an earlier job stayed in the replaced window (%d rows)", c, l.TotalCount)
		}
	}
	if l.TotalCount != 2 {
		t.Fatalf("%d costs, want the second sync's 2", l.TotalCount)
	}
}

// Deregister while a sync reads the trusted accounts (before its job
// exists): the sync must not then create a job of the deregistered data
// source, which nothing would ever delete.
func TestDeregisterDuringSyncStart(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	e.trust("g")
	d := e.register(t, e.adminA, saSource("gone", nil))
	gate, held := make(chan struct{}), make(chan struct{}, 1)
	e.services.trusted.set(func(f *fakeTrusted) { f.gate, f.held = gate, held })
	defer func() {
		select {
		case <-gate:
		default:
			close(gate) // never leave the fake identity held
		}
	}()
	e.plugin.Script(getTasksMethod, tasksReply(1))
	done := make(chan *testkit.Response, 1)
	go func() { done <- e.adminA.Call(dsBase+"sync", M{"data_source_id": d.DataSourceID}) }()
	select {
	case <-held:
	case <-time.After(waitBound):
		t.Fatal("the sync did not list the trusted accounts")
	}
	e.adminA.Call(dsBase+"deregister", M{"data_source_id": d.DataSourceID}).OK(nil)
	close(gate)
	var r *testkit.Response
	select {
	case r = <-done:
	case <-time.After(waitBound):
		t.Fatal("sync did not answer")
	}
	r.Fails(404, errs.NotFoundCode)
	mine := bson.E{Key: "data_source_id", Value: d.DataSourceID}
	for _, c := range []string{jobs, tasks} {
		if n := e.count(t, c, mine); n != 0 {
			t.Fatalf("%s: %d of the deregistered data source", c, n)
		}
	}
}

// A deregister that lands while get_tasks runs (the job exists, its tasks
// do not yet) leaves nothing behind either: the tasks the sync stores
// after it, and the job's kept directory, go when the sync finds its job
// gone.
func TestDeregisterDuringGetTasks(t *testing.T) {
	t.Parallel()
	// The gated get_tasks must outlast the deregister: at the harness's
	// 3 s call timeout, a deregister slower than that under load (14)
	// made get_tasks fail first, and the sync answered its job, FAILURE
	// or CANCELED, with 200 (2 of 4 runs).
	e := setupWith(t, options{bus: true, callTimeout: waitBound})
	d := e.register(t, e.adminA, domainSource("aws"))
	gate := make(chan struct{})
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	reply := tasksReply(2)
	reply.Gate = gate // get_tasks answers once the data source is deregistered
	e.plugin.Script(getTasksMethod, reply)
	done := make(chan *testkit.Response, 1)
	go func() { done <- e.adminA.Call(dsBase+"sync", M{"data_source_id": d.DataSourceID}) }()
	mine := bson.E{Key: "data_source_id", Value: d.DataSourceID}
	testkit.Eventually(t, waitBound, "a job of the sync", func() bool { return e.count(t, jobs, mine) != 0 })
	e.adminA.Call(dsBase+"deregister", M{"data_source_id": d.DataSourceID}).OK(nil)
	close(gate)
	var r *testkit.Response
	select {
	case r = <-done:
	case <-time.After(waitBound):
		t.Fatal("sync did not answer")
	}
	r.Fails(404, errs.NotFoundCode)
	for _, c := range []string{jobs, tasks} {
		if n := e.count(t, c, mine); n != 0 {
			t.Fatalf("%s: %d of the deregistered data source", c, n)
		}
	}
	if n := e.count(t, "cost_job_directories"); n != 0 {
		t.Fatalf("%d job directories left", n)
	}
}
