package projectgroup_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/project"
	"github.com/nubes-io/nubes/services/identity/internal/projectgroup"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const pg = "/identity/v2/project-group/"

type group struct {
	ProjectGroupID string         `json:"project_group_id"`
	Name           string         `json:"name"`
	ParentGroupID  string         `json:"parent_group_id"`
	WorkspaceID    string         `json:"workspace_id"`
	DomainID       string         `json:"domain_id"`
	Users          []string       `json:"users"`
	Tags           map[string]any `json:"tags"`
	CreatedAt      string         `json:"created_at"`
}

type groups struct {
	Results    []group `json:"results"`
	TotalCount int     `json:"total_count"`
}

func ids(l groups) []string {
	var out []string
	for _, g := range l.Results {
		out = append(out, g.ProjectGroupID)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// The tree as the console draws it: groups with their parents, projects
// with their group; moves, deletes refused while a group holds anything,
// and what a member, another workspace and another domain reach.
func TestProjectGroupTree(t *testing.T) {
	h := identitytest.New(t, identitytest.Mount(projectgroup.Routes, project.Routes, workspace.Routes))
	ws, owner, _ := h.WorkspaceUsers("tree")
	create := func(name, parent string) group {
		var g group
		owner.Call(pg+"create", map[string]any{"name": name, "parent_group_id": parent, "tags": map[string]any{"k": "v"}}).OK(&g)
		return g
	}
	a := create("A", "")
	b := create("B", a.ProjectGroupID)
	c := create("C", "")
	if a.WorkspaceID != ws || b.ParentGroupID != a.ProjectGroupID || a.ParentGroupID != "" || len(a.ProjectGroupID) < 4 || a.ProjectGroupID[:3] != "pg-" || a.Users == nil {
		t.Fatalf("created %+v / %+v", a, b)
	}
	newProject := func(name, kind, groupID string) string {
		var pr struct {
			ProjectID      string `json:"project_id"`
			ProjectGroupID string `json:"project_group_id"`
		}
		owner.Call("/identity/v2/project/create", map[string]any{"name": name, "project_type": kind, "project_group_id": groupID}).OK(&pr)
		if pr.ProjectGroupID != groupID {
			t.Fatalf("project %s in group %q, want %q", name, pr.ProjectGroupID, groupID)
		}
		return pr.ProjectID
	}
	inB := newProject("In B", "PUBLIC", b.ProjectGroupID)
	newProject("In C", "PRIVATE", c.ProjectGroupID)
	top := newProject("Top", "PUBLIC", "")

	// The console's two lists.
	var l groups
	owner.Call(pg+"list", map[string]any{}).OK(&l)
	if got := ids(l); !slices.Equal(got, sorted(a.ProjectGroupID, b.ProjectGroupID, c.ProjectGroupID)) {
		t.Fatalf("groups %v", got)
	}
	owner.Call(pg+"list", map[string]any{"parent_group_id": a.ProjectGroupID}).OK(&l)
	if got := ids(l); !slices.Equal(got, []string{b.ProjectGroupID}) {
		t.Fatalf("children of A %v", got)
	}
	var pl struct {
		Results []struct {
			ProjectID string `json:"project_id"`
		} `json:"results"`
	}
	owner.Call("/identity/v2/project/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "project_group_id", "v": b.ProjectGroupID, "o": "eq"}}}}).OK(&pl)
	if len(pl.Results) != 1 || pl.Results[0].ProjectID != inB {
		t.Fatalf("projects of B %+v", pl)
	}

	// Deletes refused while a group holds a project or a group.
	frozen := h.DBFrozen(projectgroup.Collection, core.ProjectsCollection)
	owner.Call(pg+"delete", map[string]any{"project_group_id": a.ProjectGroupID}).Fails(http.StatusBadRequest, errs.ExistResource)
	owner.Call(pg+"delete", map[string]any{"project_group_id": b.ProjectGroupID}).Fails(http.StatusBadRequest, errs.ExistResource)
	// Cycles refused; unknown parents and groups 404.
	owner.Call(pg+"change-parent-group", map[string]any{"project_group_id": a.ProjectGroupID, "parent_group_id": b.ProjectGroupID}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	owner.Call(pg+"change-parent-group", map[string]any{"project_group_id": a.ProjectGroupID, "parent_group_id": a.ProjectGroupID}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	owner.Call(pg+"change-parent-group", map[string]any{"project_group_id": a.ProjectGroupID, "parent_group_id": "pg-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	owner.Call(pg+"create", map[string]any{"name": "Orphan", "parent_group_id": "pg-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	owner.Call(pg+"create", map[string]any{"parent_group_id": a.ProjectGroupID}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	owner.Call(pg+"create", map[string]any{"name": "Bad tags", "tags": map[string]any{"": 1}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	owner.Call(pg+"create", map[string]any{"name": "Unknown field", "parent": "x"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	owner.Call("/identity/v2/project/create", map[string]any{"name": "Lost", "project_group_id": "pg-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	owner.Call("/identity/v2/project/update", map[string]any{"project_id": top, "project_group_id": "pg-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()

	// Moves: B to the top, then A (now empty of groups but not of projects? no: A held only B) is deleted.
	var moved group
	owner.Call(pg+"change-parent-group", map[string]any{"project_group_id": b.ProjectGroupID}).OK(&moved)
	if moved.ParentGroupID != "" {
		t.Fatalf("moved to the top: %+v", moved)
	}
	owner.Call(pg+"change-parent-group", map[string]any{"project_group_id": c.ProjectGroupID, "parent_group_id": b.ProjectGroupID}).OK(&moved)
	owner.Call(pg+"update", map[string]any{"project_group_id": a.ProjectGroupID, "name": "A2"}).OK(&moved)
	if moved.Name != "A2" || moved.Tags["k"] != "v" {
		t.Fatalf("update %+v", moved)
	}
	owner.Call("/identity/v2/project/update", map[string]any{"project_id": top, "project_group_id": a.ProjectGroupID}).OK(nil)
	owner.Call(pg+"delete", map[string]any{"project_group_id": a.ProjectGroupID}).Fails(http.StatusBadRequest, errs.ExistResource)
	owner.Call("/identity/v2/project/update", map[string]any{"project_id": top, "project_group_id": c.ProjectGroupID}).OK(nil)
	owner.Call(pg+"delete", map[string]any{"project_group_id": a.ProjectGroupID}).OK(nil)
	owner.Call(pg+"get", map[string]any{"project_group_id": a.ProjectGroupID}).Fails(http.StatusNotFound, errs.NotFoundCode)

	// Now B holds "In B" and C; C holds "In C" (private) and "Top" (public).
	// A member's token carries the public projects: it sees B (above In B)
	// and C (above Top), and B again as C's parent; nothing else.
	member := h.Anon.As(h.Scoped("tree-member", "Member-Passw0rd", "WORKSPACE", ws))
	d := create("D", "")
	member.Call(pg+"list", map[string]any{}).OK(&l)
	if got := ids(l); !slices.Equal(got, sorted(b.ProjectGroupID, c.ProjectGroupID)) {
		t.Fatalf("member lists %v", got)
	}
	member.Call(pg+"get", map[string]any{"project_group_id": b.ProjectGroupID}).OK(nil)
	member.Call(pg+"get", map[string]any{"project_group_id": d.ProjectGroupID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	member.Call(pg+"list", map[string]any{"project_group_id": d.ProjectGroupID}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("member lists D by id: %+v", l)
	}
	if n := identitytest.StatCount(member, pg+"stat", nil); n != 2 {
		t.Fatalf("member stat counts %d", n)
	}
	frozen = h.DBFrozen(projectgroup.Collection)
	member.Call(pg+"create", map[string]any{"name": "By member"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	member.Call(pg+"delete", map[string]any{"project_group_id": d.ProjectGroupID}).Fails(http.StatusForbidden, errs.PermissionDenied)
	member.Call(pg+"update", map[string]any{"project_group_id": b.ProjectGroupID, "name": "x"}).Fails(http.StatusForbidden, errs.PermissionDenied)

	// Another workspace's owner and another domain's admin reach nothing.
	_, other, _ := h.WorkspaceUsers("other")
	_, stranger := h.NewDomain("elsewhere")
	for _, c := range []*testkit.Client{other, stranger} {
		c.Call(pg+"get", map[string]any{"project_group_id": b.ProjectGroupID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.Call(pg+"update", map[string]any{"project_group_id": b.ProjectGroupID, "name": "x"}).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.Call(pg+"change-parent-group", map[string]any{"project_group_id": d.ProjectGroupID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.Call(pg+"delete", map[string]any{"project_group_id": d.ProjectGroupID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.Call(pg+"list", map[string]any{}).OK(&l)
		if l.TotalCount != 0 {
			t.Fatalf("an outsider lists %v", ids(l))
		}
	}
	other.Call(pg+"create", map[string]any{"name": "Under theirs", "parent_group_id": b.ProjectGroupID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()
	other.Call("/identity/v2/project/create", map[string]any{"name": "Into theirs", "project_group_id": b.ProjectGroupID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Anon.Call(pg+"list", map[string]any{}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	// The domain admin names the workspace.
	h.Admin.Call(pg+"create", map[string]any{"name": "By admin"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	var byAdmin group
	h.Admin.Call(pg+"create", map[string]any{"name": "By admin", "workspace_id": ws, "parent_group_id": d.ProjectGroupID}).OK(&byAdmin)
	if byAdmin.WorkspaceID != ws {
		t.Fatalf("admin's group %+v", byAdmin)
	}
}
