package workspaceuser_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/role"
	"github.com/nubes-io/nubes/services/identity/internal/userprofile"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
	"github.com/nubes-io/nubes/services/identity/internal/workspaceuser"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const wu = "/identity/v2/workspace-user/"

type users struct {
	Results []struct {
		UserID          string         `json:"user_id"`
		Name            string         `json:"name"`
		State           string         `json:"state"`
		RoleType        string         `json:"role_type"`
		Tags            map[string]any `json:"tags"`
		RoleBindingInfo struct {
			RoleBindingID string `json:"role_binding_id"`
			RoleID        string `json:"role_id"`
			WorkspaceID   string `json:"workspace_id"`
		} `json:"role_binding_info"`
	} `json:"results"`
	TotalCount int `json:"total_count"`
}

func (u users) ids() []string {
	var out []string
	for _, r := range u.Results {
		out = append(out, r.UserID)
	}
	slices.Sort(out)
	return out
}

func routes(d *core.Deps) []api.Route {
	return append(identitytest.Mount(workspaceuser.Routes, workspace.Routes, userprofile.Routes)(d), role.Routes()...)
}

// The workspace's users are the users its bindings name, with their
// binding; another workspace and another domain see none of them.
func TestWorkspaceUsers(t *testing.T) {
	h := identitytest.New(t, routes)
	ws, owner, member := h.WorkspaceUsers("wu")
	otherWS, other, _ := h.WorkspaceUsers("elsewhere")
	var l users
	owner.Call(wu+"list", map[string]any{}).OK(&l)
	if got := l.ids(); !slices.Equal(got, []string{"wu-member", "wu-owner"}) || l.TotalCount != 2 {
		t.Fatalf("owner lists %v (%d)", got, l.TotalCount)
	}
	for _, r := range l.Results {
		if r.RoleBindingInfo.WorkspaceID != ws || r.RoleBindingInfo.RoleBindingID == "" || r.RoleType == "" || r.Tags == nil || r.State == "" {
			t.Fatalf("workspace user %+v", r)
		}
	}
	// The home's count, as the console asks it; filters.
	member.Call(wu+"list", map[string]any{"workspace_id": ws, "query": map[string]any{"count_only": true}}).OK(&l)
	if l.TotalCount != 2 || len(l.Results) != 0 {
		t.Fatalf("count_only %+v", l)
	}
	owner.Call(wu+"list", map[string]any{"role_type": "WORKSPACE_OWNER"}).OK(&l)
	if got := l.ids(); !slices.Equal(got, []string{"wu-owner"}) {
		t.Fatalf("owners %v", got)
	}
	owner.Call(wu+"list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "user_id", "v": "member", "o": "contain"}}}}).OK(&l)
	if got := l.ids(); !slices.Equal(got, []string{"wu-member"}) {
		t.Fatalf("filtered %v", got)
	}
	r := owner.Call(wu+"list", map[string]any{"query": map[string]any{"only": []any{"user_id", "password_hash"}}})
	if r.Status == http.StatusOK && strings.Contains(string(r.Body), "password") {
		t.Fatalf("a secret field answered: %s", r.Body)
	}
	raw := owner.Call(wu+"get", map[string]any{"user_id": "wu-member"})
	var got struct {
		UserID          string `json:"user_id"`
		RoleType        string `json:"role_type"`
		RoleBindingInfo struct {
			RoleID string `json:"role_id"`
		} `json:"role_binding_info"`
	}
	raw.OK(&got)
	if got.RoleType != "WORKSPACE_MEMBER" || got.RoleBindingInfo.RoleID != "managed-workspace-member" || strings.Contains(string(raw.Body), "password") {
		t.Fatalf("get %s", raw.Body)
	}
	// Not of the workspace: 404, from inside and from outside.
	owner.Call(wu+"get", map[string]any{"user_id": "elsewhere-owner"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	owner.Call(wu+"get", map[string]any{"user_id": "nobody"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call(wu+"get", map[string]any{"user_id": "wu-member"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call(wu+"list", map[string]any{"workspace_id": ws}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call(wu+"list", map[string]any{}).OK(&l)
	if got := l.ids(); !slices.Equal(got, []string{"elsewhere-member", "elsewhere-owner"}) {
		t.Fatalf("the other workspace lists %v", got)
	}
	// A domain admin names the workspace; another domain's admin finds nobody in it.
	h.Admin.Call(wu+"list", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call(wu+"list", map[string]any{"workspace_id": otherWS}).OK(&l)
	if l.TotalCount != 2 {
		t.Fatalf("admin lists %+v", l)
	}
	_, stranger := h.NewDomain("stranger")
	stranger.Call(wu+"list", map[string]any{"workspace_id": ws}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("another domain lists %v", l.ids())
	}
	stranger.Call(wu+"get", map[string]any{"user_id": "wu-member", "workspace_id": ws}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Anon.Call(wu+"list", map[string]any{}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	owner.Call(wu+"list", map[string]any{"role_type": "DOMAIN_ADMIN"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
}

// list-basic-role is any user's; get-workspace-groups is empty.
func TestLandingCalls(t *testing.T) {
	h := identitytest.New(t, routes)
	h.DirectUser(h.Domain, "plain", "Plain-Passw0rd")
	user := h.Anon.As(h.Scoped("plain", "Plain-Passw0rd", "USER", ""))
	var l struct {
		Results []struct {
			RoleID   string         `json:"role_id"`
			Name     string         `json:"name"`
			RoleType string         `json:"role_type"`
			Tags     map[string]any `json:"tags"`
		} `json:"results"`
		TotalCount int `json:"total_count"`
	}
	user.Call("/identity/role/list-basic-role", map[string]any{}).OK(&l)
	if l.TotalCount != 3 || len(l.Results) != 3 || l.Results[0].Name == "" || l.Results[0].Tags == nil {
		t.Fatalf("basic roles %+v", l)
	}
	user.Call("/identity/role/list-basic-role", map[string]any{"query": map[string]any{"filter": []any{
		map[string]any{"k": "role_id", "v": []any{"managed-workspace-owner", "managed-domain-admin"}, "o": "in"},
		map[string]any{"k": "role_type", "v": "DOMAIN_ADMIN", "o": "not"}}}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].RoleID != "managed-workspace-owner" {
		t.Fatalf("filtered %+v", l)
	}
	user.Call("/identity/role/list-basic-role", map[string]any{"query": map[string]any{"count_only": true}}).OK(&l)
	if l.TotalCount != 3 || len(l.Results) != 0 {
		t.Fatalf("count_only %+v", l)
	}
	user.Call("/identity/role/list-basic-role", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "permissions", "v": "*", "o": "eq"}}}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Anon.Call("/identity/role/list-basic-role", map[string]any{}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	var g struct {
		Results    []any `json:"results"`
		TotalCount *int  `json:"total_count"`
	}
	user.Call("/identity/user-profile/get-workspace-groups", map[string]any{}).OK(&g)
	if g.Results == nil || len(g.Results) != 0 || g.TotalCount == nil || *g.TotalCount != 0 {
		t.Fatalf("workspace groups %+v", g)
	}
}
