package project

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/projectgroup"
)

type createProject struct {
	Name        string        `json:"name" v:"required,max=128"`
	ProjectType string        `json:"project_type" v:"enum=PRIVATE|PUBLIC"`
	WorkspaceID string        `json:"workspace_id"`
	Users       []string      `json:"users" v:"max=1000"`
	Tags        freeform.Flat `json:"tags"`
	// ProjectGroupID places the project in a group of its workspace.
	ProjectGroupID string `json:"project_group_id" v:"max=64"`
}

type updateProject struct {
	ProjectID   string        `json:"project_id" v:"required"`
	Name        string        `json:"name" v:"max=128"`
	ProjectType string        `json:"project_type" v:"enum=PRIVATE|PUBLIC"`
	Users       []string      `json:"users" v:"max=1000"`
	Tags        freeform.Flat `json:"tags"`
	// ProjectGroupID moves the project to a group of its workspace.
	ProjectGroupID string `json:"project_group_id" v:"max=64"`
}

type projectRequest struct {
	ProjectID string `json:"project_id" v:"required"`
}

// projectGetRequest may name the domain: a service of the suite asks in
// any domain (monitoring's ingest checks a webhook's project live).
type projectGetRequest struct {
	ProjectID string `json:"project_id" v:"required"`
	DomainID  string `json:"domain_id" v:"max=64"`
}

type projectQuery struct {
	Query       *query.Query `json:"query"`
	ProjectID   string       `json:"project_id"`
	Name        string       `json:"name"`
	WorkspaceID string       `json:"workspace_id"`
	// ProjectGroupID lists the projects of one group (the console's tree).
	ProjectGroupID string `json:"project_group_id"`
	// DomainID: a SYSTEM caller (another service's schedule or worker)
	// names the domain it lists for; anyone else only their own.
	DomainID string `json:"domain_id" v:"max=64"`
}

// A workspace member reaches the projects of its token (semantics.md
// §4.4 user_projects: the workspace's PUBLIC projects and the PRIVATE
// ones listing it).
var projectResource = query.Resource{KeywordFields: []string{"project_id", "name"}, DefaultSort: []query.SortKey{{Key: "name"}}, Fields: query.FieldsOf[core.Project](), Maps: freeform.FieldsOf[core.Project](),
	Tenancy: tenancy.InProject}

func (s *service) routes() []api.Route {
	return []api.Route{
		api.Op[createProject, core.Project]{Path: "/identity/v2/project/create", Access: core.WorkspaceWriters, Summary: "Create a project in a workspace.", Handle: s.createProject},
		api.Op[updateProject, core.Project]{Path: "/identity/v2/project/update", Access: core.WorkspaceWriters, Summary: "Change a project.", Handle: s.updateProject},
		api.Op[projectRequest, api.Empty]{Path: "/identity/v2/project/delete", Access: core.WorkspaceWriters, Summary: "Delete a project.", Handle: s.deleteProject},
		api.Op[projectGetRequest, core.Project]{Path: "/identity/v2/project/get", Access: core.Readers, Summary: "Get a project.", Handle: s.getProject},
		api.Op[projectQuery, api.List[core.Project]]{Path: "/identity/v2/project/list", Access: core.Readers, Summary: "List projects.", Handle: s.listProjects},
	}
}

