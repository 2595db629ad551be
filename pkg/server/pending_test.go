package server

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
)

// A Pending operation answers 501 naming the operation to every role on
// its versioned path and its alias, whatever the body; no credential is
// still 401. It is listed in the reflection like any other.
func TestPendingAnswers501(t *testing.T) {
	f := newFixture(t)
	s, err := New(Options{Name: "p", Logger: slog.New(slog.DiscardHandler), Auth: f.srv.opts.Auth}, api.PendingRoutes("dashboard")...)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = s
	for _, role := range []auth.Role{auth.User, auth.WorkspaceMember, auth.WorkspaceOwner, auth.DomainAdmin} {
		tok := f.token(t, auth.Principal{DomainID: "d", UserID: "u", Role: role, WorkspaceID: "w"}, time.Minute)
		for _, path := range []string{"/dashboard/v1/public-widget/load-sum", "/dashboard/public-widget/load-sum"} {
			for _, body := range []string{`{}`, `{"anything": [1, 2]}`, `not json`} {
				rec := f.call(http.MethodPost, path, tok, body)
				code, msg := detail(t, rec)
				if rec.Code != http.StatusNotImplemented || code != "ERROR_NOT_IMPLEMENTED" || !strings.Contains(msg, "PublicWidget.load_sum") {
					t.Fatalf("%s %s as %s: %d %s %q", path, body, role, rec.Code, code, msg)
				}
			}
		}
	}
	if rec := f.call(http.MethodPost, "/dashboard/public-dashboard/list", "", `{}`); rec.Code != http.StatusUnauthorized {
		t.Fatalf("no credential: %d", rec.Code)
	}
	rec := f.call(http.MethodGet, api.ReflectionPath, "", "")
	if !strings.Contains(rec.Body.String(), `"/dashboard/public-dashboard/list"`) {
		t.Fatalf("reflection without the pending path: %s", rec.Body)
	}
}

func TestNotBuiltPaths(t *testing.T) {
	seen := map[string]bool{}
	for svc := range api.NotBuilt {
		for _, p := range api.NotBuiltPaths(svc) {
			if api.Alias(p) == "" || !strings.HasPrefix(p, "/"+svc+"/") {
				t.Errorf("%s: not a versioned path of %s", p, svc)
			}
			if seen[api.Alias(p)] {
				t.Errorf("%s listed twice", p)
			}
			seen[api.Alias(p)] = true
		}
	}
	for path, want := range map[string]string{
		"/dashboard/v1/public-widget/load-sum": "PublicWidget.load_sum",
		"/search/v1/resource/search":           "Resource.search",
		"/identity/v2/role/list-basic-role":    "Role.list_basic_role",
	} {
		if got := api.OperationName(path); got != want {
			t.Errorf("OperationName(%s) = %s, want %s", path, got, want)
		}
	}
}
