package identity_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

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

// harness is the whole identity service (identity.Build: every route and
// worker) on a fresh database, with the root domain bootstrapped; its
// helpers are identitytest's, which a resource's own tests use on a part
// of the service.
type harness struct {
	*identitytest.Harness
	built  *identity.Built
	signer *auth.Signer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, testkit.Get().NATS.URL)
}

// newHarnessOn is newHarness publishing to the NATS at natsURL; only the
// package's NATS has the mailbox (MailTo), as MailStream is a work queue
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
	h := &harness{Harness: &identitytest.Harness{T: t, DB: env.Database(t), CipherSpec: spec}, signer: env.Signer}
	h.built, err = identity.Build(ctx, app.Deps{DB: h.DB, Events: bus, Log: log}, identity.Config{PasswordCost: bcrypt.MinCost,
		Signer: env.Signer, Cipher: cipher, AdminUserID: "admin", AdminPassword: identitytest.AdminPassword,
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
	h.Deps = h.built.Deps
	h.Handler = srv.Handler()
	h.Domain = h.built.Bootstrap.DomainID
	h.Anon = testkit.NewClient(t, h.Handler)
	h.System = h.Anon.As(h.built.SystemToken)
	h.Admin = h.Anon.As(h.Scoped("admin", identitytest.AdminPassword, "DOMAIN", ""))
	return h
}

// NewDomain creates a second domain with its own admin through
// domain/create (the service's tests are the ones that call it; a
// resource's tests store the domain with identitytest's NewDomain).
func (h *harness) NewDomain(name string) (domainID string, admin *testkit.Client) {
	h.T.Helper()
	var d struct {
		DomainID string `json:"domain_id"`
	}
	h.System.Call("/identity/v2/domain/create", map[string]any{
		"name": name, "admin": map[string]any{"user_id": "boss", "password": "Boss-Passw0rd", "email": h.Email("boss-" + name)},
	}).OK(&d)
	return d.DomainID, h.Anon.As(h.ScopedIn(d.DomainID, "boss", "Boss-Passw0rd", "DOMAIN", ""))
}
