package identity_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity"
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

	mu    sync.Mutex
	mails []events.Mail
}

const adminPassword = "Admin-Passw0rd"

func newHarness(t *testing.T) *harness {
	t.Helper()
	env := testkit.Get()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	bus, err := events.Connect(ctx, env.NATS.URL, "identity-test", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	spec := identity.RandomCipherSpec()
	cipher, _ := identity.NewCipher(spec)
	h := &harness{t: t, db: env.Database(t), signer: env.Signer, cipherSpec: spec}
	h.built, err = identity.Build(ctx, app.Deps{DB: h.db, Events: bus, Log: log}, identity.Config{
		Signer: env.Signer, Cipher: cipher, AdminUserID: "admin", AdminPassword: adminPassword,
		LoginBlock: time.Minute, MaxLoginFailures: 3, // the window outlasts 4 bcrypt calls under -race on a loaded machine
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range h.built.Service.Workers {
		go func() { _ = w(ctx) }()
	}
	h.watchMail(ctx, bus)
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

// watchMail records every mail event published from now on.
func (h *harness) watchMail(ctx context.Context, bus *events.Bus) {
	h.t.Helper()
	cons, err := bus.JS.OrderedConsumer(ctx, events.MailStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.MailSubject}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var mail events.Mail
		if json.Unmarshal(m.Data(), &mail) == nil {
			h.mu.Lock()
			h.mails = append(h.mails, mail)
			h.mu.Unlock()
		}
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(cc.Stop)
}

// mailTo waits for the next mail to addr with template and returns it.
// Addresses are unique per test, so tests sharing the stream never mix.
func (h *harness) mailTo(addr, template string) events.Mail {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		for i, m := range h.mails {
			if m.To == addr && m.Template == template {
				h.mails = append(h.mails[:i], h.mails[i+1:]...)
				h.mu.Unlock()
				return m
			}
		}
		h.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("no %q mail to %s within 10s", template, addr)
	return events.Mail{}
}

// noMailTo asserts that no mail to addr arrives within a short while.
func (h *harness) noMailTo(addr string) {
	h.t.Helper()
	time.Sleep(300 * time.Millisecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.mails {
		if m.To == addr {
			h.t.Fatalf("unexpected mail to %s: %+v", addr, m)
		}
	}
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
