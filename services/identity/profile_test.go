package identity_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/verification"
)

func TestProfileUpdate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	addr := h.email("pat")
	h.seedUser(h.domain, "pat", withEmail(addr, true))
	pat := h.as("pat")
	var u map[string]any
	pat.Call("/identity/v2/user-profile/get", nil).OK(&u)
	checkV2Info(t, u)
	if u["user_id"] != "pat" || u["email"] != addr {
		t.Fatalf("profile = %v", u)
	}
	newAddr := h.email("pat2")
	pat.Call("/identity/v2/user-profile/update", map[string]any{"current_password": userPassword, "name": "Pat", "email": newAddr, "language": "ko", "timezone": "Asia/Seoul", "tags": map[string]any{"k": "v"}}).OK(&u)
	checkV2Info(t, u)
	if u["name"] != "Pat" || u["email"] != newAddr || u["email_verified"] != false || u["language"] != "ko" || u["timezone"] != "Asia/Seoul" {
		t.Fatalf("updated profile = %v", u)
	}

	before := h.userDoc(h.domain, "pat")
	for _, c := range []struct {
		body   map[string]any
		status int
		code   string
		names  string
	}{
		{map[string]any{"email": "pat at example"}, 400, errs.InvalidParameter, "email"},
		{map[string]any{"timezone": "Asia/Seoul\n"}, 200, "", ""}, // trimmed: a no-op change
		{map[string]any{"timezone": "Asia Seoul"}, 400, errs.InvalidParameter, "timezone"},
		{map[string]any{"user_id": "admin"}, 400, errs.InvalidParameter, "user_id"},
		{map[string]any{"password": "New-Passw0rd"}, 400, errs.RequiredParameter, "current_password"},
		{map[string]any{"password": "weakpass", "current_password": userPassword}, 400, errs.IncorrectPasswordFormat, "password"},
		{map[string]any{"password": userPassword, "current_password": userPassword}, 400, errs.PasswordNotChanged, "same"},
	} {
		r := pat.Call("/identity/v2/user-profile/update", c.body)
		if c.status == 200 {
			r.OK(nil)
		} else {
			failsWith(t, r, c.status, c.code, c.names)
		}
		h.same(h.domain, "pat", before)
	}
	pat.Call("/identity/v2/user-profile/update", map[string]any{"password": "New-Passw0rd", "current_password": userPassword}).OK(&u)
	pat = h.anon.As(h.login("pat", "New-Passw0rd").AccessToken) // the change ended the session

	// An API key reads the profile but cannot change it.
	var key map[string]any
	pat.Call("/identity/v2/api-key/create", map[string]any{"name": "ci"}).OK(&key)
	byKey := h.anon.As(key["api_key"].(string))
	byKey.Call("/identity/v2/user-profile/get", nil).OK(nil)
	before = h.userDoc(h.domain, "pat")
	byKey.Call("/identity/v2/user-profile/update", map[string]any{"name": "Key"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	byKey.Call("/identity/v2/user-profile/verify-email", map[string]any{"email": h.email("key")}).Fails(http.StatusForbidden, errs.PermissionDenied)
	byKey.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"email": h.email("key")}}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.same(h.domain, "pat", before)
	// A wrong current password changes nothing but counts as a failed
	// login: guessing it through the profile gets blocked like logging in.
	h.seedUser(h.domain, "pia")
	pia := h.as("pia")
	before = h.userDoc(h.domain, "pia")
	for range 3 { // the harness blocks after 3 failures
		pia.Call("/identity/v2/user-profile/update", map[string]any{"password": "New-Passw0rd", "current_password": "Wrong-Passw0rd"}).Fails(http.StatusBadRequest, errs.PasswordNotMatched)
	}
	pia.Call("/identity/v2/user-profile/update", map[string]any{"password": "New-Passw0rd", "current_password": userPassword}).Fails(http.StatusUnauthorized, errs.LoginBlocked)
	h.anon.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "pia", "password": userPassword},
		"auth_type": "LOCAL", "domain_id": h.domain}).Fails(http.StatusUnauthorized, errs.LoginBlocked)
	h.same(h.domain, "pia", before)
	// A SYSTEM token has no user of its own.
	h.system.Call("/identity/v2/user-profile/get", nil).Fails(http.StatusNotFound, errs.NotFoundCode)
}

