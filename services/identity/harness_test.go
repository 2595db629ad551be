package identity_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// harness is one identity service on a fresh database, with the root
// domain bootstrapped, clients for its SYSTEM token and its admin, and the
// mail events it publishes.
type harness struct {
	t       *testing.T
	db      *mongo.Database
	built   *identity.Built
	handler http.Handler
	anon    *testkit.Client
	system  *testkit.Client
	admin   *testkit.Client // DOMAIN_ADMIN of the root domain, logged in
	domain  string          // root domain id
	signer  *auth.Signer
	// cipherSpec is the encryption key the service seals with ("1:<base64>").
	cipherSpec string
}

const adminPassword = "Admin-Passw0rd"

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, testkit.Get().NATS.URL)
}

// newHarnessOn is newHarness publishing to the NATS at natsURL; only the
// package's NATS has the mailbox (mailTo), as MailStream is a work queue
// that one consumer reads.
func newHarnessOn(t *testing.T, natsURL string) *harness {
	t.Helper()
	env := testkit.Get()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	bus, err := events.Connect(ctx, natsURL, "identity-test", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	spec := identity.RandomCipherSpec()
	cipher, _ := identity.NewCipher(spec)
	h := &harness{t: t, db: env.Database(t), signer: env.Signer, cipherSpec: spec}
	h.built, err = identity.Build(ctx, app.Deps{DB: h.db, Events: bus, Log: log}, identity.Config{PasswordCost: bcrypt.MinCost,
		Signer: env.Signer, Cipher: cipher, AdminUserID: "admin", AdminPassword: adminPassword,
		LoginBlock: time.Hour, MaxLoginFailures: 3, // no window slides within a test, however loaded the machine (a test of 33 logins took 93 s under -race at load 30)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range h.built.Service.Workers {
		go func() { _ = w(ctx) }()
	}
	if natsURL == env.NATS.URL {
		identitytest.WatchMail(t)
	}
	srv, err := server.New(server.Options{Name: "identity", Logger: log, Auth: h.built.Service.Auth, Documents: h.built.Service.Documents}, h.built.Service.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	h.handler = srv.Handler()
	h.domain = h.built.Bootstrap.DomainID
	h.anon = testkit.NewClient(t, h.handler)
	h.system = h.anon.As(h.built.SystemToken)
	h.admin = h.anon.As(h.scoped("admin", adminPassword, "DOMAIN", ""))
	return h
}

// mailTo waits for the next mail to addr with template, opened with the
// harness' keys (identitytest's mailbox, one per test binary).
func (h *harness) mailTo(addr, template string) events.Mail {
	h.t.Helper()
	return identitytest.MailTo(h.t, h.cipherSpec, addr, template)
}

// noMailTo asserts that no mail to addr arrives within a short while.
func (h *harness) noMailTo(addr string) {
	h.t.Helper()
	identitytest.NoMailTo(h.t, addr)
}

type pair struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

// login issues a USER-scope pair in the root domain.
func (h *harness) login(userID, password string) pair {
	h.t.Helper()
	return h.loginIn(h.domain, userID, password)
}

func (h *harness) loginIn(domainID, userID, password string) pair {
	h.t.Helper()
	var p pair
	h.anon.Call("/identity/v2/token/issue", map[string]any{
		"credentials": map[string]any{"user_id": userID, "password": password}, "auth_type": "LOCAL", "domain_id": domainID,
	}).OK(&p)
	return p
}

// scoped logs in and grants a scope (DOMAIN, WORKSPACE, USER, SYSTEM).
func (h *harness) scoped(userID, password, scope, workspaceID string) string {
	h.t.Helper()
	return h.scopedIn(h.domain, userID, password, scope, workspaceID)
}

func (h *harness) scopedIn(domainID, userID, password, scope, workspaceID string) string {
	h.t.Helper()
	p := h.loginIn(domainID, userID, password)
	var g struct {
		AccessToken string `json:"access_token"`
	}
	h.anon.Call("/identity/v2/token/grant", map[string]any{
		"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": scope, "workspace_id": workspaceID,
	}).OK(&g)
	return g.AccessToken
}

// email makes an address unique to the running test.
func (h *harness) email(name string) string {
	return name + "." + strings.ToLower(strings.NewReplacer("/", ".", " ", "", "#", "").Replace(h.t.Name())) + "@example.com"
}

// newDomain creates a second domain with its own admin, for isolation tests.
func (h *harness) newDomain(name string) (domainID string, admin *testkit.Client) {
	h.t.Helper()
	var d struct {
		DomainID string `json:"domain_id"`
	}
	h.system.Call("/identity/v2/domain/create", map[string]any{
		"name": name, "admin": map[string]any{"user_id": "boss", "password": "Boss-Passw0rd", "email": h.email("boss-" + name)},
	}).OK(&d)
	return d.DomainID, h.anon.As(h.scopedIn(d.DomainID, "boss", "Boss-Passw0rd", "DOMAIN", ""))
}
