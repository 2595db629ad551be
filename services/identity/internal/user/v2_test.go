package user_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/user"
	"github.com/nubes-io/nubes/services/identity/internal/userprofile"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

func TestUserCreateV2(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, user.Routes)
	users := core.UsersCollection
	ok := map[string]any{"user_id": "ada", "auth_type": "LOCAL", "password": "Ada-Passw0rd", "name": "Ada",
		"email": h.Email("ada"), "tags": map[string]any{"team": "core"}}
	var u map[string]any
	h.Admin.Call("/identity/v2/user/create", ok).OK(&u)
	identitytest.CheckV2Info(t, u)
	if u["state"] != "PENDING" || u["auth_type"] != "LOCAL" || u["role_type"] != "USER" || u["email_verified"] != false ||
		u["language"] != "en" || u["timezone"] != "UTC" || u["domain_id"] != h.Domain || u["created_at"] == "" {
		t.Fatalf("created = %v", u)
	}
	stored := h.UserDoc(h.Domain, "ada")
	if hash, _ := stored["password_hash"].(string); !strings.HasPrefix(hash, "$2") {
		t.Fatalf("password not stored as bcrypt: %q", hash)
	}
	// The unversioned alias is the v2 operation.
	var got map[string]any
	h.Admin.Call("/identity/user/get", map[string]any{"user_id": "ada"}).OK(&got)
	identitytest.CheckV2Info(t, got)

	// Every bad input: 400 (409 for the duplicate) and nothing stored.
	before := h.Count(users, nil)
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range ok {
			m[kk] = vv
		}
		m["user_id"] = "bob"
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		name   string
		body   map[string]any
		status int
		code   string
		names  string
	}{
		{"duplicate user_id", with("user_id", "ada"), 409, errs.NotUnique, "ada"},
		{"LOCAL without password", with("password", nil), 400, errs.RequiredParameter, "password"},
		{"blank password", with("password", "   "), 400, errs.RequiredParameter, "password"},
		{"short password", with("password", "Ab1defg"), 400, errs.IncorrectPasswordFormat, "password"},
		{"no uppercase", with("password", "abcdefg1"), 400, errs.IncorrectPasswordFormat, "password"},
		{"no lowercase", with("password", "ABCDEFG1"), 400, errs.IncorrectPasswordFormat, "password"},
		{"no digit", with("password", "Abcdefgh"), 400, errs.IncorrectPasswordFormat, "password"},
		{"over 72 bytes", with("password", "Aa1"+strings.Repeat("é", 35)), 400, errs.IncorrectPasswordFormat, "password"},
		{"EXTERNAL", with("auth_type", "EXTERNAL"), 400, errs.InvalidParameter, "auth_type"},
		{"unknown auth_type", with("auth_type", "SAML"), 400, errs.InvalidParameter, "auth_type"},
		{"no auth_type", with("auth_type", nil), 400, errs.RequiredParameter, "auth_type"},
		{"no user_id", with("user_id", nil), 400, errs.RequiredParameter, "user_id"},
		{"user_id of 61", with("user_id", strings.Repeat("u", 61)), 400, errs.InvalidParameter, "user_id"},
		{"user_id with a space", with("user_id", "bo b"), 400, errs.InvalidParameter, "user_id"},
		{"bad email", with("email", "not-an-address"), 400, errs.InvalidParameter, "email"},
		{"header in email", with("email", "a@b.c\r\nBcc: x@y.z"), 400, errs.InvalidParameter, "email"},
		{"display name email", with("email", "Bob <bob@example.com>"), 400, errs.InvalidParameter, "email"},
		{"bad timezone", with("timezone", "UTC; rm"), 400, errs.InvalidParameter, "timezone"},
		{"unknown field", with("domain_id", "domain-other"), 400, errs.InvalidParameter, "domain_id"},
		{"reset without email", map[string]any{"user_id": "bob", "auth_type": "LOCAL", "reset_password": true}, 400, errs.RequiredParameter, "email"},
	} {
		identitytest.FailsWith(t, h.Admin.Call("/identity/v2/user/create", c.body), c.status, c.code, c.names)
		if n := h.Count(users, nil); n != before {
			t.Fatalf("%s: %d users stored, want %d", c.name, n, before)
		}
	}
	h.Same(h.Domain, "ada", stored)
	// Tenancy comes from the token: a SYSTEM token creates in its own (root) domain.
	h.System.Call("/identity/v2/user/create", map[string]any{"user_id": "sys-made", "auth_type": "LOCAL", "reset_password": true, "email": h.Email("sys")}).OK(nil)
	if h.UserDoc(h.Domain, "sys-made") == nil {
		t.Fatal("SYSTEM create did not land in the root domain")
	}
}

