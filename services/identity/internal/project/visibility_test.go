package project_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/project"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

// A workspace member reads the public projects of its workspace and the
// private ones it is in; any other project is 404 and unlisted, as for an
// unknown id.
func TestMemberProjectVisibility(t *testing.T) {
	h := identitytest.New(t, identitytest.Mount(project.Routes, workspace.Routes))
	ws, owner, _ := h.WorkspaceUsers("gamma")
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
	member := h.Anon.As(h.Scoped("gamma-member", "Member-Passw0rd", "WORKSPACE", ws))

	frozen := h.DBFrozen(core.ProjectsCollection)
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