func (s *service) createProject(ctx context.Context, p *auth.Principal, r *createProject) (*core.Project, error) {
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
	if err := s.checkGroup(ctx, p, r.ProjectGroupID, w.WorkspaceID); err != nil {
		return nil, err
	}
	kind := r.ProjectType
	if kind == "" {
		kind = "PRIVATE"
	}
	id := wire.NewID("project")
	pr := &core.Project{ID: id, ProjectID: id, Name: r.Name, ProjectType: kind, Users: wire.List(r.Users), Tags: wire.Object(r.Tags),
		WorkspaceID: w.WorkspaceID, DomainID: w.DomainID, CreatedBy: p.UserID, CreatedAt: wire.T(wire.Now()), ProjectGroupID: r.ProjectGroupID}
	// A child of the workspace (core.WorkspaceRecords): a workspace whose
	// delete has begun keeps no project that its teardown would miss.
	err = s.WorkspaceRecords().Live(ctx, w.ID, func(ctx context.Context, _ *core.Workspace, lw *store.Writes[core.Workspace]) error {
		return lw.Create(ctx, func(ctx context.Context) error {
			_, err := s.Projects.InsertOne(ctx, pr)
			return store.Wrap(err)
		}, func(ctx context.Context) error {
			_, err := s.Projects.DeleteOne(ctx, bson.D{{Key: "_id", Value: pr.ID}})
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return pr, nil
}

func (s *service) updateProject(ctx context.Context, p *auth.Principal, r *updateProject) (*core.Project, error) {
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
	if r.ProjectGroupID != "" {
		if err := s.checkGroup(ctx, p, r.ProjectGroupID, pr.WorkspaceID); err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "project_group_id", Value: r.ProjectGroupID})
	}
	if len(set) == 0 {
		return pr, nil
	}
	return store.SetByID[core.Project](ctx, s.Projects, "project_id", pr.ID, set)
}

func (s *service) deleteProject(ctx context.Context, p *auth.Principal, r *projectRequest) (*api.Empty, error) {
	pr, err := store.GetToChange[core.Project](ctx, s.Projects, projectResource, p, "project_id", r.ProjectID)
	if err != nil {
		return nil, err
	}
	// The other services' share goes through the outbox before the
	// record (events.Deleted): a delete that answered has it on its way,
	// and one that failed after it is retried (same event id). The
	// project's service accounts are identity's own.
	if err := s.Outbox.AddDeleted(ctx, events.Deleted{ID: events.DeletedID(events.DeletedProject, pr.DomainID, pr.ProjectID, wire.FormatTime(pr.CreatedAt.Time)),
		Kind: events.DeletedProject, DomainID: pr.DomainID, WorkspaceID: pr.WorkspaceID, ProjectID: pr.ProjectID}); err != nil {
		return nil, store.Wrap(err)
	}
	if err := store.DeleteChildren(ctx, s.DB.Collection(core.ServiceAccountsCollection),
		bson.D{{Key: "domain_id", Value: pr.DomainID}, {Key: "project_id", Value: pr.ProjectID}}); err != nil {
		return nil, err
	}
	if _, err := s.Projects.DeleteOne(ctx, bson.D{{Key: "_id", Value: pr.ID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *service) getProject(ctx context.Context, p *auth.Principal, r *projectGetRequest) (*core.Project, error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return store.GetFor[core.Project](ctx, s.Projects, projectResource, caller, "project_id", r.ProjectID)
}

func (s *service) listProjects(ctx context.Context, p *auth.Principal, r *projectQuery) (*api.List[core.Project], error) {
	q := query.With(r.Query, query.Params("project_id", r.ProjectID, "name", r.Name, "workspace_id", r.WorkspaceID, "project_group_id", r.ProjectGroupID)...)
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return store.SearchFor[core.Project](ctx, s.Projects, q, projectResource, caller)
}

// checkGroup: a project's group is one of its workspace that the caller
// reaches (404 project_group_id otherwise); "" is the top of the tree.
func (s *service) checkGroup(ctx context.Context, p *auth.Principal, id, workspaceID string) error {
	if id == "" {
		return nil
	}
	g, err := projectgroup.Get(ctx, s.Deps, p, id)
	if err != nil {
		return err
	}
	if g.WorkspaceID != workspaceID {
		return errs.NotFound("project_group_id", id)
	}
	return nil
}

type service struct{ *core.Deps }

// Routes are the operations of projects.
func Routes(d *core.Deps) []api.Route { return (&service{Deps: d}).routes() }
