package identityapi

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// Operations the upstream console calls that the spec does not list
// (spec/clients.md §9.2): a password change of one's own and a change of
// a binding's role.

type updatePassword struct {
	CurrentPassword string `json:"current_password" v:"max=72" doc:"required unless UPDATE_PASSWORD is pending or the caller came through its latest mailed link"`
	NewPassword     string `json:"new_password" v:"required,max=72"`
}

type updateRole struct {
	RoleBindingID string `json:"role_binding_id" v:"required"`
	RoleID        string `json:"role_id" v:"required"`
}

func (s *Service) consoleRoutes() []api.Route {
	return []api.Route{
		api.Op[updatePassword, core.UserInfoV2]{Path: "/identity/v2/user-profile/update-password", Access: core.AnyRole, Summary: "Change one's own password (current_password needed unless UPDATE_PASSWORD is pending); ends every earlier session.", Handle: core.AsInfo(core.ToV2, s.updateOwnPassword)},
		api.Op[updateRole, core.RoleBinding]{Path: "/identity/v2/role-binding/update-role", Access: core.WorkspaceWriters, Summary: "Give a binding another role of its resource group (DOMAIN: the domain admin role; WORKSPACE: a workspace role).", Handle: s.updateBindingRole},
	}
}

// updateOwnPassword is user-profile/update with the password alone: the
// same rules (LOCAL users, the password format, current_password checked
// as a login, not the same password, earlier sessions ended, the user
// told), and no API key.
func (s *Service) updateOwnPassword(ctx context.Context, p *auth.Principal, r *updatePassword) (*core.User, error) {
	d, err := s.selfDoc(ctx, p, true)
	if err != nil {
		return nil, err
	}
	return s.selfUpdate(ctx, d, p, userChange{}, r.NewPassword, r.CurrentPassword)
}

// updateBindingRole changes the role of a binding within its resource
// group, under the rules of role-binding/create and delete (the kit's
// tenancy: a workspace owner reaches the bindings of its own workspace
// only, another's and the domain's are 404), never an owner's own, and a
// workspace binding takes workspace roles only.
func (s *Service) updateBindingRole(ctx context.Context, p *auth.Principal, r *updateRole) (*core.RoleBinding, error) {
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
