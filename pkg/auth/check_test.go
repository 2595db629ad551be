package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/errs"
)

type fakeChecker struct {
	mu    sync.Mutex
	err   error
	calls atomic.Int32
}

func (f *fakeChecker) Check(context.Context, string, *Principal) error {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeChecker) set(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }

func TestCheckedCachesAndExpires(t *testing.T) {
	s, _ := GenerateSigner()
	v := verifierFor(t, s)
	fc := &fakeChecker{}
	a := Checked(v, fc, 100*time.Millisecond)
	// The cache's clock moves only when the test moves it: a stalled
	// machine neither expires an answer early nor keeps it late.
	clock := time.Now()
	a.(*checked).now = func() time.Time { return clock }
	tok, _ := s.Issue(Principal{TokenType: APIKey, TokenID: "api-key-1", DomainID: "d", UserID: "u", Role: User}, 0)
	sys, _ := s.Issue(Principal{TokenType: SystemToken, DomainID: "d", UserID: "root", Role: SystemAdmin}, time.Hour)

	for range 5 {
		if p, err := a.Authenticate(context.Background(), tok); err != nil || p.TokenID != "api-key-1" {
			t.Fatalf("good key refused: %v", err)
		}
	}
	if n := fc.calls.Load(); n != 1 {
		t.Fatalf("checker called %d times, want 1 (cached)", n)
	}
	fc.set(errs.Unauthenticated("API key is disabled."))
	if _, err := a.Authenticate(context.Background(), tok); err != nil {
		t.Fatal("the cached good answer should hold until it expires")
	}
	clock = clock.Add(150 * time.Millisecond)
	if _, err := a.Authenticate(context.Background(), tok); err == nil {
		t.Fatal("a disabled key was accepted after the cache expired")
	}
	fc.set(errs.Down("The identity service", errors.New("refused")))
	clock = clock.Add(150 * time.Millisecond)
	calls := fc.calls.Load()
	for range 3 {
		if _, err := a.Authenticate(context.Background(), tok); err == nil {
			t.Fatal("accepted while identity is down")
		}
	}
	if fc.calls.Load() != calls+3 {
		t.Fatal("an outage answer was cached")
	}
	if _, err := a.Authenticate(context.Background(), sys); err != nil {
		t.Fatalf("system tokens have no record to check: %v", err)
	}
}

func TestRemoteChecker(t *testing.T) {
	var state atomic.Int32 // 0 ok, 1 refused, 2 broken
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/identity/v2/token/check" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "bad request", 400)
			return
		}
		switch state.Load() {
		case 0:
			_, _ = w.Write([]byte(`{}`))
		case 1:
			w.WriteHeader(401)
			_, _ = w.Write([]byte(`{"detail":{"code":"ERROR_AUTHENTICATE_FAILURE","message":"disabled"}}`))
		default:
			w.WriteHeader(502)
		}
	}))
	defer srv.Close()
	c := RemoteChecker(srv.URL+"/", nil)
	if err := c.Check(context.Background(), "tok", nil); err != nil {
		t.Fatal(err)
	}
	state.Store(1)
	if e, _ := errs.As(c.Check(context.Background(), "tok", nil)); e == nil || e.Status() != 401 {
		t.Fatalf("refused credential: %v", e)
	}
	state.Store(2)
	if e, _ := errs.As(c.Check(context.Background(), "tok", nil)); e == nil || e.Status() != 503 {
		t.Fatalf("broken identity: %v", e)
	}
}
