package trustedserviceaccount

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

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

type createTrustedSA struct {
	Name        string         `json:"name" v:"required,max=255"`
	Data        map[string]any `json:"data" v:"required"`
	Provider    string         `json:"provider" v:"required,max=64"`
	Scope       string         `json:"scope" v:"required,enum=DOMAIN|WORKSPACE"`
	DomainID    string         `json:"domain_id" v:"required,max=64"`
	Tags        freeform.Flat  `json:"tags"`
	WorkspaceID string         `json:"workspace_id" v:"max=64"`
}

type updateTrustedSA struct {
	TrustedServiceAccountID string         `json:"trusted_service_account_id" v:"required,max=64"`
	DomainID                string         `json:"domain_id" v:"required,max=64"`
	Name                    string         `json:"name" v:"max=255"`
	Data                    map[string]any `json:"data"`
	Tags                    freeform.Flat  `json:"tags"`
	WorkspaceID             string         `json:"workspace_id" v:"max=64"`
}

type trustedSARequest struct {
	TrustedServiceAccountID string `json:"trusted_service_account_id" v:"required,max=64"`
	DomainID                string `json:"domain_id" v:"required,max=64"`
	WorkspaceID             string `json:"workspace_id" v:"max=64"`
}

type trustedSAQuery struct {
	Query                   *query.Query `json:"query"`
	DomainID                string       `json:"domain_id" v:"required,max=64"`
	TrustedServiceAccountID string       `json:"trusted_service_account_id"`
	Name                    string       `json:"name"`
	Provider                string       `json:"provider"`
	Scope                   string       `json:"scope" v:"enum=DOMAIN|WORKSPACE"`
	WorkspaceID             string       `json:"workspace_id"`
}

type trustedSAStat struct {
	Query       *stat.Query `json:"query" v:"required"`
	DomainID    string      `json:"domain_id" v:"required,max=64"`
	WorkspaceID string      `json:"workspace_id" v:"max=64"`
}

var trustedSAResource = query.Resource{
	KeywordFields: []string{"trusted_service_account_id", "name", "provider"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"trusted_service_account_id", "name", "provider", "scope", "workspace_id"},
	Fields:        query.FieldsOf[core.TrustedServiceAccount](),
	Maps:          freeform.FieldsOf[core.TrustedServiceAccount](),
	Tenancy:       tenancy.InWorkspace,
}

// visibleTrustedSA loads a trusted service account the caller may see in
// the request's domain (and workspace_id, when the request names one);
// with write, one it may change. It answers the caller acting in that
// domain.
func (s *service) visibleTrustedSA(ctx context.Context, p *auth.Principal, id, domainID, workspaceID string, write bool) (*core.TrustedServiceAccount, *auth.Principal, error) {
	caller, err := s.CallerIn(ctx, p, domainID)
	if err != nil {
		return nil, nil, err
	}
	load := store.GetFor[core.TrustedServiceAccount]
	if write {
		load = store.GetToChange[core.TrustedServiceAccount]
	}
	t, err := load(ctx, s.TrustedSA, trustedSAResource, caller, "trusted_service_account_id", id)
	if err != nil {
		return nil, nil, err
	}
	if workspaceID != "" && workspaceID != t.WorkspaceID {
		return nil, nil, errs.NotFound("trusted_service_account_id", id)
	}
	return t, caller, nil
}

func (s *service) createTrustedSA(ctx context.Context, p *auth.Principal, r *createTrustedSA) (*core.TrustedServiceAccount, error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	if err := freeform.CheckAll("data", r.Data, "tags", r.Tags); err != nil {
		return nil, err
	}
	ws, err := s.Placement(ctx, caller, r.Scope, r.WorkspaceID)
	if err != nil {
		return nil, err
	}
	id := wire.NewID("tsa")
	t := &core.TrustedServiceAccount{ID: id, TrustedServiceAccountID: id, Name: r.Name, Data: r.Data, Provider: r.Provider,
		Tags: wire.Object(r.Tags), Scope: r.Scope, DomainID: caller.DomainID, WorkspaceID: ws, CreatedAt: wire.T(wire.Now())}
	if _, err := s.TrustedSA.InsertOne(ctx, t); err != nil {
		return nil, store.Wrap(err)
	}
	return t, nil
}

