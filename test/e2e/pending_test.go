package e2e

// The tests of identity and the mailer in the running stack: every token
// here is issued by identity to a client that logged in, never minted by
// the suite.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// TestBootstrapAdminLogsIn: the first domain and its admin come from
// identity's configuration, and the upstream two-step login works.
func TestBootstrapAdminLogsIn(t *testing.T) {
	needs(t, "identity", "board")
	board := direct(st.first(t, "board").url)
	root := domainIDOf(t, "root")

	// A wrong password and an unknown user get the same answer.
	issue(t, root, adminUserID, "Wrong-Password-1").Fails(http.StatusUnauthorized, "ERROR_AUTHENTICATION_FAILURE")
	issue(t, root, "nobody-"+randHex(3)+"@example.com", "Wrong-Password-1").Fails(http.StatusUnauthorized, "ERROR_AUTHENTICATION_FAILURE")

	admin := login(t, board, root, adminUserID, adminPassword, "DOMAIN")
	admin.call("/board/v1/board/list", map[string]any{}).OK(nil)
	admin.call("/board/v1/post/list", map[string]any{}).OK(nil)
	// A DOMAIN token may not write boards, nor the SYSTEM grant of the
	// root admin (a person's, issue 21); the service credential may.
	admin.call("/board/v1/board/create", map[string]any{"name": "not mine"}).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
	rootSystem(t, board).call("/board/v1/board/create", map[string]any{"name": "not mine"}).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
	sys := serviceCred(t, board)
	var b boardInfo
	sys.call("/board/v1/board/create", map[string]any{"name": "Bootstrap", "categories": []string{"x"}}).OK(&b)
	var p postInfo
	admin.call("/board/v1/post/create", newPost(b.BoardID, "by the root admin", "x")).OK(&p)
	if p.DomainID != root || p.UserID != adminUserID && p.Writer != adminUserID {
		t.Fatalf("post of the root admin = %+v", p)
	}

	// Bootstrap runs once: after a restart the admin still logs in with the
	// same password, and the root domain keeps its id.
	restart(t, st.first(t, "identity"), false, 0)
	if got := domainIDOf(t, "root"); got != root {
		t.Fatalf("root domain id changed over a restart: %s, was %s", got, root)
	}
	again := login(t, board, root, adminUserID, adminPassword, "DOMAIN")
	again.call("/board/v1/post/get", map[string]any{"post_id": p.PostID}).OK(nil)
	var users struct {
		Results []struct {
			UserID string `json:"user_id"`
		} `json:"results"`
	}
	login(t, identityAt(t), root, adminUserID, adminPassword, "DOMAIN").call("/identity/v2/user/list", map[string]any{"user_id": adminUserID}).OK(&users)
	if len(users.Results) != 1 {
		t.Fatalf("%d users %s after the restart, want 1", len(users.Results), adminUserID)
	}

	// Two replicas started together on an empty database bootstrap one
	// root domain with one admin.
	pair := twoFreshIdentities(t)
	var domains []string
	for _, r := range pair {
		anon := &caller{t: t, to: direct(r.url)}
		var info struct {
			DomainID string `json:"domain_id"`
		}
		anon.call("/identity/domain/get-auth-info", map[string]any{"name": "root"}).OK(&info)
		domains = append(domains, info.DomainID)
		scoped := func(scope string) *caller {
			var p tokenPair
			anon.call("/identity/token/issue", map[string]any{"credentials": map[string]any{"user_id": adminUserID, "password": adminPassword},
				"auth_type": "LOCAL", "domain_id": info.DomainID}).OK(&p)
			var g tokenPair
			anon.call("/identity/token/grant", map[string]any{"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": scope}).OK(&g)
			return &caller{t: t, to: direct(r.url), token: g.AccessToken}
		}
		var ds struct {
			TotalCount int `json:"total_count"`
		}
		scoped("SYSTEM").call("/identity/v2/domain/list", map[string]any{"name": "root"}).OK(&ds)
		scoped("DOMAIN").call("/identity/v2/user/list", map[string]any{"user_id": adminUserID}).OK(&users)
		if ds.TotalCount != 1 || len(users.Results) != 1 {
			t.Fatalf("%s: %d root domains and %d admins after a concurrent bootstrap, want 1 and 1", r.name, ds.TotalCount, len(users.Results))
		}
	}
	if domains[0] != domains[1] || domains[0] == "" {
		t.Fatalf("concurrent bootstrap: root domain %q and %q", domains[0], domains[1])
	}
}

