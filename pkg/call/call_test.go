package call

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
)

func TestCall(t *testing.T) {
	var gotBearer, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotBearer = r.Header.Get("Authorization")
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte(`{"project_id": "project-1"}`))
		case "/missing":
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"detail": {"code": "ERROR_NOT_FOUND", "message": "no such project"}}`))
		case "/odd":
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"detail": {"code": "ERROR_SOMETHING_ELSE", "message": "state"}}`))
		case "/down":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"detail": {"code": "ERROR_UNAVAILAVBLE", "message": "store"}}`))
		case "/bug":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"detail": {"code": "ERROR_UNKNOWN", "message": "internal"}}`))
		case "/garbage":
			_, _ = w.Write([]byte(`<html>`))
		}
	}))
	defer srv.Close()
	svcs := NewServices(map[string]string{"identity": srv.URL + "/", "gone": "http://127.0.0.1:1"}, "service-token", nil)
	c := svcs.Client("identity")
	caller := auth.WithBearer(context.Background(), "caller-token")

	var out struct {
		ProjectID string `json:"project_id"`
	}
	if err := c.Call(caller, "/ok", map[string]string{"project_id": "project-1"}, &out); err != nil || out.ProjectID != "project-1" {
		t.Fatalf("Call = %v, %+v", err, out)
	}
	if gotBearer != "Bearer caller-token" || gotBody != `{"project_id":"project-1"}` {
		t.Errorf("sent bearer %q body %q, want the caller's bearer and the request", gotBearer, gotBody)
	}
	if err := c.Call(context.Background(), "/ok", nil, nil); err != nil || gotBearer != "Bearer service-token" || gotBody != "{}" {
		t.Errorf("no caller: err %v bearer %q body %q, want the service token and {}", err, gotBearer, gotBody)
	}
	if err := c.CallAsService(caller, "/ok", nil, nil); err != nil || gotBearer != "Bearer service-token" {
		t.Errorf("CallAsService sent %q (err %v), want the service token", gotBearer, err)
	}

	for _, tc := range []struct {
		client       *Client
		path         string
		status       int
		code         string
		passesThough bool
	}{
		{c, "/missing", 404, "ERROR_NOT_FOUND", true},
		{c, "/odd", 409, "ERROR_SOMETHING_ELSE", true},
		{c, "/down", 503, errs.Unavailable, false},
		{c, "/bug", 503, errs.Unavailable, false},
		{c, "/garbage", 503, errs.Unavailable, false},
		{svcs.Client("gone"), "/ok", 503, errs.Unavailable, false},
		{svcs.Client("unconfigured"), "/ok", 503, errs.Unavailable, false},
	} {
		err := tc.client.Call(caller, tc.path, nil, &out)
		e, ok := errs.As(err)
		if !ok || e.Status() != tc.status || e.Code != tc.code {
			t.Errorf("%s %s: got %v, want %d %s", tc.client.service, tc.path, err, tc.status, tc.code)
			continue
		}
		if tc.passesThough && e.Message == "" {
			t.Errorf("%s: the callee's message was lost", tc.path)
		}
		if b, _ := json.Marshal(e.Message); !tc.passesThough && len(b) > 200 {
			t.Errorf("%s: a 503 message should not carry the callee's body: %s", tc.path, e.Message)
		}
	}
}

// A 401 or 403 answered to the service credential is the deployment's
// fault (a wrong service_token): the caller sees 503, never the 401 that
// would log a console user out. Answered to the caller's own bearer, it
// passes through.
func TestServiceCredentialRefusedIs503(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/401":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"detail": {"code": "ERROR_AUTHENTICATE_FAILURE", "message": "token expired"}}`))
		case "/403":
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"detail": {"code": "ERROR_PERMISSION_DENIED", "message": "denied"}}`))
		}
	}))
	defer srv.Close()
	c := NewServices(map[string]string{"identity": srv.URL}, "wrong-service-token", nil).Client("identity")
	caller := auth.WithBearer(context.Background(), "caller-token")
	for _, tc := range []struct {
		name   string
		call   func(path string) error
		status int
	}{
		{"CallAsService with a caller", func(p string) error { return c.CallAsService(caller, p, nil, nil) }, 0},
		{"CallAsService without a caller", func(p string) error { return c.CallAsService(context.Background(), p, nil, nil) }, 0},
		{"Call without a caller (service token)", func(p string) error { return c.Call(context.Background(), p, nil, nil) }, 0},
		{"Call on the caller's behalf", func(p string) error { return c.Call(caller, p, nil, nil) }, -1},
	} {
		for _, path := range []string{"/401", "/403"} {
			e, ok := errs.As(tc.call(path))
			if !ok {
				t.Fatalf("%s %s: not an errs.Error", tc.name, path)
			}
			want, code := 503, errs.Unavailable
			if tc.status < 0 { // the caller's own bearer: the answer is theirs
				want = 401
				code = "ERROR_AUTHENTICATE_FAILURE"
				if path == "/403" {
					want, code = 403, "ERROR_PERMISSION_DENIED"
				}
			}
			if e.Status() != want || e.Code != code {
				t.Errorf("%s %s: got %d %s, want %d %s", tc.name, path, e.Status(), e.Code, want, code)
			}
		}
	}
}
