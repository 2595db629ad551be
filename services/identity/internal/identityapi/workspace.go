package identityapi

import (
	"cmp"
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

type createWorkspace struct {
	Name string        `json:"name" v:"required,max=128"`
	Tags freeform.Flat `json:"tags"`
}

type updateWorkspace struct {
	WorkspaceID string        `json:"workspace_id" v:"required"`
	Name        string        `json:"name" v:"max=128"`
	Tags        freeform.Flat `json:"tags"`
}

type workspaceRequest struct {
	WorkspaceID string `json:"workspace_id" v:"required"`
}

type workspaceQuery struct {
	Query       *query.Query `json:"query"`
	WorkspaceID string       `json:"workspace_id"`
	Name        string       `json:"name"`
	State       string       `json:"state" v:"enum=ENABLED|DISABLED"`
}

type createProject struct {
	Name        string        `json:"name" v:"required,max=128"`
	ProjectType string        `json:"project_type" v:"enum=PRIVATE|PUBLIC"`
	WorkspaceID string        `json:"workspace_id"`
	Users       []string      `json:"users" v:"max=1000"`
	Tags        freeform.Flat `json:"tags"`
}

type updateProject struct {
	ProjectID   string        `json:"project_id" v:"required"`
	Name        string        `json:"name" v:"max=128"`
	ProjectType string        `json:"project_type" v:"enum=PRIVATE|PUBLIC"`
	Users       []string      `json:"users" v:"max=1000"`
	Tags        freeform.Flat `json:"tags"`
}

type projectRequest struct {
	ProjectID string `json:"project_id" v:"required"`
}

type projectQuery struct {
	Query       *query.Query `json:"query"`
	ProjectID   string       `json:"project_id"`
	Name        string       `json:"name"`
	WorkspaceID string       `json:"workspace_id"`
	// DomainID: a SYSTEM caller (another service's schedule or worker)
	// names the domain it lists for; anyone else only their own.
	DomainID string `json:"domain_id" v:"max=64"`
}

type roleRequest struct {
	RoleID string `json:"role_id" v:"required"`
}

type roleQuery struct {
	RoleType string `json:"role_type" v:"enum=DOMAIN_ADMIN|WORKSPACE_OWNER|WORKSPACE_MEMBER"`
}

type createBinding struct {
	UserID        string `json:"user_id" v:"required"`
	RoleID        string `json:"role_id" v:"required"`
	ResourceGroup string `json:"resource_group" v:"required,enum=DOMAIN|WORKSPACE"`
	WorkspaceID   string `json:"workspace_id"`
}

type bindingRequest struct {
	RoleBindingID string `json:"role_binding_id" v:"required"`
}

type bindingQuery struct {
	Query         *query.Query `json:"query"`
	RoleBindingID string       `json:"role_binding_id"`
	UserID        string       `json:"user_id"`
	RoleID        string       `json:"role_id"`
	RoleType      string       `json:"role_type"`
	WorkspaceID   string       `json:"workspace_id"`
	// DomainID: a SYSTEM caller (the notification service looking
	// for a domain's admins) names the domain; anyone else only their own.
	DomainID string `json:"domain_id" v:"max=64"`
}

// A workspace member reaches the projects of its token (semantics.md
// §4.4 user_projects: the workspace's PUBLIC projects and the PRIVATE
// ones listing it).
var projectResource = query.Resource{KeywordFields: []string{"project_id", "name"}, DefaultSort: []query.SortKey{{Key: "name"}}, Fields: query.FieldsOf[core.Project](), Maps: freeform.FieldsOf[core.Project](),
	Tenancy: tenancy.InProject}

// A domain binding has workspace_id "": only domain-wide callers reach
// it; a workspace role reaches the bindings of its workspace.
var bindingResource = query.Resource{KeywordFields: []string{"user_id", "role_id"}, DefaultSort: []query.SortKey{{Key: "created_at"}}, Fields: query.FieldsOf[core.RoleBinding](), Maps: freeform.FieldsOf[core.RoleBinding](),
	Tenancy: tenancy.InWorkspace}

func (s *Service) workspaceRoutes() []api.Route {
	return []api.Route{
		api.Op[createWorkspace, core.Workspace]{Path: "/identity/v2/workspace/create", Access: core.DomainAdmin, Summary: "Create a workspace in the caller's domain.", Handle: s.createWorkspace},
		api.Op[updateWorkspace, core.Workspace]{Path: "/identity/v2/workspace/update", Access: core.DomainAdmin, Summary: "Rename a workspace or change its tags.", Handle: s.updateWorkspace},
		api.Op[workspaceRequest, core.Workspace]{Path: "/identity/v2/workspace/enable", Access: core.DomainAdmin, Summary: "Enable a workspace.", Handle: s.workspaceState(core.Enabled)},
		api.Op[workspaceRequest, core.Workspace]{Path: "/identity/v2/workspace/disable", Access: core.DomainAdmin, Summary: "Disable a workspace.", Handle: s.workspaceState(core.Disabled)},
		api.Op[workspaceRequest, api.Empty]{Path: "/identity/v2/workspace/delete", Access: core.DomainAdmin, Summary: "Delete a workspace with its projects and bindings.", Handle: s.deleteWorkspace},
		api.Op[workspaceRequest, core.Workspace]{Path: "/identity/v2/workspace/get", Access: core.Readers, Summary: "Get a workspace.", Handle: s.getWorkspace},
		api.Op[workspaceQuery, api.List[core.Workspace]]{Path: "/identity/v2/workspace/list", Access: core.Readers, Summary: "List workspaces.", Handle: s.listWorkspaces},
	}
}

func (s *Service) createWorkspace(ctx context.Context, p *auth.Principal, r *createWorkspace) (*core.Workspace, error) {
	id := wire.NewID("workspace")
	w := &core.Workspace{ID: id, WorkspaceID: id, Name: r.Name, State: core.Enabled, Tags: wire.Object(r.Tags), DomainID: p.DomainID, CreatedBy: p.UserID, CreatedAt: wire.T(wire.Now())}
	if _, err := s.Workspaces.InsertOne(ctx, w); err != nil {
		return nil, store.Wrap(err)
	}
	return w, nil
}

func (s *Service) updateWorkspace(ctx context.Context, p *auth.Principal, r *updateWorkspace) (*core.Workspace, error) {
	w, err := store.GetToChange[core.Workspace](ctx, s.Workspaces, core.WorkspaceResource, p, "workspace_id", r.WorkspaceID)
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
		return w, nil
	}
	return store.SetByID[core.Workspace](ctx, s.Workspaces, "workspace_id", w.ID, set)
}

