// Package workspaceuser holds the workspace-user resource
// (/identity/v2/workspace-user get, list): the users of one workspace,
// that is the users its role bindings name, each with its binding there
// (upstream 2.x WorkspaceUserInfo). It stores nothing of its own: the
// bindings are read through the kit's tenancy (a workspace role reaches
// its workspace's), the users by the ids those bindings give.
// create and stat answer 501 (pkg/api NotBuilt).
package workspaceuser

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

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

// BindingInfo is the user's binding in the workspace.
type BindingInfo struct {
	RoleBindingID string    `json:"role_binding_id"`
	RoleID        string    `json:"role_id"`
	RoleType      string    `json:"role_type"`
	ResourceGroup string    `json:"resource_group"`
	WorkspaceID   string    `json:"workspace_id"`
	DomainID      string    `json:"domain_id"`
	CreatedAt     wire.Time `json:"created_at"`
}

// Info is WorkspaceUserInfo: the user's public fields and its binding.
type Info struct {
	UserID          string        `json:"user_id"`
	Name            string        `json:"name"`
	State           string        `json:"state"`
	Email           string        `json:"email"`
	EmailVerified   bool          `json:"email_verified"`
	AuthType        string        `json:"auth_type"`
	RoleType        string        `json:"role_type"`
	Language        string        `json:"language"`
	Timezone        string        `json:"timezone"`
	Tags            freeform.Flat `json:"tags"`
	DomainID        string        `json:"domain_id"`
	CreatedAt       wire.Time     `json:"created_at"`
	LastAccessedAt  wire.Time     `json:"last_accessed_at"`
	RoleBindingInfo BindingInfo   `json:"role_binding_info"`
}

// bindings is how this package reads role bindings: the same tenancy as
// the role-binding resource (a workspace role reaches its workspace's).
var bindings = query.Resource{Fields: query.FieldsOf[core.RoleBinding](), Tenancy: tenancy.InWorkspace}

type (
	getReq struct {
		UserID      string `json:"user_id" v:"required,max=255"`
		WorkspaceID string `json:"workspace_id" v:"max=64"`
	}
	listReq struct {
		Query       *query.Query `json:"query"`
		UserID      string       `json:"user_id"`
		Name        string       `json:"name"`
		State       string       `json:"state" v:"enum=ENABLED|DISABLED|PENDING"`
		Email       string       `json:"email"`
		AuthType    string       `json:"auth_type"`
		RoleType    string       `json:"role_type" v:"enum=WORKSPACE_OWNER|WORKSPACE_MEMBER"`
		WorkspaceID string       `json:"workspace_id" v:"max=64"`
	}
)

type service struct{ *core.Deps }

// Routes are the operations of workspace users.
func Routes(d *core.Deps) []api.Route {
	s := &service{Deps: d}
	return []api.Route{
		api.Op[getReq, Info]{Path: "/identity/v2/workspace-user/get", Access: core.Readers, Summary: "Get a user of the workspace, with its binding there.", Handle: s.get},
		api.Op[listReq, api.List[Info]]{Path: "/identity/v2/workspace-user/list", Access: core.Readers, Summary: "List the users of the workspace, with their bindings there.", Handle: s.list},
	}
}

// workspace is the workspace asked about: the token's for a workspace
// role (another named is 404, as a workspace it does not reach), the
// named one for a domain-wide caller.
func workspace(p *auth.Principal, named string) (string, error) {
	if tenancy.WorkspaceRole(p) {
		if named != "" && named != p.WorkspaceID {
			return "", errs.NotFound("workspace_id", named)
		}
		return p.WorkspaceID, nil
	}
	if named == "" {
		return "", errs.Required("workspace_id")
	}
	return named, nil
}

// bindingsOf are the workspace's bindings p reaches, by user id.
func (s *service) bindingsOf(ctx context.Context, p *auth.Principal, ws, userID, roleType string) (map[string]core.RoleBinding, error) {
	q := query.With(nil, query.Params("workspace_id", ws, "resource_group", "WORKSPACE", "user_id", userID, "role_type", roleType)...)
	l, err := store.SearchFor[core.RoleBinding](ctx, s.Bindings, q, bindings, p)
	if err != nil {
		return nil, err
	}
	out := map[string]core.RoleBinding{}
	for _, b := range l.Results {
		out[b.UserID] = b
	}
	return out, nil
}

func info(u core.User, b core.RoleBinding) Info {
	return Info{UserID: u.UserID, Name: u.Name, State: u.State, Email: u.Email, EmailVerified: u.EmailVerified, AuthType: u.AuthType,
		RoleType: b.RoleType, Language: u.Language, Timezone: u.Timezone, Tags: wire.Object(u.Tags), DomainID: u.DomainID,
		CreatedAt: u.CreatedAt, LastAccessedAt: u.LastAccessedAt,
		RoleBindingInfo: BindingInfo{RoleBindingID: b.RoleBindingID, RoleID: b.RoleID, RoleType: b.RoleType,
			ResourceGroup: b.ResourceGroup, WorkspaceID: b.WorkspaceID, DomainID: b.DomainID, CreatedAt: b.CreatedAt}}
}

func (s *service) get(ctx context.Context, p *auth.Principal, r *getReq) (*Info, error) {
	ws, err := workspace(p, r.WorkspaceID)
	if err != nil {
		return nil, err
	}
	bs, err := s.bindingsOf(ctx, p, ws, r.UserID, "")
	if err != nil {
		return nil, err
	}
	b, ok := bs[r.UserID]
	if !ok {
		return nil, errs.NotFound("user_id", r.UserID)
	}
	u, err := store.Get[core.User](ctx, s.Users, "user_id", core.UserKey(b.DomainID, r.UserID))
	if err != nil {
		return nil, err
	}
	if u.DomainID != p.DomainID || u.UserID != r.UserID {
		return nil, errs.NotFound("user_id", r.UserID)
	}
	out := info(*u, b)
	return &out, nil
}

// list runs the query over the users the workspace's bindings name. The
// scope is that list of ids in the caller's domain: the bindings were read
// through the kit, and a user is a domain's record the workspace does not
// hold (so UserResource's own rule, domain admins only, does not apply).
func (s *service) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[Info], error) {
	ws, err := workspace(p, r.WorkspaceID)
	if err != nil {
		return nil, err
	}
	bs, err := s.bindingsOf(ctx, p, ws, "", r.RoleType)
	if err != nil {
		return nil, err
	}
	ids := bson.A{}
	for id := range bs {
		ids = append(ids, id)
	}
	scope := bson.D{{Key: "domain_id", Value: p.DomainID}, {Key: "user_id", Value: bson.D{{Key: "$in", Value: ids}}},
		{Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}}
	q := query.With(r.Query, query.Params("user_id", r.UserID, "name", r.Name, "state", r.State, "email", r.Email, "auth_type", r.AuthType)...)
	users := core.UserResource
	users.Tenancy = tenancy.Fields{}
	l, err := store.Search[core.User](ctx, s.Users, q, users, scope)
	if err != nil {
		return nil, err
	}
	out := &api.List[Info]{TotalCount: l.TotalCount, Fields: l.Fields, Results: []Info{}}
	for _, u := range l.Results {
		out.Results = append(out.Results, info(u, bs[u.UserID]))
	}
	return out, nil
}
