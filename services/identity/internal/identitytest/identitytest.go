// Package identitytest starts what one resource of identity needs to be
// tested on its own: core.Deps on a fresh testkit database with the root
// domain bootstrapped, the token operations (every call needs a
// credential) and the resource's own operations, nothing else. A test of
// several resources, of attacks or of the tenancy matrix builds the whole
// service instead (services/identity's harness).
//
// It is imported by tests only (their TestMain calls testkit.Main) and
// must not be imported by a package that serves identity.
package identitytest

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/bootstrap"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/credential"
	"github.com/nubes-io/nubes/services/identity/internal/domainadmin"
	"github.com/nubes-io/nubes/services/identity/internal/token"
)

// AdminPassword is the root domain admin's password.
const AdminPassword = "Admin-Passw0rd"

// Harness is identity's core with the token operations and one
// resource's operations mounted, on a fresh database.
type Harness struct {
	T       *testing.T
	DB      *mongo.Database
	Deps    *core.Deps
	Handler http.Handler
	Anon    *testkit.Client
	System  *testkit.Client // the root domain's SYSTEM token
	Admin   *testkit.Client // DOMAIN_ADMIN of the root domain, logged in
	Domain  string          // root domain id
	// CipherSpec is the encryption key the deps seal with ("1:<base64>").
	CipherSpec string
}

// Options adjust the configuration (plugins, collectors) before the deps
// are made.
type Options struct {
	Config func(*core.Config)
	// Workers are run beside the mail outbox (a resource's consumers).
	Workers func(d *core.Deps) []func(context.Context) error
	// NATS is the URL of the bus (default: the test binary's); DB the
	// database (default: a fresh one) and CipherSpec the keys (default:
	// random). Replicas of one identity share all three.
	NATS       string
	DB         *mongo.Database
	CipherSpec string
}

