package trusted

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
)

func TestSelect(t *testing.T) {
	accounts := []Account{
		{TrustedAccountID: "ta-dom", DomainID: "d", WorkspaceID: "*", SecretSchemaID: "key", TrustedSecretID: "s-dom"},
		{TrustedAccountID: "ta-w1", DomainID: "d", WorkspaceID: "w1", SecretSchemaID: "role", TrustedSecretID: "s-w1"},
		{TrustedAccountID: "ta-w2", DomainID: "d", WorkspaceID: "w2", SecretSchemaID: "key", TrustedSecretID: "s-w2"},
		{TrustedAccountID: "ta-other", DomainID: "e", WorkspaceID: "*", SecretSchemaID: "key", TrustedSecretID: "s-other"},
		{TrustedAccountID: "ta-nosecret", DomainID: "d", WorkspaceID: "*", SecretSchemaID: "key"},
	}
	dom := Owner{DomainID: "d", ResourceGroup: "DOMAIN", WorkspaceID: "*"}
	ws1 := Owner{DomainID: "d", ResourceGroup: GroupWorkspace, WorkspaceID: "w1"}
	for _, tt := range []struct {
		name     string
		o        Owner
		f        Filter
		secretID string
		want     string
	}{
		{"domain owner takes the domain's", dom, Filter{}, "", "s-dom s-w1 s-w2"},
		{"workspace owner: its workspace and the domain-wide", ws1, Filter{}, "", "s-dom s-w1"},
		{"secret_id narrows", dom, Filter{}, "s-w2", "s-w2"},
		{"secret_id out of the workspace", ws1, Filter{}, "s-w2", ""},
		{"another domain's secret", dom, Filter{}, "s-other", ""},
		{"filter DISABLED is ignored", dom, Filter{State: Disabled, Secrets: []string{"s-w1"}}, "", "s-dom s-w1 s-w2"},
		{"filter without state is ignored", dom, Filter{Secrets: []string{"s-w1"}}, "", "s-dom s-w1 s-w2"},
		{"secrets in", dom, Filter{State: Enabled, Secrets: []string{"s-w1", "s-w2"}}, "", "s-w1 s-w2"},
		{"service_accounts in", dom, Filter{State: Enabled, ServiceAccounts: []string{"ta-dom"}}, "", "s-dom"},
		{"schemas in", dom, Filter{State: Enabled, Schemas: []string{"key"}}, "", "s-dom s-w2"},
		{"exclude secrets", dom, Filter{State: Enabled, ExcludeSecrets: []string{"s-dom"}}, "", "s-w1 s-w2"},
		{"exclude service accounts", dom, Filter{State: Enabled, ExcludeServiceAccounts: []string{"ta-w1"}}, "", "s-dom s-w2"},
		{"exclude schemas", dom, Filter{State: Enabled, ExcludeSchemas: []string{"key"}}, "", "s-w1"},
		{"in and not in together", dom, Filter{State: Enabled, Schemas: []string{"key"}, ExcludeSecrets: []string{"s-w2"}}, "", "s-dom"},
		{"filter and secret_id", dom, Filter{State: Enabled, Schemas: []string{"key"}}, "s-w1", ""},
		{"workspace owner and filter", ws1, Filter{State: Enabled, ExcludeServiceAccounts: []string{"ta-dom"}}, "", "s-w1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range Select(accounts, tt.o, tt.f, tt.secretID) {
				got = append(got, a.TrustedSecretID)
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("got %v, want %q", got, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		a         Account
		ownerWS   string
		workspace string
	}{
		{accounts[0], "w1", "w1"}, // domain-wide account: the owner's workspace
		{accounts[0], "*", "*"},
		{accounts[1], "*", "w1"}, // the account's own workspace
		{Account{WorkspaceID: ""}, "*", "*"},
	} {
		if got := Workspace(tt.a, tt.ownerWS); got != tt.workspace {
			t.Errorf("Workspace(%s, %s) = %s, want %s", tt.a.TrustedAccountID, tt.ownerWS, got, tt.workspace)
		}
	}
}

func TestFilterValidateAndNormalized(t *testing.T) {
	for _, tt := range []struct {
		f   Filter
		key string // "" when valid
	}{
		{Filter{}, ""},
		{Filter{State: Enabled, Secrets: []string{"s-1"}, ExcludeSchemas: []string{"x"}}, ""},
		{Filter{Secrets: []string{""}}, "secret_filter.secrets"},
		{Filter{ServiceAccounts: []string{"ta-1", ""}}, "secret_filter.service_accounts"},
		{Filter{Schemas: []string{strings.Repeat("s", 256)}}, "secret_filter.schemas"},
		{Filter{ExcludeSecrets: []string{""}}, "secret_filter.exclude_secrets"},
		{Filter{ExcludeServiceAccounts: []string{""}}, "secret_filter.exclude_service_accounts"},
		{Filter{ExcludeSchemas: []string{""}}, "secret_filter.exclude_schemas"},
	} {
		err := tt.f.Validate()
		e, _ := errs.As(err)
		switch {
		case tt.key == "" && err != nil:
			t.Errorf("%+v: %v", tt.f, err)
		case tt.key != "" && (e == nil || e.Code != errs.InvalidParameter || !strings.Contains(e.Message, tt.key)):
			t.Errorf("%+v: got %v, want an invalid %s", tt.f, err, tt.key)
		}
	}
	n := Filter{Secrets: []string{"s"}}.Normalized()
	b, _ := json.Marshal(n)
	if string(b) != `{"state":"DISABLED","secrets":["s"],"service_accounts":[],"schemas":[],"exclude_secrets":[],"exclude_service_accounts":[],"exclude_schemas":[]}` {
		t.Fatalf("Normalized = %s", b)
	}
	if (Filter{State: Enabled}).Normalized().State != Enabled {
		t.Fatal("Normalized changed the state")
	}
}

// fakeIdentity answers the three operations for one bearer, as identity
// does for a SYSTEM caller naming a domain, plus rows of other domains
// (an identity that did not filter) when sloppy.
type fakeIdentity struct {
	mu       sync.Mutex
	bearers  []string
	requests []map[string]any
	accounts []Account
	sas      []ServiceAccount
	sloppy   bool
	other    bool // get-secret-data answers another account
}

func (f *fakeIdentity) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bearers = append(f.bearers, r.Header.Get("Authorization"))
	var req map[string]any
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &req)
	f.requests = append(f.requests, req)
	domain, _ := req["domain_id"].(string)
	q, _ := req["query"].(map[string]any)
	page, _ := q["page"].(map[string]any)
	start, _ := page["start"].(float64)
	limit, _ := page["limit"].(float64)
	paged := func(n int) (int, int) { return min(int(start)-1, n), min(int(start+limit)-1, n) }
	switch r.URL.Path {
	case AccountListPath:
		var rows []Account
		for _, a := range f.accounts {
			if f.sloppy || (a.DomainID == domain && a.Provider == req["provider"]) {
				rows = append(rows, a)
			}
		}
		lo, hi := paged(len(rows))
		_ = json.NewEncoder(w).Encode(map[string]any{"results": rows[lo:hi], "total_count": len(rows)})
	case ServiceAccountListPath:
		var rows []ServiceAccount
		for _, a := range f.sas {
			if f.sloppy || a.DomainID == domain {
				rows = append(rows, a)
			}
		}
		lo, hi := paged(len(rows))
		_ = json.NewEncoder(w).Encode(map[string]any{"results": rows[lo:hi], "total_count": len(rows)})
	case SecretDataPath:
		id := req["trusted_account_id"].(string)
		if id == "ta-gone" {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"detail": map[string]string{"code": errs.NotFoundCode, "message": "no such account"}})
			return
		}
		if f.other {
			id = "ta-other"
		}
		out := map[string]any{"trusted_account_id": id, "domain_id": domain}
		if id != "ta-empty" {
			out["data"] = map[string]any{"key": "secret-of-" + id}
		}
		_ = json.NewEncoder(w).Encode(out)
	}
}

