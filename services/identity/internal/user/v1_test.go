package user_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/user"
)

var v1InfoKeys = []string{"backend", "created_at", "domain_id", "email", "email_verified", "language", "last_accessed_at", "mfa",
	"name", "required_actions", "state", "tags", "timezone", "user_id", "user_type"}

func TestUserV1Admin(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, user.Routes)
	users := core.UsersCollection
	call := func(op string, body map[string]any) map[string]any {
		t.Helper()
		body["domain_id"] = h.Domain
		var out map[string]any
		h.Admin.Call("/identity/v1/user/"+op, body).OK(&out)
		return out
	}

	// create: password for LOCAL, the rules, the limits; nothing stored on failure.
	base := map[string]any{"user_id": "ivy", "backend": "LOCAL", "password": "Ivy-Passw0rd", "domain_id": h.Domain}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range base {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	n := h.Count(users, nil)
	for _, c := range []struct {
		body   map[string]any
		status int
		code   string
		names  string
	}{
		{with("password", nil), 400, errs.RequiredParameter, "password"},
		{with("password", "ivy"), 400, errs.IncorrectPasswordFormat, "password"},
		{with("backend", "EXTERNAL"), 400, errs.InvalidParameter, "backend"},
		{with("backend", nil), 400, errs.RequiredParameter, "backend"},
		{with("domain_id", nil), 400, errs.RequiredParameter, "domain_id"},
		{with("domain_id", "domain-000000000000"), 404, errs.NotFoundCode, "domain_id"},
		{with("user_id", strings.Repeat("i", 41)), 400, errs.InvalidParameter, "user_id"},
		{with("user_type", "ROBOT"), 400, errs.InvalidParameter, "user_type"},
		{with("auth_type", "LOCAL"), 400, errs.InvalidParameter, "auth_type"},
		{with("email", "ivy"), 400, errs.InvalidParameter, "email"},
	} {
		identitytest.FailsWith(t, h.Admin.Call("/identity/v1/user/create", c.body), c.status, c.code, c.names)
		if h.Count(users, nil) != n {
			t.Fatalf("%v: a user was stored", c.body)
		}
	}
	u := call("create", with("user_type", "API_USER"))
	if got := identitytest.FieldNames(u); !slices.Equal(got, v1InfoKeys) {
		t.Fatalf("v1 UserInfo keys = %v", got)
	}
	if u["backend"] != "LOCAL" || u["user_type"] != "API_USER" || u["state"] != "PENDING" || u["domain_id"] != h.Domain {
		t.Fatalf("created = %v", u)
	}
	h.Admin.Call("/identity/v1/user/create", base).Fails(http.StatusConflict, errs.NotUnique)
	ivyAddr := h.Email("ivy")
	u = call("create", map[string]any{"user_id": "jay", "backend": "LOCAL", "reset_password": true, "email": h.Email("jay")})
	if u["user_type"] != "USER" || !slices.Equal(identitytest.ToStrings(u["required_actions"]), []string{"UPDATE_PASSWORD"}) {
		t.Fatalf("invited = %v", u)
	}
	h.MailTo(h.Email("jay"), "invite")

	// get (with only), update, set-required-actions, enable, disable, sync.
	if got := identitytest.FieldNames(call("get", map[string]any{"user_id": "ivy", "only": []string{"backend", "user_id"}})); !slices.Equal(got, []string{"backend", "user_id"}) {
		t.Fatalf("get only = %v", got)
	}
	u = call("update", map[string]any{"user_id": "ivy", "name": "Ivy", "email": ivyAddr, "tags": map[string]any{"t": "x"}})
	if u["name"] != "Ivy" || u["email"] != ivyAddr || u["email_verified"] != false {
		t.Fatalf("updated = %v", u)
	}
	before := h.UserDoc(h.Domain, "ivy")
	h.Admin.Call("/identity/v1/user/update", map[string]any{"user_id": "ivy", "domain_id": h.Domain, "email": "x"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Admin.Call("/identity/v1/user/set-required-actions", map[string]any{"user_id": "ivy", "domain_id": h.Domain, "actions": []string{"ENFORCE_MFA"}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Admin.Call("/identity/v1/user/set-required-actions", map[string]any{"user_id": "ivy", "domain_id": h.Domain, "required_actions": []string{"UPDATE_PASSWORD"}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Same(h.Domain, "ivy", before)
	u = call("set-required-actions", map[string]any{"user_id": "ivy", "actions": []string{"UPDATE_PASSWORD"}})
	if !slices.Equal(identitytest.ToStrings(u["required_actions"]), []string{"UPDATE_PASSWORD"}) {
		t.Fatalf("required actions = %v", u)
	}
	if call("enable", map[string]any{"user_id": "ivy"})["state"] != "ENABLED" || call("disable", map[string]any{"user_id": "ivy"})["state"] != "DISABLED" {
		t.Fatal("enable/disable")
	}
	before = h.UserDoc(h.Domain, "ivy")
	if got := call("sync", map[string]any{"user_id": "ivy"}); got["name"] != "Ivy" || got["state"] != "DISABLED" {
		t.Fatalf("sync = %v", got)
	}
	h.Same(h.Domain, "ivy", before)

	// verify-email with force, disable-mfa with force: an admin's.
	call("verify-email", map[string]any{"user_id": "ivy", "force": true})
	if h.UserDoc(h.Domain, "ivy")["email_verified"] != true {
		t.Fatal("forced verification")
	}
	h.SeedUser(h.Domain, "mo", func(u *core.User) {
		u.MFA = core.MFA{State: core.Enabled, MFAType: "EMAIL", Options: map[string]any{"email": "mo@example.com"}}
	})
	if mfa := call("disable-mfa", map[string]any{"user_id": "mo", "force": true})["mfa"].(map[string]any); mfa["state"] != "DISABLED" {
		t.Fatalf("forced disable = %v", mfa)
	}
	h.Admin.Call("/identity/v1/user/disable-mfa", map[string]any{"user_id": "mo", "domain_id": h.Domain, "force": true}).Fails(http.StatusConflict, errs.MFAAlreadyDisabled)

	// list, stat, find speak v1 names (backend).
	type list struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	var l list
	h.Admin.Call("/identity/v1/user/list", map[string]any{"domain_id": h.Domain, "backend": "LOCAL", "user_type": "API_USER"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0]["user_id"] != "ivy" || !slices.Equal(identitytest.FieldNames(l.Results[0]), v1InfoKeys) {
		t.Fatalf("v1 list = %v", l)
	}
	h.Admin.Call("/identity/v1/user/list", map[string]any{"domain_id": h.Domain, "query": map[string]any{
		"filter": []any{map[string]any{"k": "backend", "v": "LOCAL", "o": "eq"}}, "only": []string{"backend"}}}).OK(&l)
	if l.TotalCount != 4 || !slices.Equal(identitytest.FieldNames(l.Results[0]), []string{"backend", "name", "user_id"}) || l.Results[0]["backend"] != "LOCAL" {
		t.Fatalf("v1 list only backend = %v", l)
	}
	h.Admin.Call("/identity/v1/user/list", map[string]any{"domain_id": h.Domain, "query": map[string]any{"sort": []any{map[string]any{"key": "password_hash"}}}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Admin.Call("/identity/v1/user/list", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	var st struct {
		Results []map[string]any `json:"results"`
	}
	h.Admin.Call("/identity/v1/user/stat", map[string]any{"domain_id": h.Domain, "query": map[string]any{"aggregate": []any{
		map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "backend", "name": "backend"}}, "fields": []any{map[string]any{"operator": "count", "name": "n"}}}},
	}}}).OK(&st)
	if len(st.Results) != 1 || st.Results[0]["backend"] != "LOCAL" || st.Results[0]["n"] != 4.0 {
		t.Fatalf("v1 stat = %v", st.Results)
	}
	h.Admin.Call("/identity/v1/user/stat", map[string]any{"domain_id": h.Domain, "query": map[string]any{"aggregate": []any{map[string]any{"limit": 1}}}}).OK(&st)
	if len(st.Results) != 1 || !slices.Equal(identitytest.FieldNames(st.Results[0]), v1InfoKeys) {
		t.Fatalf("v1 raw stat = %v", st.Results)
	}
	h.Admin.Call("/identity/v1/user/stat", map[string]any{"domain_id": h.Domain, "query": map[string]any{"distinct": "login_failures.count"}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	var f list
	h.Admin.Call("/identity/v1/user/find", map[string]any{"domain_id": h.Domain, "search": map[string]any{"keyword": "IVY"}}).OK(&f)
	if f.TotalCount != 1 || !slices.Equal(identitytest.FieldNames(f.Results[0]), []string{"email", "name", "tags", "user_id"}) {
		t.Fatalf("find = %v", f)
	}
	h.Admin.Call("/identity/v1/user/find", map[string]any{"domain_id": h.Domain, "search": map[string]any{"user_id": "jay"}}).OK(&f)
	if f.TotalCount != 1 || f.Results[0]["user_id"] != "jay" {
		t.Fatalf("find by id = %v", f)
	}
	h.Admin.Call("/identity/v1/user/find", map[string]any{"domain_id": h.Domain, "search": map[string]any{}}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call("/identity/v1/user/find", map[string]any{"domain_id": h.Domain}).Fails(http.StatusBadRequest, errs.RequiredParameter)

	// delete.
	call("delete", map[string]any{"user_id": "jay"})
	if h.UserDoc(h.Domain, "jay") != nil {
		t.Fatal("not deleted")
	}
	h.Admin.Call("/identity/v1/user/delete", map[string]any{"user_id": "jay", "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v1/user/get", map[string]any{"user_id": "jay", "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// The v1 self-service operations: anyone on itself, never on another
// user, never force, never its password.
func TestUserV1SelfService(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, user.Routes)
	h.SeedUser(h.Domain, "sam")
	h.SeedUser(h.Domain, "kim")
	sam := h.As("sam")
	renew := func() { sam = h.Reissued("sam") } // after an MFA change ended the session
	self := func(op string, body map[string]any) *testkit.Response {
		t.Helper()
		body["user_id"], body["domain_id"] = "sam", h.Domain
		return sam.Call("/identity/v1/user/"+op, body)
	}
	var u map[string]any
	self("get", map[string]any{}).OK(&u)
	if !slices.Equal(identitytest.FieldNames(u), v1InfoKeys) {
		t.Fatalf("v1 self get = %v", u)
	}
	self("update", map[string]any{"name": "Sam"}).OK(&u)
	if u["name"] != "Sam" {
		t.Fatalf("self update = %v", u)
	}
	before := h.UserDoc(h.Domain, "sam")
	kim := h.UserDoc(h.Domain, "kim")
	self("update", map[string]any{"password": "Sam-Passw0rd2"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	self("update", map[string]any{"reset_password": true}).Fails(http.StatusForbidden, errs.PermissionDenied)
	self("verify-email", map[string]any{"email": h.Email("sam"), "force": true}).Fails(http.StatusForbidden, errs.PermissionDenied)
	self("disable-mfa", map[string]any{"force": true}).Fails(http.StatusForbidden, errs.PermissionDenied)
	identitytest.FailsWith(t, self("enable-mfa", map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"mail": "x@example.com"}}), 400, errs.RequiredParameter, "options.email")
	self("enable", map[string]any{}).Fails(http.StatusForbidden, errs.PermissionDenied)
	self("set-required-actions", map[string]any{"actions": []string{"UPDATE_PASSWORD"}}).Fails(http.StatusForbidden, errs.PermissionDenied)
	for op, body := range map[string]map[string]any{
		"get": {}, "update": {"name": "x"}, "verify-email": {}, "disable-mfa": {}, "confirm-mfa": {"verify_code": "123456"},
		"confirm-email": {"verify_code": "123456"}, "enable-mfa": {"mfa_type": "EMAIL", "options": map[string]any{"email": "x@example.com"}},
	} {
		body["user_id"], body["domain_id"] = "kim", h.Domain
		sam.Call("/identity/v1/user/"+op, body).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	h.Same(h.Domain, "sam", before)
	h.Same(h.Domain, "kim", kim)

	// e-mail: code to the address, confirmed by the user.
	addr := h.Email("sam")
	self("verify-email", map[string]any{"current_password": identitytest.UserPassword, "email": addr}).OK(nil)
	self("confirm-email", map[string]any{"verify_code": identitytest.WrongCode("0")}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	self("confirm-email", map[string]any{"verify_code": h.MailTo(addr, "verify_email").Data["code"]}).OK(&u)
	if u["email_verified"] != true {
		t.Fatalf("v1 confirm-email = %v", u)
	}
	// MFA: enable and disable, each confirmed with a mailed code.
	mfaAddr := h.Email("sam-mfa")
	self("enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": mfaAddr}}).OK(nil)
	self("confirm-mfa", map[string]any{"verify_code": h.MailTo(mfaAddr, "mfa_code").Data["code"]}).OK(&u)
	renew()
	if u["mfa"].(map[string]any)["state"] != "ENABLED" {
		t.Fatalf("v1 confirm-mfa = %v", u)
	}
	self("disable-mfa", map[string]any{}).OK(nil)
	m := h.MailTo(mfaAddr, "mfa_code")
	if m.Data["purpose"] != "disable" {
		t.Fatalf("v1 disable mail = %v", m.Data)
	}
	self("confirm-mfa", map[string]any{"verify_code": m.Data["code"]}).OK(&u)
	renew()
	if u["mfa"].(map[string]any)["state"] != "DISABLED" {
		t.Fatalf("v1 disabled = %v", u)
	}
}