// New starts the deps with the same test configuration as the whole
// service's harness and mounts the token operations and routes of d.
func New(t *testing.T, routes func(d *core.Deps) []api.Route, opt ...Options) *Harness {
	t.Helper()
	env := testkit.Get()
	var o Options
	for _, x := range opt {
		o.NATS, o.DB, o.CipherSpec = cmp.Or(x.NATS, o.NATS), cmp.Or(x.DB, o.DB), cmp.Or(x.CipherSpec, o.CipherSpec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	bus, err := events.Connect(ctx, cmp.Or(o.NATS, env.NATS.URL), "identity-resource-test", log)
	if err != nil {
		t.Fatal(err)
	}
	spec := cmp.Or(o.CipherSpec, core.RandomCipherSpec())
	cipher, err := core.NewCipher(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := core.Config{PasswordCost: bcrypt.MinCost, Signer: env.Signer, Cipher: cipher, AdminUserID: "admin", AdminPassword: AdminPassword,
		LoginBlock: time.Hour, MaxLoginFailures: 3}
	for _, o := range opt {
		if o.Config != nil {
			o.Config(&cfg)
		}
	}
	h := &Harness{T: t, DB: o.DB, CipherSpec: spec}
	if h.DB == nil {
		h.DB = env.Database(t)
	}
	if h.Deps, err = core.New(ctx, h.DB, bus, log, cfg); err != nil {
		t.Fatal(err)
	}
	b, err := bootstrap.Run(ctx, h.Deps)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := bootstrap.SystemToken(h.Deps, b)
	if err != nil {
		t.Fatal(err)
	}
	workers := []func(context.Context) error{h.Deps.Outbox.Run}
	for _, o := range opt {
		if o.Workers != nil {
			workers = append(workers, o.Workers(h.Deps)...)
		}
	}
	done := make(chan struct{}, len(workers))
	for _, w := range workers {
		go func() { _ = w(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for range workers {
			<-done
		}
		bus.Close()
	})
	srv, err := server.New(server.Options{Name: "identity", Logger: log, Auth: credential.Authenticator(h.Deps)},
		append(token.Routes(h.Deps), routes(h.Deps)...)...)
	if err != nil {
		t.Fatal(err)
	}
	WatchMail(t)
	h.Handler = srv.Handler()
	h.Domain = b.DomainID
	h.Anon = testkit.NewClient(t, h.Handler)
	h.System = h.Anon.As(sys)
	h.Admin = h.Anon.As(h.ScopedIn(h.Domain, "admin", AdminPassword, "DOMAIN", ""))
	return h
}

// Pair is what token/issue answers.
type Pair struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

// Scoped logs a root-domain user in and grants a scope.
func (h *Harness) Scoped(userID, password, scope, workspaceID string) string {
	h.T.Helper()
	return h.ScopedIn(h.Domain, userID, password, scope, workspaceID)
}

// LoginIn issues a USER-scope pair.
func (h *Harness) LoginIn(domainID, userID, password string) Pair {
	h.T.Helper()
	var p Pair
	h.Anon.Call("/identity/v2/token/issue", map[string]any{
		"credentials": map[string]any{"user_id": userID, "password": password}, "auth_type": "LOCAL", "domain_id": domainID,
	}).OK(&p)
	return p
}

// ScopedIn logs in and grants a scope (DOMAIN, WORKSPACE, USER, SYSTEM).
func (h *Harness) ScopedIn(domainID, userID, password, scope, workspaceID string) string {
	h.T.Helper()
	p := h.LoginIn(domainID, userID, password)
	var g struct {
		AccessToken string `json:"access_token"`
	}
	h.Anon.Call("/identity/v2/token/grant", map[string]any{
		"grant_type": "REFRESH_TOKEN", "token": p.RefreshToken, "scope": scope, "workspace_id": workspaceID,
	}).OK(&g)
	return g.AccessToken
}

// Email makes an address unique to the running test, and to its run: a
// test run again (-count) must not find the mails its last run left in the
// binary's mailbox (NoMailTo would see them).
func (h *Harness) Email(name string) string {
	test := strings.ToLower(strings.NewReplacer("/", ".", " ", "", "#", "").Replace(h.T.Name()))
	if n := runOf(h.T); n > 1 {
		test += fmt.Sprintf(".run%d", n)
	}
	return name + "." + test + "@example.com"
}

// runs counts the runs of each test name in the binary: a *testing.T
// other than the last one seen under a name is its next run.
var runs struct {
	sync.Mutex
	last map[string]*testing.T
	n    map[string]int
}

func runOf(t *testing.T) int {
	runs.Lock()
	defer runs.Unlock()
	if runs.last == nil {
		runs.last, runs.n = map[string]*testing.T{}, map[string]int{}
	}
	if runs.last[t.Name()] != t {
		runs.last[t.Name()] = t
		runs.n[t.Name()]++
	}
	return runs.n[t.Name()]
}

// NewDomain stores a second domain with its own admin, as domain/create
// does, without mounting the domain operations; it answers the domain id
// and a client of its admin.
func (h *Harness) NewDomain(name string) (domainID string, admin *testkit.Client) {
	h.T.Helper()
	ctx := context.Background()
	id := wire.NewID("domain")
	d := &core.Domain{ID: id, DomainID: id, Name: name, State: core.Enabled, Tags: map[string]any{}, CreatedAt: wire.T(wire.Now())}
	if _, err := h.Deps.Domains.InsertOne(ctx, d); err != nil {
		h.T.Fatal(err)
	}
	if _, err := domainadmin.Ensure(ctx, h.Deps, id, "boss", "Boss-Passw0rd", h.Email("boss-"+name), ""); err != nil {
		h.T.Fatal(err)
	}
	return id, h.Anon.As(h.ScopedIn(id, "boss", "Boss-Passw0rd", "DOMAIN", ""))
}

// Eventually is testkit.Eventually returning how long ok took to hold
// (what the revocation tests report).
func Eventually(t *testing.T, within time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	testkit.Eventually(t, within, what, ok)
	return time.Since(start)
}