// twoFreshIdentities starts two identity containers at once on a database
// of their own (network aliases of their own too, so no other service
// talks to them); they are removed when the test ends.
func twoFreshIdentities(t *testing.T) []*replica {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, _ := st.service("identity")
	env := st.commonEnv()
	maps.Copy(env, svc.Env(st))
	env["NUBES_MONGO_DATABASE"] = "boot" + randHex(4)
	out := make([]*replica, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			name := fmt.Sprintf("identity-fresh%d-%s", i, randHex(2))
			c, err := st.start(ctx, "identity", name, []string{name}, testcontainers.ContainerRequest{
				Env: env, ExposedPorts: []string{"8080/tcp"},
				WaitingFor: wait.ForHTTP("/readyz").WithPort("8080/tcp").WithStartupTimeout(90 * time.Second),
			})
			if c != nil {
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					_ = c.Terminate(ctx)
				})
			}
			if err != nil && c != nil {
				// FerretDB on SQLite sometimes drops the connection of one of
				// two clients creating the same new database's indexes at
				// once, and that identity exits 1. Kubernetes restarts such a
				// container; so does the test, once, and says so.
				t.Logf("%s exited during its first start (restarted once, as a Deployment would): %v\n%s", name, err, containerLog(c))
				err = c.Start(ctx)
			}
			if err != nil {
				errs[i] = fmt.Errorf("%w; its log:\n%s", err, containerLog(c))
				return
			}
			url, err := endpoint(ctx, c, "8080/tcp")
			out[i], errs[i] = &replica{svc: "identity", name: name, c: c, url: url}, err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestUsersRoleBindingsAndMail: users are created by the admin, get a role
// only through a role binding, and receive their e-mails over SMTP.
func TestUsersRoleBindingsAndMail(t *testing.T) {
	needs(t, "identity", "mailer", "board")
	board := direct(st.first(t, "board").url)
	root := domainIDOf(t, "root")
	admin := rootAdmin(t, identityAt(t))
	sys := serviceCred(t, board)
	var b boardInfo
	sys.call("/board/v1/board/create", map[string]any{"name": "Users", "categories": []string{"x"}}).OK(&b)

	// An invited user (reset_password) gets the invitation in Korean.
	invited := uniqueAddr("invited")
	admin.call("/identity/v2/user/create", map[string]any{"user_id": "inv-" + randHex(3), "auth_type": "LOCAL",
		"reset_password": true, "email": invited, "language": "ko"}).OK(nil)

	// u1 exists but has no role: it logs in, and board refuses it.
	u1, pw, u1Addr := "u1-"+randHex(3), "U1-Password-1", uniqueAddr("u1")
	newUser(t, admin, u1, pw, u1Addr)
	plain := login(t, board, root, u1, pw, "USER")
	plain.call("/board/v1/board/list", map[string]any{}).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
	plain.call("/board/v1/post/create", newPost(b.BoardID, "no role", "x")).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")

	// A role binding makes u1 a domain admin: a DOMAIN token, board works.
	bindDomainAdmin(t, admin, u1)
	domainTok := login(t, board, root, u1, pw, "DOMAIN")
	domainTok.call("/board/v1/board/list", map[string]any{}).OK(nil)
	var p postInfo
	domainTok.call("/board/v1/post/create", newPost(b.BoardID, "by u1", "x")).OK(&p)
	if p.DomainID != root {
		t.Fatalf("post of u1 = %+v", p)
	}

	// u1 verifies a new address with the code mailed to it.
	verify := uniqueAddr("u1-verify")
	self := login(t, identityAt(t), root, u1, pw, "USER")
	self.call("/identity/v2/user-profile/verify-email", map[string]any{"email": verify, "current_password": pw}).OK(nil)

	got := waitMail(t, 30*time.Second, invited, verify)
	exactlyOnce(t, got, []string{invited, verify})
	if s := got[invited][0].Subject; !hasHangul(s) {
		t.Fatalf("invitation subject %q is not Korean", s)
	}
	code := mailCode(got[verify][0].Data)
	if code == "" {
		t.Fatalf("no 6-digit code in the verify mail:\n%s", got[verify][0].Data)
	}
	self.call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).OK(nil)
	self.call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": code}).Fails(http.StatusBadRequest, "ERROR_INVALID_VERIFY_CODE")
	if n := len(mailsTo(sinkMails(t), u1Addr)[u1Addr]); n != 0 {
		t.Fatalf("a user created with a password got %d mails", n)
	}
}