func TestProfileEmailVerification(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.seedUser(h.domain, "vic")
	vic := h.as("vic")
	before := h.userDoc(h.domain, "vic")
	vic.Call("/identity/v2/user-profile/verify-email", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	vic.Call("/identity/v2/user-profile/verify-email", map[string]any{"email": "vic@"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": "123456"}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	vic.Call("/identity/v2/user-profile/confirm-email", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.same(h.domain, "vic", before)

	a := h.email("vic-a")
	vic.Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": userPassword, "email": a}).OK(nil)
	if d := h.userDoc(h.domain, "vic"); d["email"] != a || d["email_verified"] != false {
		t.Fatalf("after verify-email: %v", d)
	}
	m := h.mailTo(a, "verify_email")
	code := m.Data["code"]
	if len(code) != 6 || code[0] == '0' || m.Data["expires_minutes"] != "60" {
		t.Fatalf("verify mail = %v", m.Data)
	}
	before = h.userDoc(h.domain, "vic")
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": wrongCode(code)}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	h.same(h.domain, "vic", before)
	var u map[string]any
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).OK(&u)
	checkV2Info(t, u)
	if u["email_verified"] != true {
		t.Fatalf("confirmed = %v", u)
	}
	// A code works once.
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)

	// A code is for the address it was sent to.
	b := h.email("vic-b")
	vic.Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": userPassword, "email": b}).OK(nil)
	code = h.mailTo(b, "verify_email").Data["code"]
	vic.Call("/identity/v2/user-profile/update", map[string]any{"current_password": userPassword, "email": h.email("vic-c")}).OK(nil)
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	if d := h.userDoc(h.domain, "vic"); d["email_verified"] != false {
		t.Fatal("a code of a replaced address verified the new one")
	}
	// Asking again for the verified address does not unverify it.
	vic.Call("/identity/v2/user-profile/verify-email", nil).OK(nil)
	code = h.mailTo(h.email("vic-c"), "verify_email").Data["code"]
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).OK(nil)
	vic.Call("/identity/v2/user-profile/verify-email", nil).OK(nil)
	if d := h.userDoc(h.domain, "vic"); d["email_verified"] != true {
		t.Fatal("re-verifying the same address unverified it")
	}
}

func wrongCode(code string) string {
	if code == "999999" {
		return "999998"
	}
	return "999999"
}

