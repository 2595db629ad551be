package identity_test

import (
	"net/http"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
)

func TestBootstrapAndLogin(t *testing.T) {
	h := newHarness(t)
	var d map[string]any
	h.Admin.Call("/identity/v2/domain/get", map[string]any{"domain_id": h.Domain}).OK(&d)
	if d["name"] != "root" || d["state"] != "ENABLED" {
		t.Fatalf("root domain = %v", d)
	}
	var info map[string]any
	h.Anon.Call("/identity/domain/get-auth-info", map[string]any{"name": "root"}).OK(&info)
	if info["domain_id"] != h.Domain {
		t.Fatalf("get_auth_info = %v", info)
	}
	// A second bootstrap changes nothing.
	again := newHarness(t)
	if again.Domain == h.Domain {
		t.Fatal("fresh databases must bootstrap fresh domains")
	}

	bad := map[string]any{"credentials": map[string]any{"user_id": "admin", "password": "wrong-Passw0rd"}, "auth_type": "LOCAL", "domain_id": h.Domain}
	h.Anon.Call("/identity/token/issue", bad).Fails(http.StatusUnauthorized, errs.AuthenticationFailure)
	unknown := map[string]any{"credentials": map[string]any{"user_id": "nobody", "password": "x"}, "auth_type": "LOCAL", "domain_id": h.Domain}
	h.Anon.Call("/identity/token/issue", unknown).Fails(http.StatusUnauthorized, errs.AuthenticationFailure)

	p := h.Login("admin", identitytest.AdminPassword)
	// The USER-scope token reaches no admin operation.
	h.Anon.As(p.AccessToken).Call("/identity/v2/workspace/create", map[string]any{"name": "w"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	// A refresh token is not an access token.
	h.Anon.As(p.RefreshToken).Call("/identity/v2/token/check", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	var sys map[string]any
	h.Anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "SYSTEM"}).OK(&sys)
	if sys["role_type"] != "SYSTEM_ADMIN" {
		t.Fatalf("root admin SYSTEM grant = %v", sys)
	}
	h.Anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.AccessToken, "scope": "DOMAIN"}).Fails(http.StatusBadRequest, errs.InvalidGrantType)
	var fresh identitytest.Pair
	h.Anon.Call("/identity/v2/token/refresh", map[string]any{"refresh_token": p.RefreshToken}).OK(&fresh)
	if fresh.AccessToken == "" || fresh.RefreshToken == "" {
		t.Fatalf("refresh = %+v", fresh)
	}
}

func TestLoginBlockedAfterFailures(t *testing.T) {
	h := newHarness(t)
	bad := map[string]any{"credentials": map[string]any{"user_id": "admin", "password": "wrong-Passw0rd"}, "auth_type": "LOCAL", "domain_id": h.Domain}
	for range 3 {
		h.Anon.Call("/identity/v2/token/issue", bad).Fails(http.StatusUnauthorized, errs.AuthenticationFailure)
	}
	good := map[string]any{"credentials": map[string]any{"user_id": "admin", "password": identitytest.AdminPassword}, "auth_type": "LOCAL", "domain_id": h.Domain}
	h.Anon.Call("/identity/v2/token/issue", good).Fails(http.StatusUnauthorized, errs.LoginBlocked)
}

