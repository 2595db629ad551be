// Package projectgroup holds the project-group resource
// (/identity/v2/project-group): the folders of a workspace's project
// tree, as upstream 2.x has them. A group has at most one parent group of
// the same workspace; projects name their group (project_group_id). The
// console draws the tree from project-group list (parent_group_id) and
// project list (project_group_id).
//
// Tenancy per workspace (tenancy.InWorkspace); a workspace member sees
// only the groups above its projects (its token's projects, their groups
// and those groups' ancestors). A group is deleted only when it holds no
// project and no group.
package projectgroup

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// Collection holds the project groups, _id = project_group_id.
const Collection = core.ProjectGroupsCollection

// ProjectGroup is a stored project group; the JSON form is ProjectGroupInfo.
type ProjectGroup struct {
	ID             string        `bson:"_id" json:"-"`
	ProjectGroupID string        `bson:"project_group_id" json:"project_group_id"`
	Name           string        `bson:"name" json:"name"`
	Users          []string      `bson:"users" json:"users"`
	ParentGroupID  string        `bson:"parent_group_id" json:"parent_group_id"`
	Tags           freeform.Flat `bson:"tags" json:"tags"`
	WorkspaceID    string        `bson:"workspace_id" json:"workspace_id"`
	DomainID       string        `bson:"domain_id" json:"domain_id"`
	CreatedBy      string        `bson:"created_by" json:"created_by"`
	CreatedAt      wire.Time     `bson:"created_at" json:"created_at"`
}