// TestMFAByEmail: e-mail MFA and the self-service password reset in the
// running stack, with the codes read from the mail the sink received.
func TestMFAByEmail(t *testing.T) {
	needs(t, "identity", "mailer")
	root := domainIDOf(t, "root")
	admin := rootAdmin(t, identityAt(t))
	mia, pw, addr := "mia-"+randHex(3), "Mia-Password-1", uniqueAddr("mia")
	newUser(t, admin, mia, pw, addr)
	self := login(t, identityAt(t), root, mia, pw, "USER")
	codeIn := func(m sinkMail) string {
		t.Helper()
		code := mailCode(m.Data)
		if code == "" {
			t.Fatalf("no 6-digit code in the mail to %v:\n%s", m.To, m.Data)
		}
		return code
	}

	// The reset mail goes only to a verified address: verify it first.
	self.call("/identity/v2/user-profile/verify-email", map[string]any{"email": addr, "current_password": pw}).OK(nil)
	self.call("/identity/v2/user-profile/confirm-email", map[string]any{"verify_code": codeIn(nthMail(t, addr, 1))}).OK(nil)

	// Reset for mia and for an unknown user answer alike; only mia's mails.
	// Only reset mails are counted: the sink keeps every test's mail.
	resets := func() int {
		n := 0
		for _, m := range sinkMails(t) {
			if resetTemplate.MatchString(m.Data) {
				n++
			}
		}
		return n
	}
	before := resets()
	anon := &caller{t: t, to: identityAt(t)}
	anon.call("/identity/v2/user-profile/reset-password", map[string]any{"user_id": mia, "domain_id": root}).OK(nil)
	anon.call("/identity/v2/user-profile/reset-password", map[string]any{"user_id": "nobody-" + randHex(3), "domain_id": root}).OK(nil)
	nthMail(t, addr, 2)
	time.Sleep(3 * time.Second)
	if n := resets() - before; n != 1 {
		t.Fatalf("%d reset mails after a reset for one known and one unknown user, want 1", n)
	}

	// MFA by e-mail: enabled with the mailed code...
	mfaAddr := uniqueAddr("mia-mfa")
	self.call("/identity/v2/user-profile/enable-mfa", map[string]any{"mfa_type": "EMAIL", "options": map[string]any{"email": mfaAddr}, "current_password": pw}).OK(nil)
	self.call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": codeIn(nthMail(t, mfaAddr, 1))}).OK(nil)
	// ...then a password alone no longer logs in; the code mailed for the
	// login does, once.
	issue(t, root, mia, pw).Fails(http.StatusUnauthorized, "ERROR_MFA_REQUIRED")
	second := map[string]any{"credentials": map[string]any{"user_id": mia, "password": pw}, "auth_type": "MFA",
		"domain_id": root, "verify_code": codeIn(nthMail(t, mfaAddr, 2))}
	var p tokenPair
	anon.call("/identity/token/issue", second).OK(&p)
	(&caller{t: t, to: identityAt(t), token: p.AccessToken}).call("/identity/v2/user-profile/get", map[string]any{}).OK(nil)
	anon.call("/identity/token/issue", second).Fails(http.StatusBadRequest, "ERROR_INVALID_VERIFY_CODE")
}

// nthMail waits (30 s) until addr has n messages and returns the n-th.
func nthMail(t *testing.T, addr string, n int) sinkMail {
	t.Helper()
	var ms []sinkMail
	eventually(t, 30*time.Second, fmt.Sprintf("mail %d to %s", n, addr), func() bool {
		ms = mailsTo(sinkMails(t), addr)[addr]
		return len(ms) >= n
	})
	if len(ms) != n {
		t.Fatalf("%d mails to %s, want %d", len(ms), addr, n)
	}
	return ms[n-1]
}