func (s *Service) workspaceState(state string) func(context.Context, *auth.Principal, *workspaceRequest) (*core.Workspace, error) {
	return func(ctx context.Context, p *auth.Principal, r *workspaceRequest) (*core.Workspace, error) {
		w, err := store.GetToChange[core.Workspace](ctx, s.Workspaces, core.WorkspaceResource, p, "workspace_id", r.WorkspaceID)
		if err != nil {
			return nil, err
		}
		return store.SetByID[core.Workspace](ctx, s.Workspaces, "workspace_id", w.ID, bson.D{{Key: "state", Value: state}})
	}
}

func (s *Service) deleteWorkspace(ctx context.Context, p *auth.Principal, r *workspaceRequest) (*api.Empty, error) {
	w, err := store.GetToChange[core.Workspace](ctx, s.Workspaces, core.WorkspaceResource, p, "workspace_id", r.WorkspaceID)
	if err != nil {
		return nil, err
	}
	inside := bson.D{{Key: "domain_id", Value: w.DomainID}, {Key: "workspace_id", Value: w.WorkspaceID}}
	for _, c := range []*mongo.Collection{s.Projects, s.Bindings} {
		if _, err := c.DeleteMany(ctx, inside); err != nil {
			return nil, store.Wrap(err)
		}
	}
	if _, err := s.Workspaces.DeleteOne(ctx, bson.D{{Key: "_id", Value: w.ID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *Service) getWorkspace(ctx context.Context, p *auth.Principal, r *workspaceRequest) (*core.Workspace, error) {
	return store.GetFor[core.Workspace](ctx, s.Workspaces, core.WorkspaceResource, p, "workspace_id", r.WorkspaceID)
}

func (s *Service) listWorkspaces(ctx context.Context, p *auth.Principal, r *workspaceQuery) (*api.List[core.Workspace], error) {
	q := query.With(r.Query, query.Params("workspace_id", r.WorkspaceID, "name", r.Name, "state", r.State)...)
	return store.SearchFor[core.Workspace](ctx, s.Workspaces, q, core.WorkspaceResource, p)
}

func (s *Service) projectRoutes() []api.Route {
	return []api.Route{
		api.Op[createProject, core.Project]{Path: "/identity/v2/project/create", Access: core.WorkspaceWriters, Summary: "Create a project in a workspace.", Handle: s.createProject},
		api.Op[updateProject, core.Project]{Path: "/identity/v2/project/update", Access: core.WorkspaceWriters, Summary: "Change a project.", Handle: s.updateProject},
		api.Op[projectRequest, api.Empty]{Path: "/identity/v2/project/delete", Access: core.WorkspaceWriters, Summary: "Delete a project.", Handle: s.deleteProject},
		api.Op[projectRequest, core.Project]{Path: "/identity/v2/project/get", Access: core.Readers, Summary: "Get a project.", Handle: s.getProject},
		api.Op[projectQuery, api.List[core.Project]]{Path: "/identity/v2/project/list", Access: core.Readers, Summary: "List projects.", Handle: s.listProjects},
	}
}

func (s *Service) createProject(ctx context.Context, p *auth.Principal, r *createProject) (*core.Project, error) {
	ws := r.WorkspaceID
	if p.WorkspaceID != "" {
		ws = p.WorkspaceID // a workspace owner creates in its own workspace
	}
	if ws == "" {
		return nil, errs.Required("workspace_id")
	}
	w, err := store.GetFor[core.Workspace](ctx, s.Workspaces, core.WorkspaceResource, p, "workspace_id", ws)
	if err != nil {
		return nil, err
	}
	rule, err := tenancy.For(p, projectResource.Tenancy)
	if err != nil {
		return nil, err
	}
	if err := rule.Admits(tenancy.Record{Domain: w.DomainID, Workspace: w.WorkspaceID}); err != nil {
		return nil, err
	}
	kind := r.ProjectType
	if kind == "" {
		kind = "PRIVATE"
	}
	id := wire.NewID("project")
	pr := &core.Project{ID: id, ProjectID: id, Name: r.Name, ProjectType: kind, Users: wire.List(r.Users), Tags: wire.Object(r.Tags),
		WorkspaceID: w.WorkspaceID, DomainID: w.DomainID, CreatedBy: p.UserID, CreatedAt: wire.T(wire.Now())}
	if _, err := s.Projects.InsertOne(ctx, pr); err != nil {
		return nil, store.Wrap(err)
	}
	return pr, nil
}

func (s *Service) updateProject(ctx context.Context, p *auth.Principal, r *updateProject) (*core.Project, error) {
	pr, err := store.GetToChange[core.Project](ctx, s.Projects, projectResource, p, "project_id", r.ProjectID)
	if err != nil {
		return nil, err
	}
	set := bson.D{}
	for k, v := range map[string]any{"name": r.Name, "project_type": r.ProjectType} {
		if v != "" {
			set = append(set, bson.E{Key: k, Value: v})
		}
	}
	if r.Users != nil {
		set = append(set, bson.E{Key: "users", Value: r.Users})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	if len(set) == 0 {
		return pr, nil
	}
	return store.SetByID[core.Project](ctx, s.Projects, "project_id", pr.ID, set)
}

func (s *Service) deleteProject(ctx context.Context, p *auth.Principal, r *projectRequest) (*api.Empty, error) {
	pr, err := store.GetToChange[core.Project](ctx, s.Projects, projectResource, p, "project_id", r.ProjectID)
	if err != nil {
		return nil, err
	}
	if _, err := s.Projects.DeleteOne(ctx, bson.D{{Key: "_id", Value: pr.ID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *Service) getProject(ctx context.Context, p *auth.Principal, r *projectRequest) (*core.Project, error) {
	return store.GetFor[core.Project](ctx, s.Projects, projectResource, p, "project_id", r.ProjectID)
}

func (s *Service) listProjects(ctx context.Context, p *auth.Principal, r *projectQuery) (*api.List[core.Project], error) {
	q := query.With(r.Query, query.Params("project_id", r.ProjectID, "name", r.Name, "workspace_id", r.WorkspaceID)...)
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return store.SearchFor[core.Project](ctx, s.Projects, q, projectResource, caller)
}

func (s *Service) roleRoutes() []api.Route {
	return []api.Route{
		api.Op[roleRequest, core.Role]{Path: "/identity/v2/role/get", Access: core.Readers, Summary: "Get a managed role.", Handle: func(_ context.Context, _ *auth.Principal, r *roleRequest) (*core.Role, error) {
			role, ok := core.ManagedRole(r.RoleID)
			if !ok {
				return nil, errs.NotFound("role_id", r.RoleID)
			}
			return &role, nil
		}},
		api.Op[roleQuery, api.List[core.Role]]{Path: "/identity/v2/role/list", Access: core.Readers, Summary: "List the managed roles.", Handle: func(_ context.Context, _ *auth.Principal, r *roleQuery) (*api.List[core.Role], error) {
			out := []core.Role{}
			for _, role := range core.ManagedRoles {
				if r.RoleType == "" || role.RoleType == r.RoleType {
					out = append(out, role)
				}
			}
			return &api.List[core.Role]{Results: out, TotalCount: int64(len(out))}, nil
		}},
		api.Op[createBinding, core.RoleBinding]{Path: "/identity/v2/role-binding/create", Access: core.WorkspaceWriters, Summary: "Give a user a role in the domain or in a workspace.", Handle: s.createBinding},
		api.Op[bindingRequest, api.Empty]{Path: "/identity/v2/role-binding/delete", Access: core.WorkspaceWriters, Summary: "Take a role binding away.", Handle: s.deleteBinding},
		api.Op[bindingRequest, core.RoleBinding]{Path: "/identity/v2/role-binding/get", Access: core.Readers, Summary: "Get a role binding.", Handle: s.getBinding},
		api.Op[bindingQuery, api.List[core.RoleBinding]]{Path: "/identity/v2/role-binding/list", Access: core.Readers, Summary: "List role bindings.", Handle: s.listBindings},
	}
}

// ownsWorkspace reports whether p is a workspace owner acting in its own
// workspace: it manages that workspace's bindings and no other.
func ownsWorkspace(p *auth.Principal) bool {
	return p.Role == auth.WorkspaceOwner && !p.IsSystem()
}

func (s *Service) createBinding(ctx context.Context, p *auth.Principal, r *createBinding) (*core.RoleBinding, error) {
	rule, err := tenancy.For(p, bindingResource.Tenancy)
	if err != nil {
		return nil, err
	}
	// A workspace owner binds users into its own workspace (the token's,
	// when the request names none) with workspace roles only: a DOMAIN
	// binding (workspace_id "") or another workspace is not its to place.
	at := tenancy.Record{Domain: rule.Stamp().Domain}
	if r.ResourceGroup == "WORKSPACE" {
		at.Workspace = cmp.Or(r.WorkspaceID, rule.Stamp().Workspace)
	}
	if err := rule.Admits(at); err != nil {
		return nil, err
	}
	r.WorkspaceID = at.Workspace
	role, ok := core.ManagedRole(r.RoleID)
	if !ok {
		return nil, errs.NotFound("role_id", r.RoleID)
	}
	u, err := s.UserFor(ctx, p, r.UserID)
	if err != nil {
		return nil, err
	}
	ws := ""
	switch {
	case r.ResourceGroup == "DOMAIN" && role.RoleType != string(auth.DomainAdmin):
		return nil, errs.Invalid("role_id", "a DOMAIN binding takes the domain admin role")
	case r.ResourceGroup == "WORKSPACE" && role.RoleType == string(auth.DomainAdmin):
		return nil, errs.Invalid("role_id", "a WORKSPACE binding takes a workspace role")
	case r.ResourceGroup == "WORKSPACE":
		if r.WorkspaceID == "" {
			return nil, errs.Required("workspace_id")
		}
		w, err := store.GetFor[core.Workspace](ctx, s.Workspaces, core.WorkspaceResource, p, "workspace_id", r.WorkspaceID)
		if err != nil {
			return nil, err
		}
		ws = w.WorkspaceID
	}
	b := core.NewBinding(u.DomainID, u.UserID, role.RoleID, role.RoleType, r.ResourceGroup, ws)
	if _, err := s.Bindings.InsertOne(ctx, b); err != nil {
		if e, ok := errs.As(store.Wrap(err)); ok && e.Status() == 409 {
			return nil, errs.Duplicate("user_id", u.UserID)
		}
		return nil, store.Wrap(err)
	}
	if ws == "" {
		if _, err := store.SetByID[core.User](ctx, s.Users, "user_id", u.ID, bson.D{{Key: "role_type", Value: role.RoleType}, {Key: "role_id", Value: role.RoleID}}); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (s *Service) deleteBinding(ctx context.Context, p *auth.Principal, r *bindingRequest) (*api.Empty, error) {
	b, err := store.GetToChange[core.RoleBinding](ctx, s.Bindings, bindingResource, p, "role_binding_id", r.RoleBindingID)
	if err != nil {
		return nil, err
	}
	if ownsWorkspace(p) && b.UserID == p.UserID {
		// As upstream, an owner never removes itself (so a workspace keeps
		// its owner).
		return nil, errs.Forbidden()
	}
	unbind := func() error {
		if _, err := s.Bindings.DeleteOne(ctx, bson.D{{Key: "_id", Value: b.ID}}); err != nil {
			return store.Wrap(err)
		}
		if b.WorkspaceID != "" {
			return nil
		}
		_, err := store.SetByID[core.User](ctx, s.Users, "user_id", core.UserKey(b.DomainID, b.UserID), bson.D{{Key: "role_type", Value: string(auth.User)}, {Key: "role_id", Value: ""}})
		if core.IsNotFound(err) {
			return nil
		}
		return err
	}
	if b.WorkspaceID == "" { // the domain binding: its user is a domain admin
		err = s.KeepAnAdmin(ctx, b.DomainID, b.UserID, unbind)
	} else {
		err = unbind()
	}
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *Service) getBinding(ctx context.Context, p *auth.Principal, r *bindingRequest) (*core.RoleBinding, error) {
	return store.GetFor[core.RoleBinding](ctx, s.Bindings, bindingResource, p, "role_binding_id", r.RoleBindingID)
}

func (s *Service) listBindings(ctx context.Context, p *auth.Principal, r *bindingQuery) (*api.List[core.RoleBinding], error) {
	q := query.With(r.Query, query.Params("role_binding_id", r.RoleBindingID, "user_id", r.UserID, "role_id", r.RoleID,
		"role_type", r.RoleType, "workspace_id", r.WorkspaceID)...)
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return store.SearchFor[core.RoleBinding](ctx, s.Bindings, q, bindingResource, caller)
}
