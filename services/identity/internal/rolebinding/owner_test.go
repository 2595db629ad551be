package rolebinding_test

import (
	"net/http"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/project"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

// A workspace owner binds users into its own workspace with workspace
// roles only, and unbinds them there; the domain, another workspace and
// its own binding are out of its reach. Every refusal changes nothing.
func TestWorkspaceOwnerBindings(t *testing.T) {
	h := identitytest.New(t, identitytest.Mount(rolebinding.Routes, workspace.Routes, project.Routes))
	wsA, ownerA, memberA := h.WorkspaceUsers("alpha")
	wsB, ownerB, _ := h.WorkspaceUsers("beta")
	h.DirectUser(h.Domain, "newcomer", "Newcomer-Passw0rd")
	otherDomain, _ := h.NewDomain("roles-other")
	h.DirectUser(otherDomain, "stranger", "Stranger-Passw0rd")
	const create, del = "/identity/v2/role-binding/create", "/identity/v2/role-binding/delete"
	colls := []string{core.RoleBindingsCollection, core.UsersCollection}

	frozen := h.DBFrozen(colls...)
	for _, c := range []struct {
		name   string
		body   map[string]any
		status int
		code   string
	}{
		{"domain admin role", map[string]any{"user_id": "newcomer", "role_id": "managed-domain-admin", "resource_group": "DOMAIN"}, http.StatusForbidden, errs.PermissionDenied},
		{"domain group", map[string]any{"user_id": "newcomer", "role_id": "managed-workspace-member", "resource_group": "DOMAIN", "workspace_id": ""}, http.StatusForbidden, errs.PermissionDenied},
		{"admin role, workspace", map[string]any{"user_id": "newcomer", "role_id": "managed-domain-admin", "resource_group": "WORKSPACE"}, http.StatusBadRequest, errs.InvalidParameter},
		{"another workspace", map[string]any{"user_id": "newcomer", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE", "workspace_id": wsB}, http.StatusForbidden, errs.PermissionDenied},
		{"another domain's user", map[string]any{"user_id": "stranger", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE"}, http.StatusNotFound, errs.NotFoundCode},
		{"unknown role", map[string]any{"user_id": "newcomer", "role_id": "managed-system-admin", "resource_group": "WORKSPACE"}, http.StatusNotFound, errs.NotFoundCode},
		{"already bound (itself)", map[string]any{"user_id": "alpha-owner", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE"}, http.StatusConflict, errs.NotUnique},
	} {
		t.Log(c.name)
		ownerA.Call(create, c.body).Fails(c.status, c.code)
	}
	// A member binds nobody, even in its own workspace.
	memberA.Call(create, map[string]any{"user_id": "newcomer", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	frozen()

	// In its own workspace, with or without naming it.
	var b struct {
		RoleBindingID string `json:"role_binding_id"`
		WorkspaceID   string `json:"workspace_id"`
		RoleType      string `json:"role_type"`
	}
	ownerA.Call(create, map[string]any{"user_id": "newcomer", "role_id": "managed-workspace-owner", "resource_group": "WORKSPACE"}).OK(&b)
	if b.WorkspaceID != wsA || b.RoleType != "WORKSPACE_OWNER" {
		t.Fatalf("owner's binding = %+v, want workspace %s", b, wsA)
	}
	h.DirectUser(h.Domain, "second", "Second-Passw0rd")
	var b2 struct {
		RoleBindingID string `json:"role_binding_id"`
		WorkspaceID   string `json:"workspace_id"`
	}
	ownerA.Call(create, map[string]any{"user_id": "second", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE", "workspace_id": wsA}).OK(&b2)
	if b2.WorkspaceID != wsA {
		t.Fatalf("binding in %s, want %s", b2.WorkspaceID, wsA)
	}

	// Deleting: not another workspace's binding (404), not the domain's,
	// not its own (403); a member deletes nothing.
	var list struct {
		Results []struct {
			RoleBindingID string `json:"role_binding_id"`
			UserID        string `json:"user_id"`
			WorkspaceID   string `json:"workspace_id"`
		} `json:"results"`
	}
	h.Admin.Call("/identity/v2/role-binding/list", nil).OK(&list)
	idOf := func(user, ws string) string {
		for _, r := range list.Results {
			if r.UserID == user && r.WorkspaceID == ws {
				return r.RoleBindingID
			}
		}
		t.Fatalf("no binding of %s in %q", user, ws)
		return ""
	}
	frozen = h.DBFrozen(colls...)
	ownerA.Call(del, map[string]any{"role_binding_id": idOf("beta-member", wsB)}).Fails(http.StatusNotFound, errs.NotFoundCode)
	ownerA.Call(del, map[string]any{"role_binding_id": idOf("admin", "")}).Fails(http.StatusNotFound, errs.NotFoundCode)
	ownerA.Call(del, map[string]any{"role_binding_id": idOf("alpha-owner", wsA)}).Fails(http.StatusForbidden, errs.PermissionDenied)
	memberA.Call(del, map[string]any{"role_binding_id": b2.RoleBindingID}).Fails(http.StatusForbidden, errs.PermissionDenied)
	ownerB.Call(del, map[string]any{"role_binding_id": b2.RoleBindingID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()

	ownerA.Call(del, map[string]any{"role_binding_id": b2.RoleBindingID}).OK(nil)
	ownerA.Call("/identity/v2/role-binding/get", map[string]any{"role_binding_id": b2.RoleBindingID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// The new owner is an owner of alpha, and of nothing else.
	newOwner := h.Anon.As(h.Scoped("newcomer", "Newcomer-Passw0rd", "WORKSPACE", wsA))
	newOwner.Call("/identity/v2/project/create", map[string]any{"name": "By the new owner", "project_type": "PUBLIC"}).OK(nil)
}
