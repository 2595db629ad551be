package user_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/apikey"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/user"
)

// grants mounts the user operations with those that create a user's
// grants (API keys, role bindings).
var grants = identitytest.Mount(user.Routes, apikey.Routes, rolebinding.Routes)

// storeWorkspace stores a workspace of the root domain for WORKSPACE bindings.
func storeWorkspace(h *identitytest.Harness, id string) {
	h.T.Helper()
	w := core.Workspace{ID: id, WorkspaceID: id, Name: id, State: core.Enabled, Tags: map[string]any{}, DomainID: h.Domain,
		CreatedBy: "admin", CreatedAt: wire.T(wire.Now())}
	if _, err := h.Deps.Workspaces.InsertOne(context.Background(), w); err != nil {
		h.T.Fatal(err)
	}
}

func mine(domainID, userID string) bson.D {
	return bson.D{{Key: "domain_id", Value: domainID}, {Key: "user_id", Value: userID}}
}

// TestUserDeleteRacingGrants: API key creates, DOMAIN and WORKSPACE role
// binding creates and a writer that rewrites the user record (user
// update) race the user's delete. Whatever the order, once the delete
// answered no API key or binding of the user is left, and the user
// created again with the same id has no binding and no key (it inherits
// nothing). Without the user's teardown (bindings and keys deleted, then
// the user, with no lease) a create that read the user before the delete
// lands after it within a few rounds.
func TestUserDeleteRacingGrants(t *testing.T) {
	h := identitytest.New(t, grants)
	storeWorkspace(h, "workspace-race")
	const rounds = 8
	var landed atomic.Int64
	for round := range rounds {
		uid := fmt.Sprintf("racer%d", round)
		h.Admin.Call("/identity/v2/user/create", map[string]any{"user_id": uid, "auth_type": "LOCAL", "password": "Racer-Passw0rd1"}).OK(nil)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		// The racers stop before the test ends, also when Deleted fails
		// it: a racer that outlived the test would report into it.
		halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
		t.Cleanup(halt)
		loop := func(what, path string, body map[string]any, ok ...int) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					r := h.Admin.Call(path, body)
					switch {
					case r.Status == http.StatusOK:
						landed.Add(1)
					case r.Status == http.StatusNotFound, r.Status == http.StatusServiceUnavailable:
						// The user is being deleted or gone; a lease waited out.
						time.Sleep(time.Millisecond)
					default:
						expected := false
						for _, s := range ok {
							expected = expected || r.Status == s
						}
						if !expected {
							t.Errorf("round %d: %s: %d %s", round, what, r.Status, r.Body)
							return
						}
					}
				}
			}()
		}
		// A key limit's 400 and a binding that exists already (409) are
		// answers of a create that found the user.
		loop("api key create", "/identity/v1/api-key/create", map[string]any{"user_id": uid, "domain_id": h.Domain}, http.StatusBadRequest)
		loop("domain binding create", "/identity/v2/role-binding/create",
			map[string]any{"user_id": uid, "role_id": "managed-domain-admin", "resource_group": "DOMAIN"}, http.StatusConflict)
		loop("workspace binding create", "/identity/v2/role-binding/create",
			map[string]any{"user_id": uid, "role_id": "managed-workspace-member", "resource_group": "WORKSPACE", "workspace_id": "workspace-race"}, http.StatusConflict)
		loop("user update", "/identity/v2/user/update", map[string]any{"user_id": uid, "name": "renamed"})
		// The thing under test: the delete lands 0 to 15 ms into the creates.
		time.Sleep(time.Duration(round%4) * 5 * time.Millisecond)
		h.Admin.Deleted("/identity/v2/user/delete", map[string]any{"user_id": uid})
		halt()
		if n := h.Count(core.APIKeysCollection, mine(h.Domain, uid)); n != 0 {
			t.Fatalf("round %d: %d API keys of the deleted user left", round, n)
		}
		if n := h.Count(core.RoleBindingsCollection, mine(h.Domain, uid)); n != 0 {
			t.Fatalf("round %d: %d role bindings of the deleted user left", round, n)
		}
		if h.UserDoc(h.Domain, uid) != nil {
			t.Fatalf("round %d: the user record is left", round)
		}
		// The same id again: no grant of the deleted user reaches it.
		h.Admin.Call("/identity/v2/user/create", map[string]any{"user_id": uid, "auth_type": "LOCAL", "password": "Racer-Passw0rd1"}).OK(nil)
		if n := identitytest.ListCount(t, h.Admin, "/identity/v2/role-binding/list", map[string]any{"user_id": uid}); n != 0 {
			t.Fatalf("round %d: the re-created user has %d role bindings", round, n)
		}
		if n := identitytest.ListCount(t, h.Admin, "/identity/v1/api-key/list", map[string]any{"user_id": uid, "domain_id": h.Domain}); n != 0 {
			t.Fatalf("round %d: the re-created user has %d API keys", round, n)
		}
		if got := h.UserDoc(h.Domain, uid)["role_type"]; got != "USER" {
			t.Fatalf("round %d: the re-created user's role_type = %v", round, got)
		}
	}
	if landed.Load() == 0 {
		t.Fatal("no create or update landed: the race was not run")
	}
}

