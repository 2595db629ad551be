package identity_test

import (
	"context"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
)

// TestUpdatePassword: user-profile/update-password, as the console's My
// Page sends it, follows the rules of a password change: the current
// password checked (as a login), the format, not the same one, earlier
// sessions ended, no API key; with UPDATE_PASSWORD pending no current
// password is needed and the action goes.
func TestUpdatePassword(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const path = "/identity/user-profile/update-password" // the console's unversioned path
	h.SeedUser(h.Domain, "pam")
	first := h.Login("pam", identitytest.UserPassword)
	pam := h.Anon.As(first.AccessToken)
	var key map[string]any
	pam.Call("/identity/v2/api-key/create", map[string]any{"name": "ci"}).OK(&key)
	byKey := h.Anon.As(key["api_key"].(string))

	before := h.UserDoc(h.Domain, "pam")
	for _, c := range []struct {
		name   string
		as     *testkit.Client
		body   any
		status int
		code   string
	}{
		{"no new password", pam, map[string]any{"current_password": identitytest.UserPassword}, 400, errs.RequiredParameter},
		{"no current password", pam, map[string]any{"new_password": "New-Passw0rd1"}, 400, errs.RequiredParameter},
		{"weak", pam, map[string]any{"current_password": identitytest.UserPassword, "new_password": "weakpass"}, 400, errs.IncorrectPasswordFormat},
		{"the same", pam, map[string]any{"current_password": identitytest.UserPassword, "new_password": identitytest.UserPassword}, 400, errs.PasswordNotChanged},
		{"wrong current", pam, map[string]any{"current_password": "Wrong-Passw0rd1", "new_password": "New-Passw0rd1"}, 400, errs.PasswordNotMatched},
		{"unknown field", pam, map[string]any{"current_password": identitytest.UserPassword, "new_password": "New-Passw0rd1", "user_id": "admin"}, 400, errs.InvalidParameter},
		{"too long", pam, map[string]any{"current_password": identitytest.UserPassword, "new_password": strings.Repeat("Aa1-", 20)}, 400, errs.InvalidParameter},
		{"an API key", byKey, map[string]any{"current_password": identitytest.UserPassword, "new_password": "New-Passw0rd1"}, 403, errs.PermissionDenied},
		{"no token", h.Anon, map[string]any{"current_password": identitytest.UserPassword, "new_password": "New-Passw0rd1"}, 401, errs.AuthenticateFailure},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.as.Call(path, c.body).Fails(c.status, c.code)
			after := h.UserDoc(h.Domain, "pam")
			delete(before, "login_failures") // a wrong current password counts as a failed login
			delete(after, "login_failures")
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("a refused change changed the user:\nbefore %v\nafter  %v", before, after)
			}
		})
	}

	var u map[string]any
	pam.Call(path, map[string]any{"current_password": identitytest.UserPassword, "new_password": "New-Passw0rd1"}).OK(&u)
	identitytest.CheckV2Info(t, u)
	if u["user_id"] != "pam" {
		t.Fatalf("answer = %v", u)
	}
	// Earlier sessions end: the access token and the refresh token.
	identitytest.Eventually(t, revocationBound, "identity refuses the earlier access token", func() bool {
		return pam.Call("/identity/v2/user-profile/get", nil).Status == http.StatusUnauthorized
	})
	h.Anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": first.RefreshToken, "scope": "USER"}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	h.Anon.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "pam", "password": identitytest.UserPassword},
		"auth_type": "LOCAL", "domain_id": h.Domain}).Fails(http.StatusUnauthorized, errs.AuthenticationFailure)
	h.Anon.As(h.Login("pam", "New-Passw0rd1").AccessToken).Call("/identity/v2/user-profile/get", nil).OK(nil)

	// UPDATE_PASSWORD pending: the narrowed token changes it without the current one.
	h.SeedUser(h.Domain, "ned", func(u *core.User) { u.RequiredActions = []string{core.UpdatePassword} })
	ned := h.As("ned")
	ned.Call(path, map[string]any{"new_password": "Ned-Passw0rd1"}).OK(&u)
	if actions, _ := u["required_actions"].([]any); len(actions) != 0 {
		t.Fatalf("required_actions after the change = %v", u["required_actions"])
	}
	h.Login("ned", "Ned-Passw0rd1")

}

