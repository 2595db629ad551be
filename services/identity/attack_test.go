package identity_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/verification"
)

// The attacks of issue 21 through the HTTP API, each as an attacker runs
// it. Bursts are small (20 requests) and bounded in time by the harness's
// limits (MaxLoginFailures 3, a 5-try code).

// from is an anonymous client whose requests come from addr (the
// server's view of the peer), as from another machine.
func (h *harness) from(addr string) *testkit.Client {
	return testkit.NewClient(h.T, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = addr + ":40000"
		h.Handler.ServeHTTP(w, r)
	}))
}

// codeOf is the error code of a response ("" for a 200).
func codeOf(r *testkit.Response) string {
	if r.Status == http.StatusOK {
		return ""
	}
	var body struct {
		Detail struct{ Code string } `json:"detail"`
	}
	_ = json.Unmarshal(r.Body, &body)
	return body.Detail.Code
}

// burst sends n calls at once and counts the answers by error code ("" for
// a 200).
func burst(n int, call func(i int) *testkit.Response) map[string]int {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]int{}
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			c := codeOf(call(i))
			mu.Lock()
			out[c]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return out
}

func (h *harness) issueFrom(c *testkit.Client, userID, password string) *testkit.Response {
	return c.Call("/identity/v2/token/issue", map[string]any{
		"credentials": map[string]any{"user_id": userID, "password": password}, "auth_type": "LOCAL", "domain_id": h.Domain,
	})
}

// TestLoginBurstJudgesAtMostTheLimit: 20 wrong passwords at once, limit
// 3: three are compared, the rest are refused unjudged, and the right
// password from the same source is refused after. An unknown user answers
// exactly the same. The owner, at another address, still logs in.
func TestLoginBurstJudgesAtMostTheLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.SeedUser(h.Domain, "bea")
	before := h.UserDoc(h.Domain, "bea")
	attacker := h.from("203.0.113.7")
	for _, user := range []string{"bea", "ghost"} {
		got := burst(20, func(int) *testkit.Response { return h.issueFrom(attacker, user, "Wrong-Passw0rd") })
		if got[errs.AuthenticationFailure] != 3 || got[errs.LoginBlocked] != 17 {
			t.Fatalf("%s: 20 wrong passwords at once answered %v, want 3 %s and 17 %s", user, got, errs.AuthenticationFailure, errs.LoginBlocked)
		}
	}
	h.issueFrom(attacker, "bea", identitytest.UserPassword).Fails(http.StatusUnauthorized, errs.LoginBlocked)
	h.issueFrom(attacker, "ghost", identitytest.UserPassword).Fails(http.StatusUnauthorized, errs.LoginBlocked)
	h.Same(h.Domain, "bea", before)
	// The stranger blocked itself, not the owner.
	h.issueFrom(h.from("198.51.100.20"), "bea", identitytest.UserPassword).OK(nil)
}

// TestLoginRightPasswordInsideBurst: a right password sent inside a burst
// of wrong ones is judged only if it claimed one of the limit's attempts:
// from a fresh start, 19 wrong passwords and the right one at once are
// judged at most the limit, plus one limit more after the right one
// logged in (a login frees its source's own attempts), the rest refused
// unjudged. Sent once the limit is spent, the right password among wrong
// ones logs in nowhere. (Judged then recorded, as before issue 21, every
// one of the 20 was compared, and the right one logged in.)
func TestLoginRightPasswordInsideBurst(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.SeedUser(h.Domain, "cal")
	got := burst(20, func(i int) *testkit.Response {
		pw := "Wrong-Passw0rd"
		if i == 10 {
			pw = identitytest.UserPassword
		}
		return h.issueFrom(h.from("203.0.113.18"), "cal", pw)
	})
	if got[errs.AuthenticationFailure] > 6 || got[errs.AuthenticationFailure]+got[""]+got[errs.LoginBlocked] != 20 {
		t.Fatalf("a burst with the right password inside answered %v: at most 6 %s (the limit, once more after a login), the rest %s",
			got, errs.AuthenticationFailure, errs.LoginBlocked)
	}

	h.SeedUser(h.Domain, "cid")
	attacker := h.from("203.0.113.8")
	for range 3 {
		h.issueFrom(attacker, "cid", "Wrong-Passw0rd").Fails(http.StatusUnauthorized, errs.AuthenticationFailure)
	}
	got = burst(20, func(i int) *testkit.Response {
		pw := "Wrong-Passw0rd"
		if i%5 == 4 {
			pw = identitytest.UserPassword
		}
		return h.issueFrom(attacker, "cid", pw)
	})
	if got[errs.LoginBlocked] != 20 {
		t.Fatalf("a burst past the limit answered %v, want 20 %s", got, errs.LoginBlocked)
	}
}