func TestInviteFlow(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(user.Routes, userprofile.Routes, workspace.Routes))
	addr := h.Email("eve")
	// A binding left from an earlier "eve" must not carry over.
	orphan := &core.RoleBinding{ID: "rb-orphan", RoleBindingID: "rb-orphan", UserID: "eve", RoleID: "managed-domain-admin",
		RoleType: "DOMAIN_ADMIN", ResourceGroup: "DOMAIN", DomainID: h.Domain, CreatedAt: wire.T(time.Now().Add(-time.Hour))}
	if _, err := h.DB.Collection(core.RoleBindingsCollection).InsertOne(context.Background(), orphan); err != nil {
		t.Fatal(err)
	}
	var u map[string]any
	h.Admin.Call("/identity/v2/user/create", map[string]any{"user_id": "eve", "auth_type": "LOCAL", "reset_password": true, "email": addr, "name": "Eve"}).OK(&u)
	if u["state"] != "PENDING" || !slices.Equal(identitytest.ToStrings(u["required_actions"]), []string{"UPDATE_PASSWORD"}) {
		t.Fatalf("invited = %v", u)
	}
	if n := h.Count(core.RoleBindingsCollection, bson.D{{Key: "user_id", Value: "eve"}}); n != 0 {
		t.Fatalf("orphan binding kept: %d", n)
	}
	m := h.MailTo(addr, "invite")
	if m.Data["user_id"] != "eve" || m.Data["domain_name"] != "root" || m.Data["expires_hours"] != "168" {
		t.Fatalf("invite data = %v", m.Data)
	}
	link := h.Anon.As(identitytest.LinkToken(t, m))
	// The link reaches the profile and nothing else.
	var me map[string]any
	link.Call("/identity/v2/user-profile/get", nil).OK(&me)
	if me["user_id"] != "eve" {
		t.Fatalf("profile = %v", me)
	}
	link.Call("/identity/v2/token/check", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	link.Call("/identity/v1/user/get", map[string]any{"user_id": "eve", "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	link.Call("/identity/v2/workspace/list", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	// No password yet: nobody can log in.
	h.Anon.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "eve", "password": "Eve-Passw0rd"},
		"auth_type": "LOCAL", "domain_id": h.Domain}).Fails(http.StatusUnauthorized, errs.AuthenticationFailure)

	// UPDATE_PASSWORD is pending: no current password needed, the rules hold.
	before := h.UserDoc(h.Domain, "eve")
	link.Call("/identity/v2/user-profile/update", map[string]any{"password": "weak"}).Fails(http.StatusBadRequest, errs.IncorrectPasswordFormat)
	h.Same(h.Domain, "eve", before)
	link.Call("/identity/v2/user-profile/update", map[string]any{"password": "Eve-Passw0rd"}).OK(&me)
	if len(identitytest.ToStrings(me["required_actions"])) != 0 {
		t.Fatalf("UPDATE_PASSWORD still pending: %v", me)
	}
	// The link is used up.
	link.Call("/identity/v2/user-profile/get", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	p := h.Login("eve", "Eve-Passw0rd")
	var g map[string]any
	h.Anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER"}).OK(&g)
	if g["role_type"] != "USER" {
		t.Fatalf("grant = %v", g)
	}
	h.Admin.Call("/identity/v2/user/get", map[string]any{"user_id": "eve"}).OK(&u)
	if u["state"] != "ENABLED" {
		t.Fatalf("first login did not enable: %v", u)
	}
}