func TestProfileMFA(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.seedUser(h.domain, "mia", withEmail(h.email("mia"), true))
	mia := h.as("mia")
	mfaAddr := h.email("mia-mfa")
	before := h.userDoc(h.domain, "mia")
	for _, c := range []struct {
		body   map[string]any
		status int
		code   string
		names  string
	}{
		{map[string]any{"mfa_type": "EMAIL", "options": map[string]any{}}, 400, errs.RequiredParameter, "options"},
		{map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"email": ""}}, 400, errs.RequiredParameter, "options.email"},
		{map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"other": "x"}}, 400, errs.RequiredParameter, "options.email"},
		{map[string]any{"mfa_type": "EMAIL"}, 400, errs.RequiredParameter, "options"},
		{map[string]any{"options": map[string]any{"email": mfaAddr}}, 400, errs.RequiredParameter, "mfa_type"},
		{map[string]any{"mfa_type": "OTP", "options": map[string]any{"email": mfaAddr}}, 400, errs.InvalidKeyInOptions, "options.email"},
		{map[string]any{"mfa_type": "SMS", "options": map[string]any{"email": mfaAddr}}, 400, errs.InvalidParameter, "mfa_type"},
		{map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"email": mfaAddr, "phone": "1"}}, 400, errs.InvalidKeyInOptions, "phone"},
		{map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"email": "nope"}}, 400, errs.InvalidParameter, "options.email"},
		{map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"email": 7}}, 400, errs.RequiredParameter, "options.email"},
	} {
		failsWith(t, mia.Call("/identity/v2/user-profile/enable-mfa", c.body), c.status, c.code, c.names)
		h.same(h.domain, "mia", before)
	}
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": "123456"}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	mia.Call("/identity/v2/user-profile/disable-mfa", nil).Fails(http.StatusConflict, errs.MFAAlreadyDisabled)
	h.same(h.domain, "mia", before)

	// enable: options saved, state DISABLED until confirmed; a wrong code
	// counts, and after 5 wrong ones the code is void.
	var u map[string]any
	mia.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": userPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": mfaAddr}}).OK(&u)
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "DISABLED" || mfa["mfa_type"] != "EMAIL" || mfa["options"].(map[string]any)["email"] != mfaAddr {
		t.Fatalf("pending mfa = %v", mfa)
	}
	m := h.mailTo(mfaAddr, "mfa_code")
	if m.Data["purpose"] != "enable" {
		t.Fatalf("enable mail = %v", m.Data)
	}
	before = h.userDoc(h.domain, "mia")
	for range 5 {
		mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": wrongCode(m.Data["code"])}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	}
	// Its tries used up, the code is void: the right one is not compared.
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": m.Data["code"]}).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	h.same(h.domain, "mia", before)
	mia.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": userPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": mfaAddr}}).OK(nil)
	code := h.mailTo(mfaAddr, "mfa_code").Data["code"]
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code}).OK(&u)
	mia = h.reissued("mia") // the change ended mia's session
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "ENABLED" {
		t.Fatalf("confirmed mfa = %v", mfa)
	}
	before = h.userDoc(h.domain, "mia")
	mia.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": userPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": h.email("mia-other")}}).Fails(http.StatusConflict, errs.MFAAlreadyEnabled)
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	h.same(h.domain, "mia", before)

	// Login now needs the mailed code; a code works once.
	creds := map[string]any{"user_id": "mia", "password": userPassword}
	h.anon.Call("/identity/v2/token/issue", map[string]any{"credentials": creds, "auth_type": "LOCAL", "domain_id": h.domain}).Fails(http.StatusUnauthorized, errs.MFARequired)
	m = h.mailTo(mfaAddr, "mfa_code")
	if m.Data["purpose"] != "login" {
		t.Fatalf("login mail = %v", m.Data)
	}
	second := map[string]any{"credentials": creds, "auth_type": "MFA", "domain_id": h.domain, "verify_code": wrongCode(m.Data["code"])}
	h.anon.Call("/identity/v2/token/issue", second).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	second["verify_code"] = m.Data["code"]
	var p pair
	h.anon.Call("/identity/v2/token/issue", second).OK(&p)
	h.anon.As(p.AccessToken).Call("/identity/v2/user-profile/get", nil).OK(nil)
	h.anon.Call("/identity/v2/token/issue", second).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)

	// disable: force is not for oneself; a code goes to the MFA address.
	before = h.userDoc(h.domain, "mia")
	mia.Call("/identity/v2/user-profile/disable-mfa", map[string]any{"force": true}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.same(h.domain, "mia", before)
	mia.Call("/identity/v2/user-profile/disable-mfa", map[string]any{"user_id": "admin", "domain_id": "domain-x"}).OK(&u) // ignored: the caller is the user
	if u["user_id"] != "mia" || u["mfa"].(map[string]any)["state"] != "ENABLED" {
		t.Fatalf("disable request = %v", u)
	}
	m = h.mailTo(mfaAddr, "mfa_code")
	if m.Data["purpose"] != "disable" {
		t.Fatalf("disable mail = %v", m.Data)
	}
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": m.Data["code"]}).OK(&u)
	mia = h.reissued("mia")
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "DISABLED" || len(mfa["options"].(map[string]any)) != 0 {
		t.Fatalf("disabled mfa = %v", mfa)
	}
	mia.Call("/identity/v2/user-profile/disable-mfa", nil).Fails(http.StatusConflict, errs.MFAAlreadyDisabled)
	h.login("mia", userPassword)
}

// ENFORCE_MFA narrows the user's tokens to the profile until MFA is on.
func TestEnforcedMFA(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.seedUser(h.domain, "ned")
	mfaAddr := h.email("ned-mfa")
	h.admin.Call("/identity/v2/user/set-required-actions", map[string]any{"user_id": "ned", "required_actions": []string{"ENFORCE_MFA"}}).OK(nil)
	p := h.login("ned", userPassword)
	ned := h.anon.As(p.AccessToken)
	ned.Call("/identity/v1/user/get", map[string]any{"user_id": "ned", "domain_id": h.domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	ned.Call("/identity/v2/token/check", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER"}).Fails(http.StatusBadRequest, errs.UpdatePasswordRequired)
	ned.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": userPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": mfaAddr}}).OK(nil)
	var u map[string]any
	ned.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": h.mailTo(mfaAddr, "mfa_code").Data["code"]}).OK(&u)
	if len(toStrings(u["required_actions"])) != 0 {
		t.Fatalf("ENFORCE_MFA still pending: %v", u)
	}
	// The narrowed token was for that action only.
	ned.Call("/identity/v2/user-profile/get", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	h.anon.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "ned", "password": userPassword},
		"auth_type": "LOCAL", "domain_id": h.domain}).Fails(http.StatusUnauthorized, errs.MFARequired)
}

