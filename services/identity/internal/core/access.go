package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

var (
	SystemOnly  = auth.Roles(auth.SystemAdmin)
	DomainAdmin = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)
	Readers     = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
)

type StatRequest struct {
	Query *stat.Query `json:"query" v:"required"`
}

// BindingID is deterministic: one binding per user and workspace (""
// for the domain), enforced by _id.
func BindingID(domainID, userID, workspaceID string) string {
	sum := sha256.Sum256([]byte(domainID + "/" + userID + "/" + workspaceID))
	return "rb-" + hex.EncodeToString(sum[:6])
}

func NewBinding(domainID, userID, roleID, roleType, group, workspaceID string) *RoleBinding {
	id := BindingID(domainID, userID, workspaceID)
	return &RoleBinding{ID: id, RoleBindingID: id, UserID: userID, RoleID: roleID, RoleType: roleType,
		ResourceGroup: group, WorkspaceID: workspaceID, DomainID: domainID, CreatedAt: wire.T(wire.Now())}
}

// binding is the user's binding in a workspace ("" for the domain), or nil.
func (s *Deps) Binding(ctx context.Context, domainID, userID, workspaceID string) (*RoleBinding, error) {
	b, err := store.Get[RoleBinding](ctx, s.Bindings, "role_binding_id", BindingID(domainID, userID, workspaceID))
	if errs.Is(err, errs.NotFoundCode) {
		return nil, nil
	}
	return b, err
}

// A workspace's own id is its workspace field: a workspace role
// reaches the workspace of its token (its bindings tell it which it may
// enter), a domain admin every workspace of the domain.
var WorkspaceResource = query.Resource{KeywordFields: []string{"workspace_id", "name"}, DefaultSort: []query.SortKey{{Key: "name"}}, Fields: query.FieldsOf[Workspace](), Maps: freeform.FieldsOf[Workspace](),
	Tenancy: tenancy.InWorkspace.WithMarks()}

// WorkspaceInDomain is a workspace as a record of its domain alone, for
// token/grant: the caller has no role there yet, its binding decides.
var (
	WorkspaceInDomain = query.Resource{Tenancy: tenancy.InDomain.WithMarks()}
	WorkspaceWriters  = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner)
)

// memberProjects are the projects a workspace member reaches: the public
// ones of the workspace and those listing the user.
func (s *Deps) MemberProjects(ctx context.Context, domainID, workspaceID, userID string) ([]string, error) {
	cur, err := s.Projects.Find(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "workspace_id", Value: workspaceID},
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

// StatFor runs a StatisticsQuery over what p reaches of resource r.
func StatFor(ctx context.Context, c *mongo.Collection, p *auth.Principal, r query.Resource, q *stat.Query) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, c, p, r, q)
	return &res, err
}

// domainOfRequest is the domain a request that names domain_id acts on:
// the caller's own, or any existing domain for a service (a SYSTEM token;
// a person's SYSTEM_ADMIN grant acts in its own domain only). Another
// domain is 404, as if it did not exist.
func (s *Deps) DomainOfRequest(ctx context.Context, p *auth.Principal, domainID string) (string, error) {
	if domainID == p.DomainID {
		return domainID, nil
	}
	if !p.IsService() {
		return "", errs.NotFound("domain_id", domainID)
	}
	if _, err := store.Get[Domain](ctx, s.Domains, "domain_id", domainID); err != nil {
		return "", err
	}
	return domainID, nil
}

// callerIn is p acting in the domain its request names (domainOfRequest:
// its own, or any existing one for a service of the suite); "" is p's own.
// The kit's tenancy then holds p to that domain.
func (s *Deps) CallerIn(ctx context.Context, p *auth.Principal, domainID string) (*auth.Principal, error) {
	if domainID == "" || domainID == p.DomainID {
		return p, nil
	}
	d, err := s.DomainOfRequest(ctx, p, domainID)
	if err != nil {
		return nil, err
	}
	in := *p
	in.DomainID = d
	return &in, nil
}