// TestUpdateRole: role-binding/update-role changes a binding's role within
// its resource group and answers role_type; a workspace owner changes only
// bindings of its own workspace, never its own, with workspace roles; other
// callers reach nothing; refused changes store nothing.
func TestUpdateRole(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const path = "/identity/role-binding/update-role"
	ws := map[string]string{}
	for _, name := range []string{"One", "Two"} {
		var w map[string]any
		h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": name}).OK(&w)
		ws[name] = w["workspace_id"].(string)
	}
	h.SeedUser(h.Domain, "olga")
	h.SeedUser(h.Domain, "mike")
	h.SeedUser(h.Domain, "tina")
	h.SeedUser(h.Domain, "dora")
	owner := identitytest.BindRole(h.Admin, "olga", "managed-workspace-owner", ws["One"])["role_binding_id"].(string)
	member := identitytest.BindRole(h.Admin, "mike", "managed-workspace-member", ws["One"])["role_binding_id"].(string)
	other := identitytest.BindRole(h.Admin, "tina", "managed-workspace-member", ws["Two"])["role_binding_id"].(string)
	domainB := identitytest.BindRole(h.Admin, "dora", "managed-domain-admin", "")["role_binding_id"].(string)
	olga := h.Anon.As(h.Scoped("olga", identitytest.UserPassword, "WORKSPACE", ws["One"]))
	mike := h.Anon.As(h.Scoped("mike", identitytest.UserPassword, "WORKSPACE", ws["One"]))
	_, otherAdmin := h.NewDomain("elsewhere")
	tina := h.As("tina")

	frozen := h.DBFrozen(core.RoleBindingsCollection, core.UsersCollection)
	for _, c := range []struct {
		name   string
		as     *testkit.Client
		body   map[string]any
		status int
		code   string
	}{
		{"no binding id", h.Admin, map[string]any{"role_id": "managed-workspace-owner"}, 400, errs.RequiredParameter},
		{"no role", h.Admin, map[string]any{"role_binding_id": member}, 400, errs.RequiredParameter},
		{"unknown role", h.Admin, map[string]any{"role_binding_id": member, "role_id": "managed-nothing"}, 404, errs.NotFoundCode},
		{"unknown binding", h.Admin, map[string]any{"role_binding_id": "rb-000000000000", "role_id": "managed-workspace-owner"}, 404, errs.NotFoundCode},
		{"a workspace binding to the domain admin role", h.Admin, map[string]any{"role_binding_id": member, "role_id": "managed-domain-admin"}, 400, errs.InvalidParameter},
		{"a domain binding to a workspace role", h.Admin, map[string]any{"role_binding_id": domainB, "role_id": "managed-workspace-member"}, 400, errs.InvalidParameter},
		{"another domain's admin", otherAdmin, map[string]any{"role_binding_id": member, "role_id": "managed-workspace-owner"}, 404, errs.NotFoundCode},
		{"an owner, another workspace's binding", olga, map[string]any{"role_binding_id": other, "role_id": "managed-workspace-owner"}, 404, errs.NotFoundCode},
		{"an owner, the domain's binding", olga, map[string]any{"role_binding_id": domainB, "role_id": "managed-domain-admin"}, 404, errs.NotFoundCode},
		{"an owner, its own binding", olga, map[string]any{"role_binding_id": owner, "role_id": "managed-workspace-member"}, 403, errs.PermissionDenied},
		{"an owner, to the domain admin role", olga, map[string]any{"role_binding_id": member, "role_id": "managed-domain-admin"}, 400, errs.InvalidParameter},
		{"a member", mike, map[string]any{"role_binding_id": member, "role_id": "managed-workspace-owner"}, 403, errs.PermissionDenied},
		{"a plain user", tina, map[string]any{"role_binding_id": other, "role_id": "managed-workspace-owner"}, 403, errs.PermissionDenied},
		{"no token", h.Anon, map[string]any{"role_binding_id": member, "role_id": "managed-workspace-owner"}, 401, errs.AuthenticateFailure},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.as.Call(path, c.body).Fails(c.status, c.code)
			frozen()
		})
	}

	// The owner makes mike an owner of its workspace; the answer carries role_type.
	var b map[string]any
	olga.Call(path, map[string]any{"role_binding_id": member, "role_id": "managed-workspace-owner"}).OK(&b)
	if b["role_type"] != "WORKSPACE_OWNER" || b["role_id"] != "managed-workspace-owner" || b["role_binding_id"] != member ||
		b["workspace_id"] != ws["One"] || b["user_id"] != "mike" || b["resource_group"] != "WORKSPACE" {
		t.Fatalf("update-role answered %v", b)
	}
	var g map[string]any
	h.Anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": h.Login("mike", identitytest.UserPassword).RefreshToken,
		"scope": "WORKSPACE", "workspace_id": ws["One"]}).OK(&g)
	if g["role_type"] != "WORKSPACE_OWNER" {
		t.Fatalf("mike's grant after the change = %v", g)
	}
	// The admin moves tina (workspace Two) to owner and back; the domain binding keeps its role.
	h.Admin.Call(path, map[string]any{"role_binding_id": other, "role_id": "managed-workspace-owner"}).OK(&b)
	h.Admin.Call(path, map[string]any{"role_binding_id": other, "role_id": "managed-workspace-member"}).OK(&b)
	if b["role_type"] != "WORKSPACE_MEMBER" {
		t.Fatalf("back to member: %v", b)
	}
	h.Admin.Call(path, map[string]any{"role_binding_id": domainB, "role_id": "managed-domain-admin"}).OK(&b)
	if b["role_type"] != "DOMAIN_ADMIN" {
		t.Fatalf("domain binding: %v", b)
	}
	var l struct {
		Results []map[string]any `json:"results"`
	}
	h.Admin.Call("/identity/role-binding/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "role_type", "v": "WORKSPACE_OWNER", "o": "eq"}}}}).OK(&l)
	var owners []string
	for _, r := range l.Results {
		owners = append(owners, r["user_id"].(string))
	}
	slices.Sort(owners)
	if !slices.Equal(owners, []string{"mike", "olga"}) {
		t.Fatalf("owners after the changes = %v", owners)
	}
}

