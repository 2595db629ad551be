package auth

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/nubes-io/nubes/pkg/errs"
)

func verifierFor(t *testing.T, signers ...*Signer) *Verifier {
	t.Helper()
	v, err := NewVerifier(JWKSOf(signers...))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sign signs arbitrary claims with s, for tokens Issue refuses to make.
func sign(t *testing.T, s *Signer, c Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["kid"] = s.KeyID
	out, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVerify(t *testing.T) {
	s, _ := GenerateSigner()
	other, _ := GenerateSigner()
	v := verifierFor(t, s)
	p := Principal{DomainID: "domain-a", UserID: "alice", Role: DomainAdmin, WorkspaceID: "workspace-1"}
	good, _ := s.Issue(p, time.Hour)
	system, _ := s.Issue(Principal{TokenType: SystemToken, DomainID: "domain-a", UserID: "root", Role: SystemAdmin}, time.Hour)
	forged, _ := other.Issue(p, time.Hour)
	expired, _ := s.IssueAt(p, time.Now().Add(-time.Hour), time.Minute)
	base := func() Claims {
		return Claims{RegisteredClaims: jwt.RegisteredClaims{Issuer: issuer, Subject: "alice", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))},
			Type: AccessToken, DomainID: "domain-a", Role: DomainAdmin, Version: tokenVersion}
	}
	noExp := base()
	noExp.ExpiresAt = nil
	oldVer := base()
	oldVer.Version = "1.0"
	noDomain := base()
	noDomain.DomainID = ""
	refresh := base()
	refresh.Type = "REFRESH_TOKEN"
	wrongIss := base()
	wrongIss.Issuer = "someone"
	systemNoExp := base()
	systemNoExp.Type, systemNoExp.ExpiresAt = SystemToken, nil

	if _, err := s.Issue(p, 0); err == nil {
		t.Fatal("an access token without expiry was issued")
	}
	if _, err := s.Issue(Principal{TokenType: SystemToken, DomainID: "domain-a", Role: SystemAdmin}, 0); err == nil {
		t.Fatal("a SYSTEM token without expiry was issued")
	}
	for name, tok := range map[string]string{
		"forged": forged, "expired": expired, "access without exp": sign(t, s, noExp), "old version": sign(t, s, oldVer),
		"no domain": sign(t, s, noDomain), "refresh as access": sign(t, s, refresh), "wrong issuer": sign(t, s, wrongIss),
		"system without exp": sign(t, s, systemNoExp),
		"garbage":            "x.y.z", "empty": "",
	} {
		if _, err := v.Authenticate(context.Background(), tok); err == nil {
			t.Errorf("%s: accepted", name)
		} else if e, ok := errs.As(err); !ok || e.Status() != 401 {
			t.Errorf("%s: %v, want a 401", name, err)
		}
	}
	got, err := v.Authenticate(context.Background(), good)
	if err != nil || got.DomainID != "domain-a" || got.UserID != "alice" || got.Role != DomainAdmin || got.WorkspaceID != "workspace-1" {
		t.Fatalf("good token: %+v %v", got, err)
	}
	if got, err := v.Authenticate(context.Background(), system); err != nil || !got.IsSystem() {
		t.Fatalf("system token: %+v %v", got, err)
	}
	// A signer reloaded from its PEM verifies with the same JWK.
	again, err := ParseSignerPEM(s.PEM())
	if err != nil || again.KeyID != s.KeyID {
		t.Fatalf("PEM round trip: %v", err)
	}
}

func TestAccess(t *testing.T) {
	admin := &Principal{Role: DomainAdmin}
	member := &Principal{Role: WorkspaceMember}
	system := &Principal{TokenType: SystemToken, Role: SystemAdmin}
	a := Roles(DomainAdmin)
	if a.Check(admin) != nil || a.Check(system) != nil {
		t.Fatal("allowed callers refused")
	}
	if e, _ := errs.As(a.Check(member)); e == nil || e.Status() != 403 {
		t.Fatal("member not refused with 403")
	}
	if e, _ := errs.As(a.Check(nil)); e == nil || e.Status() != 401 {
		t.Fatal("anonymous not refused with 401")
	}
	if Public().Check(nil) != nil {
		t.Fatal("public refused")
	}
	// Service: a SYSTEM token only, never a person's SYSTEM_ADMIN grant.
	person := &Principal{TokenType: AccessToken, Role: SystemAdmin}
	if Service().Check(system) != nil {
		t.Fatal("a SYSTEM token refused by Service")
	}
	for _, p := range []*Principal{person, admin} {
		if e, _ := errs.As(Service().Check(p)); e == nil || e.Status() != 403 {
			t.Fatalf("%+v not refused by Service with 403", p)
		}
	}
	if person.IsService() || !system.IsService() {
		t.Fatal("IsService")
	}
}

