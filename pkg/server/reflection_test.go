package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
)

func reflection(t *testing.T, body []byte) []api.Reflected {
	t.Helper()
	var r api.Reflection
	if err := json.Unmarshal(body, &r); err != nil || r.APIs == nil {
		t.Fatalf("not a reflection: %s (%v)", body, err)
	}
	return r.APIs
}

// TestReflectionRoute: GET without a credential lists every operation of
// the server once, under its unversioned path.
func TestReflectionRoute(t *testing.T) {
	f := newFixture(t)
	rec := f.call("GET", api.ReflectionPath, "", "")
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	want := []api.Reflected{
		{Name: "svc.thing.do", Path: "/svc/thing/do", Method: "POST"},
		{Name: "svc.thing.open", Path: "/svc/thing/open", Method: "POST"},
	}
	if got := reflection(t, rec.Body.Bytes()); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// Every listed path answers a POST (here: 401, the operation exists).
	for _, a := range want {
		if rec := f.call("POST", a.Path, "", `{"text":"x"}`); rec.Code == 404 || rec.Code == 405 {
			t.Errorf("listed %s answers %d", a.Path, rec.Code)
		}
	}
	if rec := f.call("POST", api.ReflectionPath, "", ""); rec.Code != 405 {
		t.Errorf("POST reflection: %d", rec.Code)
	}
}

// TestSuiteReflection merges the lists of the other services, skips
// itself, leaves out a service that is down without caching its absence,
// and serves the local list on ?local=1.
func TestSuiteReflection(t *testing.T) {
	var boardCalls atomic.Int32
	board := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		boardCalls.Add(1)
		if r.URL.Path != api.ReflectionPath || r.URL.Query().Get(LocalParam) != "1" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(api.Reflection{APIs: []api.Reflected{{Name: "board.post.list", Path: "/board/post/list", Method: "POST"}}})
	}))
	defer board.Close()
	var downUp atomic.Bool
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !downUp.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		_ = json.NewEncoder(w).Encode(api.Reflection{APIs: []api.Reflected{{Name: "secret.secret.get", Path: "/secret/secret/get", Method: "POST"}}})
	}))
	defer flaky.Close()
	self := "http://127.0.0.1:1" // never asked: it is the caller
	routes := []api.Route{echoOp("/identity/v2/token/grant", 2, auth.Public())}
	suite := SuiteReflection("identity", routes, map[string]string{"identity": self, "board": board.URL + "/", "secret": flaky.URL}, time.Hour, slog.New(slog.DiscardHandler))
	srv, err := New(Options{Name: "identity", Logger: slog.New(slog.DiscardHandler), Auth: nopAuth{}, Reflection: suite}, routes...)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) []api.Reflected {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
		return reflection(t, rec.Body.Bytes())
	}
	paths := func(l []api.Reflected) []string {
		var out []string
		for _, a := range l {
			out = append(out, a.Path)
		}
		return out
	}
	if got, want := paths(get(api.ReflectionPath)), []string{"/board/post/list", "/identity/token/grant"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("with secret down: %v, want %v", got, want)
	}
	downUp.Store(true)
	if got, want := paths(get(api.ReflectionPath)), []string{"/board/post/list", "/identity/token/grant", "/secret/secret/get"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("secret back: %v, want %v", got, want)
	}
	before := boardCalls.Load()
	get(api.ReflectionPath)
	if boardCalls.Load() != before {
		t.Error("a complete list was not cached")
	}
	if got, want := paths(get(api.ReflectionPath+"?local=1")), []string{"/identity/token/grant"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("local: %v, want %v", got, want)
	}
}

type nopAuth struct{}

func (nopAuth) Authenticate(context.Context, string) (*auth.Principal, error) { return nil, nil }

// TestPublicSeesBearer: a public operation gets the presented credential
// even when it does not authenticate (token/grant's refresh token), and no
// principal for it.
func TestPublicSeesBearer(t *testing.T) {
	type seen struct {
		Bearer string `json:"bearer"`
		Caller bool   `json:"caller"`
	}
	op := api.Op[api.Empty, seen]{Path: "/svc/v1/thing/peek", Access: auth.Public(), Handle: func(ctx context.Context, p *auth.Principal, _ *api.Empty) (*seen, error) {
		return &seen{Bearer: auth.BearerFromContext(ctx), Caller: p != nil}, nil
	}}
	s, _ := auth.GenerateSigner()
	v, _ := auth.NewVerifier(auth.JWKSOf(s))
	srv, err := New(Options{Name: "t", Logger: slog.New(slog.DiscardHandler), Auth: v}, op)
	if err != nil {
		t.Fatal(err)
	}
	refresh, _ := s.Issue(auth.Principal{TokenType: auth.RefreshToken, DomainID: "d", UserID: "u", Role: auth.User}, time.Hour)
	for _, c := range []struct {
		header string
		want   seen
	}{
		{"", seen{}},
		{"Bearer " + refresh, seen{Bearer: refresh}},
		{"Bearer garbage", seen{Bearer: "garbage"}},
	} {
		req := httptest.NewRequest("POST", "/svc/thing/peek", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		var got seen
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got != c.want {
			t.Errorf("%q: %d %s, want %+v", c.header, rec.Code, rec.Body, c.want)
		}
	}
}
