package userprofile_test

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
	"github.com/nubes-io/nubes/services/identity/internal/apikey"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/user"
	"github.com/nubes-io/nubes/services/identity/internal/userprofile"
	"github.com/nubes-io/nubes/services/identity/internal/verification"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

func TestProfileUpdate(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(userprofile.Routes, apikey.Routes))
	addr := h.Email("pat")
	h.SeedUser(h.Domain, "pat", identitytest.WithEmail(addr, true))
	pat := h.As("pat")
	var u map[string]any
	pat.Call("/identity/v2/user-profile/get", nil).OK(&u)
	identitytest.CheckV2Info(t, u)
	if u["user_id"] != "pat" || u["email"] != addr {
		t.Fatalf("profile = %v", u)
	}
	newAddr := h.Email("pat2")
	pat.Call("/identity/v2/user-profile/update", map[string]any{"current_password": identitytest.UserPassword, "name": "Pat", "email": newAddr, "language": "ko", "timezone": "Asia/Seoul", "tags": map[string]any{"k": "v"}}).OK(&u)
	identitytest.CheckV2Info(t, u)
	if u["name"] != "Pat" || u["email"] != newAddr || u["email_verified"] != false || u["language"] != "ko" || u["timezone"] != "Asia/Seoul" {
		t.Fatalf("updated profile = %v", u)
	}

	before := h.UserDoc(h.Domain, "pat")
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
		{map[string]any{"password": "weakpass", "current_password": identitytest.UserPassword}, 400, errs.IncorrectPasswordFormat, "password"},
		{map[string]any{"password": identitytest.UserPassword, "current_password": identitytest.UserPassword}, 400, errs.PasswordNotChanged, "same"},
	} {
		r := pat.Call("/identity/v2/user-profile/update", c.body)
		if c.status == 200 {
			r.OK(nil)
		} else {
			identitytest.FailsWith(t, r, c.status, c.code, c.names)
		}
		h.Same(h.Domain, "pat", before)
	}
	pat.Call("/identity/v2/user-profile/update", map[string]any{"password": "New-Passw0rd", "current_password": identitytest.UserPassword}).OK(&u)
	pat = h.Anon.As(h.Login("pat", "New-Passw0rd").AccessToken) // the change ended the session

	// An API key reads the profile but cannot change it.
	var key map[string]any
	pat.Call("/identity/v2/api-key/create", map[string]any{"name": "ci"}).OK(&key)
	byKey := h.Anon.As(key["api_key"].(string))
	byKey.Call("/identity/v2/user-profile/get", nil).OK(nil)
	before = h.UserDoc(h.Domain, "pat")
	byKey.Call("/identity/v2/user-profile/update", map[string]any{"name": "Key"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	byKey.Call("/identity/v2/user-profile/verify-email", map[string]any{"email": h.Email("key")}).Fails(http.StatusForbidden, errs.PermissionDenied)
	byKey.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"email": h.Email("key")}}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Same(h.Domain, "pat", before)
	// A wrong current password changes nothing but counts as a failed
	// login: guessing it through the profile gets blocked like logging in.
	h.SeedUser(h.Domain, "pia")
	pia := h.As("pia")
	before = h.UserDoc(h.Domain, "pia")
	for range 3 { // the harness blocks after 3 failures
		pia.Call("/identity/v2/user-profile/update", map[string]any{"password": "New-Passw0rd", "current_password": "Wrong-Passw0rd"}).Fails(http.StatusBadRequest, errs.PasswordNotMatched)
	}
	pia.Call("/identity/v2/user-profile/update", map[string]any{"password": "New-Passw0rd", "current_password": identitytest.UserPassword}).Fails(http.StatusUnauthorized, errs.LoginBlocked)
	h.Anon.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "pia", "password": identitytest.UserPassword},
		"auth_type": "LOCAL", "domain_id": h.Domain}).Fails(http.StatusUnauthorized, errs.LoginBlocked)
	h.Same(h.Domain, "pia", before)
	// A SYSTEM token has no user of its own.
	h.System.Call("/identity/v2/user-profile/get", nil).Fails(http.StatusNotFound, errs.NotFoundCode)
}