// TestLoginSpreadOverSources: guesses from many addresses are bounded per
// account too (10 times the limit in the window).
func TestLoginSpreadOverSources(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.SeedUser(h.Domain, "dee")
	judged := 0
	for i := range 11 {
		src := h.from(fmt.Sprintf("203.0.113.%d", 100+i))
		for range 3 {
			if codeOf(h.issueFrom(src, "dee", "Wrong-Passw0rd")) == errs.AuthenticationFailure {
				judged++
			}
		}
	}
	if judged != 30 {
		t.Fatalf("%d guesses judged from 11 addresses, want 30 (the account bound)", judged)
	}
	h.issueFrom(h.from("198.51.100.21"), "dee", identitytest.UserPassword).Fails(http.StatusUnauthorized, errs.LoginBlocked)
}

// TestCodeBurstJudgesAtMostFive: 20 guesses at an e-mail code at once
// compare five; the right code after them is refused and nothing is
// verified.
func TestCodeBurstJudgesAtMostFive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.SeedUser(h.Domain, "eve")
	eve := h.As("eve")
	addr := h.Email("eve")
	eve.Call("/identity/v2/user-profile/verify-email", map[string]any{"email": addr, "current_password": identitytest.UserPassword}).OK(nil)
	code := h.MailTo(addr, "verify_email").Data["code"]
	before := h.UserDoc(h.Domain, "eve")
	got := burst(20, func(int) *testkit.Response {
		return eve.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": identitytest.WrongCode(code)})
	})
	if got[errs.InvalidVerifyCode] != 5 || got[errs.TooManyRequests] != 15 {
		t.Fatalf("20 guesses at once answered %v, want 5 %s and 15 %s", got, errs.InvalidVerifyCode, errs.TooManyRequests)
	}
	eve.Call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	h.Same(h.Domain, "eve", before)
}

// TestOTPBurstAtLogin: with the password known, 20 OTP guesses at once
// at login compare three (the login throttle), and the right code after
// them does not log in.
func TestOTPBurstAtLogin(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.SeedUser(h.Domain, "ole")
	ole := h.As("ole")
	code := h.enableOTP(ole)
	attacker := h.from("203.0.113.9")
	mfa := func(c string) *testkit.Response {
		return attacker.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "ole", "password": identitytest.UserPassword},
			"auth_type": "MFA", "verify_code": c, "domain_id": h.Domain})
	}
	got := burst(20, func(int) *testkit.Response { return mfa(identitytest.WrongCode(code(0))) })
	if got[errs.InvalidVerifyCode] != 3 || got[errs.LoginBlocked] != 17 {
		t.Fatalf("20 OTP guesses at login answered %v, want 3 %s and 17 %s", got, errs.InvalidVerifyCode, errs.LoginBlocked)
	}
	mfa(code(0)).Fails(http.StatusUnauthorized, errs.LoginBlocked)
}

// TestOTPConfirmBurst: 20 guesses at once at confirm-mfa (disable)
// compare five.
func TestOTPConfirmBurst(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.SeedUser(h.Domain, "oz")
	code := h.enableOTP(h.As("oz"))
	oz := h.Reissued("oz")
	oz.Call("/identity/v2/user-profile/disable-mfa", nil).OK(nil)
	got := burst(20, func(int) *testkit.Response {
		return oz.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": identitytest.WrongCode(code(30 * time.Second))})
	})
	if got[errs.InvalidVerifyCode] != 5 || got[errs.TooManyRequests] != 15 {
		t.Fatalf("20 guesses at once answered %v, want 5 %s and 15 %s", got, errs.InvalidVerifyCode, errs.TooManyRequests)
	}
	var u map[string]any
	oz.Call("/identity/v2/user-profile/get", nil).OK(&u)
	if u["mfa"].(map[string]any)["state"] != "ENABLED" {
		t.Fatal("MFA turned off by a burst of guesses")
	}
}

