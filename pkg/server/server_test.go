package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
)

type echoReq struct {
	Text  string `json:"text" v:"required"`
	Sleep int    `json:"sleep_ms"`
	Fail  string `json:"fail"`
}

type echoResp struct {
	Text    string `json:"text"`
	Version int    `json:"version"`
	Caller  string `json:"caller"`
}

func echoOp(path string, version int, access auth.Access) api.Op[echoReq, echoResp] {
	return api.Op[echoReq, echoResp]{Path: path, Access: access, Handle: func(ctx context.Context, p *auth.Principal, r *echoReq) (*echoResp, error) {
		time.Sleep(time.Duration(r.Sleep) * time.Millisecond)
		if r.Text == "hold" {
			held <- struct{}{}
			<-release
		}
		switch r.Fail {
		case "bug":
			return nil, errors.New("secret internal detail")
		case "down":
			return nil, errs.Down("The store", errors.New("connection refused"))
		}
		caller := ""
		if p != nil {
			caller = p.UserID
		}
		return &echoResp{Text: r.Text, Version: version, Caller: caller}, nil
	}}
}

type fixture struct {
	srv    *Server
	signer *auth.Signer
	ready  error
	mu     sync.Mutex
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s, err := auth.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(auth.JWKSOf(s))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{signer: s}
	f.srv, err = New(Options{
		Name: "test", Logger: slog.New(slog.DiscardHandler), Auth: v, DrainDelay: 200 * time.Millisecond,
		Ready: func(context.Context) error { f.mu.Lock(); defer f.mu.Unlock(); return f.ready },
	},
		echoOp("/svc/v1/thing/do", 1, auth.Roles(auth.DomainAdmin)),
		echoOp("/svc/v2/thing/do", 2, auth.Roles(auth.DomainAdmin)),
		echoOp("/svc/v1/thing/open", 1, auth.Public()),
	)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) token(t *testing.T, p auth.Principal, ttl time.Duration) string {
	t.Helper()
	tok, err := f.signer.Issue(p, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (f *fixture) call(method, path, token, body string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	return rec
}

func detail(t *testing.T, rec *httptest.ResponseRecorder) (string, string) {
	t.Helper()
	var body struct {
		Detail struct{ Code, Message string } `json:"detail"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("not an error body: %s", rec.Body)
	}
	return body.Detail.Code, body.Detail.Message
}

func TestAuthAndErrors(t *testing.T) {
	f := newFixture(t)
	admin := f.token(t, auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin}, time.Hour)
	member := f.token(t, auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember}, time.Hour)
	system := f.token(t, auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-a", UserID: "root", Role: auth.SystemAdmin}, time.Hour)
	other, _ := auth.GenerateSigner()
	forged, _ := other.Issue(auth.Principal{DomainID: "domain-a", UserID: "eve", Role: auth.DomainAdmin}, time.Hour)
	expired, err := f.signer.IssueAt(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin}, time.Now().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            string
	}{
		{"no token", "POST", "/svc/v1/thing/do", "", `{"text":"x"}`, 401, errs.AuthenticateFailure},
		{"forged signature", "POST", "/svc/v1/thing/do", forged, `{"text":"x"}`, 401, errs.AuthenticateFailure},
		{"expired an hour ago", "POST", "/svc/v1/thing/do", expired, `{"text":"x"}`, 401, errs.AuthenticateFailure},
		{"garbage token", "POST", "/svc/v1/thing/do", "abc.def.ghi", `{"text":"x"}`, 401, errs.AuthenticateFailure},
		{"role not allowed", "POST", "/svc/v1/thing/do", member, `{"text":"x"}`, 403, errs.PermissionDenied},
		{"bug hides its cause", "POST", "/svc/v1/thing/do", admin, `{"text":"x","fail":"bug"}`, 500, errs.Unknown},
		{"store down", "POST", "/svc/v1/thing/do", admin, `{"text":"x","fail":"down"}`, 503, errs.Unavailable},
		{"validation", "POST", "/svc/v1/thing/do", admin, `{}`, 400, errs.RequiredParameter},
		{"unknown path", "POST", "/svc/v1/thing/undo", admin, `{}`, 404, errs.UnsupportedAPI},
		{"wrong method", "GET", "/svc/v1/thing/do", admin, ``, 405, errs.UnsupportedAPI},
		{"too large", "POST", "/svc/v1/thing/open", "", `{"text":"` + strings.Repeat("x", MaxBody) + `"}`, 413, errs.RequestTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := f.call(c.method, c.path, c.token, c.body)
			code, msg := detail(t, rec)
			if rec.Code != c.status || code != c.code {
				t.Fatalf("got %d %s (%s), want %d %s", rec.Code, code, msg, c.status, c.code)
			}
			if strings.Contains(msg, "secret internal detail") || strings.Contains(msg, "connection refused") {
				t.Fatalf("internals leaked: %s", msg)
			}
		})
	}

	for _, tc := range []struct {
		token, caller string
	}{{admin, "alice"}, {system, "root"}} {
		rec := f.call("POST", "/svc/v1/thing/do", tc.token, `{"text":" hi "}`)
		var r echoResp
		_ = json.Unmarshal(rec.Body.Bytes(), &r)
		if rec.Code != 200 || r.Text != "hi" || r.Caller != tc.caller || r.Version != 1 {
			t.Fatalf("call as %s: %d %s", tc.caller, rec.Code, rec.Body)
		}
	}
	rec := f.call("POST", "/svc/v1/thing/open", "", `{"text":"anyone"}`)
	if rec.Code != 200 {
		t.Fatalf("public op: %d %s", rec.Code, rec.Body)
	}
}

func TestAliasGoesToNewestVersion(t *testing.T) {
	f := newFixture(t)
	admin := f.token(t, auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin}, time.Hour)
	rec := f.call("POST", "/svc/thing/do", admin, `{"text":"x"}`)
	var r echoResp
	_ = json.Unmarshal(rec.Body.Bytes(), &r)
	if rec.Code != 200 || r.Version != 2 {
		t.Fatalf("alias answered %d %s, want version 2", rec.Code, rec.Body)
	}
	if a := Aliases(f.srv.routes); a["/svc/thing/do"] != "/svc/v2/thing/do" || a["/svc/thing/open"] != "/svc/v1/thing/open" {
		t.Fatalf("aliases = %v", a)
	}
}

func TestHealthReadyMetricsRequestID(t *testing.T) {
	f := newFixture(t)
	if rec := f.call("GET", "/healthz", "", ""); rec.Code != 200 {
		t.Fatalf("healthz %d", rec.Code)
	}
	if rec := f.call("GET", "/readyz", "", ""); rec.Code != 200 {
		t.Fatalf("readyz %d", rec.Code)
	}
	f.mu.Lock()
	f.ready = errors.New("store gone")
	f.mu.Unlock()
	if rec := f.call("GET", "/readyz", "", ""); rec.Code != 503 {
		t.Fatalf("readyz with the store down: %d", rec.Code)
	}

	rec := f.call("POST", "/svc/v1/thing/open", "", `{"text":"x"}`, "X-Request-Id", "req-123")
	if rec.Header().Get("X-Request-Id") != "req-123" {
		t.Fatalf("request id not kept: %v", rec.Header())
	}
	if rec := f.call("POST", "/svc/v1/thing/open", "", `{}`); rec.Header().Get("X-Request-Id") == "" {
		t.Fatal("no request id generated")
	}
	m := f.call("GET", "/metrics", "", "").Body.String()
	for _, want := range []string{
		`nubes_requests_total{operation="/svc/v1/thing/open",status="200"} 1`,
		`nubes_requests_total{operation="/svc/v1/thing/open",status="400"} 1`,
		`nubes_request_duration_seconds_count{operation="/svc/v1/thing/open"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %q", want)
		}
	}
	doc := f.call("GET", "/openapi.json", "", "")
	var d map[string]any
	if err := json.Unmarshal(doc.Body.Bytes(), &d); err != nil || d["openapi"] != "3.1.0" || len(d["paths"].(map[string]any)) != 3 {
		t.Fatalf("openapi: %v %s", err, doc.Body)
	}
}

// held and release let TestGracefulShutdown hold requests in flight: a
// request with text "hold" tells held it arrived and waits for release.
var (
	held    = make(chan struct{}, 16)
	release chan struct{} // made anew by each run of the test
)

// TestGracefulShutdown: requests in flight when SIGTERM arrives finish,
// after the listener has closed, and readiness fails from the signal on.
// Each step waits for the state before it, not for a time.
func TestGracefulShutdown(t *testing.T) {
	release = make(chan struct{})
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Run(ctx, ln) }()

	const inflight = 8
	results := make(chan int, inflight)
	for range inflight {
		go func() {
			resp, err := http.Post(base+"/svc/v1/thing/open", "application/json", strings.NewReader(`{"text":"hold"}`))
			if err != nil {
				results <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	for range inflight { // every request is in its handler
		select {
		case <-held:
		case <-time.After(time.Minute):
			t.Fatal("requests did not arrive")
		}
	}
	cancel()
	testkit.Eventually(t, time.Minute, "readiness to fail", func() bool { return f.call("GET", "/readyz", "", "").Code == 503 })
	testkit.Eventually(t, time.Minute, "the listener to close", func() bool {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(release)
	for range inflight {
		if code := <-results; code != 200 {
			t.Fatalf("an in-flight request ended with %d", code)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

// TestConnectionTimeouts: a client that never finishes its headers, one
// that never finishes its body, and an answer that takes longer than the
// write timeout all lose the connection; none holds it open. The 10 s
// read deadline only bounds a failing test.
func TestConnectionTimeouts(t *testing.T) {
	f := newFixture(t)
	f.srv.opts.ReadHeaderTimeout = 100 * time.Millisecond
	f.srv.opts.ReadTimeout = 200 * time.Millisecond
	f.srv.opts.WriteTimeout = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Run(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })

	closed := func(t *testing.T, send string) string {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
		if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server kept the connection open after %q", send)
		}
		return string(got)
	}
	t.Run("headers never end", func(t *testing.T) {
		closed(t, "POST /svc/v1/thing/open HTTP/1.1\r\nHost: x\r\n")
	})
	t.Run("body never ends", func(t *testing.T) {
		got := closed(t, "POST /svc/v1/thing/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":")
		if strings.Contains(got, " 200 ") {
			t.Fatalf("a request with a cut body was answered: %s", got)
		}
	})
	t.Run("answer slower than the write timeout", func(t *testing.T) {
		body := `{"text":"x","sleep_ms":1000}`
		got := closed(t, "POST /svc/v1/thing/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "+
			strconv.Itoa(len(body))+"\r\n\r\n"+body)
		if got != "" {
			t.Fatalf("an answer past the write timeout reached the client: %s", got)
		}
	})
	t.Run("a quick answer", func(t *testing.T) {
		body := `{"text":"x"}`
		got := closed(t, "POST /svc/v1/thing/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "+
			strconv.Itoa(len(body))+"\r\n\r\n"+body)
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") {
			t.Fatalf("got %q", got)
		}
	})
}

func TestDefaultTimeouts(t *testing.T) {
	s, err := New(Options{Name: "t", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	o := s.opts
	if o.ReadHeaderTimeout != DefaultReadHeaderTimeout || o.ReadTimeout != DefaultReadTimeout ||
		o.WriteTimeout != DefaultWriteTimeout || o.IdleTimeout != DefaultIdleTimeout {
		t.Fatalf("defaults not applied: %+v", o)
	}
}
