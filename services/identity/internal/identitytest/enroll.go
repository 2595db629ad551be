package identitytest

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// Enroll makes a tenancy-matrix caller real, as identity's authenticator
// wants (its user, its domain, its binding), so that an outsider is
// refused by tenancy rather than by a 401. The role-binding operations
// must be mounted.
func (h *Harness) Enroll(t *testing.T, p auth.Principal) {
	t.Helper()
	ctx := t.Context()
	insert := func(coll string, doc any) {
		t.Helper()
		if _, err := h.DB.Collection(coll).InsertOne(ctx, doc); err != nil && !mongo.IsDuplicateKeyError(err) {
			t.Fatal(err)
		}
	}
	if p.DomainID != h.Domain {
		insert(core.DomainsCollection, core.Domain{ID: p.DomainID, DomainID: p.DomainID, Name: p.DomainID, State: core.Enabled})
	}
	// A WORKSPACE_OWNER token without a workspace exists only for a
	// domain admin: enroll it as one.
	roleType := "USER"
	if p.Role == auth.DomainAdmin || p.Role == auth.SystemAdmin || (p.Role == auth.WorkspaceOwner && p.WorkspaceID == "") {
		roleType = string(auth.DomainAdmin)
	}
	u := core.User{ID: core.UserKey(p.DomainID, p.UserID), UserID: p.UserID, DomainID: p.DomainID, Name: p.UserID,
		State: core.Enabled, AuthType: "LOCAL", UserType: "USER", RoleType: roleType}
	u.CreatedAt.Time = time.Now().UTC().Add(-time.Second).Truncate(time.Millisecond)
	insert(core.UsersCollection, u)
	if p.WorkspaceID != "" && (p.Role == auth.WorkspaceOwner || p.Role == auth.WorkspaceMember) {
		insert(core.WorkspacesCollection, core.Workspace{ID: p.WorkspaceID, WorkspaceID: p.WorkspaceID, Name: p.WorkspaceID,
			State: core.Enabled, DomainID: p.DomainID})
		role := map[auth.Role]string{auth.WorkspaceOwner: "managed-workspace-owner", auth.WorkspaceMember: "managed-workspace-member"}[p.Role]
		if h.Count(core.RoleBindingsCollection, bson.D{{Key: "_id", Value: core.BindingID(p.DomainID, p.UserID, p.WorkspaceID)}}) == 0 {
			BindRole(h.Admin, p.UserID, role, p.WorkspaceID)
		}
	}
}