func TestProfileEmailVerification(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, userprofile.Routes)
	h.SeedUser(h.Domain, "vic")
	vic := h.As("vic")
	before := h.UserDoc(h.Domain, "vic")
	vic.Call("/identity/v2/user-profile/verify-email", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	vic.Call("/identity/v2/user-profile/verify-email", map[string]any{"email": "vic@"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": "123456"}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	vic.Call("/identity/v2/user-profile/confirm-email", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Same(h.Domain, "vic", before)

	a := h.Email("vic-a")
	vic.Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": identitytest.UserPassword, "email": a}).OK(nil)
	if d := h.UserDoc(h.Domain, "vic"); d["email"] != a || d["email_verified"] != false {
		t.Fatalf("after verify-email: %v", d)
	}
	m := h.MailTo(a, "verify_email")
	code := m.Data["code"]
	if len(code) != 6 || code[0] == '0' || m.Data["expires_minutes"] != "60" {
		t.Fatalf("verify mail = %v", m.Data)
	}
	before = h.UserDoc(h.Domain, "vic")
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": identitytest.WrongCode(code)}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	h.Same(h.Domain, "vic", before)
	var u map[string]any
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).OK(&u)
	identitytest.CheckV2Info(t, u)
	if u["email_verified"] != true {
		t.Fatalf("confirmed = %v", u)
	}
	// A code works once.
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)

	// A code is for the address it was sent to.
	b := h.Email("vic-b")
	vic.Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": identitytest.UserPassword, "email": b}).OK(nil)
	code = h.MailTo(b, "verify_email").Data["code"]
	vic.Call("/identity/v2/user-profile/update", map[string]any{"current_password": identitytest.UserPassword, "email": h.Email("vic-c")}).OK(nil)
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	if d := h.UserDoc(h.Domain, "vic"); d["email_verified"] != false {
		t.Fatal("a code of a replaced address verified the new one")
	}
	// Asking again for the verified address does not unverify it.
	vic.Call("/identity/v2/user-profile/verify-email", nil).OK(nil)
	code = h.MailTo(h.Email("vic-c"), "verify_email").Data["code"]
	vic.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).OK(nil)
	vic.Call("/identity/v2/user-profile/verify-email", nil).OK(nil)
	if d := h.UserDoc(h.Domain, "vic"); d["email_verified"] != true {
		t.Fatal("re-verifying the same address unverified it")
	}
}

func TestProfileMFA(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, userprofile.Routes)
	h.SeedUser(h.Domain, "mia", identitytest.WithEmail(h.Email("mia"), true))
	mia := h.As("mia")
	mfaAddr := h.Email("mia-mfa")
	before := h.UserDoc(h.Domain, "mia")
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
		identitytest.FailsWith(t, mia.Call("/identity/v2/user-profile/enable-mfa", c.body), c.status, c.code, c.names)
		h.Same(h.Domain, "mia", before)
	}
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": "123456"}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	mia.Call("/identity/v2/user-profile/disable-mfa", nil).Fails(http.StatusConflict, errs.MFAAlreadyDisabled)
	h.Same(h.Domain, "mia", before)

	// enable: options saved, state DISABLED until confirmed; a wrong code
	// counts, and after 5 wrong ones the code is void.
	var u map[string]any
	mia.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": mfaAddr}}).OK(&u)
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "DISABLED" || mfa["mfa_type"] != "EMAIL" || mfa["options"].(map[string]any)["email"] != mfaAddr {
		t.Fatalf("pending mfa = %v", mfa)
	}
	m := h.MailTo(mfaAddr, "mfa_code")
	if m.Data["purpose"] != "enable" {
		t.Fatalf("enable mail = %v", m.Data)
	}
	before = h.UserDoc(h.Domain, "mia")
	for range 5 {
		mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": identitytest.WrongCode(m.Data["code"])}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	}
	// Its tries used up, the code is void: the right one is not compared.
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": m.Data["code"]}).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	h.Same(h.Domain, "mia", before)
	mia.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": mfaAddr}}).OK(nil)
	code := h.MailTo(mfaAddr, "mfa_code").Data["code"]
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code}).OK(&u)
	mia = h.Reissued("mia") // the change ended mia's session
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "ENABLED" {
		t.Fatalf("confirmed mfa = %v", mfa)
	}
	before = h.UserDoc(h.Domain, "mia")
	mia.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": h.Email("mia-other")}}).Fails(http.StatusConflict, errs.MFAAlreadyEnabled)
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	h.Same(h.Domain, "mia", before)

	// Login now needs the mailed code; a code works once.
	creds := map[string]any{"user_id": "mia", "password": identitytest.UserPassword}
	h.Anon.Call("/identity/v2/token/issue", map[string]any{"credentials": creds, "auth_type": "LOCAL", "domain_id": h.Domain}).Fails(http.StatusUnauthorized, errs.MFARequired)
	m = h.MailTo(mfaAddr, "mfa_code")
	if m.Data["purpose"] != "login" {
		t.Fatalf("login mail = %v", m.Data)
	}
	second := map[string]any{"credentials": creds, "auth_type": "MFA", "domain_id": h.Domain, "verify_code": identitytest.WrongCode(m.Data["code"])}
	h.Anon.Call("/identity/v2/token/issue", second).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	second["verify_code"] = m.Data["code"]
	var p identitytest.Pair
	h.Anon.Call("/identity/v2/token/issue", second).OK(&p)
	h.Anon.As(p.AccessToken).Call("/identity/v2/user-profile/get", nil).OK(nil)
	h.Anon.Call("/identity/v2/token/issue", second).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)

	// disable: force is not for oneself; a code goes to the MFA address.
	before = h.UserDoc(h.Domain, "mia")
	mia.Call("/identity/v2/user-profile/disable-mfa", map[string]any{"force": true}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Same(h.Domain, "mia", before)
	mia.Call("/identity/v2/user-profile/disable-mfa", map[string]any{"user_id": "admin", "domain_id": "domain-x"}).OK(&u) // ignored: the caller is the user
	if u["user_id"] != "mia" || u["mfa"].(map[string]any)["state"] != "ENABLED" {
		t.Fatalf("disable request = %v", u)
	}
	m = h.MailTo(mfaAddr, "mfa_code")
	if m.Data["purpose"] != "disable" {
		t.Fatalf("disable mail = %v", m.Data)
	}
	mia.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": m.Data["code"]}).OK(&u)
	mia = h.Reissued("mia")
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "DISABLED" || len(mfa["options"].(map[string]any)) != 0 {
		t.Fatalf("disabled mfa = %v", mfa)
	}
	mia.Call("/identity/v2/user-profile/disable-mfa", nil).Fails(http.StatusConflict, errs.MFAAlreadyDisabled)
	h.Login("mia", identitytest.UserPassword)
}