// Resource is the project group's declaration for lists and tenancy.
var Resource = query.Resource{
	KeywordFields: []string{"project_group_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"project_group_id", "name", "parent_group_id", "workspace_id"},
	Fields:        query.FieldsOf[ProjectGroup](),
	Maps:          freeform.FieldsOf[ProjectGroup](),
	Tenancy:       tenancy.InWorkspace,
}

// maxDepth bounds a walk up the tree (a chain longer than this is a bug:
// change-parent-group refuses cycles).
const maxDepth = 64

type (
	createReq struct {
		Name          string        `json:"name" v:"required,max=255"`
		ParentGroupID string        `json:"parent_group_id" v:"max=64"`
		Tags          freeform.Flat `json:"tags"`
		// WorkspaceID: a domain admin names the workspace; a workspace
		// owner's is its token's.
		WorkspaceID string `json:"workspace_id" v:"max=64"`
	}
	updateReq struct {
		ProjectGroupID string        `json:"project_group_id" v:"required,max=64"`
		Name           string        `json:"name" v:"max=255"`
		Tags           freeform.Flat `json:"tags"`
		WorkspaceID    string        `json:"workspace_id" v:"max=64"`
	}
	changeParentReq struct {
		ProjectGroupID string `json:"project_group_id" v:"required,max=64"`
		// ParentGroupID empty or null: the group moves to the top.
		ParentGroupID string `json:"parent_group_id" v:"max=64"`
		WorkspaceID   string `json:"workspace_id" v:"max=64"`
	}
	idReq struct {
		ProjectGroupID string `json:"project_group_id" v:"required,max=64"`
		WorkspaceID    string `json:"workspace_id" v:"max=64"`
	}
	listReq struct {
		Query          *query.Query `json:"query"`
		ProjectGroupID string       `json:"project_group_id"`
		Name           string       `json:"name"`
		ParentGroupID  string       `json:"parent_group_id"`
		WorkspaceID    string       `json:"workspace_id"`
	}
	statReq struct {
		Query       *stat.Query `json:"query" v:"required"`
		WorkspaceID string      `json:"workspace_id"`
	}
)

type service struct {
	*core.Deps
	groups *mongo.Collection
}

// Routes creates the indexes and returns the operations of project groups.
func Routes(d *core.Deps) []api.Route {
	s := &service{Deps: d, groups: d.DB.Collection(Collection)}
	if err := store.EnsureIndexes(context.Background(), s.groups,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "parent_group_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "name", Value: 1}}},
	); err != nil {
		d.Log.Warn("project group indexes not made", "error", err.Error())
	}
	p := "/identity/v2/project-group/"
	return []api.Route{
		api.Op[createReq, ProjectGroup]{Path: p + "create", Access: core.WorkspaceWriters, Summary: "Create a project group, at the top or under a parent of the workspace.", Handle: s.create},
		api.Op[updateReq, ProjectGroup]{Path: p + "update", Access: core.WorkspaceWriters, Summary: "Rename a project group or replace its tags.", Handle: s.update},
		api.Op[changeParentReq, ProjectGroup]{Path: p + "change-parent-group", Access: core.WorkspaceWriters, Summary: "Move a project group under another of its workspace, or to the top.", Handle: s.changeParent},
		api.Op[idReq, api.Empty]{Path: p + "delete", Access: core.WorkspaceWriters, Summary: "Delete a project group that holds no project and no group.", Handle: s.delete},
		api.Op[idReq, ProjectGroup]{Path: p + "get", Access: core.Readers, Summary: "Get a project group.", Handle: s.get},
		api.Op[listReq, api.List[ProjectGroup]]{Path: p + "list", Access: core.Readers, Summary: "List the project groups the caller reaches.", Handle: s.list},
		api.Op[statReq, map[string]any]{Path: p + "stat", Access: core.Readers, Summary: "Statistics over the project groups the caller reaches.", Handle: s.stat},
	}
}

// Get is the project group id that p reaches (404 otherwise, another
// workspace's or domain's too): a project checks its group with it.
func Get(ctx context.Context, d *core.Deps, p *auth.Principal, id string) (*ProjectGroup, error) {
	return store.GetFor[ProjectGroup](ctx, d.DB.Collection(Collection), Resource, p, "project_group_id", id)
}

func (s *service) create(ctx context.Context, p *auth.Principal, r *createReq) (*ProjectGroup, error) {
	if err := freeform.Check("tags", r.Tags); err != nil {
		return nil, err
	}
	ws := r.WorkspaceID
	if p.WorkspaceID != "" {
		ws = p.WorkspaceID
	}
	if ws == "" {
		return nil, errs.Required("workspace_id")
	}
	w, err := store.GetFor[core.Workspace](ctx, s.Workspaces, core.WorkspaceResource, p, "workspace_id", ws)
	if err != nil {
		return nil, err
	}
	rule, err := tenancy.For(p, Resource.Tenancy)
	if err != nil {
		return nil, err
	}
	if err := rule.Admits(tenancy.Record{Domain: w.DomainID, Workspace: w.WorkspaceID}); err != nil {
		return nil, err
	}
	if r.ParentGroupID != "" {
		if _, err := s.parent(ctx, p, r.ParentGroupID, w.WorkspaceID); err != nil {
			return nil, err
		}
	}
	id := wire.NewID("pg")
	g := &ProjectGroup{ID: id, ProjectGroupID: id, Name: r.Name, Users: []string{}, ParentGroupID: r.ParentGroupID,
		Tags: wire.Object(r.Tags), WorkspaceID: w.WorkspaceID, DomainID: w.DomainID, CreatedBy: p.UserID, CreatedAt: wire.T(wire.Now())}
	if _, err := s.groups.InsertOne(ctx, g); err != nil {
		return nil, store.Wrap(err)
	}
	return g, nil
}

// parent is the group id of workspace ws that p reaches, as a parent.
func (s *service) parent(ctx context.Context, p *auth.Principal, id, ws string) (*ProjectGroup, error) {
	g, err := store.GetFor[ProjectGroup](ctx, s.groups, Resource, p, "parent_group_id", id)
	if err != nil {
		return nil, err
	}
	if g.WorkspaceID != ws {
		return nil, errs.NotFound("parent_group_id", id)
	}
	return g, nil
}

func (s *service) update(ctx context.Context, p *auth.Principal, r *updateReq) (*ProjectGroup, error) {
	if err := freeform.Check("tags", r.Tags); err != nil {
		return nil, err
	}
	g, err := store.GetToChange[ProjectGroup](ctx, s.groups, Resource, p, "project_group_id", r.ProjectGroupID)
	if err != nil {
		return nil, err
	}
	set := bson.D{}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	if len(set) == 0 {
		return g, nil
	}
	return store.SetByID[ProjectGroup](ctx, s.groups, "project_group_id", g.ID, set)
}

// changeParent moves the group; a parent that is the group itself or
// one of its descendants would make a cycle (400).
func (s *service) changeParent(ctx context.Context, p *auth.Principal, r *changeParentReq) (*ProjectGroup, error) {
	g, err := store.GetToChange[ProjectGroup](ctx, s.groups, Resource, p, "project_group_id", r.ProjectGroupID)
	if err != nil {
		return nil, err
	}
	if r.ParentGroupID != "" {
		if _, err := s.parent(ctx, p, r.ParentGroupID, g.WorkspaceID); err != nil {
			return nil, err
		}
		up, err := s.ancestors(ctx, g.DomainID, r.ParentGroupID)
		if err != nil {
			return nil, err
		}
		if slices.Contains(up, g.ID) {
			return nil, errs.Invalid("parent_group_id", "the group itself or one of its descendants: the tree would have a cycle")
		}
	}
	return store.SetByID[ProjectGroup](ctx, s.groups, "project_group_id", g.ID, bson.D{{Key: "parent_group_id", Value: r.ParentGroupID}})
}

// ancestors are id and the groups above it, nearest first, read by _id
// (with no tenancy check: the walk stays in one domain).
func (s *service) ancestors(ctx context.Context, domainID, id string) ([]string, error) {
	var out []string
	for id != "" && len(out) < maxDepth && !slices.Contains(out, id) {
		g, err := store.Get[ProjectGroup](ctx, s.groups, "project_group_id", id)
		if errs.Is(err, errs.NotFoundCode) {
			break
		}
		if err != nil {
			return nil, err
		}
		if g.DomainID != domainID {
			break
		}
		out = append(out, id)
		id = g.ParentGroupID
	}
	return out, nil
}

// delete refuses a group that holds a project or a group (upstream
// ERROR_EXIST_RESOURCE). A project or group added between the check and
// the delete is left pointing at a deleted group: it then shows at the
// top of the tree, as one whose group is unknown does.
func (s *service) delete(ctx context.Context, p *auth.Principal, r *idReq) (*api.Empty, error) {
	g, err := store.GetToChange[ProjectGroup](ctx, s.groups, Resource, p, "project_group_id", r.ProjectGroupID)
	if err != nil {
		return nil, err
	}
	for _, child := range []struct {
		c           *mongo.Collection
		field, what string
	}{{s.Projects, "project_group_id", "project"}, {s.groups, "parent_group_id", "project group"}} {
		n, err := child.c.CountDocuments(ctx, bson.D{{Key: "domain_id", Value: g.DomainID}, {Key: child.field, Value: g.ID}})
		if err != nil {
			return nil, store.Wrap(err)
		}
		if n > 0 {
			return nil, errs.New(errs.ExistResource, "The project group holds %d %s(s); move or delete them first. (project_group_id = %s)", n, child.what, g.ID)
		}
	}
	if _, err := s.groups.DeleteOne(ctx, bson.D{{Key: "_id", Value: g.ID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *service) get(ctx context.Context, p *auth.Principal, r *idReq) (*ProjectGroup, error) {
	g, err := store.GetFor[ProjectGroup](ctx, s.groups, Resource, p, "project_group_id", r.ProjectGroupID)
	if err != nil {
		return nil, err
	}
	if seen, err := s.memberSees(ctx, p); err != nil {
		return nil, err
	} else if seen != nil && !slices.Contains(seen, g.ID) {
		return nil, errs.NotFound("project_group_id", r.ProjectGroupID)
	}
	return g, nil
}

// memberSees is, for a workspace member, the groups above its token's
// projects (nil for every other caller: tenancy alone decides).
func (s *service) memberSees(ctx context.Context, p *auth.Principal) ([]string, error) {
	if p == nil || p.IsSystem() || p.Role != auth.WorkspaceMember {
		return nil, nil
	}
	seen := []string{}
	for _, pid := range p.Projects {
		pr, err := store.Get[core.Project](ctx, s.Projects, "project_id", pid)
		if errs.Is(err, errs.NotFoundCode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if pr.DomainID != p.DomainID || pr.WorkspaceID != p.WorkspaceID || pr.ProjectGroupID == "" {
			continue
		}
		up, err := s.ancestors(ctx, p.DomainID, pr.ProjectGroupID)
		if err != nil {
			return nil, err
		}
		for _, id := range up {
			if !slices.Contains(seen, id) {
				seen = append(seen, id)
			}
		}
	}
	return seen, nil
}

// only confines q to the groups a member sees, when it is one.
func (s *service) only(ctx context.Context, p *auth.Principal, q *query.Query) (*query.Query, error) {
	seen, err := s.memberSees(ctx, p)
	if err != nil || seen == nil {
		return q, err
	}
	ids := make([]any, len(seen))
	for i, id := range seen {
		ids[i] = id
	}
	return query.With(q, query.Condition{Key: "project_group_id", Value: ids, Operator: "in"}), nil
}

func (s *service) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[ProjectGroup], error) {
	q := query.With(r.Query, query.Params("project_group_id", r.ProjectGroupID, "name", r.Name, "parent_group_id", r.ParentGroupID, "workspace_id", r.WorkspaceID)...)
	q, err := s.only(ctx, p, q)
	if err != nil {
		return nil, err
	}
	return store.SearchFor[ProjectGroup](ctx, s.groups, q, Resource, p)
}

func (s *service) stat(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
	seen, err := s.memberSees(ctx, p)
	if err != nil {
		return nil, err
	}
	if seen != nil {
		ids := make([]any, len(seen))
		for i, id := range seen {
			ids[i] = id
		}
		r.Query.Filter = append(r.Query.Filter, query.Condition{Key: "project_group_id", Value: ids, Operator: "in"})
	}
	if r.WorkspaceID != "" {
		r.Query.Filter = append(r.Query.Filter, query.Condition{Key: "workspace_id", Value: r.WorkspaceID, Operator: "eq"})
	}
	res, err := stat.RunFor(ctx, s.groups, p, Resource, r.Query)
	return &res, err
}
