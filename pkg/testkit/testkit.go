// Package testkit hands tests the FerretDB and NATS of the `go test` run
// (processes of their own, outside the race build: see infra.go), mints
// tokens with test key material, and drives a service's HTTP handler so a
// test reads like the API call it makes.
//
// Only tests import it.
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/store"
)

// Env is the infrastructure of one test binary: the run's store, its own
// account of the run's NATS server.
type Env struct {
	Mongo    Mongo
	NATS     Broker
	Client   *mongo.Client
	Signer   *auth.Signer
	Verifier *auth.Verifier
	infra    *infra
	release  func() // the NATS account
	seq      atomic.Int64
}

// Mongo is where the run's store (FerretDB on SQLite behind serialwrites)
// takes MongoDB clients.
type Mongo struct{ URI string }

// Broker is where the binary's NATS account takes clients (the URL names
// the account's user).
type Broker struct{ URL string }

var env *Env

// Main starts the environment, runs the tests and stops it. Call it from
// TestMain: `func TestMain(m *testing.M) { testkit.Main(m) }`. atEnd run
// after the tests, before the environment stops: they stop what the
// binary's tests shared (a stack started once for them).
func Main(m *testing.M, atEnd ...func()) {
	var err error
	env, err = start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit:", err)
		os.Exit(1)
	}
	code := m.Run()
	for _, f := range atEnd {
		f()
	}
	env.stop()
	os.Exit(code)
}

// Get returns the environment started by Main.
func Get() *Env {
	if env == nil {
		panic("testkit: call testkit.Main from TestMain")
	}
	return env
}

func start() (*Env, error) {
	in, err := joinInfra()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	natsURL, release, err := in.claimAccount(ctx)
	if err != nil {
		in.close()
		return nil, err
	}
	c, err := store.Connect(ctx, in.state.MongoURI, store.Options{MaxPoolSize: 16})
	if err != nil {
		release()
		in.close()
		return nil, err
	}
	s, err := auth.GenerateSigner()
	if err != nil {
		return nil, err
	}
	v, err := auth.NewVerifier(auth.JWKSOf(s))
	if err != nil {
		return nil, err
	}
	return &Env{Mongo: Mongo{URI: in.state.MongoURI}, NATS: Broker{URL: natsURL}, Client: c, Signer: s, Verifier: v,
		infra: in, release: release}, nil
}

func (e *Env) stop() {
	_ = e.Client.Disconnect(context.Background())
	e.release()
	e.infra.close()
}

// Database returns a fresh, empty database for one test; the store is
// shared by the run's binaries, so the name has this process's id.
func (e *Env) Database(t testing.TB) *mongo.Database {
	name := fmt.Sprintf("t%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, e.seq.Add(1))
	db := e.Client.Database(name)
	t.Cleanup(func() { _ = db.Drop(context.Background()) })
	return db
}

// JWKS is the JWK set that verifies the kit's tokens.
func (e *Env) JWKS() []byte { return auth.JWKSOf(e.Signer) }

// Token mints a token (an hour) for p.
func (e *Env) Token(t testing.TB, p auth.Principal) string {
	tok, err := e.Signer.Issue(p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Client calls a handler as one caller.
type Client struct {
	t       testing.TB
	h       http.Handler
	token   string
	headers map[string]string
}

// NewClient calls h anonymously; use As for a caller.
func NewClient(t testing.TB, h http.Handler) *Client { return &Client{t: t, h: h} }

// As returns a client that sends token as its bearer credential.
func (c *Client) As(token string) *Client {
	cp := *c
	cp.token = token
	return &cp
}

// For returns a client that calls as p, with a token the kit mints.
func (c *Client) For(p auth.Principal) *Client { return c.As(Get().Token(c.t, p)) }

// Response is an answer of the API.
type Response struct {
	t      testing.TB
	Path   string
	Status int
	Body   []byte
}

// Call POSTs body (marshalled, or sent as is when it is a string or
// []byte) to path.
func (c *Client) Call(path string, body any) *Response {
	c.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	case nil:
		raw = []byte("{}")
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			c.t.Fatal(err)
		}
	}
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, req)
	return &Response{t: c.t, Path: path, Status: rec.Code, Body: rec.Body.Bytes()}
}

