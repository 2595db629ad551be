package repository_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/repository"
)

// A plugin's registry credentials are a secret field: no query of any
// caller reads them (upstream's regex-with-count_only oracle answered 1 or
// 0 per guessed character), and a remote repository is never sent such a
// query.
func TestRegistryCredentialsAreNoQueryOracle(t *testing.T) {
	t.Parallel()
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

// Registry credentials stored in clear before sealing are sealed when the
// service starts, and still reach the registry.
func TestPlaintextRegistryCredentialsAreSealedAtStart(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t, "basic")
	reg.pushTags(t, "team/plugin-old", "1.0.0")
	db := testkit.Get().Database(t)
	now := time.Now().UTC()
	if _, err := db.Collection(repository.PluginsCollection).InsertOne(context.Background(), bson.D{
		{Key: "_id", Value: "plugin-old"}, {Key: "plugin_id", Value: "plugin-old"}, {Key: "name", Value: "Old"}, {Key: "state", Value: "ENABLED"},
		{Key: "resource_type", Value: "inventory.Collector"}, {Key: "image", Value: "team/plugin-old"}, {Key: "registry_type", Value: "PRIVATE_REGISTRY"},
		{Key: "registry_url", Value: reg.URL}, {Key: "registry_config", Value: bson.D{{Key: "username", Value: regUser}, {Key: "password", Value: regPassword}}},
		{Key: "domain_id", Value: "domain-a"}, {Key: "created_at", Value: now}, {Key: "updated_at", Value: now},
	}); err != nil {
		t.Fatal(err)
	}
	_, handler := build(t, db, repository.Config{Outward: loopback})
	raw, err := db.Collection(repository.PluginsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: "plugin-old"}}).Raw()
	if err != nil || bytes.Contains(raw, []byte(regPassword)) || raw.Lookup("registry_sealed", "data").Type == 0 {
		t.Fatalf("the old record is not sealed: %v (%v)", raw, err)
	}
	member := testkit.NewClient(t, handler).For(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"})
	var v versionsInfo
	member.Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": "plugin-old"}).OK(&v)
	if len(v.Results) != 1 || v.Results[0] != "1.0.0" {
		t.Fatalf("versions with the sealed credentials = %+v", v)
	}
}
