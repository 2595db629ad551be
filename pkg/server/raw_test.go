package server

import (
	"encoding/json"
	"io"
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
