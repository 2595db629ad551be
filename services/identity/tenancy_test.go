package identity_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
)

// enroller makes the tenancy matrix's callers real: identity's
// authenticator checks the user, its domain and its binding behind every
// token, so an outsider must exist to be refused by tenancy rather than
// by a 401. Records are written directly (no password: nobody logs in),
// bindings through role-binding/create, whose ids are identity's.
type enroller struct {
	h    *harness
	done map[string]bool
}

func (e *enroller) enroll(t *testing.T, p auth.Principal) {
	t.Helper()
	key := p.DomainID + "/" + p.UserID + "/" + p.WorkspaceID
	if e.done[key] {
		return
	}
	e.done[key] = true
	ctx := context.Background()
	insert := func(coll string, doc any) {
		t.Helper()
		if _, err := e.h.DB.Collection(coll).InsertOne(ctx, doc); err != nil && !mongo.IsDuplicateKeyError(err) {
			t.Fatal(err)
		}
	}
	if p.DomainID != e.h.Domain {
		insert(core.DomainsCollection, core.Domain{ID: p.DomainID, DomainID: p.DomainID, Name: p.DomainID, State: core.Enabled})
	}
	// A WORKSPACE_OWNER token without a workspace exists only for a domain
	// admin (grant asks for a workspace; the authenticator holds an
	// owner's role for an admin without a binding): enroll it as one.
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
		identitytest.BindRole(e.h.Admin, p.UserID, role, p.WorkspaceID)
	}
}

