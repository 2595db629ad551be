package repository_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/repository"
)

// A plugin's registry credentials are a secret field: no query of any
// caller reads them (upstream's regex-with-count_only oracle answered 1 or
// 0 per guessed character), and a remote repository is never sent such a
// query.
func TestRegistryCredentialsAreNoQueryOracle(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(remote.Close)
	h := setup(t, repository.Config{Remotes: []repository.Remote{{Name: "partner", URL: remote.URL, Token: "remote-token"}}})
	const password = "hunter2-Secret"
	h.register(t, h.adminA, map[string]any{
		"name": "Mail", "resource_type": "notification.Protocol", "image": "registry.example.com/team/mail:1.0",
		"registry_type": "PRIVATE_REGISTRY", "registry_url": "registry.example.com",
		"registry_config": map[string]any{"username": "u", "password": password, "nested": map[string]any{"api_token": password}},
	})
	for _, c := range []*testkit.Client{h.userA, h.adminA, h.system} {
		testkit.SecretOracle(t, c, testkit.Oracle{List: "/repository/v1/plugin/list", Secret: "registry_config",
			Probe: "registry_config.password", Right: password, Wrong: "wrong"})
		testkit.SecretOracle(t, c, testkit.Oracle{List: "/repository/v1/plugin/list", Secret: "registry_config.nested.api_token",
			Right: password, Wrong: "wrong"})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range asked {
		if strings.Contains(p, "plugin/list") {
			t.Fatalf("the remote repository was sent a query naming a secret field (%v)", asked)
		}
	}

	// Masking reaches nested keys in every answer.
	for _, path := range []string{"/repository/v1/plugin/list", "/repository/v1/plugin/get"} {
		r := h.adminA.Call(path, map[string]any{"plugin_id": "mail"})
		if r.Status != http.StatusOK || strings.Contains(string(r.Body), password) {
			t.Fatalf("%s: %d %s: the registry secret must never be sent back", path, r.Status, r.Body)
		}
	}
}
