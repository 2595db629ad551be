package identityapi

import (
	"cmp"
	"context"
	"encoding/json"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

type (
	createWorkspace struct {
		Name string        `json:"name" v:"required,max=128"`
		Tags freeform.Flat `json:"tags"`
	}
	updateWorkspace struct {
		WorkspaceID string        `json:"workspace_id" v:"required"`
		Name        string        `json:"name" v:"max=128"`
		Tags        freeform.Flat `json:"tags"`
	}
	workspaceRequest struct {
		WorkspaceID string `json:"workspace_id" v:"required"`
	}
	workspaceQuery struct {
		Query       *query.Query `json:"query"`
		WorkspaceID string       `json:"workspace_id"`
		Name        string       `json:"name"`
		State       string       `json:"state" v:"enum=ENABLED|DISABLED"`
	}
	createProject struct {
		Name        string        `json:"name" v:"required,max=128"`
		ProjectType string        `json:"project_type" v:"enum=PRIVATE|PUBLIC"`
		WorkspaceID string        `json:"workspace_id"`
		Users       []string      `json:"users" v:"max=1000"`
		Tags        freeform.Flat `json:"tags"`
	}
	updateProject struct {
		ProjectID   string        `json:"project_id" v:"required"`
		Name        string        `json:"name" v:"max=128"`
		ProjectType string        `json:"project_type" v:"enum=PRIVATE|PUBLIC"`
		Users       []string      `json:"users" v:"max=1000"`
		Tags        freeform.Flat `json:"tags"`
	}
	projectRequest struct {
		ProjectID string `json:"project_id" v:"required"`
	}
	projectQuery struct {
		Query       *query.Query `json:"query"`
		ProjectID   string       `json:"project_id"`
		Name        string       `json:"name"`
		WorkspaceID string       `json:"workspace_id"`
		// DomainID: a SYSTEM caller (another service's schedule or worker)
		// names the domain it lists for; anyone else only their own.
		DomainID string `json:"domain_id" v:"max=64"`
	}
	roleRequest struct {
		RoleID string `json:"role_id" v:"required"`
	}
	roleQuery struct {
		RoleType string `json:"role_type" v:"enum=DOMAIN_ADMIN|WORKSPACE_OWNER|WORKSPACE_MEMBER"`
	}
	createBinding struct {
		UserID        string `json:"user_id" v:"required"`
		RoleID        string `json:"role_id" v:"required"`
		ResourceGroup string `json:"resource_group" v:"required,enum=DOMAIN|WORKSPACE"`
		WorkspaceID   string `json:"workspace_id"`
	}
	bindingRequest struct {
		RoleBindingID string `json:"role_binding_id" v:"required"`
	}
	bindingQuery struct {
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
)

var (
	// A workspace's own id is its workspace field: a workspace role
	// reaches the workspace of its token (its bindings tell it which it may
	// enter), a domain admin every workspace of the domain.
	workspaceResource = query.Resource{KeywordFields: []string{"workspace_id", "name"}, DefaultSort: []query.SortKey{{Key: "name"}}, Fields: query.FieldsOf[Workspace](), Maps: freeform.FieldsOf[Workspace](),
		Tenancy: tenancy.InWorkspace}
	// workspaceInDomain is a workspace as a record of its domain alone, for
	// token/grant: the caller has no role there yet, its binding decides.
	workspaceInDomain = query.Resource{Tenancy: tenancy.InDomain}
	// A workspace member reaches the projects of its token (semantics.md
	// §4.4 user_projects: the workspace's PUBLIC projects and the PRIVATE
	// ones listing it).
	projectResource = query.Resource{KeywordFields: []string{"project_id", "name"}, DefaultSort: []query.SortKey{{Key: "name"}}, Fields: query.FieldsOf[Project](), Maps: freeform.FieldsOf[Project](),
		Tenancy: tenancy.InProject}
	// A domain binding has workspace_id "": only domain-wide callers reach
	// it; a workspace role reaches the bindings of its workspace.
	bindingResource = query.Resource{KeywordFields: []string{"user_id", "role_id"}, DefaultSort: []query.SortKey{{Key: "created_at"}}, Fields: query.FieldsOf[RoleBinding](), Maps: freeform.FieldsOf[RoleBinding](),
		Tenancy: tenancy.InWorkspace}
	workspaceWriters = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner)
)

func (s *Service) workspaceRoutes() []api.Route {
	return []api.Route{
		api.Op[createWorkspace, Workspace]{Path: "/identity/v2/workspace/create", Access: domainAdmin, Summary: "Create a workspace in the caller's domain.", Handle: s.createWorkspace},
		api.Op[updateWorkspace, Workspace]{Path: "/identity/v2/workspace/update", Access: domainAdmin, Summary: "Rename a workspace or change its tags.", Handle: s.updateWorkspace},
		api.Op[workspaceRequest, Workspace]{Path: "/identity/v2/workspace/enable", Access: domainAdmin, Summary: "Enable a workspace.", Handle: s.workspaceState(Enabled)},
		api.Op[workspaceRequest, Workspace]{Path: "/identity/v2/workspace/disable", Access: domainAdmin, Summary: "Disable a workspace.", Handle: s.workspaceState(Disabled)},
		api.Op[workspaceRequest, api.Empty]{Path: "/identity/v2/workspace/delete", Access: domainAdmin, Summary: "Delete a workspace with its projects and bindings.", Handle: s.deleteWorkspace},
		api.Op[workspaceRequest, Workspace]{Path: "/identity/v2/workspace/get", Access: readers, Summary: "Get a workspace.", Handle: s.getWorkspace},
		api.Op[workspaceQuery, api.List[Workspace]]{Path: "/identity/v2/workspace/list", Access: readers, Summary: "List workspaces.", Handle: s.listWorkspaces},
	}
}

func (s *Service) createWorkspace(ctx context.Context, p *auth.Principal, r *createWorkspace) (*Workspace, error) {
	id := wire.NewID("workspace")
	w := &Workspace{ID: id, WorkspaceID: id, Name: r.Name, State: Enabled, Tags: wire.Object(r.Tags), DomainID: p.DomainID, CreatedBy: p.UserID, CreatedAt: wire.T(wire.Now())}
	if _, err := s.workspaces.InsertOne(ctx, w); err != nil {
		return nil, store.Wrap(err)
	}
	return w, nil
}

func (s *Service) updateWorkspace(ctx context.Context, p *auth.Principal, r *updateWorkspace) (*Workspace, error) {
	w, err := store.GetToChange[Workspace](ctx, s.workspaces, workspaceResource, p, "workspace_id", r.WorkspaceID)
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
	return store.SetByID[Workspace](ctx, s.workspaces, "workspace_id", w.ID, set)
}

func (s *Service) workspaceState(state string) func(context.Context, *auth.Principal, *workspaceRequest) (*Workspace, error) {
	return func(ctx context.Context, p *auth.Principal, r *workspaceRequest) (*Workspace, error) {
		w, err := store.GetToChange[Workspace](ctx, s.workspaces, workspaceResource, p, "workspace_id", r.WorkspaceID)
		if err != nil {
			return nil, err
		}
		return store.SetByID[Workspace](ctx, s.workspaces, "workspace_id", w.ID, bson.D{{Key: "state", Value: state}})
	}
}

func (s *Service) deleteWorkspace(ctx context.Context, p *auth.Principal, r *workspaceRequest) (*api.Empty, error) {
	w, err := store.GetToChange[Workspace](ctx, s.workspaces, workspaceResource, p, "workspace_id", r.WorkspaceID)
	if err != nil {
		return nil, err
	}
	inside := bson.D{{Key: "domain_id", Value: w.DomainID}, {Key: "workspace_id", Value: w.WorkspaceID}}
	for _, c := range []*mongoCollection{s.projects, s.bindings} {
		if _, err := c.DeleteMany(ctx, inside); err != nil {
			return nil, store.Wrap(err)
		}
	}
	if _, err := s.workspaces.DeleteOne(ctx, bson.D{{Key: "_id", Value: w.ID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *Service) getWorkspace(ctx context.Context, p *auth.Principal, r *workspaceRequest) (*Workspace, error) {
	return store.GetFor[Workspace](ctx, s.workspaces, workspaceResource, p, "workspace_id", r.WorkspaceID)
}

func (s *Service) listWorkspaces(ctx context.Context, p *auth.Principal, r *workspaceQuery) (*api.List[Workspace], error) {
	q := query.With(r.Query, query.Params("workspace_id", r.WorkspaceID, "name", r.Name, "state", r.State)...)
	return store.SearchFor[Workspace](ctx, s.workspaces, q, workspaceResource, p)
}

func (s *Service) projectRoutes() []api.Route {
	return []api.Route{
		api.Op[createProject, Project]{Path: "/identity/v2/project/create", Access: workspaceWriters, Summary: "Create a project in a workspace.", Handle: s.createProject},
		api.Op[updateProject, Project]{Path: "/identity/v2/project/update", Access: workspaceWriters, Summary: "Change a project.", Handle: s.updateProject},
		api.Op[projectRequest, api.Empty]{Path: "/identity/v2/project/delete", Access: workspaceWriters, Summary: "Delete a project.", Handle: s.deleteProject},
		api.Op[projectRequest, Project]{Path: "/identity/v2/project/get", Access: readers, Summary: "Get a project.", Handle: s.getProject},
		api.Op[projectQuery, api.List[Project]]{Path: "/identity/v2/project/list", Access: readers, Summary: "List projects.", Handle: s.listProjects},
	}
}

func (s *Service) createProject(ctx context.Context, p *auth.Principal, r *createProject) (*Project, error) {
	ws := r.WorkspaceID
	if p.WorkspaceID != "" {
		ws = p.WorkspaceID // a workspace owner creates in its own workspace
	}
	if ws == "" {
		return nil, errs.Required("workspace_id")
	}
	w, err := store.GetFor[Workspace](ctx, s.workspaces, workspaceResource, p, "workspace_id", ws)
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
	pr := &Project{ID: id, ProjectID: id, Name: r.Name, ProjectType: kind, Users: wire.List(r.Users), Tags: wire.Object(r.Tags),
		WorkspaceID: w.WorkspaceID, DomainID: w.DomainID, CreatedBy: p.UserID, CreatedAt: wire.T(wire.Now())}
	if _, err := s.projects.InsertOne(ctx, pr); err != nil {
		return nil, store.Wrap(err)
	}
	return pr, nil
}

func (s *Service) updateProject(ctx context.Context, p *auth.Principal, r *updateProject) (*Project, error) {
	pr, err := store.GetToChange[Project](ctx, s.projects, projectResource, p, "project_id", r.ProjectID)
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
	return store.SetByID[Project](ctx, s.projects, "project_id", pr.ID, set)
}

func (s *Service) deleteProject(ctx context.Context, p *auth.Principal, r *projectRequest) (*api.Empty, error) {
	pr, err := store.GetToChange[Project](ctx, s.projects, projectResource, p, "project_id", r.ProjectID)
	if err != nil {
		return nil, err
	}
	if _, err := s.projects.DeleteOne(ctx, bson.D{{Key: "_id", Value: pr.ID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *Service) getProject(ctx context.Context, p *auth.Principal, r *projectRequest) (*Project, error) {
	return store.GetFor[Project](ctx, s.projects, projectResource, p, "project_id", r.ProjectID)
}

func (s *Service) listProjects(ctx context.Context, p *auth.Principal, r *projectQuery) (*api.List[Project], error) {
	q := query.With(r.Query, query.Params("project_id", r.ProjectID, "name", r.Name, "workspace_id", r.WorkspaceID)...)
	caller, err := s.callerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return store.SearchFor[Project](ctx, s.projects, q, projectResource, caller)
}

// memberProjects are the projects a workspace member reaches: the public
// ones of the workspace and those listing the user.
func (s *Service) memberProjects(ctx context.Context, domainID, workspaceID, userID string) ([]string, error) {
	cur, err := s.projects.Find(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "workspace_id", Value: workspaceID},
		{Key: "$or", Value: bson.A{bson.D{{Key: "project_type", Value: "PUBLIC"}}, bson.D{{Key: "users", Value: userID}}}}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	var rows []Project
	if err := cur.All(ctx, &rows); err != nil {
		return nil, store.Wrap(err)
	}
	out := []string{}
	for _, r := range rows {
		out = append(out, r.ProjectID)
	}
	return out, nil
}

func (s *Service) roleRoutes() []api.Route {
	return []api.Route{
		api.Op[roleRequest, Role]{Path: "/identity/v2/role/get", Access: readers, Summary: "Get a managed role.", Handle: func(_ context.Context, _ *auth.Principal, r *roleRequest) (*Role, error) {
			role, ok := managedRole(r.RoleID)
			if !ok {
				return nil, errs.NotFound("role_id", r.RoleID)
			}
			return &role, nil
		}},
		api.Op[roleQuery, api.List[Role]]{Path: "/identity/v2/role/list", Access: readers, Summary: "List the managed roles.", Handle: func(_ context.Context, _ *auth.Principal, r *roleQuery) (*api.List[Role], error) {
			out := []Role{}
			for _, role := range ManagedRoles {
				if r.RoleType == "" || role.RoleType == r.RoleType {
					out = append(out, role)
				}
			}
			return &api.List[Role]{Results: out, TotalCount: int64(len(out))}, nil
		}},
		api.Op[createBinding, RoleBinding]{Path: "/identity/v2/role-binding/create", Access: workspaceWriters, Summary: "Give a user a role in the domain or in a workspace.", Handle: s.createBinding},
		api.Op[bindingRequest, api.Empty]{Path: "/identity/v2/role-binding/delete", Access: workspaceWriters, Summary: "Take a role binding away.", Handle: s.deleteBinding},
		api.Op[bindingRequest, RoleBinding]{Path: "/identity/v2/role-binding/get", Access: readers, Summary: "Get a role binding.", Handle: s.getBinding},
		api.Op[bindingQuery, api.List[RoleBinding]]{Path: "/identity/v2/role-binding/list", Access: readers, Summary: "List role bindings.", Handle: s.listBindings},
	}
}

// ownsWorkspace reports whether p is a workspace owner acting in its own
// workspace: it manages that workspace's bindings and no other.
func ownsWorkspace(p *auth.Principal) bool {
	return p.Role == auth.WorkspaceOwner && !p.IsSystem()
}

func (s *Service) createBinding(ctx context.Context, p *auth.Principal, r *createBinding) (*RoleBinding, error) {
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
	role, ok := managedRole(r.RoleID)
	if !ok {
		return nil, errs.NotFound("role_id", r.RoleID)
	}
	u, err := s.userFor(ctx, p, r.UserID)
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
		w, err := store.GetFor[Workspace](ctx, s.workspaces, workspaceResource, p, "workspace_id", r.WorkspaceID)
		if err != nil {
			return nil, err
		}
		ws = w.WorkspaceID
	}
	b := newBinding(u.DomainID, u.UserID, role.RoleID, role.RoleType, r.ResourceGroup, ws)
	if _, err := s.bindings.InsertOne(ctx, b); err != nil {
		if e, ok := errs.As(store.Wrap(err)); ok && e.Status() == 409 {
			return nil, errs.Duplicate("user_id", u.UserID)
		}
		return nil, store.Wrap(err)
	}
	if ws == "" {
		if _, err := store.SetByID[User](ctx, s.users, "user_id", u.ID, bson.D{{Key: "role_type", Value: role.RoleType}, {Key: "role_id", Value: role.RoleID}}); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (s *Service) deleteBinding(ctx context.Context, p *auth.Principal, r *bindingRequest) (*api.Empty, error) {
	b, err := store.GetToChange[RoleBinding](ctx, s.bindings, bindingResource, p, "role_binding_id", r.RoleBindingID)
	if err != nil {
		return nil, err
	}
	if ownsWorkspace(p) && b.UserID == p.UserID {
		// As upstream, an owner never removes itself (so a workspace keeps
		// its owner).
		return nil, errs.Forbidden()
	}
	unbind := func() error {
		if _, err := s.bindings.DeleteOne(ctx, bson.D{{Key: "_id", Value: b.ID}}); err != nil {
			return store.Wrap(err)
		}
		if b.WorkspaceID != "" {
			return nil
		}
		_, err := store.SetByID[User](ctx, s.users, "user_id", UserKey(b.DomainID, b.UserID), bson.D{{Key: "role_type", Value: string(auth.User)}, {Key: "role_id", Value: ""}})
		if isNotFound(err) {
			return nil
		}
		return err
	}
	if b.WorkspaceID == "" { // the domain binding: its user is a domain admin
		err = s.keepAnAdmin(ctx, b.DomainID, b.UserID, unbind)
	} else {
		err = unbind()
	}
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

// keepAnAdmin runs take, which takes userID's domain-admin rights away
// (unbind, disable, delete), unless userID is the last enabled domain
// admin of domainID. Check and change hold the domain's admin lock, so two
// admins removing each other at once cannot leave the domain without one.
func (s *Service) keepAnAdmin(ctx context.Context, domainID, userID string, take func() error) error {
	return lease.Run(ctx, s.db.Collection(CountersCollection), "admins:"+domainID, 30*time.Second, 10*time.Second, func(ctx context.Context) error {
		n, err := s.users.CountDocuments(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "role_type", Value: string(auth.DomainAdmin)},
			{Key: "state", Value: bson.D{{Key: "$ne", Value: Disabled}}}, {Key: "user_id", Value: bson.D{{Key: "$ne", Value: userID}}}})
		if err != nil {
			return store.Wrap(err)
		}
		if n == 0 {
			return errs.New(errs.LastAdmin, "The last domain admin cannot be disabled or deleted.")
		}
		return take()
	})
}

func (s *Service) getBinding(ctx context.Context, p *auth.Principal, r *bindingRequest) (*RoleBinding, error) {
	return store.GetFor[RoleBinding](ctx, s.bindings, bindingResource, p, "role_binding_id", r.RoleBindingID)
}

func (s *Service) listBindings(ctx context.Context, p *auth.Principal, r *bindingQuery) (*api.List[RoleBinding], error) {
	q := query.With(r.Query, query.Params("role_binding_id", r.RoleBindingID, "user_id", r.UserID, "role_id", r.RoleID,
		"role_type", r.RoleType, "workspace_id", r.WorkspaceID)...)
	caller, err := s.callerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return store.SearchFor[RoleBinding](ctx, s.bindings, q, bindingResource, caller)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// statFor runs a StatisticsQuery over what p reaches of resource r.
func statFor(ctx context.Context, c *mongoCollection, p *auth.Principal, r query.Resource, q *stat.Query) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, c, p, r, q)
	return &res, err
}