// enableOTP turns OTP MFA on for c's user and returns its code at an
// offset from now (the step is fresh for 20 s). c's session ends with the
// change: use reissued for the user afterwards.
func (h *harness) enableOTP(c *testkit.Client) func(time.Duration) string {
	h.T.Helper()
	var u map[string]any
	c.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"mfa_type": "OTP", "current_password": identitytest.UserPassword}).OK(&u)
	code := otpCodes(h.T, u)
	identitytest.WaitForFreshOTPStep(h.T)
	c.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code(0)}).OK(nil)
	return code
}

// otpCodes reads the secret of an enable-mfa (OTP) answer: the code an app
// shows at an offset from now.
func otpCodes(t *testing.T, enabled map[string]any) func(time.Duration) string {
	t.Helper()
	uri, err := url.Parse(fmt.Sprint(enabled["mfa"].(map[string]any)["options"].(map[string]any)["otp_qrcode_uri"]))
	if err != nil {
		t.Fatal(err)
	}
	return func(at time.Duration) string {
		c, err := verification.OTPCode(uri.Query().Get("secret"), time.Now().Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// TestSessionsEndAtEveryService: a password set by an admin or by the
// user, MFA turned off, a user disabled (and enabled again) or deleted
// (and created again) ends every access and refresh token issued before,
// at board (a service that verifies offline and checks with identity)
// within the revocation bound; a rotated refresh token used again ends
// its chain.
func TestSessionsEndAtEveryService(t *testing.T) {
	t.Parallel() // its waits are the check cache's lifetime: side by side with the others
	h := newHarness(t)
	b := boardBehindIdentity(t, h)
	// admin makes an enabled domain admin and answers a DOMAIN token and
	// a refresh token of another login.
	admin := func(userID string) (token, refresh string) {
		h.DirectUser(h.Domain, userID, "Sess-Passw0rd1")
		identitytest.BindRole(h.Admin, userID, "managed-domain-admin", "")
		return h.Scoped(userID, "Sess-Passw0rd1", "DOMAIN", ""), h.Login(userID, "Sess-Passw0rd1").RefreshToken
	}
	grant := func(refresh string) *testkit.Response {
		return h.Anon.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": refresh, "scope": "USER"})
	}

	t.Run("password set by an admin", func(t *testing.T) {
		t.Parallel()
		token, refresh := admin("rita")
		revoked(t, b, token, func() {
			h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "rita", "password": "Reset-Passw0rd1"}).OK(nil)
		})
		grant(refresh).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
		b.As(h.Scoped("rita", "Reset-Passw0rd1", "DOMAIN", "")).Call(boardRead, nil).OK(nil)
	})

	t.Run("own password changed", func(t *testing.T) {
		t.Parallel()
		token, refresh := admin("otis")
		revoked(t, b, token, func() {
			h.Anon.As(h.Login("otis", "Sess-Passw0rd1").AccessToken).Call("/identity/v2/user-profile/update",
				map[string]any{"password": "Other-Passw0rd1", "current_password": "Sess-Passw0rd1"}).OK(nil)
		})
		grant(refresh).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	})

	t.Run("MFA turned off by an admin", func(t *testing.T) {
		t.Parallel()
		token, refresh := admin("mona")
		_, err := h.DB.Collection(core.UsersCollection).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: core.UserKey(h.Domain, "mona")}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "mfa", Value: core.MFA{State: core.Enabled, MFAType: "EMAIL", Options: map[string]any{"email": h.Email("mona")}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		revoked(t, b, token, func() { h.Admin.Call("/identity/v2/user/disable-mfa", map[string]any{"user_id": "mona"}).OK(nil) })
		grant(refresh).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	})

	t.Run("disabled, then enabled again", func(t *testing.T) {
		t.Parallel()
		token, refresh := admin("dina")
		revoked(t, b, token, func() { h.Admin.Call("/identity/v2/user/disable", map[string]any{"user_id": "dina"}).OK(nil) })
		h.Admin.Call("/identity/v2/user/enable", map[string]any{"user_id": "dina"}).OK(nil)
		grant(refresh).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	})

	t.Run("deleted, then created again", func(t *testing.T) {
		t.Parallel()
		token, refresh := admin("remy")
		revoked(t, b, token, func() {
			h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": "remy"}).OK(nil)
			h.Admin.Call("/identity/v2/user/create", map[string]any{"user_id": "remy", "password": "Sess-Passw0rd1", "auth_type": "LOCAL"}).OK(nil)
			identitytest.BindRole(h.Admin, "remy", "managed-domain-admin", "")
		})
		grant(refresh).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	})

	t.Run("refresh token used twice", func(t *testing.T) {
		t.Parallel()
		h.DirectUser(h.Domain, "rudy", "Sess-Passw0rd1")
		first := h.Login("rudy", "Sess-Passw0rd1")
		var second identitytest.Pair
		h.Anon.Call("/identity/v2/token/refresh", map[string]any{"refresh_token": first.RefreshToken}).OK(&second)
		// The spent token grants nothing and, used again, ends the chain.
		h.Anon.Call("/identity/v2/token/refresh", map[string]any{"refresh_token": first.RefreshToken}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
		grant(second.RefreshToken).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
		h.Anon.Call("/identity/v2/token/refresh", map[string]any{"refresh_token": second.RefreshToken}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
		h.Anon.As(second.AccessToken).Call("/identity/v2/user-profile/get", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
		h.Login("rudy", "Sess-Passw0rd1") // signing in again works
	})

	t.Run("a spent refresh token grants nothing", func(t *testing.T) {
		t.Parallel()
		h.DirectUser(h.Domain, "gus", "Sess-Passw0rd1")
		first := h.Login("gus", "Sess-Passw0rd1")
		h.Anon.Call("/identity/v2/token/refresh", map[string]any{"refresh_token": first.RefreshToken}).OK(nil)
		grant(first.RefreshToken).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	})
}

// TestNoTakeoverFromAToken: with only a user's access token, the e-mail
// address, the password and MFA stay out of reach; with the current
// password the address changes and the old address is told.
func TestNoTakeoverFromAToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	old := h.Email("tom")
	h.SeedUser(h.Domain, "tom", identitytest.WithEmail(old, true))
	tom := h.As("tom")
	before := h.UserDoc(h.Domain, "tom")
	stolen := h.Email("thief")
	for _, c := range []struct {
		path string
		body map[string]any
		code string
	}{
		{"/identity/v2/user-profile/update", map[string]any{"email": stolen}, errs.RequiredParameter},
		{"/identity/v2/user-profile/update", map[string]any{"email": stolen, "current_password": "Wrong-Passw0rd1"}, errs.PasswordNotMatched},
		{"/identity/v2/user-profile/verify-email", map[string]any{"email": stolen}, errs.RequiredParameter},
		{"/identity/v2/user-profile/enable-mfa", map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"email": stolen}}, errs.RequiredParameter},
		{"/identity/v2/user-profile/enable-mfa", map[string]any{"mfa_type": "OTP"}, errs.RequiredParameter},
		{"/identity/v1/user/update", map[string]any{"user_id": "tom", "domain_id": h.Domain, "email": stolen}, errs.RequiredParameter},
		{"/identity/v1/user/verify-email", map[string]any{"user_id": "tom", "domain_id": h.Domain, "email": stolen}, errs.RequiredParameter},
		{"/identity/v1/user/enable-mfa", map[string]any{"user_id": "tom", "domain_id": h.Domain, "mfa_type": "EMAIL", "options": map[string]any{"email": stolen}}, errs.RequiredParameter},
	} {
		tom.Call(c.path, c.body).Fails(http.StatusBadRequest, c.code)
	}
	h.Same(h.Domain, "tom", before)
	h.NoMailTo(stolen)

	// With the current password: changed, and the old address is told.
	var u map[string]any
	tom.Call("/identity/v2/user-profile/update", map[string]any{"email": stolen, "current_password": identitytest.UserPassword}).OK(&u)
	if u["email"] != stolen || u["email_verified"] != false {
		t.Fatalf("after the change: %v", u)
	}
	if m := h.MailTo(old, "generic"); m.Data["subject"] == "" || m.Data["name"] != "" {
		t.Fatalf("notice to the old address: %+v", m)
	}
}

// TestAdminTokenCannotTakeItsOwnAccount: a domain admin's access token
// does not change its own password, address or MFA through the admin
// operations without the current password.
func TestAdminTokenCannotTakeItsOwnAccount(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	before := h.UserDoc(h.Domain, "admin")
	h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "admin", "password": "Taken-Passw0rd1"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "admin", "email": h.Email("thief")}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call("/identity/v2/user/verify-email", map[string]any{"user_id": "admin", "email": h.Email("thief")}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call("/identity/v1/user/update", map[string]any{"user_id": "admin", "domain_id": h.Domain, "password": "Taken-Passw0rd1"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Same(h.Domain, "admin", before)
	h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "admin", "password": "Taken-Passw0rd1", "current_password": identitytest.AdminPassword}).OK(nil)
}

// TestAPIKeyChangesNoCredentials: an admin's API key sets no password and
// changes no address or MFA, its own user's or anyone's, on v1 or v2.
func TestAPIKeyChangesNoCredentials(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.SeedUser(h.Domain, "kim", identitytest.WithEmail(h.Email("kim"), true), func(u *core.User) {
		u.MFA = core.MFA{State: core.Enabled, MFAType: "EMAIL", Options: map[string]any{"email": h.Email("kim")}}
	})
	var k map[string]any
	h.Admin.Call("/identity/v2/api-key/create", map[string]any{"name": "ci"}).OK(&k)
	byKey := h.Anon.As(k["api_key"].(string))
	admin, kim := h.UserDoc(h.Domain, "admin"), h.UserDoc(h.Domain, "kim")
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/identity/v2/user/update", map[string]any{"user_id": "admin", "password": "Taken-Passw0rd1"}},
		{"/identity/v2/user/update", map[string]any{"user_id": "admin", "password": "Taken-Passw0rd1", "current_password": identitytest.AdminPassword}},
		{"/identity/v2/user/update", map[string]any{"user_id": "kim", "password": "Taken-Passw0rd1"}},
		{"/identity/v2/user/update", map[string]any{"user_id": "kim", "email": h.Email("thief")}},
		{"/identity/v2/user/update", map[string]any{"user_id": "kim", "reset_password": true}},
		{"/identity/v2/user/verify-email", map[string]any{"user_id": "kim", "email": h.Email("thief")}},
		{"/identity/v2/user/disable-mfa", map[string]any{"user_id": "kim"}},
		{"/identity/v1/user/update", map[string]any{"user_id": "admin", "domain_id": h.Domain, "password": "Taken-Passw0rd1"}},
		{"/identity/v1/user/update", map[string]any{"user_id": "kim", "domain_id": h.Domain, "email": h.Email("thief")}},
		{"/identity/v1/user/verify-email", map[string]any{"user_id": "kim", "domain_id": h.Domain, "email": h.Email("thief"), "force": true}},
		{"/identity/v1/user/enable-mfa", map[string]any{"user_id": "admin", "domain_id": h.Domain, "mfa_type": "OTP"}},
		{"/identity/v1/user/disable-mfa", map[string]any{"user_id": "kim", "domain_id": h.Domain, "force": true}},
		{"/identity/v2/user-profile/update", map[string]any{"password": "Taken-Passw0rd1", "current_password": identitytest.AdminPassword}},
	} {
		byKey.Call(c.path, c.body).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	h.Same(h.Domain, "admin", admin)
	h.Same(h.Domain, "kim", kim)
	h.NoMailTo(h.Email("thief"))
}

// TestUserTextChecked: a name with control, format or line break
// characters, or too long, is refused and nothing is stored; a name never
// reaches a mail to an address the user has not verified.
func TestUserTextChecked(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.SeedUser(h.Domain, "nia")
	nia := h.As("nia")
	before := h.UserDoc(h.Domain, "nia")
	users := h.Count(core.UsersCollection, nil)
	long := ""
	for range 129 {
		long += "a"
	}
	for _, name := range []string{"Nia\r\nBcc: x@example.com", "Nia\u202egnp.exe", "Nia\x00", "Nia\tTab", long, "Nia\u200b"} {
		nia.Call("/identity/v2/user-profile/update", map[string]any{"name": name}).Fails(http.StatusBadRequest, errs.InvalidParameter)
		h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": "nia", "name": name}).Fails(http.StatusBadRequest, errs.InvalidParameter)
		h.Admin.Call("/identity/v2/user/create", map[string]any{"user_id": "new-one", "name": name, "password": "New-Passw0rd1", "auth_type": "LOCAL"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
		h.Admin.Call("/identity/v1/user/create", map[string]any{"user_id": "new-one", "domain_id": h.Domain, "name": name, "password": "New-Passw0rd1", "backend": "LOCAL"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	}
	h.Same(h.Domain, "nia", before)
	if n := h.Count(core.UsersCollection, nil); n != users {
		t.Fatalf("%d users after refused creations, want %d", n, users)
	}

	// A valid name that reads as an instruction goes to no unverified
	// address: not with an e-mail code, not with an MFA code, not with an
	// invitation.
	bait := "Your account is locked, call +1 555 0100"
	nia.Call("/identity/v2/user-profile/update", map[string]any{"name": bait}).OK(nil)
	victim := h.Email("victim")
	nia.Call("/identity/v2/user-profile/verify-email", map[string]any{"email": victim, "current_password": identitytest.UserPassword}).OK(nil)
	if m := h.MailTo(victim, "verify_email"); m.Data["name"] != "" {
		t.Fatalf("the name went to an unverified address: %+v", m.Data)
	}
	other := h.Email("victim2")
	nia.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"email": other}, "current_password": identitytest.UserPassword}).OK(nil)
	if m := h.MailTo(other, "mfa_code"); m.Data["name"] != "" {
		t.Fatalf("the name went to an unverified MFA address: %+v", m.Data)
	}
	invited := h.Email("invited")
	h.Admin.Call("/identity/v2/user/create", map[string]any{"user_id": "inv", "name": bait, "email": invited, "reset_password": true, "auth_type": "LOCAL"}).OK(nil)
	if m := h.MailTo(invited, "invite"); m.Data["name"] != "" {
		t.Fatalf("the name went to an invited, unverified address: %+v", m.Data)
	}
}

// TestPersonSystemGrantIsNotAService: the root domain admin's SYSTEM
// grant reads no secret data and reaches into no other domain; the
// service credential does both.
func TestPersonSystemGrantIsNotAService(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const ta = "/identity/v2/trusted-account/"
	other, otherAdmin := h.NewDomain("tenant")
	var a map[string]any
	otherAdmin.Call(ta+"create", map[string]any{"name": "AWS", "data": map[string]any{"account_id": "1"}, "provider": "aws", "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIATENANT", "aws_secret_access_key": "tenant-s3cr3t"}, "resource_group": "DOMAIN"}).OK(&a)
	person := h.Anon.As(h.Scoped("admin", identitytest.AdminPassword, "SYSTEM", ""))
	keys := h.Count(core.APIKeysCollection, nil)
	read := map[string]any{"trusted_account_id": a["trusted_account_id"], "domain_id": other}
	person.Call(ta+"get-secret-data", read).Fails(http.StatusForbidden, errs.PermissionDenied)
	person.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": a["trusted_account_id"], "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	person.Call("/identity/v1/api-key/create", map[string]any{"user_id": "boss", "domain_id": other}).Fails(http.StatusNotFound, errs.NotFoundCode)
	person.Call("/identity/v1/user/update", map[string]any{"user_id": "boss", "domain_id": other, "name": "pwned"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := h.Count(core.APIKeysCollection, nil); n != keys {
		t.Fatalf("%d API keys after refused creations, want %d", n, keys)
	}
	h.System.Call(ta+"get-secret-data", read).OK(nil)
}

// rebuilt is identity built again on the harness's database with cfg
// changed by edit (a restart with new settings).
func (h *harness) rebuilt(edit func(*identity.Config)) *testkit.Client {
	h.T.Helper()
	cipher, _ := identity.NewCipher(h.CipherSpec)
	cfg := identity.Config{PasswordCost: bcrypt.MinCost, Signer: h.signer, Cipher: cipher, AdminUserID: "admin", AdminPassword: identitytest.AdminPassword, LoginBlock: time.Hour, MaxLoginFailures: 3}
	edit(&cfg)
	log := slog.New(slog.DiscardHandler)
	bus, err := events.Connect(context.Background(), testkit.Get().NATS.URL, "identity-test", log)
	if err != nil {
		h.T.Fatal(err)
	}
	h.T.Cleanup(bus.Close)
	b, err := identity.Build(context.Background(), app.Deps{DB: h.DB, Events: bus, Log: log}, cfg)
	if err != nil {
		h.T.Fatal(err)
	}
	srv, err := server.New(server.Options{Name: "identity", Logger: log, Auth: b.Service.Auth, Documents: b.Service.Documents}, b.Service.Routes...)
	if err != nil {
		h.T.Fatal(err)
	}
	return testkit.NewClient(h.T, srv.Handler())
}

// TestSystemScopeFollowsTheRootDomainID: renaming the root domain in the
// configuration does not make another domain's admin a SYSTEM admin.
func TestSystemScopeFollowsTheRootDomainID(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.NewDomain("lookalike")
	again := h.rebuilt(func(c *identity.Config) { c.RootDomain = "lookalike" })
	var p identitytest.Pair
	again.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "boss", "password": "Boss-Passw0rd"},
		"auth_type": "LOCAL", "domain_id": domainNamed(t, h, "lookalike")}).OK(&p)
	again.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": "SYSTEM"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	// The root domain's admin still takes it.
	root := h.Login("admin", identitytest.AdminPassword)
	again.Call("/identity/v2/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": root.RefreshToken, "scope": "SYSTEM"}).OK(nil)
}

