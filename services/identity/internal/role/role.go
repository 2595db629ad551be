package role

import (
	"context"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

type roleRequest struct {
	RoleID string `json:"role_id" v:"required"`
}

type roleQuery struct {
	RoleType string `json:"role_type" v:"enum=DOMAIN_ADMIN|WORKSPACE_OWNER|WORKSPACE_MEMBER"`
}

// Routes are the operations of roles.
func Routes() []api.Route {
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
	}
}
