package workspace_test

import (
	"net/http"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/project"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/userprofile"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

// A workspace's delete marks it first, deletes its projects and role
// bindings, and the workspace last (store.Teardown): when a child delete
// fails, the workspace is out of every read and write and takes no new
// child, and a retry finishes the work. Not parallel: the injected fault
// holds for every database's bindings collection.
func TestWorkspaceDeleteRetried(t *testing.T) {
	h := identitytest.New(t, identitytest.Mount(workspace.Routes, project.Routes, rolebinding.Routes, userprofile.Routes))
	var ws struct {
		WorkspaceID string `json:"workspace_id"`
	}
	h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": "doomed"}).OK(&ws)
	h.Admin.Call("/identity/v2/project/create", map[string]any{"name": "p", "workspace_id": ws.WorkspaceID}).OK(nil)
	h.SeedUser(h.Domain, "wes")
	h.Admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": "wes", "role_id": "managed-workspace-member",
		"resource_group": "WORKSPACE", "workspace_id": ws.WorkspaceID}).OK(nil)
	inside := bson.D{{Key: "workspace_id", Value: ws.WorkspaceID}}
	del := map[string]any{"workspace_id": ws.WorkspaceID}

	restore := store.FailChildDeletes(core.RoleBindingsCollection)
	if r := h.Admin.Call("/identity/v2/workspace/delete", del); r.Status != http.StatusServiceUnavailable {
		restore()
		t.Fatalf("delete with a failing child delete answered %d, want 503", r.Status)
	}
	restore()
	if n := h.Count(core.RoleBindingsCollection, inside); n != 1 {
		t.Fatalf("%d bindings left after the failed delete, want 1 (the fault kept it)", n)
	}
	h.Admin.Call("/identity/v2/workspace/get", del).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v2/workspace/update", map[string]any{"workspace_id": ws.WorkspaceID, "name": "back"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v2/workspace/enable", del).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v2/project/create", map[string]any{"name": "late", "workspace_id": ws.WorkspaceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.SeedUser(h.Domain, "lou")
	h.Admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": "lou", "role_id": "managed-workspace-member",
		"resource_group": "WORKSPACE", "workspace_id": ws.WorkspaceID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var list struct {
		Results []struct {
			WorkspaceID string `json:"workspace_id"`
		} `json:"results"`
	}
	h.Admin.Call("/identity/v2/workspace/list", map[string]any{}).OK(&list)
	for _, w := range list.Results {
		if w.WorkspaceID == ws.WorkspaceID {
			t.Fatal("workspace/list shows a workspace whose delete has begun")
		}
	}
	h.As("wes").Call("/identity/v2/user-profile/get-workspaces", map[string]any{}).OK(&list)
	if len(list.Results) != 0 {
		t.Fatalf("get-workspaces shows %+v, a workspace whose delete has begun", list.Results)
	}

	h.Admin.Call("/identity/v2/workspace/delete", del).OK(nil)
	for _, c := range []string{core.WorkspacesCollection, core.ProjectsCollection, core.RoleBindingsCollection} {
		if n := h.Count(c, inside); n != 0 {
			t.Fatalf("%d documents left in %s after the retry", n, c)
		}
	}
	h.Admin.Call("/identity/v2/workspace/delete", del).Fails(http.StatusNotFound, errs.NotFoundCode)
}