func TestProfileResetPassword(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	rita, uma, vera := h.email("rita"), h.email("uma"), h.email("vera")
	h.seedUser(h.domain, "rita", withEmail(rita, true))
	h.seedUser(h.domain, "uma", withEmail(uma, false))
	h.seedUser(h.domain, "noel")
	h.seedUser(h.domain, "vera", withEmail(vera, true))
	reset := func(path, userID, domainID string) {
		t.Helper()
		start := time.Now()
		r := h.anon.Call(path, map[string]any{"user_id": userID, "domain_id": domainID}).OK(nil)
		if strings.TrimSpace(string(r.Body)) != "{}" {
			t.Fatalf("reset answered %s", r.Body)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("reset of %s answered in %s: faster than the floor", userID, d)
		}
	}
	before := map[string]bson.M{"uma": h.userDoc(h.domain, "uma"), "noel": h.userDoc(h.domain, "noel")}
	for _, id := range []string{"rita", "uma", "noel", "ghost"} {
		reset("/identity/v2/user-profile/reset-password", id, h.domain)
	}
	reset("/identity/v2/user-profile/reset-password", "rita", "domain-000000000000")
	m := h.mailTo(rita, "reset_password")
	if m.Data["user_id"] != "rita" || m.Data["expires_hours"] != "24" {
		t.Fatalf("reset mail = %v", m.Data)
	}
	h.noMailTo(uma)
	for id, doc := range before {
		h.same(h.domain, id, doc)
	}
	// At most one mail a minute, silently.
	reset("/identity/v2/user-profile/reset-password", "rita", h.domain)
	reset("/identity/v1/user/reset-password", "rita", h.domain)
	h.noMailTo(rita)
	// Asking changes nothing the owner relies on: the old password works.
	if d := h.userDoc(h.domain, "rita"); len(d["required_actions"].(bson.A)) != 0 {
		t.Fatalf("reset request made actions pending: %v", d["required_actions"])
	}
	h.login("rita", userPassword)

	// The link reaches only the profile and sets a password without the current one.
	link := h.anon.As(linkToken(t, m))
	link.Call("/identity/v2/user-profile/get", nil).OK(nil)
	link.Call("/identity/v2/token/check", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	link.Call("/identity/v1/user/get", map[string]any{"user_id": "rita", "domain_id": h.domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	link.Call("/identity/v2/api-key/create", map[string]any{"name": "x"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	link.Call("/identity/v2/user-profile/update", map[string]any{"password": "Rita-Passw0rd9"}).OK(nil)
	link.Call("/identity/v2/user-profile/get", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	p := h.login("rita", "Rita-Passw0rd9")
	var g map[string]any
	h.anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER"}).OK(&g)
	if g["access_token"] == "" {
		t.Fatalf("grant = %v", g)
	}

	// v1 answers the same way.
	for _, id := range []string{"vera", "uma", "ghost"} {
		reset("/identity/v1/user/reset-password", id, h.domain)
	}
	h.mailTo(vera, "reset_password")
	h.noMailTo(uma)
	h.anon.Call("/identity/v2/user-profile/reset-password", map[string]any{"user_id": "rita"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.anon.Call("/identity/v1/user/reset-password", map[string]any{"domain_id": h.domain}).Fails(http.StatusBadRequest, errs.RequiredParameter)
}

func TestProfileWorkspaces(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ids := map[string]string{}
	for _, name := range []string{"Alpha", "Beta", "Gamma"} {
		var w map[string]any
		h.admin.Call("/identity/v2/workspace/create", map[string]any{"name": name, "tags": map[string]any{"n": name}}).OK(&w)
		ids[name] = w["workspace_id"].(string)
	}
	h.admin.Call("/identity/v2/workspace/disable", map[string]any{"workspace_id": ids["Gamma"]}).OK(nil)
	h.seedUser(h.domain, "wes")
	for _, name := range []string{"Beta", "Gamma"} {
		h.admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": "wes", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE", "workspace_id": ids[name]}).OK(nil)
	}
	type mine struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	var l mine
	h.as("wes").Call("/identity/v2/user-profile/get-workspaces", nil).OK(&l)
	if l.TotalCount != 1 || l.Results[0]["workspace_id"] != ids["Beta"] || l.Results[0]["role_type"] != "WORKSPACE_MEMBER" ||
		l.Results[0]["role_id"] != "managed-workspace-member" || l.Results[0]["role_name"] != "Workspace Member" {
		t.Fatalf("member's workspaces = %v", l)
	}
	want := []string{"created_at", "created_by", "domain_id", "is_dormant", "is_managed", "last_synced_at", "name", "reference_id", "role_id",
		"role_name", "role_type", "state", "tags", "workspace_id"}
	if got := fieldNames(l.Results[0]); !slices.Equal(got, want) {
		t.Fatalf("MyWorkspaceInfo keys = %v", got)
	}
	// A domain admin may enter every enabled workspace, as owner.
	h.admin.Call("/identity/v2/user-profile/get-workspaces", nil).OK(&l)
	if l.TotalCount != 2 || l.Results[0]["name"] != "Alpha" || l.Results[1]["name"] != "Beta" || l.Results[0]["role_type"] != "WORKSPACE_OWNER" {
		t.Fatalf("admin's workspaces = %v", l)
	}
	// Another domain's admin sees none of them.
	_, boss := h.newDomain("other")
	boss.Call("/identity/v2/user-profile/get-workspaces", nil).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("other domain's workspaces = %v", l)
	}
}

// TestCodeMailsCapped: a user can have only so many codes mailed in an
// hour, whichever flow asks, so an account cannot flood a mailbox; the
// refused request changes nothing and mails nothing.
func TestCodeMailsCapped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.seedUser(h.domain, "flo")
	flo := h.as("flo")
	for i := range 10 { // both flows count
		addr := h.email(fmt.Sprintf("flo-%d", i))
		if i%2 == 0 {
			flo.Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": userPassword, "email": addr}).OK(nil)
			h.mailTo(addr, "verify_email")
			continue
		}
		flo.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": userPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": addr}}).OK(nil)
		h.mailTo(addr, "mfa_code")
	}
	before := h.userDoc(h.domain, "flo")
	codes := h.dbFrozen(core.CodesCollection)
	over := h.email("flo-over")
	flo.Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": userPassword, "email": over}).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	flo.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": userPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": over}}).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	h.same(h.domain, "flo", before)
	codes()
	h.noMailTo(over)
	// Another user is not affected.
	h.seedUser(h.domain, "gil")
	gil := h.email("gil")
	h.as("gil").Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": userPassword, "email": gil}).OK(nil)
	h.mailTo(gil, "verify_email")
}

// TestProfileOTP: OTP MFA end to end with codes computed as an
// authenticator app does: enable answers the secret once, confirm turns it
// on, login needs a fresh code, a code works once, and disable needs a
// request and then a code.
func TestProfileOTP(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.seedUser(h.domain, "otto")
	otto := h.as("otto")
	issue := func(body map[string]any) *testkit.Response {
		body["credentials"] = map[string]any{"user_id": "otto", "password": userPassword}
		body["domain_id"] = h.domain
		return h.anon.Call("/identity/v2/token/issue", body)
	}
	var u map[string]any
	otto.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": userPassword, "mfa_type": "OTP"}).OK(&u)
	mfa := u["mfa"].(map[string]any)
	uri, err := url.Parse(fmt.Sprint(mfa["options"].(map[string]any)["otp_qrcode_uri"]))
	secret := uri.Query().Get("secret")
	if err != nil || mfa["state"] != "DISABLED" || mfa["mfa_type"] != "OTP" || uri.Scheme != "otpauth" || len(secret) != 32 {
		t.Fatalf("enable-mfa OTP = %v", mfa)
	}
	// The secret is answered once and stored sealed.
	otto.Call("/identity/v2/user-profile/get", nil).OK(&u)
	if opts := u["mfa"].(map[string]any)["options"].(map[string]any); len(opts) != 0 {
		t.Fatalf("get shows mfa options %v", opts)
	}
	if strings.Contains(h.dump(core.UsersCollection), secret) {
		t.Fatal("the OTP secret is stored in the clear")
	}
	code := func(at time.Duration) string {
		c, err := verification.OTPCode(secret, time.Now().Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	waitForFreshOTPStep(t)

	// confirm: wrong codes count and change nothing; a right one turns it on.
	before := h.userDoc(h.domain, "otto")
	otto.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": wrongCode(code(0))}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	h.same(h.domain, "otto", before)
	issue(map[string]any{"auth_type": "LOCAL"}).OK(nil) // not on yet
	otto.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code(0)}).OK(&u)
	otto = h.reissued("otto") // the change ended otto's session
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "ENABLED" || mfa["mfa_type"] != "OTP" || len(mfa["options"].(map[string]any)) != 0 {
		t.Fatalf("confirmed mfa = %v", mfa)
	}

	// login: the password alone is not enough; the code already used is
	// refused; the next one works, once.
	issue(map[string]any{"auth_type": "LOCAL"}).Fails(http.StatusUnauthorized, errs.MFARequired)
	issue(map[string]any{"auth_type": "MFA", "verify_code": code(0)}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	issue(map[string]any{"auth_type": "MFA"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	next := code(30 * time.Second)
	var pair map[string]any
	issue(map[string]any{"auth_type": "MFA", "verify_code": next}).OK(&pair)
	if pair["access_token"] == nil {
		t.Fatalf("MFA login = %v", pair)
	}
	issue(map[string]any{"auth_type": "MFA", "verify_code": next}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)

	// disable: a code alone does nothing; after disable-mfa (no mail) a
	// code turns MFA off and the secret is gone.
	prev := code(-30 * time.Second)
	otto.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": prev}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	otto.Call("/identity/v2/user-profile/disable-mfa", nil).OK(nil)
	otto.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": prev}).OK(&u)
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "DISABLED" {
		t.Fatalf("disabled mfa = %v", mfa)
	}
	if d := h.userDoc(h.domain, "otto"); d["otp_secret"] != nil || d["otp_pending"] != nil {
		t.Fatalf("secret kept after disable: %v", d)
	}
	issue(map[string]any{"auth_type": "LOCAL"}).OK(nil)
}

// waitForFreshOTPStep waits until the current 30 s step has 20 s left, so
// that the codes a test computes keep their steps while it runs.
func waitForFreshOTPStep(t *testing.T) {
	t.Helper()
	if into := time.Duration(time.Now().UnixNano()) % (30 * time.Second); into > 10*time.Second {
		time.Sleep(30*time.Second - into)
	}
}

// TestOTPDisableGuessesNotForgiven: asking disable-mfa again does not buy
// more guesses at the secret; an admin's disable-mfa is the way out.
func TestOTPDisableGuessesNotForgiven(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.seedUser(h.domain, "oona")
	oona := h.as("oona")
	var u map[string]any
	oona.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": userPassword, "mfa_type": "OTP", "options": map[string]any{}}).OK(&u)
	uri, _ := url.Parse(fmt.Sprint(u["mfa"].(map[string]any)["options"].(map[string]any)["otp_qrcode_uri"]))
	code := func(at time.Duration) string {
		c, err := verification.OTPCode(uri.Query().Get("secret"), time.Now().Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	waitForFreshOTPStep(t)
	oona.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code(0)}).OK(nil)
	oona = h.reissued("oona") // the change ended oona's session

	oona.Call("/identity/v2/user-profile/disable-mfa", nil).OK(nil)
	for range 5 {
		oona.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": wrongCode(code(30 * time.Second))}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	}
	oona.Call("/identity/v2/user-profile/disable-mfa", nil).OK(nil)
	oona.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code(30 * time.Second)}).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	oona.Call("/identity/v2/user-profile/get", nil).OK(&u)
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "ENABLED" {
		t.Fatalf("MFA turned off after the guesses ran out: %v", mfa)
	}
	h.admin.Call("/identity/v2/user/disable-mfa", map[string]any{"user_id": "oona"}).OK(&u)
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "DISABLED" || h.userDoc(h.domain, "oona")["otp_secret"] != nil {
		t.Fatalf("after the admin's disable-mfa: %v", mfa)
	}
}