// TestAPIKeyEverywhere: an API key is a bearer credential at board and
// stops working within 5 seconds of being disabled at identity.
func TestAPIKeyEverywhere(t *testing.T) {
	needs(t, "identity", "board")
	// A board replica that checks credentials with identity, as deployed.
	checked := st.extraReplicaEnv(t, "board", map[string]string{"NUBES_IDENTITY_URL": "http://identity:8080"})
	board := direct(checked.url)
	admin := rootAdmin(t, identityAt(t))
	sys := serviceCred(t, board)
	var b boardInfo
	sys.call("/board/v1/board/create", map[string]any{"name": "Keys", "categories": []string{"x"}}).OK(&b)

	var k struct {
		APIKeyID string `json:"api_key_id"`
		APIKey   string `json:"api_key"`
	}
	admin.call("/identity/v2/api-key/create", map[string]any{}).OK(&k)
	if k.APIKeyID == "" || k.APIKey == "" {
		t.Fatalf("api-key/create = %+v", k)
	}
	key := &caller{t: t, to: board, token: k.APIKey}
	var p postInfo
	key.call("/board/v1/post/create", newPost(b.BoardID, "by key", "x")).OK(&p)
	key.call("/board/v1/post/list", map[string]any{"board_id": b.BoardID}).OK(nil)
	key.call("/board/v1/board/list", map[string]any{}).OK(nil)

	refused := func(what string) time.Duration {
		t.Helper()
		var last result
		d := eventually(t, 5*time.Second, "board refuses the key after "+what, func() bool {
			last = key.call("/board/v1/post/list", map[string]any{"board_id": b.BoardID})
			return last.status != http.StatusOK
		})
		last.Fails(http.StatusUnauthorized, "ERROR_AUTHENTICATE_FAILURE")
		t.Logf("board refused the key %s after %s", d.Round(time.Millisecond), what)
		return d
	}
	admin.call("/identity/v2/api-key/disable", map[string]any{"api_key_id": k.APIKeyID}).OK(nil)
	refused("disable")
	key.call("/board/v1/post/create", newPost(b.BoardID, "disabled key", "x")).Fails(http.StatusUnauthorized, "ERROR_AUTHENTICATE_FAILURE")

	admin.call("/identity/v2/api-key/enable", map[string]any{"api_key_id": k.APIKeyID}).OK(nil)
	eventually(t, 5*time.Second, "board accepts the key enabled again", func() bool {
		return key.call("/board/v1/post/list", map[string]any{"board_id": b.BoardID}).status == http.StatusOK
	})
	admin.call("/identity/v2/api-key/delete", map[string]any{"api_key_id": k.APIKeyID}).OK(nil)
	refused("delete")
}

