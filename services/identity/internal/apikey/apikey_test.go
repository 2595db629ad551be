package apikey_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/services/identity/internal/apikey"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
)

var apiKeyIDPattern = regexp.MustCompile(`^api-key-[0-9a-f]{12}$`)

var v2KeyFields = []string{"api_key_id", "api_key", "app_id", "name", "state", "domain_id", "user_id", "created_at", "last_accessed_at", "expired_at"}
var v1KeyFields = []string{"api_key_id", "api_key", "state", "user_id", "domain_id", "last_accessed_at", "created_at"}

func TestAPIKeyV2Lifecycle(t *testing.T) {
	h := identitytest.New(t, apikey.Routes)
	alice := h.Anon.As(h.DirectUser(h.Domain, "alice", "Alice-Passw0rd"))
	bob := h.Anon.As(h.DirectUser(h.Domain, "bob", "Bob-Passw0rd1"))
	keys := core.APIKeysCollection

	// create: defaults, every field, the value only here.
	var k map[string]any
	before := time.Now()
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": "ci"}).OK(&k)
	identitytest.SameFields(t, "create", k, v2KeyFields...)
	id, _ := k["api_key_id"].(string)
	value, _ := k["api_key"].(string)
	if !apiKeyIDPattern.MatchString(id) || strings.Count(value, ".") != 2 || k["state"] != "ENABLED" || k["name"] != "ci" ||
		k["user_id"] != "alice" || k["domain_id"] != h.Domain || k["app_id"] != "" || k["last_accessed_at"] != "" {
		t.Fatalf("create = %v", k)
	}
	exp, err := time.Parse(time.RFC3339, k["expired_at"].(string))
	if err != nil || !identitytest.IsoMillis.MatchString(k["expired_at"].(string)) || !identitytest.IsoMillis.MatchString(k["created_at"].(string)) {
		t.Fatalf("timestamps = %v / %v", k["created_at"], k["expired_at"])
	}
	if d := exp.Sub(before); d < 364*24*time.Hour || d > 365*24*time.Hour+time.Minute {
		t.Fatalf("default expiry %s ahead, want 365 days", d)
	}
	// The value is never stored.
	if strings.Contains(h.Dump(keys), value) {
		t.Fatal("the API key value is stored")
	}

	// The key is a bearer credential at identity, acting as its user.
	var chk map[string]any
	h.Anon.As(value).Call("/identity/v2/token/check", nil).OK(&chk)
	if chk["token_type"] != "API_KEY" || chk["user_id"] != "alice" || chk["role_type"] != "USER" || chk["domain_id"] != h.Domain {
		t.Fatalf("token/check with the key = %v", chk)
	}
	key := h.Anon.As(value)
	if n := identitytest.ListCount(t, key, "/identity/v2/api-key/list", nil); n != 1 {
		t.Fatalf("the key lists %d keys", n)
	}
	// Its use is recorded (to the minute: a check that finds it fresher
	// writes nothing).
	var used map[string]any
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).OK(&used)
	at, err := time.Parse(time.RFC3339, fmt.Sprint(used["last_accessed_at"]))
	if err != nil || !identitytest.IsoMillis.MatchString(used["last_accessed_at"].(string)) || at.Before(before.Truncate(time.Millisecond)) || time.Since(at) > time.Minute {
		t.Fatalf("last_accessed_at after use = %v", used["last_accessed_at"])
	}

	// Refused creates store nothing.
	frozen := h.DBFrozen(keys)
	yearAndDay := time.Now().Add(366 * 24 * time.Hour).UTC().Format(time.RFC3339)
	alice.Call("/identity/v2/api-key/create", map[string]any{"expired_at": yearAndDay}).Fails(http.StatusBadRequest, errs.APIKeyExpiredLimit)
	alice.Call("/identity/v2/api-key/create", map[string]any{"expired_at": "2020-01-01T00:00:00Z"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	alice.Call("/identity/v2/api-key/create", map[string]any{"expired_at": "tomorrow"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": "x", "user_id": "bob"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": 5}).Fails(http.StatusBadRequest, errs.InvalidParameterType)
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": strings.Repeat("n", 129)}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Anon.Call("/identity/v2/api-key/create", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	// A key cannot mint or revive keys; a SYSTEM token has no user.
	key.Call("/identity/v2/api-key/create", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	key.Call("/identity/v2/api-key/enable", map[string]any{"api_key_id": id}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.System.Call("/identity/v2/api-key/create", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	// Another user of the domain sees nothing of alice's keys.
	for _, op := range []string{"get", "enable", "disable", "delete"} {
		bob.Call("/identity/v2/api-key/"+op, map[string]any{"api_key_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	bob.Call("/identity/v2/api-key/update", map[string]any{"api_key_id": id, "name": "mine"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := identitytest.ListCount(t, bob, "/identity/v2/api-key/list", nil); n != 0 {
		t.Fatalf("bob lists %d keys", n)
	}
	if n := identitytest.ListCount(t, bob, "/identity/v2/api-key/list", map[string]any{"user_id": "alice"}); n != 0 {
		t.Fatalf("bob lists %d keys of alice", n)
	}
	if n := identitytest.StatCount(bob, "/identity/v2/api-key/stat", nil); n != 0 {
		t.Fatalf("bob counts %d keys", n)
	}
	// The domain admin may read, but not rename or enable, alice's keys.
	h.Admin.Call("/identity/v2/api-key/update", map[string]any{"api_key_id": id, "name": "admin's"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v2/api-key/enable", map[string]any{"api_key_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": "api-key-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	alice.Call("/identity/v2/api-key/get", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	alice.Call("/identity/v2/api-key/list", map[string]any{"state": "BROKEN"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	alice.Call("/identity/v2/api-key/stat", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	frozen()

	// get, list, update: never the value.
	var got map[string]any
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).OK(&got)
	identitytest.SameFields(t, "get", got, v2KeyFields...)
	if got["api_key"] != "" || got["name"] != "ci" || got["expired_at"] != k["expired_at"] {
		t.Fatalf("get = %v", got)
	}
	alice.Call("/identity/v2/api-key/update", map[string]any{"api_key_id": id, "name": "deploy"}).OK(&got)
	if got["name"] != "deploy" || got["api_key"] != "" {
		t.Fatalf("update = %v", got)
	}
	var second map[string]any
	alice.Call("/identity/api-key/create", map[string]any{"expired_at": time.Now().Add(48 * time.Hour).Format("2006-01-02T15:04:05-07:00")}).OK(&second)
	var list struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	alice.Call("/identity/v2/api-key/list", nil).OK(&list)
	if list.TotalCount != 2 {
		t.Fatalf("alice lists %d keys", list.TotalCount)
	}
	for _, r := range list.Results {
		identitytest.SameFields(t, "list row", r, v2KeyFields...)
		if r["api_key"] != "" {
			t.Fatalf("list shows a key value: %v", r)
		}
	}
	alice.Call("/identity/v2/api-key/list", map[string]any{"name": "deploy", "query": map[string]any{"only": []string{"api_key_id"}}}).OK(&list)
	if _, hasName := list.Results[0]["name"]; list.TotalCount != 1 || hasName || list.Results[0]["api_key_id"] != id { // only keeps the sort key too
		t.Fatalf("list by name with only = %+v", list)
	}
	alice.Call("/identity/v2/api-key/list", map[string]any{"query": map[string]any{"keyword": "deplo"}}).OK(&list)
	if list.TotalCount != 1 {
		t.Fatalf("keyword list = %d", list.TotalCount)
	}
	if n := identitytest.StatCount(alice, "/identity/v2/api-key/stat", nil); n != 2 {
		t.Fatalf("alice counts %d keys", n)
	}
	// The domain admin lists and counts every key of the domain.
	h.Admin.Call("/identity/v2/api-key/create", map[string]any{"name": "admin"}).OK(nil)
	if n := identitytest.ListCount(t, h.Admin, "/identity/v2/api-key/list", nil); n != 3 {
		t.Fatalf("admin lists %d keys", n)
	}
	if n := identitytest.ListCount(t, h.Admin, "/identity/v2/api-key/list", map[string]any{"user_id": "alice"}); n != 2 {
		t.Fatalf("admin lists %d keys of alice", n)
	}
	if n := identitytest.StatCount(h.Admin, "/identity/v2/api-key/stat", nil); n != 3 {
		t.Fatalf("admin counts %d keys", n)
	}
	h.Admin.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).OK(&got)

	// disable: identity refuses the key within its check cache; enable
	// brings it back.
	alice.Call("/identity/v2/api-key/disable", map[string]any{"api_key_id": id}).OK(&got)
	if got["state"] != "DISABLED" || got["api_key"] != "" {
		t.Fatalf("disable = %v", got)
	}
	d := identitytest.Eventually(t, 5*time.Second, "identity refuses a disabled key", func() bool { return !h.Works(value) })
	t.Logf("identity refused the disabled key after %s", d)
	if n := identitytest.ListCount(t, alice, "/identity/v2/api-key/list", map[string]any{"state": "DISABLED"}); n != 1 {
		t.Fatalf("DISABLED keys = %d", n)
	}
	alice.Call("/identity/v2/api-key/enable", map[string]any{"api_key_id": id}).OK(&got)
	if got["state"] != "ENABLED" {
		t.Fatalf("enable = %v", got)
	}
	identitytest.Eventually(t, 5*time.Second, "identity accepts an enabled key again", func() bool { return h.Works(value) })

	// The admin disables and deletes alice's key.
	h.Admin.Call("/identity/v2/api-key/disable", map[string]any{"api_key_id": id}).OK(&got)
	if got["state"] != "DISABLED" {
		t.Fatalf("admin disable = %v", got)
	}
	h.Admin.Call("/identity/v2/api-key/delete", map[string]any{"api_key_id": id}).OK(nil)
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
	identitytest.Eventually(t, 5*time.Second, "identity refuses a deleted key", func() bool { return !h.Works(value) })
	alice.Call("/identity/v2/api-key/delete", map[string]any{"api_key_id": second["api_key_id"]}).OK(nil)
	if n := identitytest.ListCount(t, alice, "/identity/v2/api-key/list", nil); n != 0 {
		t.Fatalf("alice lists %d keys after deleting both", n)
	}
}

func TestAPIKeyV2Expiry(t *testing.T) {
	h := identitytest.New(t, apikey.Routes)
	alice := h.Anon.As(h.DirectUser(h.Domain, "alice", "Alice-Passw0rd"))
	var k map[string]any
	expires := time.Now().Add(1500 * time.Millisecond)
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": "short", "expired_at": expires.UTC().Format(time.RFC3339Nano)}).OK(&k)
	value := k["api_key"].(string)
	if !h.Works(value) {
		t.Fatal("a fresh key is refused")
	}
	// Identity takes no clock: the key's real expiry is what is tested.
	time.Sleep(time.Until(expires) + 10*time.Millisecond)
	var got map[string]any
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": k["api_key_id"]}).OK(&got)
	if got["state"] != "EXPIRED" {
		t.Fatalf("state after expiry = %v", got["state"])
	}
	identitytest.Eventually(t, 5*time.Second, "identity refuses an expired key", func() bool { return !h.Works(value) })
	t.Logf("identity refused the expired key %s after its expiry", time.Since(expires).Round(time.Millisecond))
	// list and stat filter on the reported state.
	if n := identitytest.ListCount(t, alice, "/identity/v2/api-key/list", map[string]any{"state": "EXPIRED"}); n != 1 {
		t.Fatalf("EXPIRED keys listed = %d", n)
	}
	if n := identitytest.ListCount(t, alice, "/identity/v2/api-key/list", map[string]any{"state": "ENABLED"}); n != 0 {
		t.Fatalf("ENABLED keys listed = %d", n)
	}
	if n := identitytest.StatCount(alice, "/identity/v2/api-key/stat", map[string]any{"query": map[string]any{
		"filter":    []any{map[string]any{"k": "state", "v": "EXPIRED", "o": "eq"}},
		"aggregate": []any{map[string]any{"group": map[string]any{"fields": []any{map[string]any{"name": "n", "operator": "count"}}}}},
	}}); n != 1 {
		t.Fatalf("EXPIRED keys counted = %d", n)
	}
	// An expired key stays expired.
	frozen := h.DBFrozen(core.APIKeysCollection)
	alice.Call("/identity/v2/api-key/enable", map[string]any{"api_key_id": k["api_key_id"]}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	frozen()
	alice.Call("/identity/v2/api-key/disable", map[string]any{"api_key_id": k["api_key_id"]}).OK(&got)
	if got["state"] != "EXPIRED" {
		t.Fatalf("a disabled expired key reports %v", got["state"])
	}
	// A v1 key (no expiry) of the same domain is untouched by the sweep.
	var v1 map[string]any
	h.Admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.Domain}).OK(&v1)
	if n := identitytest.ListCount(t, h.Admin, "/identity/v2/api-key/list", map[string]any{"state": "ENABLED"}); n != 1 {
		t.Fatalf("ENABLED keys after the sweep = %d", n)
	}
}

// A key acts with its user's role in the domain; when the role changes,
// the key stops working.
func TestAPIKeyRoleFollowsUser(t *testing.T) {
	h := identitytest.New(t, identitytest.Mount(apikey.Routes, rolebinding.Routes))
	h.DirectUser(h.Domain, "carol", "Carol-Passw0rd")
	identitytest.BindRole(h.Admin, "carol", "managed-domain-admin", "")
	carol := h.Anon.As(h.Scoped("carol", "Carol-Passw0rd", "DOMAIN", ""))
	var k map[string]any
	carol.Call("/identity/v2/api-key/create", map[string]any{"name": "admin key"}).OK(&k)
	value := k["api_key"].(string)
	var chk map[string]any
	h.Anon.As(value).Call("/identity/v2/token/check", nil).OK(&chk)
	if chk["role_type"] != "DOMAIN_ADMIN" {
		t.Fatalf("a domain admin's key = %v", chk)
	}
	// The admin key does admin work: it lists every key of the domain.
	h.Anon.As(value).Call("/identity/v1/api-key/list", map[string]any{"domain_id": h.Domain}).OK(nil)

	var bindings struct {
		Results []map[string]any `json:"results"`
	}
	h.Admin.Call("/identity/v2/role-binding/list", map[string]any{"user_id": "carol"}).OK(&bindings)
	if len(bindings.Results) != 1 {
		t.Fatalf("carol's bindings = %v", bindings.Results)
	}
	h.Admin.Call("/identity/v2/role-binding/delete", map[string]any{"role_binding_id": bindings.Results[0]["role_binding_id"]}).OK(nil)
	d := identitytest.Eventually(t, 5*time.Second, "identity refuses a demoted admin's key", func() bool { return !h.Works(value) })
	t.Logf("identity refused the demoted admin's key after %s", d)
	// A USER's key is refused after promotion as well (it was made USER).
	var uk map[string]any
	carol2 := h.Anon.As(h.Login("carol", "Carol-Passw0rd").AccessToken)
	carol2.Call("/identity/v2/api-key/create", nil).OK(&uk)
	h.Anon.As(uk["api_key"].(string)).Call("/identity/v2/token/check", nil).OK(&chk)
	if chk["role_type"] != "USER" {
		t.Fatalf("a USER's key = %v", chk)
	}
	identitytest.BindRole(h.Admin, "carol", "managed-domain-admin", "")
	identitytest.Eventually(t, 5*time.Second, "identity refuses a promoted user's old key", func() bool { return !h.Works(uk["api_key"].(string)) })
}

func TestAPIKeyV1(t *testing.T) {
	h := identitytest.New(t, apikey.Routes)
	alice := h.Anon.As(h.DirectUser(h.Domain, "alice", "Alice-Passw0rd"))
	otherID, other := h.NewDomain("other")
	keys := core.APIKeysCollection

	var k map[string]any
	h.Admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.Domain}).OK(&k)
	identitytest.SameFields(t, "v1 create", k, v1KeyFields...)
	id, value := k["api_key_id"].(string), k["api_key"].(string)
	if !apiKeyIDPattern.MatchString(id) || value == "" || k["state"] != "ENABLED" || k["user_id"] != "alice" || k["domain_id"] != h.Domain {
		t.Fatalf("v1 create = %v", k)
	}
	var chk map[string]any
	h.Anon.As(value).Call("/identity/v2/token/check", nil).OK(&chk)
	if chk["user_id"] != "alice" || chk["role_type"] != "USER" {
		t.Fatalf("v1 key check = %v", chk)
	}

	frozen := h.DBFrozen(keys)
	// Only domain admins (and SYSTEM) use v1; another domain is not found.
	alice.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	alice.Call("/identity/v1/api-key/list", map[string]any{"domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Anon.As(value).Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "nobody", "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "boss", "domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call("/identity/v1/api-key/list", map[string]any{"domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call("/identity/v1/api-key/stat", map[string]any{"domain_id": otherID, "query": identitytest.CountQuery}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()

	var got map[string]any
	h.Admin.Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.Domain}).OK(&got)
	identitytest.SameFields(t, "v1 get", got, v1KeyFields...)
	if got["api_key"] != "" {
		t.Fatalf("v1 get shows the value: %v", got)
	}
	h.Admin.Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.Domain, "only": []string{"state", "user_id"}}).OK(&got)
	identitytest.SameFields(t, "v1 get only", got, "state", "user_id")
	h.Admin.Call("/identity/v1/api-key/disable", map[string]any{"api_key_id": id, "domain_id": h.Domain}).OK(&got)
	identitytest.SameFields(t, "v1 disable", got, v1KeyFields...)
	if got["state"] != "DISABLED" {
		t.Fatalf("v1 disable = %v", got)
	}
	identitytest.Eventually(t, 5*time.Second, "identity refuses a v1 key disabled", func() bool { return !h.Works(value) })
	var list struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	h.Admin.Call("/identity/v1/api-key/list", map[string]any{"domain_id": h.Domain, "state": "DISABLED"}).OK(&list)
	if list.TotalCount != 1 || list.Results[0]["api_key_id"] != id || list.Results[0]["api_key"] != "" {
		t.Fatalf("v1 list = %+v", list)
	}
	identitytest.SameFields(t, "v1 list row", list.Results[0], v1KeyFields...)
	h.Admin.Call("/identity/v1/api-key/enable", map[string]any{"api_key_id": id, "domain_id": h.Domain}).OK(&got)
	if got["state"] != "ENABLED" {
		t.Fatalf("v1 enable = %v", got)
	}
	if n := identitytest.StatCount(h.Admin, "/identity/v1/api-key/stat", map[string]any{"domain_id": h.Domain}); n != 1 {
		t.Fatalf("v1 stat = %d", n)
	}
	// The v2 shape of the same key, seen by its owner.
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).OK(&got)
	if got["expired_at"] != "" || got["state"] != "ENABLED" {
		t.Fatalf("a v1 key through v2 = %v", got)
	}

	// SYSTEM may name any domain.
	var bk map[string]any
	h.System.Call("/identity/v1/api-key/create", map[string]any{"user_id": "boss", "domain_id": otherID}).OK(&bk)
	if bk["domain_id"] != otherID {
		t.Fatalf("SYSTEM create in another domain = %v", bk)
	}
	if n := identitytest.ListCount(t, h.System, "/identity/v1/api-key/list", map[string]any{"domain_id": otherID}); n != 1 {
		t.Fatalf("SYSTEM lists %d keys of the other domain", n)
	}
	h.System.Call("/identity/v1/api-key/list", map[string]any{"domain_id": "domain-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// The unversioned alias is v2 for api-key.
	h.Admin.Call("/identity/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.Domain}).Fails(http.StatusBadRequest, errs.InvalidParameter)

	h.Admin.Call("/identity/v1/api-key/delete", map[string]any{"api_key_id": id, "domain_id": h.Domain}).OK(nil)
	h.Admin.Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	identitytest.Eventually(t, 5*time.Second, "identity refuses a deleted v1 key", func() bool { return !h.Works(value) })
}

// An admin of domain B never reads, lists, counts, changes or deletes
// domain A's keys, through v1 or v2.
func TestAPIKeyIsolation(t *testing.T) {
	h := identitytest.New(t, apikey.Routes)
	h.DirectUser(h.Domain, "alice", "Alice-Passw0rd")
	otherID, other := h.NewDomain("other")
	var ka, kb map[string]any
	h.Admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.Domain}).OK(&ka)
	h.Admin.Call("/identity/v2/api-key/create", map[string]any{"name": "root admin"}).OK(&kb)
	other.Call("/identity/v2/api-key/create", map[string]any{"name": "b"}).OK(nil)

	frozen := h.DBFrozen(core.APIKeysCollection)
	for _, id := range []any{ka["api_key_id"], kb["api_key_id"]} {
		for _, op := range []string{"get", "enable", "disable", "delete"} {
			other.Call("/identity/v2/api-key/"+op, map[string]any{"api_key_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
			other.Call("/identity/v1/api-key/"+op, map[string]any{"api_key_id": id, "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
			other.Call("/identity/v1/api-key/"+op, map[string]any{"api_key_id": id, "domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		}
		other.Call("/identity/v2/api-key/update", map[string]any{"api_key_id": id, "name": "mine"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	other.Call("/identity/v1/api-key/list", map[string]any{"domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call("/identity/v1/api-key/stat", map[string]any{"domain_id": h.Domain, "query": identitytest.CountQuery}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// Own lists hold only domain B's key, whatever the filter says.
	for _, body := range []map[string]any{
		nil,
		{"user_id": "alice"},
		{"api_key_id": ka["api_key_id"]},
		{"query": map[string]any{"filter": []any{map[string]any{"k": "domain_id", "v": h.Domain, "o": "eq"}}}},
		{"query": map[string]any{"filter_or": []any{map[string]any{"k": "domain_id", "v": h.Domain, "o": "eq"}, map[string]any{"k": "user_id", "v": "alice", "o": "eq"}}}},
	} {
		var l struct {
			Results []map[string]any `json:"results"`
		}
		var b any = body
		if body == nil {
			b = nil
		}
		other.Call("/identity/v2/api-key/list", b).OK(&l)
		for _, r := range l.Results {
			if r["domain_id"] != otherID {
				t.Fatalf("domain B lists %v", r)
			}
		}
	}
	if n := identitytest.ListCount(t, other, "/identity/v1/api-key/list", map[string]any{"domain_id": otherID, "user_id": "alice"}); n != 0 {
		t.Fatalf("domain B v1-lists %d keys of alice", n)
	}
	if n := identitytest.StatCount(other, "/identity/v2/api-key/stat", nil); n != 1 {
		t.Fatalf("domain B counts %d keys", n)
	}
	if n := identitytest.StatCount(other, "/identity/v1/api-key/stat", map[string]any{"domain_id": otherID}); n != 1 {
		t.Fatalf("domain B v1-counts %d keys", n)
	}
	frozen()
	// And domain A's keys keep working.
	if !h.Works(ka["api_key"].(string)) || !h.Works(kb["api_key"].(string)) {
		t.Fatal("domain A's keys stopped working")
	}
}
