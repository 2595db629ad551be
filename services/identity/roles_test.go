package identity_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// A workspace owner binds users into its own workspace with workspace
// roles only, and unbinds them there; the domain, another workspace and
// its own binding are out of its reach. Every refusal changes nothing.
func TestWorkspaceOwnerBindings(t *testing.T) {
	h := newHarness(t)
	wsA, ownerA, memberA := h.workspaceUsers("alpha")
	wsB, ownerB, _ := h.workspaceUsers("beta")
	h.directUser(h.domain, "newcomer", "Newcomer-Passw0rd")
	otherDomain, _ := h.newDomain("roles-other")
	h.directUser(otherDomain, "stranger", "Stranger-Passw0rd")
	const create, del = "/identity/v2/role-binding/create", "/identity/v2/role-binding/delete"
	colls := []string{core.RoleBindingsCollection, core.UsersCollection}

	frozen := h.dbFrozen(colls...)
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
	h.directUser(h.domain, "second", "Second-Passw0rd")
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
	h.admin.Call("/identity/v2/role-binding/list", nil).OK(&list)
	idOf := func(user, ws string) string {
		for _, r := range list.Results {
			if r.UserID == user && r.WorkspaceID == ws {
				return r.RoleBindingID
			}
		}
		t.Fatalf("no binding of %s in %q", user, ws)
		return ""
	}
	frozen = h.dbFrozen(colls...)
	ownerA.Call(del, map[string]any{"role_binding_id": idOf("beta-member", wsB)}).Fails(http.StatusNotFound, errs.NotFoundCode)
	ownerA.Call(del, map[string]any{"role_binding_id": idOf("admin", "")}).Fails(http.StatusNotFound, errs.NotFoundCode)
	ownerA.Call(del, map[string]any{"role_binding_id": idOf("alpha-owner", wsA)}).Fails(http.StatusForbidden, errs.PermissionDenied)
	memberA.Call(del, map[string]any{"role_binding_id": b2.RoleBindingID}).Fails(http.StatusForbidden, errs.PermissionDenied)
	ownerB.Call(del, map[string]any{"role_binding_id": b2.RoleBindingID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()

	ownerA.Call(del, map[string]any{"role_binding_id": b2.RoleBindingID}).OK(nil)
	ownerA.Call("/identity/v2/role-binding/get", map[string]any{"role_binding_id": b2.RoleBindingID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// The new owner is an owner of alpha, and of nothing else.
	newOwner := h.anon.As(h.scoped("newcomer", "Newcomer-Passw0rd", "WORKSPACE", wsA))
	newOwner.Call("/identity/v2/project/create", map[string]any{"name": "By the new owner", "project_type": "PUBLIC"}).OK(nil)
}

// A workspace member reads the public projects of its workspace and the
// private ones it is in; any other project is 404 and unlisted, as for an
// unknown id.
func TestMemberProjectVisibility(t *testing.T) {
	h := newHarness(t)
	ws, owner, _ := h.workspaceUsers("gamma")
	project := func(name, kind string, users ...string) string {
		var pr struct {
			ProjectID string `json:"project_id"`
		}
		owner.Call("/identity/v2/project/create", map[string]any{"name": name, "project_type": kind, "users": users}).OK(&pr)
		return pr.ProjectID
	}
	public := project("Public", "PUBLIC")
	mine := project("Mine", "PRIVATE", "gamma-member")
	theirs := project("Theirs", "PRIVATE", "gamma-owner")
	// The member's token carries its projects as they are when it is granted.
	member := h.anon.As(h.scoped("gamma-member", "Member-Passw0rd", "WORKSPACE", ws))

	frozen := h.dbFrozen(core.ProjectsCollection)
	for _, id := range []string{public, mine} {
		member.Call("/identity/v2/project/get", map[string]any{"project_id": id}).OK(nil)
	}
	member.Call("/identity/v2/project/get", map[string]any{"project_id": theirs}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// Named in the list query, by id or by name, it is still not there.
	for _, body := range []map[string]any{{}, {"project_id": theirs}, {"name": "Theirs"},
		{"query": map[string]any{"filter": []any{map[string]any{"k": "project_id", "v": theirs, "o": "eq"}}}}} {
		var l struct {
			Results []struct {
				ProjectID string `json:"project_id"`
			} `json:"results"`
			TotalCount int `json:"total_count"`
		}
		member.Call("/identity/v2/project/list", body).OK(&l)
		var ids []string
		for _, r := range l.Results {
			ids = append(ids, r.ProjectID)
		}
		if slices.Contains(ids, theirs) {
			t.Fatalf("list %v shows the private project %s: %v", body, theirs, ids)
		}
		if len(body) == 0 && (len(ids) != 2 || l.TotalCount != 2 || !slices.Contains(ids, public) || !slices.Contains(ids, mine)) {
			t.Fatalf("member lists %v (%d), want %s and %s", ids, l.TotalCount, public, mine)
		}
	}
	// Nor may it change one, its own included.
	member.Call("/identity/v2/project/update", map[string]any{"project_id": theirs, "users": []string{"gamma-member"}}).Fails(http.StatusForbidden, errs.PermissionDenied)
	member.Call("/identity/v2/project/delete", map[string]any{"project_id": mine}).Fails(http.StatusForbidden, errs.PermissionDenied)
	frozen()
	// The owner reads every project of its workspace.
	for _, id := range []string{public, mine, theirs} {
		owner.Call("/identity/v2/project/get", map[string]any{"project_id": id}).OK(nil)
	}
}

// workspaceUsers makes a workspace and an owner and a member of it, and
// returns the workspace id and their WORKSPACE-scope clients.
func (h *harness) workspaceUsers(name string) (workspaceID string, owner, member *testkit.Client) {
	h.t.Helper()
	var ws map[string]any
	h.admin.Call("/identity/v2/workspace/create", map[string]any{"name": name}).OK(&ws)
	workspaceID = ws["workspace_id"].(string)
	h.directUser(h.domain, name+"-owner", "Owner-Passw0rd")
	h.directUser(h.domain, name+"-member", "Member-Passw0rd")
	bindRole(h.admin, name+"-owner", "managed-workspace-owner", workspaceID)
	bindRole(h.admin, name+"-member", "managed-workspace-member", workspaceID)
	owner = h.anon.As(h.scoped(name+"-owner", "Owner-Passw0rd", "WORKSPACE", workspaceID))
	member = h.anon.As(h.scoped(name+"-member", "Member-Passw0rd", "WORKSPACE", workspaceID))
	return workspaceID, owner, member
}
