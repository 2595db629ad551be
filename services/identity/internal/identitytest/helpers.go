package identitytest

import (
	"net/http"
	"net/url"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// Mount joins the operations of several resources, for a test that
// calls another resource's operations beside its own.
func Mount(parts ...func(*core.Deps) []api.Route) func(*core.Deps) []api.Route {
	return func(d *core.Deps) []api.Route {
		var r []api.Route
		for _, p := range parts {
			r = append(r, p(d)...)
		}
		return r
	}
}

// Login issues a USER-scope pair in the root domain.
func (h *Harness) Login(userID, password string) Pair {
	h.T.Helper()
	return h.LoginIn(h.Domain, userID, password)
}

// Works reports whether identity's token/check accepts the bearer token.
func (h *Harness) Works(token string) bool {
	return h.Anon.As(token).Call("/identity/v2/token/check", nil).Status == http.StatusOK
}

// BindRole gives userID a managed role through role-binding/create, as
// the domain admin client admin (the role-binding operations must be
// mounted).
func BindRole(admin *testkit.Client, userID, roleID, workspaceID string) map[string]any {
	group := "DOMAIN"
	if workspaceID != "" {
		group = "WORKSPACE"
	}
	var b map[string]any
	admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": userID, "role_id": roleID, "resource_group": group, "workspace_id": workspaceID}).OK(&b)
	return b
}

// WorkspaceUsers makes a workspace (through workspace/create) and an
// owner and a member of it, and returns the workspace id and their
// WORKSPACE-scope clients; their bindings are stored as
// role-binding/create stores them.
func (h *Harness) WorkspaceUsers(name string) (workspaceID string, owner, member *testkit.Client) {
	h.T.Helper()
	var ws map[string]any
	h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": name}).OK(&ws)
	workspaceID = ws["workspace_id"].(string)
	h.DirectUser(h.Domain, name+"-owner", "Owner-Passw0rd")
	h.DirectUser(h.Domain, name+"-member", "Member-Passw0rd")
	h.Bind(name+"-owner", "managed-workspace-owner", workspaceID)
	h.Bind(name+"-member", "managed-workspace-member", workspaceID)
	owner = h.Anon.As(h.Scoped(name+"-owner", "Owner-Passw0rd", "WORKSPACE", workspaceID))
	member = h.Anon.As(h.Scoped(name+"-member", "Member-Passw0rd", "WORKSPACE", workspaceID))
	return workspaceID, owner, member
}

// LinkToken is the access token of a mailed console link.
func LinkToken(t *testing.T, m events.Mail) string {
	t.Helper()
	u, err := url.Parse(m.Data["link"])
	if err != nil {
		t.Fatal(err)
	}
	tok := u.Query().Get("sso_access_token")
	if tok == "" {
		t.Fatalf("no token in link %q", m.Data["link"])
	}
	return tok
}

// WrongCode is a six-digit code other than code.
func WrongCode(code string) string {
	if code == "999999" {
		return "999998"
	}
	return "999999"
}

// WaitForFreshOTPStep waits until the current 30 s step has 20 s left, so
// that the codes a test computes keep their steps while it runs.
func WaitForFreshOTPStep(t *testing.T) {
	t.Helper()
	if into := time.Duration(time.Now().UnixNano()) % (30 * time.Second); into > 10*time.Second {
		time.Sleep(30*time.Second - into)
	}
}

// FieldNames are m's keys, sorted.
func FieldNames(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ToStrings is a JSON array of strings.
func ToStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// V2InfoKeys are the fields of a v2 UserInfo.
var V2InfoKeys = []string{"api_key_count", "auth_type", "created_at", "domain_id", "email", "email_verified", "language", "last_accessed_at", "mfa",
	"name", "required_actions", "role_id", "role_type", "state", "tags", "timezone", "user_id"}

// CheckV2Info asserts that u has exactly the fields of a v2 UserInfo.
func CheckV2Info(t *testing.T, u map[string]any) {
	t.Helper()
	if got := FieldNames(u); !slices.Equal(got, V2InfoKeys) {
		t.Fatalf("v2 UserInfo keys = %v, want %v", got, V2InfoKeys)
	}
	mfa, _ := u["mfa"].(map[string]any)
	if got := FieldNames(mfa); !slices.Equal(got, []string{"mfa_type", "options", "state"}) {
		t.Fatalf("mfa keys = %v", got)
	}
}