func TestUserAdminOperationsV2(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(user.Routes, userprofile.Routes, workspace.Routes, rolebinding.Routes))
	addr := h.Email("bob")
	h.SeedUser(h.Domain, "bob", identitytest.WithEmail(addr, true))
	h.SeedUser(h.Domain, "carol", func(u *core.User) { u.Name = "Carol"; u.State = core.Pending })

	// update: fields, a new e-mail is unverified; bad values change nothing.
	var u map[string]any
	h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "bob", "name": "Bob", "language": "ko", "timezone": "Asia/Seoul",
		"tags": map[string]any{"a": 1.0}}).OK(&u)
	identitytest.CheckV2Info(t, u)
	if u["name"] != "Bob" || u["language"] != "ko" || u["timezone"] != "Asia/Seoul" || u["email_verified"] != true || u["tags"].(map[string]any)["a"] != 1.0 {
		t.Fatalf("updated = %v", u)
	}
	newAddr := h.Email("bob2")
	h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "bob", "email": newAddr}).OK(&u)
	if u["email"] != newAddr || u["email_verified"] != false {
		t.Fatalf("new email = %v", u)
	}
	before := h.UserDoc(h.Domain, "bob")
	for _, c := range []struct {
		body   map[string]any
		status int
		code   string
	}{
		{map[string]any{"user_id": "bob", "email": "nope"}, 400, errs.InvalidParameter},
		{map[string]any{"user_id": "bob", "password": "short1A"}, 400, errs.IncorrectPasswordFormat},
		{map[string]any{"user_id": "bob", "language": "e n"}, 400, errs.InvalidParameter},
		{map[string]any{"user_id": "bob", "name": strings.Repeat("n", 129)}, 400, errs.InvalidParameter},
		{map[string]any{"user_id": "bob", "state": "ENABLED"}, 400, errs.InvalidParameter},
		{map[string]any{"user_id": "nobody", "name": "x"}, 404, errs.NotFoundCode},
		{map[string]any{"name": "x"}, 400, errs.RequiredParameter},
	} {
		h.Admin.Call("/identity/v2/user/update", c.body).Fails(c.status, c.code)
		h.Same(h.Domain, "bob", before)
	}
	// An admin sets a password without the current one (rules, bcrypt).
	h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "bob", "password": "Bob-Passw0rd2"}).OK(&u)
	after := h.UserDoc(h.Domain, "bob")
	if after["password_hash"] == before["password_hash"] || !strings.HasPrefix(after["password_hash"].(string), "$2") {
		t.Fatal("password hash not replaced")
	}
	// reset_password mails a reset link and makes UPDATE_PASSWORD pending.
	h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "bob", "reset_password": true}).OK(&u)
	if !slices.Equal(identitytest.ToStrings(u["required_actions"]), []string{"UPDATE_PASSWORD"}) {
		t.Fatalf("reset = %v", u)
	}
	if m := h.MailTo(newAddr, "reset_password"); m.Data["expires_hours"] != "24" {
		t.Fatalf("reset mail = %v", m.Data)
	}
	before = h.UserDoc(h.Domain, "carol")
	h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "carol", "reset_password": true}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Same(h.Domain, "carol", before)

	// verify-email (admin): verified at once, with a new address or the stored one.
	h.Admin.Call("/identity/v2/user/verify-email", map[string]any{"user_id": "bob"}).OK(nil)
	if d := h.UserDoc(h.Domain, "bob"); d["email_verified"] != true || d["email"] != newAddr {
		t.Fatalf("verify-email = %v", d)
	}
	h.Admin.Call("/identity/v2/user/verify-email", map[string]any{"user_id": "carol"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call("/identity/v2/user/verify-email", map[string]any{"user_id": "carol", "email": "bad@"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Same(h.Domain, "carol", before)
	carolAddr := h.Email("carol")
	h.Admin.Call("/identity/v2/user/verify-email", map[string]any{"user_id": "carol", "email": carolAddr}).OK(nil)
	if d := h.UserDoc(h.Domain, "carol"); d["email_verified"] != true || d["email"] != carolAddr {
		t.Fatalf("verify-email with address = %v", d)
	}

	// set-required-actions adds; ENFORCE_MFA is skipped while MFA is on.
	h.Admin.Call("/identity/v2/user/set-required-actions", map[string]any{"user_id": "carol", "required_actions": []string{"ENFORCE_MFA", "UPDATE_PASSWORD"}}).OK(&u)
	if !slices.Equal(identitytest.ToStrings(u["required_actions"]), []string{"ENFORCE_MFA", "UPDATE_PASSWORD"}) {
		t.Fatalf("required actions = %v", u["required_actions"])
	}
	before = h.UserDoc(h.Domain, "carol")
	h.Admin.Call("/identity/v2/user/set-required-actions", map[string]any{"user_id": "carol", "required_actions": []string{"BE_NICE"}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Admin.Call("/identity/v2/user/set-required-actions", map[string]any{"user_id": "carol", "required_actions": []string{}}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Same(h.Domain, "carol", before)
	h.SeedUser(h.Domain, "mfa-on", func(u *core.User) {
		u.MFA = core.MFA{State: core.Enabled, MFAType: "EMAIL", Options: map[string]any{"email": "m@example.com"}}
	})
	h.Admin.Call("/identity/v2/user/set-required-actions", map[string]any{"user_id": "mfa-on", "required_actions": []string{"ENFORCE_MFA"}}).OK(&u)
	if len(identitytest.ToStrings(u["required_actions"])) != 0 {
		t.Fatalf("ENFORCE_MFA added over an enabled MFA: %v", u)
	}

	// disable-mfa (admin): no code; already off is a conflict.
	h.Admin.Call("/identity/v2/user/disable-mfa", map[string]any{"user_id": "mfa-on"}).OK(&u)
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "DISABLED" || len(mfa["options"].(map[string]any)) != 0 {
		t.Fatalf("mfa after reset = %v", mfa)
	}
	before = h.UserDoc(h.Domain, "mfa-on")
	h.Admin.Call("/identity/v2/user/disable-mfa", map[string]any{"user_id": "mfa-on"}).Fails(http.StatusConflict, errs.MFAAlreadyDisabled)
	h.Same(h.Domain, "mfa-on", before)

	// enable / disable / get.
	h.Admin.Call("/identity/v2/user/enable", map[string]any{"user_id": "carol"}).OK(&u)
	if u["state"] != "ENABLED" {
		t.Fatalf("enable = %v", u)
	}
	h.Admin.Call("/identity/v2/user/disable", map[string]any{"user_id": "carol"}).OK(&u)
	h.Admin.Call("/identity/v2/user/disable", map[string]any{"user_id": "carol"}).OK(&u) // harmless repeat
	if u["state"] != "DISABLED" {
		t.Fatalf("disable = %v", u)
	}
	for _, op := range []string{"get", "enable", "disable", "delete", "disable-mfa"} {
		h.Admin.Call("/identity/v2/user/"+op, map[string]any{"user_id": "nobody"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	}

	// delete takes the user's bindings, API keys and codes with it.
	var ws map[string]any
	h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": "W"}).OK(&ws)
	h.Admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": "bob", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE", "workspace_id": ws["workspace_id"]}).OK(nil)
	key := &core.APIKey{ID: "api-key-bob", APIKeyID: "api-key-bob", State: core.Enabled, UserID: "bob", DomainID: h.Domain, CreatedAt: wire.T(wire.Now())}
	if _, err := h.DB.Collection(core.APIKeysCollection).InsertOne(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	h.Anon.As(h.Login("bob", "Bob-Passw0rd2").AccessToken).Call("/identity/v2/user-profile/verify-email", nil).OK(nil)
	h.MailTo(newAddr, "verify_email")
	h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": "bob"}).OK(nil)
	mine := bson.D{{Key: "user_id", Value: "bob"}}
	if h.UserDoc(h.Domain, "bob") != nil || h.Count(core.RoleBindingsCollection, mine) != 0 || h.Count(core.APIKeysCollection, mine) != 0 ||
		h.Count(core.CodesCollection, bson.D{{Key: "_id", Value: "verify_email:" + core.UserKey(h.Domain, "bob")}}) != 0 {
		t.Fatal("delete left the user, a binding, an API key or a code behind")
	}
	h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": "bob"}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

func TestUserListAndStatV2(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, user.Routes)
	h.SeedUser(h.Domain, "u1", func(u *core.User) { u.Name = "Zed"; u.Email = "zed@example.com" })
	h.SeedUser(h.Domain, "u2", func(u *core.User) { u.Name = "Amy"; u.State = core.Disabled })
	h.SeedUser(h.Domain, "u3", func(u *core.User) { u.Name = "Amy" })
	type list struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	ids := func(l list) []string {
		var out []string
		for _, r := range l.Results {
			out = append(out, r["user_id"].(string))
		}
		return out
	}
	var l list
	h.Admin.Call("/identity/v2/user/list", nil).OK(&l)
	// Default order: name, then user_id ("admin" is named Administrator).
	if l.TotalCount != 4 || !slices.Equal(ids(l), []string{"admin", "u2", "u3", "u1"}) {
		t.Fatalf("list = %v (%d)", ids(l), l.TotalCount)
	}
	for _, r := range l.Results {
		identitytest.CheckV2Info(t, r)
	}
	h.Admin.Call("/identity/v2/user/list", map[string]any{"state": "ENABLED", "name": "Amy"}).OK(&l)
	if !slices.Equal(ids(l), []string{"u3"}) {
		t.Fatalf("filtered = %v", ids(l))
	}
	h.Admin.Call("/identity/v2/user/list", map[string]any{"query": map[string]any{"keyword": "ZED"}}).OK(&l)
	if !slices.Equal(ids(l), []string{"u1"}) {
		t.Fatalf("keyword = %v", ids(l))
	}
	h.Admin.Call("/identity/v2/user/list", map[string]any{"query": map[string]any{"minimal": true, "page": map[string]any{"limit": 1}}}).OK(&l)
	if l.TotalCount != 4 || len(l.Results) != 1 || !slices.Equal(identitytest.FieldNames(l.Results[0]), []string{"auth_type", "name", "role_type", "state", "user_id"}) {
		t.Fatalf("minimal = %v", l)
	}
	h.Admin.Call("/identity/v2/user/list", map[string]any{"query": map[string]any{"count_only": true}}).OK(&l)
	if l.TotalCount != 4 || len(l.Results) != 0 {
		t.Fatalf("count_only = %v", l)
	}
	// Secrets are no field of a user: not to filter, sort, project or count on.
	for _, q := range []map[string]any{
		{"filter": []any{map[string]any{"k": "password_hash", "v": "^\\$2", "o": "regex"}}},
		{"sort": []any{map[string]any{"key": "password_hash"}}},
		{"only": []any{"password_hash"}},
	} {
		h.Admin.Call("/identity/v2/user/list", map[string]any{"query": q}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	}
	// Other stored fields the Info leaves out answer as a field no user has:
	// the store never reads them (every user here has login_failures).
	for q, want := range map[string]int{
		`{"filter_or": [{"k": "login_failures.count", "v": 0, "o": "gte"}]}`:                            0,
		`{"filter": [{"k": "link_token_id", "v": true, "o": "exists"}]}`:                                0,
		`{"filter": [{"k": "login_failures", "v": null, "o": "eq"}]}`:                                   4,
		`{"filter": [{"k": "is_dormant", "v": false, "o": "eq"}], "sort": [{"key": "login_failures"}]}`: 0,
	} {
		h.Admin.Call("/identity/v2/user/list", `{"query": `+q+`}`).OK(&l)
		if l.TotalCount != want {
			t.Fatalf("%s: %d users, want %d", q, l.TotalCount, want)
		}
	}
	h.Admin.Call("/identity/v2/user/list", map[string]any{"state": "GONE"}).Fails(http.StatusBadRequest, errs.InvalidParameter)

	var st struct {
		Results []map[string]any `json:"results"`
	}
	h.Admin.Call("/identity/v2/user/stat", map[string]any{"query": map[string]any{"aggregate": []any{
		map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "state", "name": "state"}}, "fields": []any{map[string]any{"operator": "count", "name": "n"}}}},
	}}}).OK(&st)
	counts := map[string]float64{}
	for _, r := range st.Results {
		counts[r["state"].(string)] = r["n"].(float64)
	}
	if counts["ENABLED"] != 3 || counts["DISABLED"] != 1 {
		t.Fatalf("stat = %v", st.Results)
	}
	// Stages that build no rows of their own still return Info fields only.
	h.Admin.Call("/identity/v2/user/stat", map[string]any{"query": map[string]any{"aggregate": []any{
		map[string]any{"sort": []any{map[string]any{"key": "user_id"}}}, map[string]any{"limit": 10},
	}}}).OK(&st)
	if len(st.Results) != 4 {
		t.Fatalf("raw stat rows = %d", len(st.Results))
	}
	for _, r := range st.Results {
		if !slices.Equal(identitytest.FieldNames(r), identitytest.V2InfoKeys[1:]) { // the stored fields: api_key_count is counted, not stored
			t.Fatalf("raw stat row keys = %v", identitytest.FieldNames(r))
		}
	}
	for _, q := range []map[string]any{
		{"distinct": "password_hash"},
		{"filter": []any{map[string]any{"k": "password_hash", "v": "x", "o": "contain"}}, "distinct": "user_id"},
		{"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "password_hash", "name": "h"}}}}}},
		{"aggregate": []any{map[string]any{"group": map[string]any{"fields": []any{map[string]any{"key": "password_hash", "name": "h", "operator": "push"}}}}}},
		{"aggregate": []any{map[string]any{"project": map[string]any{"fields": []any{map[string]any{"key": "login_failures", "name": "f"}}}}}},
		{"aggregate": []any{map[string]any{"sort": []any{map[string]any{"key": "password_hash"}}}, map[string]any{"count": map[string]any{"name": "n"}}}},
		{"aggregate": []any{map[string]any{"unwind": map[string]any{"path": "tags", "filter": []any{map[string]any{"k": "password_hash", "v": "x", "o": "eq"}}}}}},
	} {
		h.Admin.Call("/identity/v2/user/stat", map[string]any{"query": q}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	}
	h.Admin.Call("/identity/v2/user/stat", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
}

func TestLastAdmin(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(user.Routes, rolebinding.Routes))
	before := h.UserDoc(h.Domain, "admin")
	h.Admin.Call("/identity/v2/user/disable", map[string]any{"user_id": "admin"}).Fails(http.StatusBadRequest, errs.LastAdmin)
	h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": "admin"}).Fails(http.StatusBadRequest, errs.LastAdmin)
	h.Admin.Call("/identity/v1/user/disable", map[string]any{"user_id": "admin", "domain_id": h.Domain}).Fails(http.StatusBadRequest, errs.LastAdmin)
	h.Admin.Call("/identity/v1/user/delete", map[string]any{"user_id": "admin", "domain_id": h.Domain}).Fails(http.StatusBadRequest, errs.LastAdmin)
	h.Same(h.Domain, "admin", before)
	// With a second admin the first may go; then the second is the last.
	h.SeedUser(h.Domain, "second")
	h.Admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": "second", "role_id": "managed-domain-admin", "resource_group": "DOMAIN"}).OK(nil)
	h.System.Call("/identity/v2/user/disable", map[string]any{"user_id": "admin"}).OK(nil)
	h.System.Call("/identity/v2/user/disable", map[string]any{"user_id": "second"}).Fails(http.StatusBadRequest, errs.LastAdmin)
	h.System.Call("/identity/v2/user/delete", map[string]any{"user_id": "second"}).Fails(http.StatusBadRequest, errs.LastAdmin)
	// A disabled admin does not count, and deleting it takes nothing away.
	h.System.Call("/identity/v2/user/delete", map[string]any{"user_id": "admin"}).OK(nil)
	if h.UserDoc(h.Domain, "second")["state"] != "ENABLED" {
		t.Fatal("the last admin changed")
	}
}

// TestLastAdminRacing: two admins disabled (or deleted) at once, each
// while the other still counts: in every round exactly one goes, the
// other answers LastAdmin, and the domain keeps an enabled admin
// (domainadmin.Keep decides on one guard document).
func TestLastAdminRacing(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(user.Routes, rolebinding.Routes))
	stayed := "admin"
	for round := range 4 {
		a, b := fmt.Sprintf("first%d", round), fmt.Sprintf("second%d", round)
		for _, u := range []string{a, b} {
			h.SeedUser(h.Domain, u)
			h.System.Call("/identity/v2/role-binding/create", map[string]any{"user_id": u, "role_id": "managed-domain-admin", "resource_group": "DOMAIN"}).OK(nil)
		}
		// The one left by the round before goes: its guard entry is gone.
		h.System.Call("/identity/v2/user/disable", map[string]any{"user_id": stayed}).OK(nil)
		path := "/identity/v2/user/disable"
		if round%2 == 1 {
			path = "/identity/v2/user/delete"
		}
		statuses := make(chan *testkit.Response, 2)
		var wg sync.WaitGroup
		for _, u := range []string{a, b} {
			wg.Go(func() { statuses <- h.System.Call(path, map[string]any{"user_id": u}) })
		}
		wg.Wait()
		close(statuses)
		ok := 0
		for r := range statuses {
			if r.Status == http.StatusOK {
				ok++
				continue
			}
			r.Fails(http.StatusBadRequest, errs.LastAdmin)
		}
		if ok != 1 {
			t.Fatalf("round %d (%s): %d of the two last admins went, want 1", round, path, ok)
		}
		stayed = a
		if h.Count(core.UsersCollection, bson.D{{Key: "domain_id", Value: h.Domain}, {Key: "user_id", Value: a}, {Key: "state", Value: "ENABLED"}}) == 0 {
			stayed = b
		}
		if h.Count(core.UsersCollection, bson.D{{Key: "domain_id", Value: h.Domain}, {Key: "user_id", Value: stayed}, {Key: "state", Value: "ENABLED"}}) != 1 {
			t.Fatalf("round %d: no enabled admin left", round)
		}
	}
}

func TestDisabledUserIsRefused(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(user.Routes, userprofile.Routes))
	h.SeedUser(h.Domain, "dan")
	dan := h.As("dan")
	dan.Call("/identity/v2/user-profile/get", nil).OK(nil)
	h.Admin.Call("/identity/v2/user/disable", map[string]any{"user_id": "dan"}).OK(nil)
	// identity's own authenticator re-checks the user within auth.CheckTTL.
	identitytest.Eventually(t, 15*time.Second, "a disabled user's token is refused", func() bool {
		return dan.Call("/identity/v2/user-profile/get", nil).Status == http.StatusUnauthorized
	})
	dan.Call("/identity/v2/user-profile/get", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	bad := map[string]any{"credentials": map[string]any{"user_id": "dan", "password": identitytest.UserPassword}, "auth_type": "LOCAL", "domain_id": h.Domain}
	h.Anon.Call("/identity/v2/token/issue", bad).Fails(http.StatusBadRequest, errs.UserStateDisabled)
	h.Anon.Call("/identity/v2/user-profile/reset-password", map[string]any{"user_id": "dan", "domain_id": h.Domain}).OK(nil)
	h.Admin.Call("/identity/v2/user/enable", map[string]any{"user_id": "dan"}).OK(nil)
	h.As("dan").Call("/identity/v2/user-profile/get", nil).OK(nil)
}

// A user without a role binding has USER tokens only: self-service and
// nothing else.
func TestUserWithoutBindingIsSelfServiceOnly(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(user.Routes, userprofile.Routes, workspace.Routes, rolebinding.Routes))
	addr := h.Email("nora")
	h.SeedUser(h.Domain, "nora", identitytest.WithEmail(addr, true))
	h.SeedUser(h.Domain, "other")
	p := h.Login("nora", identitytest.UserPassword)
	nora := h.Anon.As(p.AccessToken)
	nora.Call("/identity/v2/user-profile/get", nil).OK(nil)
	nora.Call("/identity/v2/user-profile/update", map[string]any{"name": "Nora"}).OK(nil)
	var ws struct {
		TotalCount int `json:"total_count"`
	}
	nora.Call("/identity/v2/user-profile/get-workspaces", nil).OK(&ws)
	if ws.TotalCount != 0 {
		t.Fatalf("workspaces without a binding = %d", ws.TotalCount)
	}
	nora.Call("/identity/v1/user/get", map[string]any{"user_id": "nora", "domain_id": h.Domain}).OK(nil)
	before := h.UserDoc(h.Domain, "other")
	for path, body := range map[string]map[string]any{
		"/identity/v2/user/list":                 nil,
		"/identity/v2/user/stat":                 {"query": map[string]any{"distinct": "user_id"}},
		"/identity/v2/user/create":               {"user_id": "x", "auth_type": "LOCAL", "password": "Xx-Passw0rd"},
		"/identity/v2/user/get":                  {"user_id": "nora"},
		"/identity/v2/user/update":               {"user_id": "other", "name": "pwned"},
		"/identity/v2/user/disable":              {"user_id": "other"},
		"/identity/v2/user/delete":               {"user_id": "other"},
		"/identity/v2/user/set-required-actions": {"user_id": "nora", "required_actions": []string{"UPDATE_PASSWORD"}},
		"/identity/v1/user/list":                 {"domain_id": h.Domain},
		"/identity/v1/user/get":                  {"user_id": "other", "domain_id": h.Domain},
		"/identity/v1/user/update":               {"user_id": "other", "domain_id": h.Domain, "name": "pwned"},
		"/identity/v1/user/delete":               {"user_id": "other", "domain_id": h.Domain},
		"/identity/v1/user/disable-mfa":          {"user_id": "other", "domain_id": h.Domain, "force": true},
		"/identity/v2/workspace/create":          {"name": "w"},
		"/identity/v2/role-binding/create":       {"user_id": "nora", "role_id": "managed-domain-admin", "resource_group": "DOMAIN"},
	} {
		nora.Call(path, body).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	h.Same(h.Domain, "other", before)
	h.Anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "DOMAIN"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	// No token at all: 401.
	h.Anon.Call("/identity/v2/user-profile/get", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	h.Anon.Call("/identity/v2/user/list", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
}

// An admin of another domain never reads, lists, counts, changes or
// deletes a user of the root domain, through v2 or v1.
func TestUserDomainIsolation(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, user.Routes)
	h.SeedUser(h.Domain, "rooty", identitytest.WithEmail(h.Email("rooty"), true), func(u *core.User) {
		u.MFA = core.MFA{State: core.Enabled, MFAType: "EMAIL", Options: map[string]any{"email": "m@example.com"}}
	})
	other, boss := h.NewDomain("other")
	before := h.UserDoc(h.Domain, "rooty")
	for op, body := range map[string]map[string]any{
		"get": {}, "update": {"name": "pwned"}, "delete": {}, "enable": {}, "disable": {}, "verify-email": {"email": "x@example.com"},
		"disable-mfa": {}, "set-required-actions": {"required_actions": []string{"UPDATE_PASSWORD"}},
	} {
		body["user_id"] = "rooty"
		boss.Call("/identity/v2/user/"+op, body).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	for _, domainID := range []string{h.Domain, other} { // naming the root domain, or its own with a root user
		for op, body := range map[string]map[string]any{
			"get": {}, "update": {"name": "pwned"}, "delete": {}, "enable": {}, "disable": {}, "sync": {},
			"verify-email": {"force": true}, "disable-mfa": {"force": true}, "enable-mfa": {"mfa_type": "EMAIL", "options": map[string]any{"email": "x@example.com"}},
			"confirm-mfa": {"verify_code": "123456"}, "confirm-email": {"verify_code": "123456"}, "set-required-actions": {"actions": []string{"UPDATE_PASSWORD"}},
		} {
			body["user_id"], body["domain_id"] = "rooty", domainID
			boss.Call("/identity/v1/user/"+op, body).Fails(http.StatusNotFound, errs.NotFoundCode)
		}
	}
	for _, path := range []string{"list", "stat", "find"} {
		body := map[string]any{"domain_id": h.Domain, "query": map[string]any{"distinct": "user_id"}}
		if path == "list" {
			delete(body, "query")
		}
		if path == "find" {
			delete(body, "query")
			body["search"] = map[string]any{"keyword": "rooty"}
		}
		boss.Call("/identity/v1/user/"+path, body).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	boss.Call("/identity/v1/user/create", map[string]any{"user_id": "planted", "backend": "LOCAL", "password": "Plant-Passw0rd", "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Same(h.Domain, "rooty", before)
	if h.UserDoc(h.Domain, "planted") != nil {
		t.Fatal("a user was planted in another domain")
	}
	var l struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	boss.Call("/identity/v2/user/list", nil).OK(&l)
	if l.TotalCount != 1 || l.Results[0]["user_id"] != "boss" {
		t.Fatalf("other domain lists %v", l.Results)
	}
	boss.Call("/identity/v2/user/list", map[string]any{"query": map[string]any{"filter_or": []any{map[string]any{"k": "domain_id", "v": h.Domain, "o": "eq"}}}}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("filter_or widened the domain: %v", l.Results)
	}
	boss.Call("/identity/v1/user/list", map[string]any{"domain_id": other, "user_id": "rooty"}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("v1 list of own domain finds a root user: %v", l.Results)
	}
	var st struct {
		Results []map[string]any `json:"results"`
	}
	boss.Call("/identity/v2/user/stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}).OK(&st)
	if len(st.Results) != 1 || st.Results[0]["n"] != 1.0 {
		t.Fatalf("other domain counts %v", st.Results)
	}
	var f struct {
		TotalCount int `json:"total_count"`
	}
	boss.Call("/identity/v1/user/find", map[string]any{"domain_id": other, "search": map[string]any{"keyword": "rooty"}}).OK(&f)
	if f.TotalCount != 0 {
		t.Fatal("find crosses domains")
	}
	// SYSTEM may name any existing domain in v1, and no missing one.
	h.System.Call("/identity/v1/user/list", map[string]any{"domain_id": other}).OK(&l)
	if l.TotalCount != 1 {
		t.Fatalf("SYSTEM list of another domain = %d", l.TotalCount)
	}
	h.System.Call("/identity/v1/user/list", map[string]any{"domain_id": "domain-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// TestLastAdminRace: two admins taking each other's rights away at the
// same moment (disable, delete or unbind, in every pairing) leave the
// domain exactly one admin: one request succeeds, the other answers
// ERROR_LAST_ADMIN_CANNOT_DISABLED_DELETED.
func TestLastAdminRace(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(user.Routes, rolebinding.Routes))
	type removal func(admin *testkit.Client, userID, bindingID string) *testkit.Response
	disable := func(a *testkit.Client, u, _ string) *testkit.Response {
		return a.Call("/identity/v2/user/disable", map[string]any{"user_id": u})
	}
	remove := func(a *testkit.Client, u, _ string) *testkit.Response {
		return a.Call("/identity/v2/user/delete", map[string]any{"user_id": u})
	}
	unbind := func(a *testkit.Client, _, b string) *testkit.Response {
		return a.Call("/identity/v2/role-binding/delete", map[string]any{"role_binding_id": b})
	}
	pairs := [][2]removal{{disable, disable}, {remove, remove}, {unbind, unbind}, {disable, remove}, {remove, unbind}, {unbind, disable}}
	for i, pair := range pairs {
		domainID, boss := h.NewDomain(fmt.Sprintf("race-%d", i))
		h.DirectUser(domainID, "second", "Second-Passw0rd")
		var b map[string]any
		boss.Call("/identity/v2/role-binding/create", map[string]any{"user_id": "second", "role_id": "managed-domain-admin", "resource_group": "DOMAIN"}).OK(&b)
		second := h.Anon.As(h.ScopedIn(domainID, "second", "Second-Passw0rd", "DOMAIN", ""))
		var list struct {
			Results []map[string]any `json:"results"`
		}
		boss.Call("/identity/v2/role-binding/list", map[string]any{"user_id": "boss"}).OK(&list)
		if len(list.Results) != 1 {
			t.Fatalf("boss has %d bindings", len(list.Results))
		}
		bossBinding, secondBinding := list.Results[0]["role_binding_id"].(string), b["role_binding_id"].(string)

		// Both credentials are checked now, so both requests reach the
		// rule rather than one being refused as no longer an admin.
		boss.Call("/identity/v2/role-binding/list", nil).OK(nil)
		second.Call("/identity/v2/role-binding/list", nil).OK(nil)
		var got [2]*testkit.Response
		var wg sync.WaitGroup
		wg.Go(func() { got[0] = pair[0](boss, "second", secondBinding) })
		wg.Go(func() { got[1] = pair[1](second, "boss", bossBinding) })
		wg.Wait()
		ok := 0
		for _, r := range got {
			if r.Status == http.StatusOK {
				ok++
			} else {
				r.Fails(http.StatusBadRequest, errs.LastAdmin)
			}
		}
		n, err := h.DB.Collection(core.UsersCollection).CountDocuments(context.Background(), bson.D{
			{Key: "domain_id", Value: domainID}, {Key: "role_type", Value: "DOMAIN_ADMIN"}, {Key: "state", Value: "ENABLED"}})
		if err != nil {
			t.Fatal(err)
		}
		if ok != 1 || n != 1 {
			t.Fatalf("pairing %d: %d removals succeeded, %d enabled admins left; want 1 and 1", i, ok, n)
		}
	}
}
