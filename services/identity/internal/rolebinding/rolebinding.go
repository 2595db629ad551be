package rolebinding

import (
	"cmp"
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/domainadmin"
)

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

// A domain binding has workspace_id "": only domain-wide callers reach
// it; a workspace role reaches the bindings of its workspace.
var bindingResource = query.Resource{KeywordFields: []string{"user_id", "role_id"}, DefaultSort: []query.SortKey{{Key: "created_at"}}, Fields: query.FieldsOf[core.RoleBinding](), Maps: freeform.FieldsOf[core.RoleBinding](),
	Tenancy: tenancy.InWorkspace}

// ownsWorkspace reports whether p is a workspace owner acting in its own
// workspace: it manages that workspace's bindings and no other.
func ownsWorkspace(p *auth.Principal) bool {
	return p.Role == auth.WorkspaceOwner && !p.IsSystem()
}

func (s *service) createBinding(ctx context.Context, p *auth.Principal, r *createBinding) (*core.RoleBinding, error) {
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
	insert := func(ctx context.Context) error {
		if _, err := s.Bindings.InsertOne(ctx, b); err != nil {
			if e, ok := errs.As(store.Wrap(err)); ok && e.Status() == 409 {
				return errs.Duplicate("user_id", u.UserID)
			}
			return store.Wrap(err)
		}
		return nil
	}
	remove := func(ctx context.Context) error {
		_, err := s.Bindings.DeleteOne(ctx, bson.D{{Key: "_id", Value: b.ID}})
		return err
	}
	// A child of the user (core.UserRecords), and of its workspace: a
	// binding recorded while either's delete runs goes again (404); a
	// user re-created with the same id inherits nothing.
	found := false
	err = s.UserRecords().Live(ctx, u.ID, func(ctx context.Context, _ *core.User, uw *store.Writes[core.User]) error {
		found = true
		if ws != "" {
			return uw.Create(ctx, func(ctx context.Context) error {
				return s.WorkspaceRecords().Live(ctx, ws, func(ctx context.Context, _ *core.Workspace, w *store.Writes[core.Workspace]) error {
					return w.Create(ctx, insert, remove)
				})
			}, remove)
		}
		if err := uw.Create(ctx, insert, remove); err != nil {
			return err
		}
		_, err := uw.Set(ctx, bson.D{{Key: "role_type", Value: role.RoleType}, {Key: "role_id", Value: role.RoleID}})
		return err
	})
	if !found && errs.Is(err, errs.NotFoundCode) { // the user, not its workspace
		return nil, errs.NotFound("user_id", u.UserID)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (s *service) deleteBinding(ctx context.Context, p *auth.Principal, r *bindingRequest) (*api.Empty, error) {
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
		if errs.Is(err, errs.NotFoundCode) {
			return nil
		}
		return err
	}
	if b.WorkspaceID == "" { // the domain binding: its user is a domain admin
		err = domainadmin.Keep(ctx, s.Deps, b.DomainID, b.UserID, unbind)
	} else {
		err = unbind()
	}
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *service) getBinding(ctx context.Context, p *auth.Principal, r *bindingRequest) (*core.RoleBinding, error) {
	return store.GetFor[core.RoleBinding](ctx, s.Bindings, bindingResource, p, "role_binding_id", r.RoleBindingID)
}

func (s *service) listBindings(ctx context.Context, p *auth.Principal, r *bindingQuery) (*api.List[core.RoleBinding], error) {
	q := query.With(r.Query, query.Params("role_binding_id", r.RoleBindingID, "user_id", r.UserID, "role_id", r.RoleID,
		"role_type", r.RoleType, "workspace_id", r.WorkspaceID)...)
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return store.SearchFor[core.RoleBinding](ctx, s.Bindings, q, bindingResource, caller)
}

type updateRole struct {
	RoleBindingID string `json:"role_binding_id" v:"required"`
	RoleID        string `json:"role_id" v:"required"`
}

// updateBindingRole changes the role of a binding within its resource
// group, under the rules of role-binding/create and delete (the kit's
// tenancy: a workspace owner reaches the bindings of its own workspace
// only, another's and the domain's are 404), never an owner's own, and a
// workspace binding takes workspace roles only.
func (s *service) updateBindingRole(ctx context.Context, p *auth.Principal, r *updateRole) (*core.RoleBinding, error) {
	b, err := store.GetToChange[core.RoleBinding](ctx, s.Bindings, bindingResource, p, "role_binding_id", r.RoleBindingID)
	if err != nil {
		return nil, err
	}
	if ownsWorkspace(p) && b.UserID == p.UserID {
		// As upstream's check_self_update_and_delete: an owner does not
		// change its own role (a workspace keeps its owner).
		return nil, errs.Forbidden()
	}
	role, ok := core.ManagedRole(r.RoleID)
	if !ok {
		return nil, errs.NotFound("role_id", r.RoleID)
	}
	domainRole := role.RoleType == string(auth.DomainAdmin)
	if (b.WorkspaceID == "") != domainRole {
		if domainRole {
			return nil, errs.Invalid("role_id", "a WORKSPACE binding takes a workspace role")
		}
		return nil, errs.Invalid("role_id", "a DOMAIN binding takes the domain admin role")
	}
	if role.RoleID == b.RoleID {
		return b, nil
	}
	// By _id alone: a binding deleted meanwhile answers 404.
	return store.SetByID[core.RoleBinding](ctx, s.Bindings, "role_binding_id", b.ID, bson.D{{Key: "role_id", Value: role.RoleID}, {Key: "role_type", Value: role.RoleType}})
}

type service struct{ *core.Deps }

// Routes are the operations of role bindings.
func Routes(d *core.Deps) []api.Route {
	s := &service{Deps: d}
	return []api.Route{
		api.Op[createBinding, core.RoleBinding]{Path: "/identity/v2/role-binding/create", Access: core.WorkspaceWriters, Summary: "Give a user a role in the domain or in a workspace.", Handle: s.createBinding},
		api.Op[bindingRequest, api.Empty]{Path: "/identity/v2/role-binding/delete", Access: core.WorkspaceWriters, Summary: "Take a role binding away.", Handle: s.deleteBinding},
		api.Op[bindingRequest, core.RoleBinding]{Path: "/identity/v2/role-binding/get", Access: core.Readers, Summary: "Get a role binding.", Handle: s.getBinding},
		api.Op[bindingQuery, api.List[core.RoleBinding]]{Path: "/identity/v2/role-binding/list", Access: core.Readers, Summary: "List role bindings.", Handle: s.listBindings},
		api.Op[updateRole, core.RoleBinding]{Path: "/identity/v2/role-binding/update-role", Access: core.WorkspaceWriters, Summary: "Give a binding another role of its resource group (DOMAIN: the domain admin role; WORKSPACE: a workspace role).", Handle: s.updateBindingRole},
	}
}
