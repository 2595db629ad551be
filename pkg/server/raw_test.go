package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
)

// TestRaw: a raw route gets its path parameters and the server's error
// body; it sits beside declared operations without taking their paths.
func TestRaw(t *testing.T) {
	raw := Raw{Method: http.MethodPost, Path: "/svc/v1/thing/:id/:key/events", Handle: func(w http.ResponseWriter, r *http.Request) error {
		if r.PathValue("key") != "open" {
			return errs.Forbidden()
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		return json.NewEncoder(w).Encode(map[string]string{"id": r.PathValue("id"), "body": string(body)})
	}}
	s, err := New(Options{Raw: []Raw{raw}})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(`{"a":1}`)))
		return rec
	}
	rec := do(http.MethodPost, "/svc/v1/thing/t-1/open/events")
	var got map[string]string
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got["id"] != "t-1" || got["body"] != `{"a":1}` {
		t.Fatalf("raw route: %d %s", rec.Code, rec.Body)
	}
	rec = do(http.MethodPost, "/svc/v1/thing/t-1/shut/events")
	if rec.Code != 403 || !strings.Contains(rec.Body.String(), errs.PermissionDenied) {
		t.Fatalf("raw route error: %d %s", rec.Code, rec.Body)
	}
	if rec := do(http.MethodPost, "/svc/v1/thing/t-1/open/other"); rec.Code != 404 {
		t.Fatalf("unknown path: %d", rec.Code)
	}
}

// A path parameter may be a secret (a webhook's ingest URL holds its
// access key): the log names the route, never the path, whether the
// request is served, refused, sent with a wrong method or to no route.
func TestLogNamesTheRouteNotThePath(t *testing.T) {
	const key = "k3y-0f-the-h00k"
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	raw := Raw{Method: http.MethodPost, Path: "/svc/v1/thing/:id/:key/events", Handle: func(w http.ResponseWriter, r *http.Request) error {
		switch r.PathValue("id") {
		case "refused":
			return errs.Forbidden()
		case "bug":
			return errors.New("boom")
		}
		Logger(r.Context()).Info("event ingested")
		return nil
	}}
	s, err := New(Options{Raw: []Raw{raw}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, path string }{
		{http.MethodPost, "/svc/v1/thing/ok/" + key + "/events"},
		{http.MethodPost, "/svc/v1/thing/refused/" + key + "/events"},
		{http.MethodPost, "/svc/v1/thing/bug/" + key + "/events"},
		{http.MethodGet, "/svc/v1/thing/ok/" + key + "/events"},
		{http.MethodPost, "/svc/v1/thing/ok/" + key + "/other"},
	} {
		s.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{}`)))
	}
	out := buf.String()
	if strings.Contains(out, key) {
		t.Fatalf("the log carries the path's secret:\n%s", out)
	}
	if !strings.Contains(out, "route=/svc/v1/thing/:id/:key/events") || !strings.Contains(out, "event ingested") {
		t.Fatalf("the log should name the route:\n%s", out)
	}
}