func (s *service) updateTrustedSA(ctx context.Context, p *auth.Principal, r *updateTrustedSA) (*core.TrustedServiceAccount, error) {
	t, caller, err := s.visibleTrustedSA(ctx, p, r.TrustedServiceAccountID, r.DomainID, "", true)
	if err != nil {
		return nil, err
	}
	if err := freeform.CheckAll("data", r.Data, "tags", r.Tags); err != nil {
		return nil, err
	}
	set := bson.D{}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Data != nil {
		set = append(set, bson.E{Key: "data", Value: freeform.Map(r.Data)})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	if r.WorkspaceID != "" && r.WorkspaceID != t.WorkspaceID {
		// Moving a WORKSPACE record to another workspace of the domain is
		// for domain-wide callers; a DOMAIN record stays domain-wide.
		ws, err := s.Placement(ctx, caller, t.Scope, r.WorkspaceID)
		if err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "workspace_id", Value: ws})
	}
	if len(set) == 0 {
		return t, nil
	}
	return store.SetByID[core.TrustedServiceAccount](ctx, s.TrustedSA, "trusted_service_account_id", t.ID, set)
}

func (s *service) deleteTrustedSA(ctx context.Context, p *auth.Principal, r *trustedSARequest) (*api.Empty, error) {
	t, _, err := s.visibleTrustedSA(ctx, p, r.TrustedServiceAccountID, r.DomainID, r.WorkspaceID, true)
	if err != nil {
		return nil, err
	}
	if _, err := s.TrustedSA.DeleteOne(ctx, bson.D{{Key: "_id", Value: t.ID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *service) getTrustedSA(ctx context.Context, p *auth.Principal, r *trustedSARequest) (*core.TrustedServiceAccount, error) {
	t, _, err := s.visibleTrustedSA(ctx, p, r.TrustedServiceAccountID, r.DomainID, r.WorkspaceID, false)
	return t, err
}

func (s *service) listTrustedSA(ctx context.Context, p *auth.Principal, r *trustedSAQuery) (*api.List[core.TrustedServiceAccount], error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("trusted_service_account_id", r.TrustedServiceAccountID, "name", r.Name,
		"provider", r.Provider, "scope", r.Scope, "workspace_id", r.WorkspaceID)...)
	return store.SearchFor[core.TrustedServiceAccount](ctx, s.TrustedSA, q, trustedSAResource, caller)
}

func (s *service) statTrustedSA(ctx context.Context, p *auth.Principal, r *trustedSAStat) (*map[string]any, error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	scope, err := store.Scope(caller, trustedSAResource)
	if err != nil {
		return nil, err
	}
	if r.WorkspaceID != "" {
		// $and: the scope may hold a workspace_id condition of its own.
		scope = bson.D{{Key: "$and", Value: bson.A{scope, bson.D{{Key: "workspace_id", Value: r.WorkspaceID}}}}}
	}
	res, err := stat.Run(ctx, s.TrustedSA, scope, trustedSAResource, r.Query)
	return &res, err
}

type service struct{ *core.Deps }

// Routes are the operations of trusted service accounts.
func Routes(d *core.Deps) []api.Route {
	s := &service{Deps: d}
	const tsa = "/identity/v2/trusted-service-account/"
	return []api.Route{
		api.Op[createTrustedSA, core.TrustedServiceAccount]{Path: tsa + "create", Access: core.WorkspaceWriters, Summary: "Create a trusted service account.", Handle: s.createTrustedSA},
		api.Op[updateTrustedSA, core.TrustedServiceAccount]{Path: tsa + "update", Access: core.WorkspaceWriters, Summary: "Change a trusted service account.", Handle: s.updateTrustedSA},
		api.Op[trustedSARequest, api.Empty]{Path: tsa + "delete", Access: core.WorkspaceWriters, Summary: "Delete a trusted service account.", Handle: s.deleteTrustedSA},
		api.Op[trustedSARequest, core.TrustedServiceAccount]{Path: tsa + "get", Access: core.Readers, Summary: "Get a trusted service account.", Handle: s.getTrustedSA},
		api.Op[trustedSAQuery, api.List[core.TrustedServiceAccount]]{Path: tsa + "list", Access: core.Readers, Summary: "List trusted service accounts.", Handle: s.listTrustedSA},
		api.Op[trustedSAStat, map[string]any]{Path: tsa + "stat", Access: core.Readers, Summary: "Statistics over trusted service accounts.", Handle: s.statTrustedSA},
	}
}
