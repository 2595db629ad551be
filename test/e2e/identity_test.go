package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode"
)

// The suite's client side of identity: logging in as a client would, and
// reading what the mailer delivered to the fixture's SMTP sink.

// identityAt is the first identity replica.
func identityAt(t *testing.T) target {
	t.Helper()
	s := st.first(t, "identity")
	st.mu.Lock()
	defer st.mu.Unlock()
	return direct(s.url)
}

type tokenPair struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

// domainIDOf asks identity for a domain's id by name, without a token.
func domainIDOf(t *testing.T, name string) string {
	t.Helper()
	var info struct {
		DomainID string `json:"domain_id"`
	}
	(&caller{t: t, to: identityAt(t)}).call("/identity/domain/get-auth-info", map[string]any{"name": name}).OK(&info)
	if info.DomainID == "" {
		t.Fatalf("get-auth-info %s: no domain_id", name)
	}
	return info.DomainID
}

// issue is the first login step (token/issue) of a LOCAL user.
func issue(t *testing.T, domainID, userID, password string) result {
	t.Helper()
	return (&caller{t: t, to: identityAt(t)}).call("/identity/token/issue", map[string]any{
		"credentials": map[string]any{"user_id": userID, "password": password}, "auth_type": "LOCAL", "domain_id": domainID})
}

// login logs in (token/issue, then token/grant of scope) and returns a
// caller with identity's access token that talks to to.
func login(t *testing.T, to target, domainID, userID, password, scope string) *caller {
	t.Helper()
	var p tokenPair
	issue(t, domainID, userID, password).OK(&p)
	if p.AccessToken == "" || p.RefreshToken == "" {
		t.Fatalf("token/issue of %s: no tokens", userID)
	}
	var g tokenPair
	(&caller{t: t, to: identityAt(t)}).call("/identity/token/grant", map[string]any{
		"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": scope}).OK(&g)
	if g.AccessToken == "" {
		t.Fatalf("token/grant %s of %s: no access token", scope, userID)
	}
	return &caller{t: t, to: to, token: g.AccessToken, domain: domainID, user: userID}
}

// rootAdmin is the bootstrap admin with a DOMAIN token, talking to to.
func rootAdmin(t *testing.T, to target) *caller {
	t.Helper()
	return login(t, to, domainIDOf(t, "root"), adminUserID, adminPassword, "DOMAIN")
}

// rootSystem is the bootstrap admin with a SYSTEM token (the root domain's
// admin may grant scope SYSTEM): a person's grant, which manages domains
// but writes no platform record (issue 21).
func rootSystem(t *testing.T, to target) *caller {
	t.Helper()
	return login(t, to, domainIDOf(t, "root"), adminUserID, adminPassword, "SYSTEM")
}

// serviceCred is the suite's service credential (what `identity
// system-token` printed), talking to to: boards and the other platform
// records are its to write.
func serviceCred(t *testing.T, to target) *caller {
	t.Helper()
	return &caller{t: t, to: to, token: st.serviceToken}
}

// uniqueAddr is an e-mail address no other test uses.
func uniqueAddr(name string) string {
	return fmt.Sprintf("%s.%s@example.com", name, randHex(4))
}

// sinkMail is one message the SMTP sink accepted.
type sinkMail struct {
	To        []string `json:"to"`
	MessageID string   `json:"message_id"`
	Subject   string   `json:"subject"`
	Data      string   `json:"data"`
}

func sinkMails(t *testing.T) []sinkMail {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ms []sinkMail
	status, body, err := get(ctx, st.control+"/mail")
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &ms) != nil {
		t.Fatalf("GET /mail: %d %v %s", status, err, body)
	}
	return ms
}

func clearSink(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, st.control+"/mail", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("DELETE /mail: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE /mail: %d", resp.StatusCode)
	}
}

// failSMTP makes the sink answer code to the next count DATA commands.
func failSMTP(t *testing.T, count, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"count": %d, "code": %d}`, count, code)
	if status, resp, err := post(ctx, st.control, "/smtp/fail", "", []byte(body)); err != nil || status != http.StatusOK {
		t.Fatalf("POST /smtp/fail: %d %v %s", status, err, resp)
	}
}

// mailsTo is the sink's messages to any of addrs, by recipient.
func mailsTo(ms []sinkMail, addrs ...string) map[string][]sinkMail {
	out := map[string][]sinkMail{}
	for _, m := range ms {
		for _, to := range m.To {
			for _, a := range addrs {
				if strings.EqualFold(to, a) {
					out[a] = append(out[a], m)
				}
			}
		}
	}
	return out
}

// waitMail waits until every one of addrs has at least one message and
// returns the messages to them.
func waitMail(t *testing.T, within time.Duration, addrs ...string) map[string][]sinkMail {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := mailsTo(sinkMails(t), addrs...)
		if len(got) == len(addrs) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("within %s the sink got mail for %d of %d addresses", within, len(got), len(addrs))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// exactlyOnce fails unless every address of addrs got exactly one message
// and no two messages share a Message-ID.
func exactlyOnce(t *testing.T, got map[string][]sinkMail, addrs []string) {
	t.Helper()
	ids := map[string]string{}
	for _, a := range addrs {
		if n := len(got[a]); n != 1 {
			t.Errorf("%s got %d messages, want 1", a, n)
			continue
		}
		id := got[a][0].MessageID
		if id == "" {
			t.Errorf("message to %s has no Message-ID", a)
		} else if other, dup := ids[id]; dup {
			t.Errorf("Message-ID %s sent to %s and %s", id, other, a)
		}
		ids[id] = a
	}
	if t.Failed() {
		t.FailNow()
	}
}

func hasHangul(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Hangul, r) {
			return true
		}
	}
	return false
}

// eventually polls cond every 100 ms until it holds or within passes, and
// returns how long it took.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

// restart stops a replica (grace: nil for docker's default, 0 for a kill)
// and starts the same container again after pause; its published port may
// change, so its URL is read again.
func restart(t *testing.T, r *replica, kill bool, pause time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if kill {
		if out, err := exec.CommandContext(ctx, "docker", "kill", r.c.GetContainerID()).CombinedOutput(); err != nil {
			t.Fatalf("docker kill %s: %v %s", r.name, err, out)
		}
	} else {
		grace := 20 * time.Second
		if err := r.c.Stop(ctx, &grace); err != nil {
			t.Fatalf("stop %s: %v", r.name, err)
		}
	}
	time.Sleep(pause)
	if err := r.c.Start(ctx); err != nil {
		t.Fatalf("start %s again: %v", r.name, err)
	}
	url, err := endpoint(ctx, r.c, "8080/tcp")
	if err != nil {
		t.Fatal(err)
	}
	g, err := endpoint(ctx, r.c, "50051/tcp")
	if err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	r.url, r.grpc = url, strings.TrimPrefix(g, "http://")
	st.mu.Unlock()
	waitReadyz(t, url, http.StatusOK, 90*time.Second)
}

// newUser has the admin create a LOCAL user with a password (no mail).
func newUser(t *testing.T, admin *caller, userID, password, email string) {
	t.Helper()
	admin.call("/identity/v2/user/create", map[string]any{"user_id": userID, "auth_type": "LOCAL",
		"password": password, "email": email}).OK(nil)
}

// bindDomainAdmin makes userID an admin of the admin's domain.
func bindDomainAdmin(t *testing.T, admin *caller, userID string) {
	t.Helper()
	admin.call("/identity/v2/role-binding/create", map[string]any{"user_id": userID,
		"role_id": "managed-domain-admin", "resource_group": "DOMAIN"}).OK(nil)
}
