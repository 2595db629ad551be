package workspace

import (
	"context"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
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

// workspaceGetRequest may name the domain: a service of the suite asks
// in any domain (monitoring's ingest checks a webhook's workspace live).
type workspaceGetRequest struct {
	WorkspaceID string `json:"workspace_id" v:"required"`
	DomainID    string `json:"domain_id" v:"max=64"`
}

type workspaceQuery struct {
	Query       *query.Query `json:"query"`
	WorkspaceID string       `json:"workspace_id"`
	Name        string       `json:"name"`
	State       string       `json:"state" v:"enum=ENABLED|DISABLED"`
}

func (s *service) routes() []api.Route {
	return []api.Route{
		api.Op[createWorkspace, core.Workspace]{Path: "/identity/v2/workspace/create", Access: core.DomainAdmin, Summary: "Create a workspace in the caller's domain.", Handle: s.createWorkspace},
		api.Op[updateWorkspace, core.Workspace]{Path: "/identity/v2/workspace/update", Access: core.DomainAdmin, Summary: "Rename a workspace or change its tags.", Handle: s.updateWorkspace},
		api.Op[workspaceRequest, core.Workspace]{Path: "/identity/v2/workspace/enable", Access: core.DomainAdmin, Summary: "Enable a workspace.", Handle: s.workspaceState(core.Enabled)},
		api.Op[workspaceRequest, core.Workspace]{Path: "/identity/v2/workspace/disable", Access: core.DomainAdmin, Summary: "Disable a workspace.", Handle: s.workspaceState(core.Disabled)},
		api.Op[workspaceRequest, api.Empty]{Path: "/identity/v2/workspace/delete", Access: core.DomainAdmin, Summary: "Delete a workspace with its projects and bindings.", Handle: s.deleteWorkspace},
		api.Op[workspaceGetRequest, core.Workspace]{Path: "/identity/v2/workspace/get", Access: core.Readers, Summary: "Get a workspace.", Handle: s.getWorkspace},
		api.Op[workspaceQuery, api.List[core.Workspace]]{Path: "/identity/v2/workspace/list", Access: core.Readers, Summary: "List workspaces.", Handle: s.listWorkspaces},
	}
}

func (s *service) createWorkspace(ctx context.Context, p *auth.Principal, r *createWorkspace) (*core.Workspace, error) {
	id := wire.NewID("workspace")
	w := &core.Workspace{ID: id, WorkspaceID: id, Name: r.Name, State: core.Enabled, Tags: wire.Object(r.Tags), DomainID: p.DomainID, CreatedBy: p.UserID, CreatedAt: wire.T(wire.Now())}
	if _, err := s.Workspaces.InsertOne(ctx, w); err != nil {
		return nil, store.Wrap(err)
	}
	return w, nil
}

func (s *service) updateWorkspace(ctx context.Context, p *auth.Principal, r *updateWorkspace) (*core.Workspace, error) {
	return s.WorkspaceRecords().Change(ctx, p, r.WorkspaceID, func(_ context.Context, w *core.Workspace) error {
		if r.Name != "" {
			w.Name = r.Name
		}
		if r.Tags != nil {
			w.Tags = r.Tags
		}
		return nil
	})
}

func (s *service) workspaceState(state string) func(context.Context, *auth.Principal, *workspaceRequest) (*core.Workspace, error) {
	return func(ctx context.Context, p *auth.Principal, r *workspaceRequest) (*core.Workspace, error) {
		return s.WorkspaceRecords().Change(ctx, p, r.WorkspaceID, func(_ context.Context, w *core.Workspace) error {
			w.State = state
			return nil
		})
	}
}

func (s *service) deleteWorkspace(ctx context.Context, p *auth.Principal, r *workspaceRequest) (*api.Empty, error) {
	if _, err := s.WorkspaceRecords().Delete(ctx, p, r.WorkspaceID); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *service) getWorkspace(ctx context.Context, p *auth.Principal, r *workspaceGetRequest) (*core.Workspace, error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return store.GetFor[core.Workspace](ctx, s.Workspaces, core.WorkspaceResource, caller, "workspace_id", r.WorkspaceID)
}

func (s *service) listWorkspaces(ctx context.Context, p *auth.Principal, r *workspaceQuery) (*api.List[core.Workspace], error) {
	q := query.With(r.Query, query.Params("workspace_id", r.WorkspaceID, "name", r.Name, "state", r.State)...)
	return store.SearchFor[core.Workspace](ctx, s.Workspaces, q, core.WorkspaceResource, p)
}

type service struct{ *core.Deps }

// Routes are the operations of workspaces.
func Routes(d *core.Deps) []api.Route { return (&service{Deps: d}).routes() }