// The client lists every page with the service credential, keeps what
// belongs to the domain asked for whatever identity answers, and reads
// secret data of the account asked for only.
func TestIdentity(t *testing.T) {
	// No ListPageSize-sized test data is needed to see paging: a caller
	// reads a second page only after a full one.
	f := &fakeIdentity{}
	for i := range call.ListPageSize + 3 {
		f.accounts = append(f.accounts, Account{TrustedAccountID: fmt.Sprintf("ta-%d", i), DomainID: "d", Provider: "aws", TrustedSecretID: "s"})
	}
	f.accounts = append(f.accounts, Account{TrustedAccountID: "ta-e", DomainID: "e", Provider: "aws"},
		Account{TrustedAccountID: "ta-gcp", DomainID: "d", Provider: "google_cloud"})
	f.sas = []ServiceAccount{{TrustedServiceAccountID: "tsa-1", DomainID: "d", Data: map[string]any{"account_id": "1"}},
		{TrustedServiceAccountID: "tsa-e", DomainID: "e"}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	defer srv.Close()
	id := Identity{Client: call.NewServices(map[string]string{"identity": srv.URL}, "svc-token", nil).Client("identity")}
	ctx := context.Background()

	as, err := id.Accounts(ctx, "d", "aws")
	if err != nil || len(as) != call.ListPageSize+3 || as[0].TrustedAccountID != "ta-0" || as[call.ListPageSize+2].TrustedAccountID != fmt.Sprintf("ta-%d", call.ListPageSize+2) {
		t.Fatalf("Accounts = %d accounts, %v", len(as), err)
	}
	if len(f.requests) != 2 || f.requests[1]["domain_id"] != "d" || f.requests[1]["provider"] != "aws" {
		t.Fatalf("requests %v", f.requests)
	}
	for _, b := range f.bearers {
		if b != "Bearer svc-token" {
			t.Fatalf("bearer %q: want the service credential", b)
		}
	}
	f.sloppy = true // identity answering every domain and provider: only d's aws ones are kept
	if as, err = id.Accounts(ctx, "d", "aws"); err != nil || len(as) != call.ListPageSize+3 {
		t.Fatalf("sloppy Accounts = %d, %v", len(as), err)
	}
	sas, err := id.ServiceAccounts(ctx, "d")
	if err != nil || len(sas) != 1 || sas[0].TrustedServiceAccountID != "tsa-1" || sas[0].Data["account_id"] != "1" {
		t.Fatalf("ServiceAccounts = %+v, %v", sas, err)
	}
	if last := f.requests[len(f.requests)-1]; last["domain_id"] != "d" {
		t.Fatalf("service account list request %v", last)
	}

	data, err := id.SecretData(ctx, "d", "ta-1")
	if err != nil || data["key"] != "secret-of-ta-1" {
		t.Fatalf("SecretData = %v, %v", data, err)
	}
	if last := f.requests[len(f.requests)-1]; last["trusted_account_id"] != "ta-1" || last["domain_id"] != "d" {
		t.Fatalf("get-secret-data request %v", last)
	}
	if data, err = id.SecretData(ctx, "d", "ta-empty"); err != nil || data == nil || len(data) != 0 {
		t.Fatalf("SecretData without data = %v, %v", data, err)
	}
	if _, err = id.SecretData(ctx, "d", "ta-gone"); !isCode(err, errs.NotFoundCode) {
		t.Fatalf("SecretData of a deleted account = %v, want identity's 404", err)
	}
	f.other = true
	if data, err = id.SecretData(ctx, "d", "ta-1"); !isCode(err, errs.Unavailable) || data != nil {
		t.Fatalf("SecretData answered for another account = %v, %v", data, err)
	}

	srv.Close()
	if _, err := id.Accounts(ctx, "d", "aws"); !isCode(err, errs.Unavailable) {
		t.Fatalf("identity down: %v", err)
	}
	if _, err := id.ServiceAccounts(ctx, "d"); !isCode(err, errs.Unavailable) {
		t.Fatalf("identity down: %v", err)
	}
}

func isCode(err error, code string) bool {
	e, ok := errs.As(err)
	return ok && e.Code == code
}

// With the secret service: its secrets of the provider that belong to a
// service account are accounts too (the account's id, the secret's id and
// schema, so a secret filter reads them as upstream), another domain's or
// one without a service account is dropped, and an sa- id's data is its
// secret's get-data, read with the service credential.
func TestSecrets(t *testing.T) {
	f := &fakeIdentity{}
	f.accounts = []Account{{TrustedAccountID: "ta-1", DomainID: "d", Provider: "aws", TrustedSecretID: "trusted-secret-1"}}
	ids := httptest.NewServer(http.HandlerFunc(f.serve))
	defer ids.Close()
	var mu sync.Mutex
	var seen []map[string]any
	var bearers []string
	secrets := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		seen, bearers = append(seen, req), append(bearers, r.Header.Get("Authorization"))
		mu.Unlock()
		switch r.URL.Path {
		case SecretListPath:
			rows := []map[string]any{
				{"secret_id": "secret-1", "schema_id": "aws-secret-access-key", "provider": "aws", "service_account_id": "sa-1", "resource_group": "PROJECT",
					"project_id": "project-1", "workspace_id": "w", "domain_id": "d"},
				{"secret_id": "secret-2", "provider": "aws", "service_account_id": "", "resource_group": "WORKSPACE", "workspace_id": "w", "domain_id": "d"},
				{"secret_id": "secret-3", "provider": "aws", "service_account_id": "sa-3", "workspace_id": "w", "domain_id": "e"},
			}
			if sa, _ := req["service_account_id"].(string); sa != "" {
				rows = rows[:1]
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"results": rows, "total_count": len(rows)})
		case SecretGetDataPath:
			_ = json.NewEncoder(w).Encode(map[string]any{"encrypted": false, "data": map[string]any{"key": "of-" + req["secret_id"].(string)}})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer secrets.Close()
	svc := call.NewServices(map[string]string{"identity": ids.URL, "secret": secrets.URL}, "svc-token", nil)
	id := Identity{Client: svc.Client("identity"), Secrets: svc.Client("secret")}
	ctx := context.Background()
	as, err := id.Accounts(ctx, "d", "aws")
	if err != nil || len(as) != 2 || as[0].TrustedAccountID != "ta-1" {
		t.Fatalf("Accounts = %+v, %v", as, err)
	}
	want := Account{TrustedAccountID: "sa-1", Provider: "aws", ResourceGroup: "PROJECT", DomainID: "d", WorkspaceID: "w",
		SecretSchemaID: "aws-secret-access-key", TrustedSecretID: "secret-1", ProjectID: "project-1"}
	if as[1] != want {
		t.Fatalf("the secret as an account = %+v", as[1])
	}
	f1 := Filter{State: Enabled, ServiceAccounts: []string{"sa-1"}}
	if got := Select(as, Owner{DomainID: "d", ResourceGroup: GroupWorkspace, WorkspaceID: "w"}, f1, ""); len(got) != 1 || got[0].TrustedSecretID != "secret-1" {
		t.Fatalf("Select by service account = %+v", got)
	}
	if got := Select(as, Owner{DomainID: "d", ResourceGroup: GroupWorkspace, WorkspaceID: "w2"}, Filter{}, "secret-1"); len(got) != 0 {
		t.Fatalf("another workspace's collector selects %+v", got)
	}
	data, err := id.SecretData(ctx, "d", "sa-1")
	if err != nil || len(data) != 1 || data["key"] != "of-secret-1" {
		t.Fatalf("SecretData(sa-1) = %v, %v", data, err)
	}
	mu.Lock()
	last := seen[len(seen)-1]
	for _, b := range bearers {
		if b != "Bearer svc-token" {
			t.Errorf("bearer %q: want the service credential", b)
		}
	}
	mu.Unlock()
	if last["secret_id"] != "secret-1" || last["domain_id"] != "d" {
		t.Fatalf("get-data request %v", last)
	}
	// A trusted account's data still comes from identity.
	if data, err := id.SecretData(ctx, "d", "ta-1"); err != nil || data["key"] != "secret-of-ta-1" {
		t.Fatalf("SecretData(ta-1) = %v, %v", data, err)
	}
	secrets.Close()
	if _, err := id.Accounts(ctx, "d", "aws"); !isCode(err, errs.Unavailable) {
		t.Fatalf("secret service down: %v", err)
	}
}