// TestTenancyMatrix runs the kit's tenancy matrix over every resource
// identity stores and serves: another domain's admin, a plain user, a
// workspace owner without a workspace, an owner of another workspace and
// a member outside the project (where the record has them) read nothing
// and change nothing. One harness serves every resource. Where requests
// carry domain_id (v1, trusted service accounts) each caller names its
// own domain (NamesDomain): naming another answers 404 before tenancy is
// tried, which other tests check.
func TestTenancyMatrix(t *testing.T) {
	h := newHarness(t)
	e := &enroller{h: h, done: map[string]bool{}}
	coll := func(name string) *mongo.Collection { return h.DB.Collection(name) }
	id := func(m map[string]any, key string) string {
		t.Helper()
		s, _ := m[key].(string)
		if s == "" {
			t.Fatalf("no %s in %v", key, m)
		}
		return s
	}
	// stat counts the distinct values of key among the records whose key
	// is value: the record itself, for who reaches it.
	stat := func(path, key, value string, extra map[string]any) *testkit.Req {
		body := map[string]any{"query": map[string]any{"distinct": key, "filter": []any{map[string]any{"k": key, "v": value, "o": "eq"}}}}
		for k, v := range extra {
			body[k] = v
		}
		return &testkit.Req{Path: path, Body: body}
	}

	var ws, pr map[string]any
	h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": "matrix"}).OK(&ws)
	wsID := id(ws, "workspace_id")
	h.Admin.Call("/identity/v2/project/create", map[string]any{"name": "matrix", "workspace_id": wsID, "project_type": "PRIVATE"}).OK(&pr)
	prID := id(pr, "project_id")

	admin := auth.Principal{DomainID: h.Domain, UserID: "insider-admin", Role: auth.DomainAdmin}
	owner := auth.Principal{DomainID: h.Domain, UserID: "insider-owner", Role: auth.WorkspaceOwner, WorkspaceID: wsID}
	member := auth.Principal{DomainID: h.Domain, UserID: "insider-member", Role: auth.WorkspaceMember, WorkspaceID: wsID, Projects: []string{prID}}
	for _, p := range []auth.Principal{admin, owner, member} {
		e.enroll(t, p)
	}
	matrix := func(t *testing.T, m testkit.Tenancy) {
		t.Helper()
		m.Handler, m.Enroll = h.Handler, e.enroll
		m.Domain = h.Domain
		m.Run(t)
	}

	t.Run("workspace", func(t *testing.T) {
		req := map[string]any{"workspace_id": wsID}
		matrix(t, testkit.Tenancy{
			Coll: coll(core.WorkspacesCollection), ID: wsID, Workspace: wsID, Insider: member,
			Get:  testkit.Req{Path: "/identity/v2/workspace/get", Body: req},
			List: testkit.Req{Path: "/identity/v2/workspace/list", Body: req},
			Changes: []testkit.Req{
				{Path: "/identity/v2/workspace/update", Body: map[string]any{"workspace_id": wsID, "name": "taken"}},
				{Path: "/identity/v2/workspace/disable", Body: req},
				{Path: "/identity/v2/workspace/delete", Body: req},
			},
			Watch: []*mongo.Collection{coll(core.ProjectsCollection), coll(core.RoleBindingsCollection)},
		})
	})

	t.Run("project", func(t *testing.T) {
		req := map[string]any{"project_id": prID}
		matrix(t, testkit.Tenancy{
			Coll: coll(core.ProjectsCollection), ID: prID, Workspace: wsID, Project: prID, Insider: member,
			Get:  testkit.Req{Path: "/identity/v2/project/get", Body: req},
			List: testkit.Req{Path: "/identity/v2/project/list", Body: req},
			Changes: []testkit.Req{
				{Path: "/identity/v2/project/update", Body: map[string]any{"project_id": prID, "name": "taken", "users": []string{"outsider-member"}}},
				{Path: "/identity/v2/project/delete", Body: req},
			},
		})
	})

	// A member's binding of the workspace.
	e.enroll(t, auth.Principal{DomainID: h.Domain, UserID: "matrix-bound", Role: auth.User})
	binding := identitytest.BindRole(h.Admin, "matrix-bound", "managed-workspace-member", wsID)
	t.Run("role binding", func(t *testing.T) {
		bID := id(binding, "role_binding_id")
		req := map[string]any{"role_binding_id": bID}
		matrix(t, testkit.Tenancy{
			Coll: coll(core.RoleBindingsCollection), ID: bID, Workspace: wsID, Insider: member,
			Get:  testkit.Req{Path: "/identity/v2/role-binding/get", Body: req},
			List: testkit.Req{Path: "/identity/v2/role-binding/list", Body: req},
			Changes: []testkit.Req{
				{Path: "/identity/v2/role-binding/update-role", Body: map[string]any{"role_binding_id": bID, "role_id": "managed-workspace-owner"}},
				{Path: "/identity/v2/role-binding/delete", Body: req},
			},
		})
	})

	// A user of the domain, as v2 and v1 serve it; an API key it owns,
	// as v2 (its owner) and v1 (the domain admin) serve it.
	const target = "matrix-user"
	e.enroll(t, auth.Principal{DomainID: h.Domain, UserID: target, Role: auth.User})
	users := []*mongo.Collection{coll(core.RoleBindingsCollection), coll(core.APIKeysCollection)}
	t.Run("user v2", func(t *testing.T) {
		req := map[string]any{"user_id": target}
		matrix(t, testkit.Tenancy{
			Coll: coll(core.UsersCollection), ID: core.UserKey(h.Domain, target), Insider: admin,
			Get:  testkit.Req{Path: "/identity/v2/user/get", Body: req},
			List: testkit.Req{Path: "/identity/v2/user/list", Body: req},
			Stat: stat("/identity/v2/user/stat", "user_id", target, nil),
			Changes: []testkit.Req{
				{Path: "/identity/v2/user/update", Body: map[string]any{"user_id": target, "name": "taken"}},
				{Path: "/identity/v2/user/set-required-actions", Body: map[string]any{"user_id": target, "required_actions": []string{"UPDATE_PASSWORD"}}},
				{Path: "/identity/v2/user/verify-email", Body: map[string]any{"user_id": target, "email": "taken@example.com"}},
				{Path: "/identity/v2/user/disable-mfa", Body: req},
				{Path: "/identity/v2/user/disable", Body: req},
				{Path: "/identity/v2/user/delete", Body: req},
			},
			Watch: users,
		})
	})
	t.Run("user v1", func(t *testing.T) {
		req := map[string]any{"user_id": target, "domain_id": h.Domain}
		matrix(t, testkit.Tenancy{
			Coll: coll(core.UsersCollection), ID: core.UserKey(h.Domain, target), Insider: admin, NamesDomain: true,
			Get:  testkit.Req{Path: "/identity/v1/user/get", Body: req},
			List: testkit.Req{Path: "/identity/v1/user/list", Body: req},
			Stat: stat("/identity/v1/user/stat", "user_id", target, map[string]any{"domain_id": h.Domain}),
			Changes: []testkit.Req{
				{Path: "/identity/v1/user/update", Body: map[string]any{"user_id": target, "domain_id": h.Domain, "name": "taken"}},
				{Path: "/identity/v1/user/set-required-actions", Body: map[string]any{"user_id": target, "domain_id": h.Domain, "actions": []string{"UPDATE_PASSWORD"}}},
				{Path: "/identity/v1/user/verify-email", Body: map[string]any{"user_id": target, "domain_id": h.Domain, "force": true}},
				{Path: "/identity/v1/user/disable-mfa", Body: map[string]any{"user_id": target, "domain_id": h.Domain, "force": true}},
				{Path: "/identity/v1/user/disable", Body: req},
				{Path: "/identity/v1/user/delete", Body: req},
			},
			Watch: users,
		})
	})

	keyOwner := auth.Principal{DomainID: h.Domain, UserID: target, Role: auth.User}
	var key map[string]any
	testkit.NewClient(t, h.Handler).For(keyOwner).Call("/identity/v2/api-key/create", map[string]any{"name": "matrix"}).OK(&key)
	keyID := id(key, "api_key_id")
	t.Run("api key v2", func(t *testing.T) {
		req := map[string]any{"api_key_id": keyID}
		matrix(t, testkit.Tenancy{
			Coll: coll(core.APIKeysCollection), ID: keyID, Insider: keyOwner,
			Get:  testkit.Req{Path: "/identity/v2/api-key/get", Body: req},
			List: testkit.Req{Path: "/identity/v2/api-key/list", Body: req},
			Stat: stat("/identity/v2/api-key/stat", "api_key_id", keyID, nil),
			Changes: []testkit.Req{
				{Path: "/identity/v2/api-key/update", Body: map[string]any{"api_key_id": keyID, "name": "taken"}},
				{Path: "/identity/v2/api-key/disable", Body: req},
				{Path: "/identity/v2/api-key/enable", Body: req},
				{Path: "/identity/v2/api-key/delete", Body: req},
			},
		})
	})
	t.Run("api key v1", func(t *testing.T) {
		req := map[string]any{"api_key_id": keyID, "domain_id": h.Domain}
		matrix(t, testkit.Tenancy{
			Coll: coll(core.APIKeysCollection), ID: keyID, Insider: admin, NamesDomain: true,
			Get:  testkit.Req{Path: "/identity/v1/api-key/get", Body: req},
			List: testkit.Req{Path: "/identity/v1/api-key/list", Body: req},
			Stat: stat("/identity/v1/api-key/stat", "api_key_id", keyID, map[string]any{"domain_id": h.Domain}),
			Changes: []testkit.Req{
				{Path: "/identity/v1/api-key/disable", Body: req},
				{Path: "/identity/v1/api-key/enable", Body: req},
				{Path: "/identity/v1/api-key/delete", Body: req},
			},
		})
	})

	// Trusted accounts of the workspace and of the domain, and the sealed
	// secret data of the first: a child reached only through its account.
	jobs, secrets := coll(core.JobsCollection), coll(core.TrustedSecretsCollection)
	trusted := func(group, workspaceID string) map[string]any {
		var a map[string]any
		h.Admin.Call("/identity/v2/trusted-account/create", map[string]any{
			"name": "matrix " + group, "data": map[string]any{"account_id": "1"}, "provider": "aws", "secret_schema_id": "aws-secret-access-key",
			"secret_data": map[string]any{"aws_access_key_id": "AKIAMATRIX", "aws_secret_access_key": "matrix-secret"}, "resource_group": group, "workspace_id": workspaceID,
		}).OK(&a)
		return a
	}
	trustedMatrix := func(t *testing.T, a map[string]any, workspaceID string, c *mongo.Collection, recordID string) {
		taID := id(a, "trusted_account_id")
		req := map[string]any{"trusted_account_id": taID}
		matrix(t, testkit.Tenancy{
			Coll: c, ID: recordID, Workspace: workspaceID, Insider: member,
			Get:  testkit.Req{Path: "/identity/v2/trusted-account/get", Body: req},
			List: testkit.Req{Path: "/identity/v2/trusted-account/list", Body: req},
			Stat: stat("/identity/v2/trusted-account/stat", "trusted_account_id", taID, nil),
			Changes: []testkit.Req{
				{Path: "/identity/v2/trusted-account/update", Body: map[string]any{"trusted_account_id": taID, "name": "taken", "tags": map[string]any{}}},
				{Path: "/identity/v2/trusted-account/update-secret-data", Body: map[string]any{"trusted_account_id": taID,
					"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIATAKEN", "aws_secret_access_key": "taken-key"}}},
				{Path: "/identity/v2/trusted-account/sync", Body: req},
				{Path: "/identity/v2/trusted-account/delete", Body: req},
			},
			Watch:       []*mongo.Collection{jobs, secrets},
			NoToken:     true,
			SecretPaths: []string{"secret_data"},
		})
	}
	inWorkspace, ofDomain := trusted("WORKSPACE", wsID), trusted("DOMAIN", "")
	t.Run("trusted account", func(t *testing.T) {
		trustedMatrix(t, inWorkspace, wsID, coll(core.TrustedAccountsCollection), id(inWorkspace, "trusted_account_id"))
	})
	t.Run("trusted account secret", func(t *testing.T) {
		trustedMatrix(t, inWorkspace, wsID, secrets, id(inWorkspace, "trusted_secret_id"))
	})
	t.Run("trusted account of the domain", func(t *testing.T) {
		trustedMatrix(t, ofDomain, "*", coll(core.TrustedAccountsCollection), id(ofDomain, "trusted_account_id"))
	})

	var tsa map[string]any
	h.Admin.Call("/identity/v2/trusted-service-account/create", map[string]any{"name": "matrix", "data": map[string]any{}, "provider": "aws",
		"scope": "WORKSPACE", "domain_id": h.Domain, "workspace_id": wsID}).OK(&tsa)
	t.Run("trusted service account", func(t *testing.T) {
		tsaID := id(tsa, "trusted_service_account_id")
		req := map[string]any{"trusted_service_account_id": tsaID, "domain_id": h.Domain}
		matrix(t, testkit.Tenancy{
			Coll: coll(core.TrustedSACollection), ID: tsaID, Workspace: wsID, Insider: member, NamesDomain: true,
			Get:  testkit.Req{Path: "/identity/v2/trusted-service-account/get", Body: req},
			List: testkit.Req{Path: "/identity/v2/trusted-service-account/list", Body: req},
			Stat: stat("/identity/v2/trusted-service-account/stat", "trusted_service_account_id", tsaID, map[string]any{"domain_id": h.Domain}),
			Changes: []testkit.Req{
				{Path: "/identity/v2/trusted-service-account/update", Body: map[string]any{"trusted_service_account_id": tsaID, "domain_id": h.Domain, "name": "taken"}},
				{Path: "/identity/v2/trusted-service-account/delete", Body: req},
			},
		})
	})

	t.Run("domain", func(t *testing.T) {
		req := map[string]any{"domain_id": h.Domain}
		matrix(t, testkit.Tenancy{
			Coll: coll(core.DomainsCollection), ID: h.Domain,
			Insider: auth.Principal{DomainID: h.Domain, UserID: "insider-system", Role: auth.SystemAdmin},
			Get:     testkit.Req{Path: "/identity/v2/domain/get", Body: req},
			List:    testkit.Req{Path: "/identity/v2/domain/list", Body: req},
			Changes: []testkit.Req{{Path: "/identity/v2/domain/disable", Body: req}},
		})
	})
}