// TestUserDeleteHalfWay: a user delete whose API key step fails answers
// 503 and leaves the user marked: out of get, list, stat and login, and
// no key or binding can be created for it; its bindings are gone. The
// retry finishes (keys and user gone), and then the delete is 404.
func TestUserDeleteHalfWay(t *testing.T) {
	h := identitytest.New(t, grants)
	const uid = "halfway"
	h.Admin.Call("/identity/v2/user/create", map[string]any{"user_id": uid, "auth_type": "LOCAL", "password": "Halfway-Passw0rd1"}).OK(nil)
	h.Admin.Call("/identity/v2/user/enable", map[string]any{"user_id": uid}).OK(nil)
	h.Admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": uid, "role_id": "managed-domain-admin", "resource_group": "DOMAIN"}).OK(nil)
	h.Admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": uid, "domain_id": h.Domain}).OK(nil)
	token := h.LoginIn(h.Domain, uid, "Halfway-Passw0rd1").AccessToken

	restore := store.FailChildDeletes(core.APIKeysCollection)
	h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": uid}).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	restore()
	if n := h.Count(core.RoleBindingsCollection, mine(h.Domain, uid)); n != 0 {
		t.Fatalf("bindings after the failed delete: %d", n)
	}
	if n := h.Count(core.APIKeysCollection, mine(h.Domain, uid)); n != 1 {
		t.Fatalf("API keys after the failed step: %d, want 1", n)
	}
	h.Admin.Call("/identity/v2/user/get", map[string]any{"user_id": uid}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v1/user/get", map[string]any{"user_id": uid, "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := identitytest.ListCount(t, h.Admin, "/identity/v2/user/list", map[string]any{"user_id": uid}); n != 0 {
		t.Fatalf("the marked user is listed (%d)", n)
	}
	if n := identitytest.StatCount(h.Admin, "/identity/v2/user/stat", nil); n != 1 {
		t.Fatalf("users counted with the marked one: %d, want 1 (the admin)", n)
	}
	h.Admin.Call("/identity/v2/user/update", map[string]any{"user_id": uid, "name": "back"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": uid, "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": uid, "role_id": "managed-domain-admin", "resource_group": "DOMAIN"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if r := h.Anon.As(token).Call("/identity/v2/api-key/list", nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("the marked user's token: %d %s, want it refused", r.Status, r.Body)
	}
	if r := h.Anon.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": uid, "password": "Halfway-Passw0rd1"},
		"auth_type": "LOCAL", "domain_id": h.Domain}); r.Status != http.StatusUnauthorized {
		t.Fatalf("the marked user's login: %d %s, want 401", r.Status, r.Body)
	}

	h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": uid}).OK(nil)
	if n := h.Count(core.APIKeysCollection, mine(h.Domain, uid)); n != 0 {
		t.Fatalf("API keys after the retry: %d", n)
	}
	if h.UserDoc(h.Domain, uid) != nil {
		t.Fatal("the user record is left after the retry")
	}
	h.Admin.Call("/identity/v2/user/delete", map[string]any{"user_id": uid}).Fails(http.StatusNotFound, errs.NotFoundCode)
}