// ENFORCE_MFA narrows the user's tokens to the profile until MFA is on.
func TestEnforcedMFA(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(userprofile.Routes, user.Routes))
	h.SeedUser(h.Domain, "ned")
	mfaAddr := h.Email("ned-mfa")
	h.Admin.Call("/identity/v2/user/set-required-actions", map[string]any{"user_id": "ned", "required_actions": []string{"ENFORCE_MFA"}}).OK(nil)
	p := h.Login("ned", identitytest.UserPassword)
	ned := h.Anon.As(p.AccessToken)
	ned.Call("/identity/v1/user/get", map[string]any{"user_id": "ned", "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	ned.Call("/identity/v2/token/check", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER"}).Fails(http.StatusBadRequest, errs.UpdatePasswordRequired)
	ned.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": mfaAddr}}).OK(nil)
	var u map[string]any
	ned.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": h.MailTo(mfaAddr, "mfa_code").Data["code"]}).OK(&u)
	if len(identitytest.ToStrings(u["required_actions"])) != 0 {
		t.Fatalf("ENFORCE_MFA still pending: %v", u)
	}
	// The narrowed token was for that action only.
	ned.Call("/identity/v2/user-profile/get", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	h.Anon.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "ned", "password": identitytest.UserPassword},
		"auth_type": "LOCAL", "domain_id": h.Domain}).Fails(http.StatusUnauthorized, errs.MFARequired)
}

