package costanalysis_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// logBuffer keeps the service's log lines (options.logs).
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

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
}

func (f *fakeTrusted) serve(w http.ResponseWriter, path string, p *auth.Principal, body []byte) bool {
	if !strings.HasPrefix(path, "/identity/") {
		return false
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

// match_service_account: the rule's trusted service accounts come from
// identity (service credential, the data source's domain only, whatever
// identity answers); a matched cost gets the account and its workspace
// (the account has no project: the project rules decide it).
func TestMatchServiceAccountSync(t *testing.T) {
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
	l := e.costs(t, e.adminA, M{})
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