// TestDomainIsolationAcrossServices: two domains made through identity
// never see each other's records at identity or board.
func TestDomainIsolationAcrossServices(t *testing.T) {
	needs(t, "identity", "board")
	board, id := direct(st.first(t, "board").url), identityAt(t)
	rootID := domainIDOf(t, "root")
	sys := rootSystem(t, id)
	name := "dom-" + randHex(4)
	var d struct {
		DomainID string `json:"domain_id"`
	}
	bossPW := "Boss-Password-1"
	sys.call("/identity/v2/domain/create", map[string]any{"name": name,
		"admin": map[string]any{"user_id": "boss", "password": bossPW, "email": uniqueAddr("boss")}}).OK(&d)
	if d.DomainID == "" || d.DomainID == rootID {
		t.Fatalf("domain/create = %+v", d)
	}
	if got := domainIDOf(t, name); got != d.DomainID {
		t.Fatalf("get-auth-info %s = %s, want %s", name, got, d.DomainID)
	}
	adminA := rootAdmin(t, board)
	adminB := login(t, board, d.DomainID, "boss", bossPW, "DOMAIN")
	idA, idB := adminA.with(id), adminB.with(id)

	// Users: each domain sees its own.
	userA, userB := "only-a-"+randHex(3), "only-b-"+randHex(3)
	newUser(t, idA, userA, "Only-A-Password-1", uniqueAddr("a"))
	newUser(t, idB, userB, "Only-B-Password-1", uniqueAddr("b"))
	idA.call("/identity/v2/user/get", map[string]any{"user_id": userA}).OK(nil)
	idB.call("/identity/v2/user/get", map[string]any{"user_id": userA}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	idA.call("/identity/v2/user/get", map[string]any{"user_id": userB}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	idB.call("/identity/v2/user/update", map[string]any{"user_id": userA, "name": "taken"}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	idB.call("/identity/v2/user/delete", map[string]any{"user_id": userA}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	idA.call("/identity/v2/user/get", map[string]any{"user_id": userA}).OK(nil)
	type userList struct {
		Results []struct {
			UserID   string `json:"user_id"`
			DomainID string `json:"domain_id"`
		} `json:"results"`
		TotalCount int `json:"total_count"`
	}
	for _, c := range []struct {
		who  *caller
		dom  string
		mine string
	}{{idA, rootID, userA}, {idB, d.DomainID, userB}} {
		var l userList
		c.who.call("/identity/v2/user/list", map[string]any{}).OK(&l)
		found := false
		for _, u := range l.Results {
			if u.DomainID != "" && u.DomainID != c.dom || u.UserID == userA && c.mine != userA || u.UserID == userB && c.mine != userB {
				t.Fatalf("user/list of %s shows %+v", c.dom, u)
			}
			found = found || u.UserID == c.mine
		}
		if !found {
			t.Fatalf("user/list of %s misses its own user %s", c.dom, c.mine)
		}
	}
	// v1 names the domain in the request: B naming A is refused.
	if r := idB.call("/identity/v1/user/list", map[string]any{"domain_id": rootID}); r.status == http.StatusOK {
		t.Fatalf("B listed A's users through v1: %s", r.body)
	}

	// Posts on one shared board.
	var b boardInfo
	serviceCred(t, board).call("/board/v1/board/create", map[string]any{"name": "Shared " + name, "categories": []string{"x"}}).OK(&b)
	var pa, pb postInfo
	adminA.call("/board/v1/post/create", newPost(b.BoardID, "A's post", "x")).OK(&pa)
	adminB.call("/board/v1/post/create", newPost(b.BoardID, "B's post", "x")).OK(&pb)
	if pa.DomainID != rootID || pb.DomainID != d.DomainID {
		t.Fatalf("posts landed in %s and %s", pa.DomainID, pb.DomainID)
	}
	for _, c := range []struct {
		who   *caller
		other postInfo
		dom   string
	}{{adminB, pa, d.DomainID}, {adminA, pb, rootID}} {
		id := map[string]any{"post_id": c.other.PostID}
		c.who.call("/board/v1/post/get", id).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
		c.who.call("/board/v1/post/update", map[string]any{"post_id": c.other.PostID, "title": "taken"}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
		c.who.call("/board/v1/post/delete", id).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
		var l postList
		c.who.call("/board/v1/post/list", map[string]any{"board_id": b.BoardID}).OK(&l)
		if l.TotalCount != 1 || len(l.Results) != 1 || l.Results[0].DomainID != c.dom {
			t.Fatalf("list of %s on the shared board = %+v", c.dom, l)
		}
		c.who.call("/board/v1/post/list", map[string]any{"query": map[string]any{
			"filter_or": []any{map[string]any{"k": "domain_id", "v": c.other.DomainID, "o": "eq"}, map[string]any{"k": "post_id", "v": c.other.PostID, "o": "eq"}},
		}}).OK(&l)
		if l.TotalCount != 0 {
			t.Fatalf("%s listed the other domain's post: %+v", c.dom, l)
		}
	}
	var p postInfo
	adminA.call("/board/v1/post/get", map[string]any{"post_id": pa.PostID}).OK(&p)
	if p.Title != "A's post" {
		t.Fatalf("A's post changed: %+v", p)
	}
}

// TestMailerKilledWhileMailing: every e-mail arrives exactly once even if
// the mailer dies mid-batch and the SMTP server refuses some for a while.
func TestMailerKilledWhileMailing(t *testing.T) {
	needs(t, "identity", "mailer")
	admin := rootAdmin(t, identityAt(t))
	mailer := st.first(t, "mailer")
	clearSink(t)

	const n = 40
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = uniqueAddr(fmt.Sprintf("burst%02d", i))
	}
	var wg sync.WaitGroup
	errc := make(chan error, n)
	tenth := make(chan struct{})
	wg.Go(func() {
		for i, a := range addrs {
			r, err := admin.try("/identity/v2/user/create", map[string]any{"user_id": fmt.Sprintf("burst%02d-%s", i, randHex(3)),
				"auth_type": "LOCAL", "reset_password": true, "email": a})
			if err != nil || r.status != http.StatusOK {
				errc <- fmt.Errorf("create %d: %d %v %s", i, r.status, err, r.body)
			}
			if i == 9 {
				close(tenth)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	<-tenth
	failSMTP(t, 3, 451)
	start := time.Now()
	restart(t, mailer, true, 3*time.Second)
	t.Logf("mailer killed and ready again in %s", time.Since(start).Round(time.Millisecond))
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	start = time.Now()
	got := waitMail(t, 90*time.Second, addrs...)
	t.Logf("all %d mails at the sink %s after the last create", n, time.Since(start).Round(time.Millisecond))
	exactlyOnce(t, got, addrs)
	time.Sleep(10 * time.Second)
	exactlyOnce(t, mailsTo(sinkMails(t), addrs...), addrs)
}

// containerLog is the whole log of a container, for a failure message.
func containerLog(c testcontainers.Container) string {
	if c == nil {
		return "(no container)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := c.Logs(ctx)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 64<<10))
	return string(b)
}

// resetTemplate marks a password-reset mail (the mailer's header).
var resetTemplate = regexp.MustCompile(`(?m)^X-Nubes-Template: reset_password\r?$`)

// codeLine is a mailed code: six digits alone on their line, so that a
// user id or address that happens to hold six digits is never taken for it.
var codeLine = regexp.MustCompile(`(?m)^([1-9][0-9]{5})\r?$`)

func mailCode(data string) string {
	if m := codeLine.FindStringSubmatch(data); m != nil {
		return m[1]
	}
	return ""
}
