package role

import (
	"context"
	"slices"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

type roleRequest struct {
	RoleID string `json:"role_id" v:"required"`
}

type roleQuery struct {
	RoleType string `json:"role_type" v:"enum=DOMAIN_ADMIN|WORKSPACE_OWNER|WORKSPACE_MEMBER"`
}

// basicQuery is list-basic-role's body as the console's landing pages
// send it. The managed roles are few and fixed, so a query's filter on
// role_id, role_type, name or state is applied here (eq, in, not,
// not_in); any other condition is 400.
type basicQuery struct {
	Query    *query.Query `json:"query"`
	RoleID   string       `json:"role_id"`
	RoleType string       `json:"role_type" v:"enum=DOMAIN_ADMIN|WORKSPACE_OWNER|WORKSPACE_MEMBER"`
}

// BasicRole is upstream's BasicRoleInfo: what any user may know of a role.
type BasicRole struct {
	RoleID   string         `json:"role_id"`
	Name     string         `json:"name"`
	RoleType string         `json:"role_type"`
	Tags     map[string]any `json:"tags"`
}

// matches reports whether role meets every condition (400 for one this
// list cannot decide).
func matches(role core.Role, conds []query.Condition) (bool, error) {
	for _, c := range conds {
		var v string
		switch c.Key {
		case "role_id":
			v = role.RoleID
		case "role_type":
			v = role.RoleType
		case "name":
			v = role.Name
		case "state":
			v = role.State
		default:
			return false, errs.Invalid("query.filter", "list-basic-role filters on role_id, role_type, name and state only")
		}
		in := func() bool {
			list, ok := c.Value.([]any)
			if !ok {
				return c.Value == v
			}
			return slices.Contains(list, any(v))
		}
		switch c.Operator {
		case "eq", "":
			if c.Value != v {
				return false, nil
			}
		case "not":
			if c.Value == v {
				return false, nil
			}
		case "in":
			if !in() {
				return false, nil
			}
		case "not_in":
			if in() {
				return false, nil
			}
		default:
			return false, errs.Invalid("query.filter", "list-basic-role takes the operators eq, in, not and not_in")
		}
	}
	return true, nil
}

func listBasic(_ context.Context, _ *auth.Principal, r *basicQuery) (*api.List[BasicRole], error) {
	conds := query.Params("role_id", r.RoleID, "role_type", r.RoleType)
	countOnly := false
	if r.Query != nil {
		if len(r.Query.FilterOr) > 0 || r.Query.Keyword != "" {
			return nil, errs.Invalid("query", "list-basic-role takes filter, page, sort and count_only only")
		}
		conds = append(conds, r.Query.Filter...)
		countOnly = r.Query.CountOnly
	}
	out := []BasicRole{}
	for _, role := range core.ManagedRoles {
		ok, err := matches(role, conds)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, BasicRole{RoleID: role.RoleID, Name: role.Name, RoleType: role.RoleType, Tags: map[string]any{}})
		}
	}
	n := int64(len(out))
	if countOnly {
		out = nil
	}
	return &api.List[BasicRole]{Results: out, TotalCount: n}, nil
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
		// Any signed-in user (upstream role_types USER): the landing pages
		// name the roles of the caller's bindings.
		api.Op[basicQuery, api.List[BasicRole]]{Path: "/identity/v2/role/list-basic-role", Access: core.AnyRole, Summary: "List the roles' ids, names and types (any user).", Handle: listBasic},
	}
}