func TestProfileResetPassword(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(userprofile.Routes, user.Routes, apikey.Routes))
	rita, uma, vera := h.Email("rita"), h.Email("uma"), h.Email("vera")
	h.SeedUser(h.Domain, "rita", identitytest.WithEmail(rita, true))
	h.SeedUser(h.Domain, "uma", identitytest.WithEmail(uma, false))
	h.SeedUser(h.Domain, "noel")
	h.SeedUser(h.Domain, "vera", identitytest.WithEmail(vera, true))
	reset := func(path, userID, domainID string) {
		t.Helper()
		start := time.Now()
		r := h.Anon.Call(path, map[string]any{"user_id": userID, "domain_id": domainID}).OK(nil)
		if strings.TrimSpace(string(r.Body)) != "{}" {
			t.Fatalf("reset answered %s", r.Body)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("reset of %s answered in %s: faster than the floor", userID, d)
		}
	}
	before := map[string]bson.M{"uma": h.UserDoc(h.Domain, "uma"), "noel": h.UserDoc(h.Domain, "noel")}
	for _, id := range []string{"rita", "uma", "noel", "ghost"} {
		reset("/identity/v2/user-profile/reset-password", id, h.Domain)
	}
	reset("/identity/v2/user-profile/reset-password", "rita", "domain-000000000000")
	m := h.MailTo(rita, "reset_password")
	if m.Data["user_id"] != "rita" || m.Data["expires_hours"] != "24" {
		t.Fatalf("reset mail = %v", m.Data)
	}
	h.NoMailTo(uma)
	for id, doc := range before {
		h.Same(h.Domain, id, doc)
	}
	// At most one mail a minute, silently.
	reset("/identity/v2/user-profile/reset-password", "rita", h.Domain)
	reset("/identity/v1/user/reset-password", "rita", h.Domain)
	h.NoMailTo(rita)
	// Asking changes nothing the owner relies on: the old password works.
	if d := h.UserDoc(h.Domain, "rita"); len(d["required_actions"].(bson.A)) != 0 {
		t.Fatalf("reset request made actions pending: %v", d["required_actions"])
	}
	h.Login("rita", identitytest.UserPassword)

	// The link reaches only the profile and sets a password without the current one.
	link := h.Anon.As(identitytest.LinkToken(t, m))
	link.Call("/identity/v2/user-profile/get", nil).OK(nil)
	link.Call("/identity/v2/token/check", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	link.Call("/identity/v1/user/get", map[string]any{"user_id": "rita", "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	link.Call("/identity/v2/api-key/create", map[string]any{"name": "x"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	link.Call("/identity/v2/user-profile/update", map[string]any{"password": "Rita-Passw0rd9"}).OK(nil)
	link.Call("/identity/v2/user-profile/get", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	p := h.Login("rita", "Rita-Passw0rd9")
	var g map[string]any
	h.Anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "USER"}).OK(&g)
	if g["access_token"] == "" {
		t.Fatalf("grant = %v", g)
	}

	// v1 answers the same way.
	for _, id := range []string{"vera", "uma", "ghost"} {
		reset("/identity/v1/user/reset-password", id, h.Domain)
	}
	h.MailTo(vera, "reset_password")
	h.NoMailTo(uma)
	h.Anon.Call("/identity/v2/user-profile/reset-password", map[string]any{"user_id": "rita"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Anon.Call("/identity/v1/user/reset-password", map[string]any{"domain_id": h.Domain}).Fails(http.StatusBadRequest, errs.RequiredParameter)
}

func TestProfileWorkspaces(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(userprofile.Routes, workspace.Routes, rolebinding.Routes))
	ids := map[string]string{}
	for _, name := range []string{"Alpha", "Beta", "Gamma"} {
		var w map[string]any
		h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": name, "tags": map[string]any{"n": name}}).OK(&w)
		ids[name] = w["workspace_id"].(string)
	}
	h.Admin.Call("/identity/v2/workspace/disable", map[string]any{"workspace_id": ids["Gamma"]}).OK(nil)
	h.SeedUser(h.Domain, "wes")
	for _, name := range []string{"Beta", "Gamma"} {
		h.Admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": "wes", "role_id": "managed-workspace-member", "resource_group": "WORKSPACE", "workspace_id": ids[name]}).OK(nil)
	}
	type mine struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	var l mine
	h.As("wes").Call("/identity/v2/user-profile/get-workspaces", nil).OK(&l)
	if l.TotalCount != 1 || l.Results[0]["workspace_id"] != ids["Beta"] || l.Results[0]["role_type"] != "WORKSPACE_MEMBER" ||
		l.Results[0]["role_id"] != "managed-workspace-member" || l.Results[0]["role_name"] != "Workspace Member" {
		t.Fatalf("member's workspaces = %v", l)
	}
	want := []string{"created_at", "created_by", "domain_id", "is_dormant", "is_managed", "last_synced_at", "name", "reference_id", "role_id",
		"role_name", "role_type", "state", "tags", "workspace_id"}
	if got := identitytest.FieldNames(l.Results[0]); !slices.Equal(got, want) {
		t.Fatalf("MyWorkspaceInfo keys = %v", got)
	}
	// A domain admin may enter every enabled workspace, as owner.
	h.Admin.Call("/identity/v2/user-profile/get-workspaces", nil).OK(&l)
	if l.TotalCount != 2 || l.Results[0]["name"] != "Alpha" || l.Results[1]["name"] != "Beta" || l.Results[0]["role_type"] != "WORKSPACE_OWNER" {
		t.Fatalf("admin's workspaces = %v", l)
	}
	// Another domain's admin sees none of them.
	_, boss := h.NewDomain("other")
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
	h := identitytest.New(t, userprofile.Routes)
	h.SeedUser(h.Domain, "flo")
	flo := h.As("flo")
	for i := range 10 { // both flows count
		addr := h.Email(fmt.Sprintf("flo-%d", i))
		if i%2 == 0 {
			flo.Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": identitytest.UserPassword, "email": addr}).OK(nil)
			h.MailTo(addr, "verify_email")
			continue
		}
		flo.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": addr}}).OK(nil)
		h.MailTo(addr, "mfa_code")
	}
	before := h.UserDoc(h.Domain, "flo")
	codes := h.DBFrozen(core.CodesCollection)
	over := h.Email("flo-over")
	flo.Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": identitytest.UserPassword, "email": over}).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	flo.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "EMAIL", "options": map[string]any{"email": over}}).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	h.Same(h.Domain, "flo", before)
	codes()
	h.NoMailTo(over)
	// Another user is not affected.
	h.SeedUser(h.Domain, "gil")
	gil := h.Email("gil")
	h.As("gil").Call("/identity/v2/user-profile/verify-email", map[string]any{"current_password": identitytest.UserPassword, "email": gil}).OK(nil)
	h.MailTo(gil, "verify_email")
}

// TestProfileOTP: OTP MFA end to end with codes computed as an
// authenticator app does: enable answers the secret once, confirm turns it
// on, login needs a fresh code, a code works once, and disable needs a
// request and then a code.
func TestProfileOTP(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, userprofile.Routes)
	h.SeedUser(h.Domain, "otto")
	otto := h.As("otto")
	issue := func(body map[string]any) *testkit.Response {
		body["credentials"] = map[string]any{"user_id": "otto", "password": identitytest.UserPassword}
		body["domain_id"] = h.Domain
		return h.Anon.Call("/identity/v2/token/issue", body)
	}
	var u map[string]any
	otto.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "OTP"}).OK(&u)
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
	if strings.Contains(h.Dump(core.UsersCollection), secret) {
		t.Fatal("the OTP secret is stored in the clear")
	}
	code := func(at time.Duration) string {
		c, err := verification.OTPCode(secret, time.Now().Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	identitytest.WaitForFreshOTPStep(t)

	// confirm: wrong codes count and change nothing; a right one turns it on.
	before := h.UserDoc(h.Domain, "otto")
	otto.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": identitytest.WrongCode(code(0))}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	h.Same(h.Domain, "otto", before)
	issue(map[string]any{"auth_type": "LOCAL"}).OK(nil) // not on yet
	otto.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code(0)}).OK(&u)
	otto = h.Reissued("otto") // the change ended otto's session
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
	if d := h.UserDoc(h.Domain, "otto"); d["otp_secret"] != nil || d["otp_pending"] != nil {
		t.Fatalf("secret kept after disable: %v", d)
	}
	issue(map[string]any{"auth_type": "LOCAL"}).OK(nil)
}