func TestWorkspacesProjectsBindings(t *testing.T) {
	h := newHarness(t)
	var ws struct {
		WorkspaceID string `json:"workspace_id"`
	}
	h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": "Prod"}).OK(&ws)
	var pr map[string]any
	h.Admin.Call("/identity/v2/project/create", map[string]any{"name": "Web", "workspace_id": ws.WorkspaceID, "project_type": "PUBLIC"}).OK(&pr)
	var roles struct {
		TotalCount int `json:"total_count"`
	}
	h.Admin.Call("/identity/v2/role/list", nil).OK(&roles)
	if roles.TotalCount != 3 {
		t.Fatalf("managed roles = %d", roles.TotalCount)
	}
	// Binding needs an existing user: the admin itself in a workspace.
	var b map[string]any
	h.Admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": "admin", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE", "workspace_id": ws.WorkspaceID}).OK(&b)
	h.Admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": "admin", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE", "workspace_id": ws.WorkspaceID}).Fails(http.StatusConflict, errs.NotUnique)
	// The last domain admin keeps its binding.
	var list struct {
		Results []map[string]any `json:"results"`
	}
	h.Admin.Call("/identity/v2/role-binding/list", map[string]any{"workspace_id": ""}).OK(&list)
	for _, r := range list.Results {
		if r["role_type"] == "DOMAIN_ADMIN" {
			h.Admin.Call("/identity/v2/role-binding/delete", map[string]any{"role_binding_id": r["role_binding_id"]}).Fails(http.StatusBadRequest, errs.LastAdmin)
		}
	}
	// Another domain sees none of it.
	_, other := h.NewDomain("other")
	other.Call("/identity/v2/workspace/get", map[string]any{"workspace_id": ws.WorkspaceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call("/identity/v2/project/get", map[string]any{"project_id": pr["project_id"]}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call("/identity/v2/role-binding/get", map[string]any{"role_binding_id": b["role_binding_id"]}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var wl struct {
		TotalCount int `json:"total_count"`
	}
	other.Call("/identity/v2/workspace/list", nil).OK(&wl)
	if wl.TotalCount != 0 {
		t.Fatalf("other domain lists %d workspaces", wl.TotalCount)
	}
	other.Call("/identity/v2/workspace/delete", map[string]any{"workspace_id": ws.WorkspaceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// A SYSTEM caller (another service's schedule) lists the projects of the
// domain it names; anyone else names only their own domain.
func TestProjectListForDomain(t *testing.T) {
	h := newHarness(t)
	otherID, other := h.NewDomain("projects-other")
	var ws struct {
		WorkspaceID string `json:"workspace_id"`
	}
	other.Call("/identity/v2/workspace/create", map[string]any{"name": "Prod"}).OK(&ws)
	other.Call("/identity/v2/project/create", map[string]any{"name": "Web", "workspace_id": ws.WorkspaceID, "project_type": "PUBLIC"}).OK(nil)
	h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": "Root"}).OK(&ws)
	h.Admin.Call("/identity/v2/project/create", map[string]any{"name": "Root web", "workspace_id": ws.WorkspaceID, "project_type": "PUBLIC"}).OK(nil)

	names := func(c *testkit.Client, body map[string]any) []string {
		var l struct {
			Results []struct {
				Name     string `json:"name"`
				DomainID string `json:"domain_id"`
			} `json:"results"`
		}
		c.Call("/identity/v2/project/list", body).OK(&l)
		var out []string
		for _, p := range l.Results {
			out = append(out, p.Name+"@"+p.DomainID)
		}
		return out
	}
	if got := names(h.System, map[string]any{"domain_id": otherID}); len(got) != 1 || got[0] != "Web@"+otherID {
		t.Fatalf("SYSTEM lists %v for %s", got, otherID)
	}
	if got := names(h.System, map[string]any{}); len(got) != 1 || got[0] != "Root web@"+h.Domain {
		t.Fatalf("SYSTEM without domain_id lists %v", got)
	}
	h.Admin.Call("/identity/v2/project/list", map[string]any{"domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.System.Call("/identity/v2/project/list", map[string]any{"domain_id": "domain-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if got := names(other, map[string]any{"domain_id": otherID}); len(got) != 1 {
		t.Fatalf("a domain naming itself lists %v", got)
	}
}

// A SYSTEM caller (the notification service) finds the admins of the
// domain it names: their DOMAIN_ADMIN bindings and their e-mails.
func TestDomainAdminsForService(t *testing.T) {
	h := newHarness(t)
	otherID, _ := h.NewDomain("admins-other")
	var bl struct {
		Results []struct {
			UserID   string `json:"user_id"`
			RoleType string `json:"role_type"`
			DomainID string `json:"domain_id"`
		} `json:"results"`
	}
	h.System.Call("/identity/v2/role-binding/list", map[string]any{"domain_id": otherID, "role_type": "DOMAIN_ADMIN"}).OK(&bl)
	if len(bl.Results) != 1 || bl.Results[0].UserID != "boss" || bl.Results[0].DomainID != otherID {
		t.Fatalf("SYSTEM lists bindings %+v for %s", bl.Results, otherID)
	}
	var ul struct {
		Results []struct {
			UserID   string `json:"user_id"`
			Email    string `json:"email"`
			DomainID string `json:"domain_id"`
		} `json:"results"`
	}
	h.System.Call("/identity/v2/user/list", map[string]any{"domain_id": otherID, "user_id": "boss"}).OK(&ul)
	if len(ul.Results) != 1 || ul.Results[0].Email != h.Email("boss-admins-other") || ul.Results[0].DomainID != otherID {
		t.Fatalf("SYSTEM lists users %+v for %s", ul.Results, otherID)
	}
	h.Admin.Call("/identity/v2/role-binding/list", map[string]any{"domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v2/user/list", map[string]any{"domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
}