// placement resolves group (DOMAIN or WORKSPACE) and a requested
// workspace to the workspace_id of a record p creates: "*" for DOMAIN,
// which only a domain-wide caller places (403); for WORKSPACE the
// caller's own workspace, or for a domain-wide caller a workspace of the
// domain named in the request.
func (s *Deps) Placement(ctx context.Context, p *auth.Principal, group, workspaceID string) (string, error) {
	rule, err := tenancy.For(p, tenancy.InWorkspace)
	if err != nil {
		return "", err
	}
	stamp := rule.Stamp()
	switch {
	case group == "DOMAIN":
		if err := rule.Admits(tenancy.Record{Domain: stamp.Domain, Workspace: AllWorkspaces}); err != nil {
			return "", err
		}
		if workspaceID != "" && workspaceID != AllWorkspaces {
			return "", errs.Invalid("workspace_id", "a DOMAIN record belongs to no workspace")
		}
		return AllWorkspaces, nil
	case stamp.Workspace != "":
		if workspaceID != "" && workspaceID != stamp.Workspace {
			return "", errs.NotFound("workspace_id", workspaceID)
		}
		return stamp.Workspace, nil
	case workspaceID == "" || workspaceID == AllWorkspaces:
		return "", errs.Required("workspace_id")
	}
	w, err := store.GetFor[Workspace](ctx, s.Workspaces, WorkspaceResource, p, "workspace_id", workspaceID)
	if err != nil {
		return "", err
	}
	return w.WorkspaceID, nil
}

// WorkspaceRecords are the workspace records with their teardown (store.Teardown):
// a workspace is deleted mark first, then its deletion is recorded for
// the other services (events.Deleted), then its projects, role bindings,
// trusted accounts (with their secrets), trusted service accounts,
// service accounts and project groups, then itself. Every write to a workspace goes through Change (a
// compare-and-set that refuses a marked one) and every create of a child
// in one through Live (checked again after the insert).
func (s *Deps) WorkspaceRecords() store.Teardown[Workspace] {
	return store.Teardown[Workspace]{Records: s.Workspaces, Resource: WorkspaceResource, Key: "workspace_id",
		Children: func(ctx context.Context, w *Workspace) error {
			if err := s.Outbox.AddDeleted(ctx, events.Deleted{ID: events.DeletedID(events.DeletedWorkspace, w.DomainID, w.WorkspaceID, wire.FormatTime(w.CreatedAt.Time)),
				Kind: events.DeletedWorkspace, DomainID: w.DomainID, WorkspaceID: w.WorkspaceID}); err != nil {
				return store.Wrap(err)
			}
			inside := bson.D{{Key: "domain_id", Value: w.DomainID}, {Key: "workspace_id", Value: w.WorkspaceID}}
			// A trusted account's sealed secret before the account: a retry
			// still finds the accounts whose secrets are left.
			if err := s.dropTrustedSecrets(ctx, inside); err != nil {
				return err
			}
			for _, c := range []*mongo.Collection{s.Projects, s.Bindings, s.Trusted, s.TrustedSA,
				s.DB.Collection(ServiceAccountsCollection), s.DB.Collection(ProjectGroupsCollection)} {
				if err := store.DeleteChildren(ctx, c, inside); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// dropTrustedSecrets deletes the sealed secrets of the trusted accounts
// filter selects.
func (s *Deps) dropTrustedSecrets(ctx context.Context, filter bson.D) error {
	cur, err := s.Trusted.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "trusted_secret_id", Value: 1}}))
	if err != nil {
		return store.Wrap(err)
	}
	var accounts []struct {
		SecretID string `bson:"trusted_secret_id"`
	}
	if err := cur.All(ctx, &accounts); err != nil {
		return store.Wrap(err)
	}
	ids := make([]string, 0, len(accounts))
	for _, a := range accounts {
		ids = append(ids, a.SecretID)
	}
	if len(ids) == 0 {
		return nil
	}
	return store.DeleteChildren(ctx, s.DB.Collection(TrustedSecretsCollection), bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
}