// A key set under rotation: every key of the PEM verifies, the first
// signs.
func TestParseSignersPEM(t *testing.T) {
	a, b := mustSigner(t), mustSigner(t)
	got, err := ParseSignersPEM(append(a.PEM(), b.PEM()...))
	if err != nil || len(got) != 2 || got[0].KeyID != a.KeyID || got[1].KeyID != b.KeyID {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := ParseSignersPEM([]byte("nothing")); err == nil {
		t.Fatal("no PEM accepted")
	}
}

// A token that verified is taken again without the RSA check only until
// it expires: then it is refused as a first look refuses it. The
// verifier's clock moves only when the test moves it, so the leeway ends
// where the test says, not after a stall.
func TestVerifiedTokenStillExpires(t *testing.T) {
	s := mustSigner(t)
	v := verifierFor(t, s)
	var clock atomic.Int64
	start := time.Now().Truncate(time.Second) // what a token keeps of a time
	clock.Store(start.UnixNano())
	v.setClock(func() time.Time { return time.Unix(0, clock.Load()) })
	// Expired 3 s ago: the 5 s leeway lets it in for 2 s more.
	tok, err := s.IssueAt(Principal{DomainID: "domain-a", UserID: "alice", Role: DomainAdmin}, start.Add(-time.Hour), time.Hour-3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !accepts(v, tok) || !accepts(v, tok) {
		t.Fatal("a token within the leeway is refused")
	}
	clock.Add(int64(1900 * time.Millisecond))
	if !accepts(v, tok) {
		t.Fatal("a remembered token is refused before its leeway ended")
	}
	clock.Add(int64(200 * time.Millisecond))
	if accepts(v, tok) {
		t.Fatal("a remembered token is still accepted after its expiry and leeway passed")
	}
	_, err = v.Authenticate(context.Background(), tok)
	if e, ok := errs.As(err); !ok || e.Status() != 401 {
		t.Fatalf("expired: %v, want a 401", err)
	}
}

// The principal of a remembered token is the caller's own: changing it
// changes nothing for the next request with the same token.
func TestVerifiedTokenPrincipalIsACopy(t *testing.T) {
	s := mustSigner(t)
	v := verifierFor(t, s)
	tok, err := s.Issue(Principal{DomainID: "domain-a", UserID: "alice", Role: WorkspaceMember, Projects: []string{"project-1"},
		Permissions: []string{"/identity/v2/user-profile/"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p, err := v.Authenticate(context.Background(), tok)
		if err != nil || len(p.Projects) != 1 || p.Projects[0] != "project-1" || p.DomainID != "domain-a" ||
			len(p.Permissions) != 1 || p.Permissions[0] != "/identity/v2/user-profile/" {
			t.Fatalf("%+v %v", p, err)
		}
		p.Projects[0], p.Permissions[0], p.DomainID = "project-x", "/", "domain-x"
		c, err := v.Parse(tok)
		if err != nil || c.ExpiresAt == nil || len(c.Audience) != 1 || c.Audience[0] != "alice" {
			t.Fatalf("%+v %v", c, err)
		}
		c.ExpiresAt.Time, c.Audience[0] = time.Time{}, "mallory"
	}
}

// The same token checked from many goroutines at once.
func TestVerifiedTokenConcurrent(t *testing.T) {
	s := mustSigner(t)
	v := verifierFor(t, s)
	good, forged := tokenOf(t, s), tokenOf(t, mustSigner(t))
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for range 16 {
		wg.Go(func() {
			for range 20 {
				if !accepts(v, good) || accepts(v, forged) {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if wrong.Load() != 0 {
		t.Fatalf("%d wrong answers", wrong.Load())
	}
}
