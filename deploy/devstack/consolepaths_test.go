package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/api"
)

// consolePaths reads docs/spec/console-paths.txt.
func consolePaths(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../../docs/spec/console-paths.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if len(out) < 200 {
		t.Fatalf("console-paths.txt lists %d paths", len(out))
	}
	return out
}

// TestConsolePathList: every path the console binds (console-2x.md
// sections 0 to 4, kept in docs/spec/console-paths.txt) is in the
// reflection list, so no resource of the console's API tree is
// undefined; none answers 404 or, not being built, 403: what is not built
// answers 501 ERROR_NOT_IMPLEMENTED naming the operation, and
// docs/status.md lists it.
func TestConsolePathList(t *testing.T) {
	t.Parallel()
	base, boot := sharedStack(t)
	status, b := post(t, base+"/identity/token/issue", "", `{"credentials": {"user_id": "`+boot.AdminUserID+`", "password": "`+boot.AdminPassword+`"}, "auth_type": "LOCAL", "domain_id": "`+boot.DomainID+`"}`)
	if status != http.StatusOK {
		t.Fatalf("login: %d %v", status, b)
	}
	refresh := b["refresh_token"].(string)
	_, b = post(t, base+"/identity/token/grant", "", `{"grant_type": "REFRESH_TOKEN", "token": "`+refresh+`", "scope": "DOMAIN"}`)
	admin, _ := b["access_token"].(string)
	_, b = post(t, base+"/identity/token/grant", "", `{"grant_type": "REFRESH_TOKEN", "token": "`+refresh+`", "scope": "USER"}`)
	user, _ := b["access_token"].(string)
	if admin == "" || user == "" {
		t.Fatal("no DOMAIN or USER token")
	}

	resp, err := http.Get(base + api.ReflectionPath)
	if err != nil {
		t.Fatal(err)
	}
	var refl api.Reflection
	err = json.NewDecoder(resp.Body).Decode(&refl)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	reflected := map[string]bool{}
	for _, a := range refl.APIs {
		reflected[a.Path] = true
	}
	statusDoc, err := os.ReadFile("../../docs/status.md")
	if err != nil {
		t.Fatal(err)
	}

	served, pending := 0, 0
	for _, path := range consolePaths(t) {
		if !reflected[path] {
			t.Errorf("%s: not in the reflection list (the console's API tree has a hole)", path)
			continue
		}
		status, body := post(t, base+path, admin, `{}`)
		code, msg := "", ""
		if d, ok := body["detail"].(map[string]any); ok {
			code, _ = d["code"].(string)
			msg, _ = d["message"].(string)
		}
		switch {
		case status == http.StatusNotImplemented:
			pending++
			if code != "ERROR_NOT_IMPLEMENTED" || !strings.Contains(msg, api.OperationName(path)) {
				t.Errorf("%s: 501 %s %q, want ERROR_NOT_IMPLEMENTED naming %s", path, code, msg, api.OperationName(path))
			}
			if !strings.Contains(string(statusDoc), "`"+path+"`") {
				t.Errorf("%s answers 501 but docs/status.md does not list it", path)
			}
			// Not built: no role is refused (a 403 shows the console's
			// authorization-error screen).
			if s, _ := post(t, base+path, user, `{}`); s != http.StatusNotImplemented {
				t.Errorf("%s: a USER token gets %d, want 501", path, s)
			}
		case status == http.StatusNotFound && code != "ERROR_NOT_FOUND":
			t.Errorf("%s: 404 %s: routed in the reflection but not served", path, code)
		case status == http.StatusForbidden:
			t.Errorf("%s: 403 to the domain admin: %s", path, msg)
		default:
			served++
		}
	}
	t.Logf("console paths: %d served, %d answering 501", served, pending)

	// Every operation the kit marks not built is in docs/status.md.
	for svc := range api.NotBuilt {
		for _, p := range api.NotBuiltPaths(svc) {
			if !strings.Contains(string(statusDoc), "`"+api.Alias(p)+"`") {
				t.Errorf("%s (not built) is missing from docs/status.md", api.Alias(p))
			}
		}
	}
}