// TestOTPDisableGuessesNotForgiven: asking disable-mfa again does not buy
// more guesses at the secret; an admin's disable-mfa is the way out.
func TestOTPDisableGuessesNotForgiven(t *testing.T) {
	t.Parallel()
	h := identitytest.New(t, identitytest.Mount(userprofile.Routes, user.Routes))
	h.SeedUser(h.Domain, "oona")
	oona := h.As("oona")
	var u map[string]any
	oona.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "OTP", "options": map[string]any{}}).OK(&u)
	uri, _ := url.Parse(fmt.Sprint(u["mfa"].(map[string]any)["options"].(map[string]any)["otp_qrcode_uri"]))
	code := func(at time.Duration) string {
		c, err := verification.OTPCode(uri.Query().Get("secret"), time.Now().Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	identitytest.WaitForFreshOTPStep(t)
	oona.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code(0)}).OK(nil)
	oona = h.Reissued("oona") // the change ended oona's session

	oona.Call("/identity/v2/user-profile/disable-mfa", nil).OK(nil)
	for range 5 {
		oona.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": identitytest.WrongCode(code(30 * time.Second))}).Fails(http.StatusBadRequest, errs.InvalidVerifyCode)
	}
	oona.Call("/identity/v2/user-profile/disable-mfa", nil).OK(nil)
	oona.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code(30 * time.Second)}).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	oona.Call("/identity/v2/user-profile/get", nil).OK(&u)
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "ENABLED" {
		t.Fatalf("MFA turned off after the guesses ran out: %v", mfa)
	}
	h.Admin.Call("/identity/v2/user/disable-mfa", map[string]any{"user_id": "oona"}).OK(&u)
	if mfa := u["mfa"].(map[string]any); mfa["state"] != "DISABLED" || h.UserDoc(h.Domain, "oona")["otp_secret"] != nil {
		t.Fatalf("after the admin's disable-mfa: %v", mfa)
	}
}