func domainNamed(t *testing.T, h *harness, name string) string {
	t.Helper()
	var d struct {
		DomainID string `bson:"domain_id"`
	}
	if err := h.DB.Collection(core.DomainsCollection).FindOne(context.Background(), bson.D{{Key: "name", Value: name}}).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d.DomainID
}

// TestSigningKeyRotation: with a new signing key and the old one kept to
// verify, the JWK set holds both, new tokens are signed with the new key
// and the old key's API keys and SYSTEM tokens keep working; once the old
// key is withdrawn they stop. SYSTEM tokens expire.
func TestSigningKeyRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	oldKey := h.signer
	var k map[string]any
	h.Admin.Call("/identity/v2/api-key/create", map[string]any{"name": "before"}).OK(&k)
	oldAPIKey, oldSystem := k["api_key"].(string), h.built.SystemToken

	newKey, err := auth.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	rotating := h.rebuilt(func(c *identity.Config) { c.Signer, c.VerifyKeys = newKey, []*auth.Signer{oldKey} })
	var set auth.JWKS
	rotating.Call("/identity/v2/token/get-public-keys", nil).OK(&set)
	if len(set.Keys) != 2 || set.Keys[0].Kid != newKey.KeyID || set.Keys[1].Kid != oldKey.KeyID {
		t.Fatalf("JWK set during the rotation: %+v", set.Keys)
	}
	var p identitytest.Pair
	rotating.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "admin", "password": identitytest.AdminPassword},
		"auth_type": "LOCAL", "domain_id": h.Domain}).OK(&p)
	onlyNew, err := auth.NewVerifier(auth.JWKSOf(newKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := onlyNew.Authenticate(context.Background(), p.AccessToken); err != nil {
		t.Fatalf("a new token is not signed with the new key: %v", err)
	}
	rotating.As(oldAPIKey).Call("/identity/v2/api-key/list", nil).OK(nil)
	rotating.As(oldSystem).Call("/identity/v2/domain/list", nil).OK(nil)
	rotating.As(p.AccessToken).Call("/identity/v2/user-profile/get", nil).OK(nil)

	withdrawn := h.rebuilt(func(c *identity.Config) { c.Signer = newKey })
	withdrawn.As(oldAPIKey).Call("/identity/v2/api-key/list", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	withdrawn.As(oldSystem).Call("/identity/v2/domain/list", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	withdrawn.As(p.AccessToken).Call("/identity/v2/user-profile/get", nil).OK(nil)

	// The service credential expires (30 days by default).
	old, err := auth.NewVerifier(auth.JWKSOf(oldKey))
	if err != nil {
		t.Fatal(err)
	}
	sys, err := old.Parse(oldSystem)
	if err != nil || sys.ExpiresAt == nil || sys.ExpiresAt.Sub(sys.IssuedAt.Time) > 30*24*time.Hour {
		t.Fatalf("the SYSTEM token does not expire within 30 days: %+v %v", sys, err)
	}
}