// TestWorkspaceDormant: workspaces carry is_dormant (false: the spec gives
// no rule that makes one dormant); the console's workspace/list filter
// is_dormant eq false finds them, get-workspaces shows the field, and a
// workspace stored before the field existed gets it when identity starts.
func TestWorkspaceDormant(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var w map[string]any
	h.Admin.Call("/identity/workspace/create", map[string]any{"name": "Dawn", "tags": map[string]any{"description": "d", "theme": "blue"}}).OK(&w)
	if w["is_dormant"] != false {
		t.Fatalf("created workspace = %v", w)
	}
	old := bson.D{{Key: "_id", Value: "workspace-0123456789ab"}, {Key: "workspace_id", Value: "workspace-0123456789ab"}, {Key: "name", Value: "Old"},
		{Key: "state", Value: "ENABLED"}, {Key: "tags", Value: bson.D{}}, {Key: "domain_id", Value: h.Domain}, {Key: "created_by", Value: "admin"}, {Key: "created_at", Value: time.Now().UTC()}}
	if _, err := h.DB.Collection(core.WorkspacesCollection).InsertOne(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	console := map[string]any{"query": map[string]any{"filter": []any{
		map[string]any{"k": "is_dormant", "v": false, "o": "eq"}, map[string]any{"k": "state", "v": "ENABLED", "o": "eq"}},
		"page": map[string]any{"start": 1, "limit": 15}, "sort": []any{map[string]any{"key": "name"}}}}
	names := func() []string {
		var l struct {
			Results    []map[string]any `json:"results"`
			TotalCount int              `json:"total_count"`
		}
		h.Admin.Call("/identity/workspace/list", console).OK(&l)
		var out []string
		for _, r := range l.Results {
			if r["is_dormant"] != false {
				t.Fatalf("workspace row %v", r)
			}
			out = append(out, r["name"].(string))
		}
		return out
	}
	if got := names(); !slices.Equal(got, []string{"Dawn"}) {
		t.Fatalf("before a restart: %v", got)
	}
	restart(t, h)
	if got := names(); !slices.Equal(got, []string{"Dawn", "Old"}) {
		t.Fatalf("after a restart: %v", got)
	}
	var mine struct {
		Results []map[string]any `json:"results"`
	}
	h.Admin.Call("/identity/user-profile/get-workspaces", nil).OK(&mine)
	if len(mine.Results) != 2 || mine.Results[0]["is_dormant"] != false || mine.Results[1]["is_dormant"] != false {
		t.Fatalf("get-workspaces = %v", mine.Results)
	}
	// Another domain's admin finds none of them with the console's filter.
	_, boss := h.NewDomain("away")
	var l struct {
		TotalCount int `json:"total_count"`
	}
	boss.Call("/identity/workspace/list", console).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("another domain lists %d", l.TotalCount)
	}
}

// restart builds identity again on h's database: what a restart runs.
func restart(t *testing.T, h *harness) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	bus, err := events.Connect(t.Context(), testkit.Get().NATS.URL, "identity-restart", log)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	cipher, err := identity.NewCipher(h.CipherSpec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Build(t.Context(), app.Deps{DB: h.DB, Events: bus, Log: log}, identity.Config{PasswordCost: bcrypt.MinCost,
		Signer: h.signer, Cipher: cipher, AdminUserID: "admin", AdminPassword: identitytest.AdminPassword}); err != nil {
		t.Fatal(err)
	}
}