// CallQueued is Call for a test that queues more writers on one lease
// than a loaded machine serves within the lease's wait: it calls again
// while the answer is the lease's 503 (lease.Take gave up waiting, before
// anything was done), as a client told to retry later would, so the test
// checks what the writes did together rather than how fast they queued.
// Any other answer (a store timeout's 503 too) is returned as is.
func (c *Client) CallQueued(path string, body any) *Response {
	c.t.Helper()
	for try := 1; ; try++ {
		r := c.Call(path, body)
		if !r.lockWaitedOut() || try == queuedTries {
			return r
		}
		c.t.Logf("%s: the lease's 503 (try %d), calling again", path, try)
	}
}

// Deleted calls a delete of a record with children (store.Teardown)
// until it is done, and fails the test if it never is. Any 503 is called
// again: a teardown cut half-way (a store timeout on a loaded machine, a
// lease waited out) is finished by its retry, and a 404 after a 503 says
// the cut delete landed after all. A test that checks what is left
// after a delete then checks it whatever the machine's load.
func (c *Client) Deleted(path string, body any) {
	c.t.Helper()
	for try := 1; ; try++ {
		r := c.Call(path, body)
		if r.Status == http.StatusOK || (try > 1 && r.Status == http.StatusNotFound) {
			return
		}
		if r.Status != http.StatusServiceUnavailable || try == queuedTries {
			c.t.Fatalf("%s %v (try %d): status %d, want 200: %s", path, body, try, r.Status, r.Body)
		}
		c.t.Logf("%s: 503 (try %d), calling again: %s", path, try, r.Body)
	}
}

// queuedTries bounds CallQueued and Deleted: a lease never released
// still fails.
const queuedTries = 20

// lockWaitedOut reports the 503 of lease.Take (errs.Down("the lock ...")).
func (r *Response) lockWaitedOut() bool {
	if r.Status != http.StatusServiceUnavailable {
		return false
	}
	var body struct {
		Detail struct{ Message string } `json:"detail"`
	}
	return json.Unmarshal(r.Body, &body) == nil && strings.HasPrefix(body.Detail.Message, "the lock ")
}

// OK asserts a 200 and decodes the body into out (if not nil).
func (r *Response) OK(out any) *Response {
	r.t.Helper()
	if r.Status != http.StatusOK {
		r.t.Fatalf("%s: status %d, want 200: %s", r.Path, r.Status, r.Body)
	}
	if out != nil {
		reflect.ValueOf(out).Elem().SetZero() // a reused target keeps no stale fields
		if err := json.Unmarshal(r.Body, out); err != nil {
			r.t.Fatalf("%s: decode %s: %v", r.Path, r.Body, err)
		}
	}
	return r
}

// Fails asserts the error status and code of the body.
func (r *Response) Fails(status int, code string) {
	r.t.Helper()
	var body struct {
		Detail struct{ Code, Message string } `json:"detail"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		r.t.Fatalf("%s: status %d, body not an error: %s", r.Path, r.Status, r.Body)
	}
	if r.Status != status || body.Detail.Code != code {
		r.t.Fatalf("%s: got %d %s (%s), want %d %s", r.Path, r.Status, body.Detail.Code, body.Detail.Message, status, code)
	}
	if strings.TrimSpace(body.Detail.Message) == "" {
		r.t.Fatalf("%s: error without a message", r.Path)
	}
}

// JSON decodes the body into a generic map.
func (r *Response) JSON() map[string]any {
	r.t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		r.t.Fatalf("%s: decode %s: %v", r.Path, r.Body, err)
	}
	return m
}

// Account is a JetStream account of the run's NATS server, emptied first,
// for what outlives one test (a stack the binary's tests share); release
// frees it. A test's own account is OwnNATS.
func (e *Env) Account(ctx context.Context) (url string, release func(), err error) {
	return e.infra.claimAccount(ctx)
}

// OwnNATS is the URL of a JetStream account of the run's NATS server for
// t alone, emptied first and freed at the end of the test: for a test
// whose services own the fixed stream and consumer names (a whole stack)
// and must not meet another test's.
func (e *Env) OwnNATS(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, release, err := e.infra.claimAccount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return url
}
