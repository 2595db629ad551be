package identity_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/password"
)

// Helpers shared by the API key, trusted account and cross-service tests.

// directUser stores an enabled LOCAL user without a role binding straight
// in the database (the user operations are another file's business) and
// returns its USER-scope access token.
func (h *harness) directUser(domainID, userID, pw string) string {
	h.t.Helper()
	hash, err := password.Hash(pw, bcrypt.MinCost)
	if err != nil {
		h.t.Fatal(err)
	}
	u := core.User{
		ID: core.UserKey(domainID, userID), UserID: userID, DomainID: domainID, Name: userID, State: core.Enabled,
		AuthType: "LOCAL", UserType: "USER", RoleType: "USER", MFA: core.MFA{State: core.Disabled, Options: map[string]any{}},
		Language: "en", Timezone: "UTC", RequiredActions: []string{}, Tags: map[string]any{}, PasswordHash: hash,
	}
	u.CreatedAt.Time = time.Now().UTC().Add(-time.Second).Truncate(time.Millisecond)
	if _, err := h.db.Collection(core.UsersCollection).InsertOne(context.Background(), u); err != nil {
		h.t.Fatal(err)
	}
	return h.loginIn(domainID, userID, pw).AccessToken
}

// bindRole gives userID a managed role through role-binding/create, as
// the domain admin client admin.
func bindRole(admin *testkit.Client, userID, roleID, workspaceID string) map[string]any {
	group := "DOMAIN"
	if workspaceID != "" {
		group = "WORKSPACE"
	}
	var b map[string]any
	admin.Call("/identity/v2/role-binding/create", map[string]any{"user_id": userID, "role_id": roleID, "resource_group": group, "workspace_id": workspaceID}).OK(&b)
	return b
}

// dbFrozen snapshots the collections and returns a check that they are
// exactly as they were: refused requests change nothing.
func (h *harness) dbFrozen(colls ...string) func() {
	h.t.Helper()
	before := h.dump(colls...)
	return func() {
		h.t.Helper()
		if after := h.dump(colls...); after != before {
			h.t.Fatalf("a refused request changed the database:\nbefore %s\nafter  %s", before, after)
		}
	}
}

func (h *harness) dump(colls ...string) string {
	h.t.Helper()
	var b strings.Builder
	for _, c := range colls {
		cur, err := h.db.Collection(c).Find(context.Background(), bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			h.t.Fatal(err)
		}
		var docs []bson.Raw
		if err := cur.All(context.Background(), &docs); err != nil {
			h.t.Fatal(err)
		}
		b.WriteString(c + ":")
		for _, d := range docs {
			b.WriteString(d.String())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// The shared test helpers, under the names the package's tests use.
var (
	countQuery = identitytest.CountQuery
	statCount  = identitytest.StatCount
	listCount  = identitytest.ListCount
	eventually = identitytest.Eventually
	sameFields = identitytest.SameFields
)

var (
	apiKeyIDPattern = regexp.MustCompile(`^api-key-[0-9a-f]{12}$`)
	isoMillis       = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
)

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var v2KeyFields = []string{"api_key_id", "api_key", "app_id", "name", "state", "domain_id", "user_id", "created_at", "last_accessed_at", "expired_at"}
var v1KeyFields = []string{"api_key_id", "api_key", "state", "user_id", "domain_id", "last_accessed_at", "created_at"}

// works reports whether the bearer token is accepted by identity's
// token/check.
func works(h *harness, token string) bool {
	return h.anon.As(token).Call("/identity/v2/token/check", nil).Status == http.StatusOK
}

func TestAPIKeyV2Lifecycle(t *testing.T) {
	h := newHarness(t)
	alice := h.anon.As(h.directUser(h.domain, "alice", "Alice-Passw0rd"))
	bob := h.anon.As(h.directUser(h.domain, "bob", "Bob-Passw0rd1"))
	keys := core.APIKeysCollection

	// create: defaults, every field, the value only here.
	var k map[string]any
	before := time.Now()
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": "ci"}).OK(&k)
	sameFields(t, "create", k, v2KeyFields...)
	id, _ := k["api_key_id"].(string)
	value, _ := k["api_key"].(string)
	if !apiKeyIDPattern.MatchString(id) || strings.Count(value, ".") != 2 || k["state"] != "ENABLED" || k["name"] != "ci" ||
		k["user_id"] != "alice" || k["domain_id"] != h.domain || k["app_id"] != "" || k["last_accessed_at"] != "" {
		t.Fatalf("create = %v", k)
	}
	exp, err := time.Parse(time.RFC3339, k["expired_at"].(string))
	if err != nil || !isoMillis.MatchString(k["expired_at"].(string)) || !isoMillis.MatchString(k["created_at"].(string)) {
		t.Fatalf("timestamps = %v / %v", k["created_at"], k["expired_at"])
	}
	if d := exp.Sub(before); d < 364*24*time.Hour || d > 365*24*time.Hour+time.Minute {
		t.Fatalf("default expiry %s ahead, want 365 days", d)
	}
	// The value is never stored.
	if strings.Contains(h.dump(keys), value) {
		t.Fatal("the API key value is stored")
	}

	// The key is a bearer credential at identity, acting as its user.
	var chk map[string]any
	h.anon.As(value).Call("/identity/v2/token/check", nil).OK(&chk)
	if chk["token_type"] != "API_KEY" || chk["user_id"] != "alice" || chk["role_type"] != "USER" || chk["domain_id"] != h.domain {
		t.Fatalf("token/check with the key = %v", chk)
	}
	key := h.anon.As(value)
	if n := listCount(t, key, "/identity/v2/api-key/list", nil); n != 1 {
		t.Fatalf("the key lists %d keys", n)
	}
	// Its use is recorded (to the minute: a check that finds it fresher
	// writes nothing).
	var used map[string]any
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).OK(&used)
	at, err := time.Parse(time.RFC3339, fmt.Sprint(used["last_accessed_at"]))
	if err != nil || !isoMillis.MatchString(used["last_accessed_at"].(string)) || at.Before(before.Truncate(time.Millisecond)) || time.Since(at) > time.Minute {
		t.Fatalf("last_accessed_at after use = %v", used["last_accessed_at"])
	}

	// Refused creates store nothing.
	frozen := h.dbFrozen(keys)
	yearAndDay := time.Now().Add(366 * 24 * time.Hour).UTC().Format(time.RFC3339)
	alice.Call("/identity/v2/api-key/create", map[string]any{"expired_at": yearAndDay}).Fails(http.StatusBadRequest, errs.APIKeyExpiredLimit)
	alice.Call("/identity/v2/api-key/create", map[string]any{"expired_at": "2020-01-01T00:00:00Z"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	alice.Call("/identity/v2/api-key/create", map[string]any{"expired_at": "tomorrow"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": "x", "user_id": "bob"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": 5}).Fails(http.StatusBadRequest, errs.InvalidParameterType)
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": strings.Repeat("n", 129)}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.anon.Call("/identity/v2/api-key/create", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	// A key cannot mint or revive keys; a SYSTEM token has no user.
	key.Call("/identity/v2/api-key/create", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	key.Call("/identity/v2/api-key/enable", map[string]any{"api_key_id": id}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.system.Call("/identity/v2/api-key/create", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	// Another user of the domain sees nothing of alice's keys.
	for _, op := range []string{"get", "enable", "disable", "delete"} {
		bob.Call("/identity/v2/api-key/"+op, map[string]any{"api_key_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	bob.Call("/identity/v2/api-key/update", map[string]any{"api_key_id": id, "name": "mine"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := listCount(t, bob, "/identity/v2/api-key/list", nil); n != 0 {
		t.Fatalf("bob lists %d keys", n)
	}
	if n := listCount(t, bob, "/identity/v2/api-key/list", map[string]any{"user_id": "alice"}); n != 0 {
		t.Fatalf("bob lists %d keys of alice", n)
	}
	if n := statCount(bob, "/identity/v2/api-key/stat", nil); n != 0 {
		t.Fatalf("bob counts %d keys", n)
	}
	// The domain admin may read, but not rename or enable, alice's keys.
	h.admin.Call("/identity/v2/api-key/update", map[string]any{"api_key_id": id, "name": "admin's"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.admin.Call("/identity/v2/api-key/enable", map[string]any{"api_key_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": "api-key-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	alice.Call("/identity/v2/api-key/get", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	alice.Call("/identity/v2/api-key/list", map[string]any{"state": "BROKEN"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	alice.Call("/identity/v2/api-key/stat", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	frozen()

	// get, list, update: never the value.
	var got map[string]any
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).OK(&got)
	sameFields(t, "get", got, v2KeyFields...)
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
		sameFields(t, "list row", r, v2KeyFields...)
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
	if n := statCount(alice, "/identity/v2/api-key/stat", nil); n != 2 {
		t.Fatalf("alice counts %d keys", n)
	}
	// The domain admin lists and counts every key of the domain.
	h.admin.Call("/identity/v2/api-key/create", map[string]any{"name": "admin"}).OK(nil)
	if n := listCount(t, h.admin, "/identity/v2/api-key/list", nil); n != 3 {
		t.Fatalf("admin lists %d keys", n)
	}
	if n := listCount(t, h.admin, "/identity/v2/api-key/list", map[string]any{"user_id": "alice"}); n != 2 {
		t.Fatalf("admin lists %d keys of alice", n)
	}
	if n := statCount(h.admin, "/identity/v2/api-key/stat", nil); n != 3 {
		t.Fatalf("admin counts %d keys", n)
	}
	h.admin.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).OK(&got)

	// disable: identity refuses the key within its check cache; enable
	// brings it back.
	alice.Call("/identity/v2/api-key/disable", map[string]any{"api_key_id": id}).OK(&got)
	if got["state"] != "DISABLED" || got["api_key"] != "" {
		t.Fatalf("disable = %v", got)
	}
	d := eventually(t, 5*time.Second, "identity refuses a disabled key", func() bool { return !works(h, value) })
	t.Logf("identity refused the disabled key after %s", d)
	if n := listCount(t, alice, "/identity/v2/api-key/list", map[string]any{"state": "DISABLED"}); n != 1 {
		t.Fatalf("DISABLED keys = %d", n)
	}
	alice.Call("/identity/v2/api-key/enable", map[string]any{"api_key_id": id}).OK(&got)
	if got["state"] != "ENABLED" {
		t.Fatalf("enable = %v", got)
	}
	eventually(t, 5*time.Second, "identity accepts an enabled key again", func() bool { return works(h, value) })

	// The admin disables and deletes alice's key.
	h.admin.Call("/identity/v2/api-key/disable", map[string]any{"api_key_id": id}).OK(&got)
	if got["state"] != "DISABLED" {
		t.Fatalf("admin disable = %v", got)
	}
	h.admin.Call("/identity/v2/api-key/delete", map[string]any{"api_key_id": id}).OK(nil)
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
	eventually(t, 5*time.Second, "identity refuses a deleted key", func() bool { return !works(h, value) })
	alice.Call("/identity/v2/api-key/delete", map[string]any{"api_key_id": second["api_key_id"]}).OK(nil)
	if n := listCount(t, alice, "/identity/v2/api-key/list", nil); n != 0 {
		t.Fatalf("alice lists %d keys after deleting both", n)
	}
}

func TestAPIKeyV2Expiry(t *testing.T) {
	h := newHarness(t)
	alice := h.anon.As(h.directUser(h.domain, "alice", "Alice-Passw0rd"))
	var k map[string]any
	alice.Call("/identity/v2/api-key/create", map[string]any{"name": "short", "expired_at": time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)}).OK(&k)
	value := k["api_key"].(string)
	if !works(h, value) {
		t.Fatal("a fresh key is refused")
	}
	time.Sleep(1600 * time.Millisecond)
	var got map[string]any
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": k["api_key_id"]}).OK(&got)
	if got["state"] != "EXPIRED" {
		t.Fatalf("state after expiry = %v", got["state"])
	}
	d := eventually(t, 5*time.Second, "identity refuses an expired key", func() bool { return !works(h, value) })
	t.Logf("identity refused the expired key %s after its expiry", d+1600*time.Millisecond-1500*time.Millisecond)
	// list and stat filter on the reported state.
	if n := listCount(t, alice, "/identity/v2/api-key/list", map[string]any{"state": "EXPIRED"}); n != 1 {
		t.Fatalf("EXPIRED keys listed = %d", n)
	}
	if n := listCount(t, alice, "/identity/v2/api-key/list", map[string]any{"state": "ENABLED"}); n != 0 {
		t.Fatalf("ENABLED keys listed = %d", n)
	}
	if n := statCount(alice, "/identity/v2/api-key/stat", map[string]any{"query": map[string]any{
		"filter":    []any{map[string]any{"k": "state", "v": "EXPIRED", "o": "eq"}},
		"aggregate": []any{map[string]any{"group": map[string]any{"fields": []any{map[string]any{"name": "n", "operator": "count"}}}}},
	}}); n != 1 {
		t.Fatalf("EXPIRED keys counted = %d", n)
	}
	// An expired key stays expired.
	frozen := h.dbFrozen(core.APIKeysCollection)
	alice.Call("/identity/v2/api-key/enable", map[string]any{"api_key_id": k["api_key_id"]}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	frozen()
	alice.Call("/identity/v2/api-key/disable", map[string]any{"api_key_id": k["api_key_id"]}).OK(&got)
	if got["state"] != "EXPIRED" {
		t.Fatalf("a disabled expired key reports %v", got["state"])
	}
	// A v1 key (no expiry) of the same domain is untouched by the sweep.
	var v1 map[string]any
	h.admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.domain}).OK(&v1)
	if n := listCount(t, h.admin, "/identity/v2/api-key/list", map[string]any{"state": "ENABLED"}); n != 1 {
		t.Fatalf("ENABLED keys after the sweep = %d", n)
	}
}

// A key acts with its user's role in the domain; when the role changes,
// the key stops working.
func TestAPIKeyRoleFollowsUser(t *testing.T) {
	h := newHarness(t)
	h.directUser(h.domain, "carol", "Carol-Passw0rd")
	bindRole(h.admin, "carol", "managed-domain-admin", "")
	carol := h.anon.As(h.scoped("carol", "Carol-Passw0rd", "DOMAIN", ""))
	var k map[string]any
	carol.Call("/identity/v2/api-key/create", map[string]any{"name": "admin key"}).OK(&k)
	value := k["api_key"].(string)
	var chk map[string]any
	h.anon.As(value).Call("/identity/v2/token/check", nil).OK(&chk)
	if chk["role_type"] != "DOMAIN_ADMIN" {
		t.Fatalf("a domain admin's key = %v", chk)
	}
	// The admin key does admin work: it lists every key of the domain.
	h.anon.As(value).Call("/identity/v1/api-key/list", map[string]any{"domain_id": h.domain}).OK(nil)

	var bindings struct {
		Results []map[string]any `json:"results"`
	}
	h.admin.Call("/identity/v2/role-binding/list", map[string]any{"user_id": "carol"}).OK(&bindings)
	if len(bindings.Results) != 1 {
		t.Fatalf("carol's bindings = %v", bindings.Results)
	}
	h.admin.Call("/identity/v2/role-binding/delete", map[string]any{"role_binding_id": bindings.Results[0]["role_binding_id"]}).OK(nil)
	d := eventually(t, 5*time.Second, "identity refuses a demoted admin's key", func() bool { return !works(h, value) })
	t.Logf("identity refused the demoted admin's key after %s", d)
	// A USER's key is refused after promotion as well (it was made USER).
	var uk map[string]any
	carol2 := h.anon.As(h.login("carol", "Carol-Passw0rd").AccessToken)
	carol2.Call("/identity/v2/api-key/create", nil).OK(&uk)
	h.anon.As(uk["api_key"].(string)).Call("/identity/v2/token/check", nil).OK(&chk)
	if chk["role_type"] != "USER" {
		t.Fatalf("a USER's key = %v", chk)
	}
	bindRole(h.admin, "carol", "managed-domain-admin", "")
	eventually(t, 5*time.Second, "identity refuses a promoted user's old key", func() bool { return !works(h, uk["api_key"].(string)) })
}

func TestAPIKeyV1(t *testing.T) {
	h := newHarness(t)
	alice := h.anon.As(h.directUser(h.domain, "alice", "Alice-Passw0rd"))
	otherID, other := h.newDomain("other")
	keys := core.APIKeysCollection

	var k map[string]any
	h.admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.domain}).OK(&k)
	sameFields(t, "v1 create", k, v1KeyFields...)
	id, value := k["api_key_id"].(string), k["api_key"].(string)
	if !apiKeyIDPattern.MatchString(id) || value == "" || k["state"] != "ENABLED" || k["user_id"] != "alice" || k["domain_id"] != h.domain {
		t.Fatalf("v1 create = %v", k)
	}
	var chk map[string]any
	h.anon.As(value).Call("/identity/v2/token/check", nil).OK(&chk)
	if chk["user_id"] != "alice" || chk["role_type"] != "USER" {
		t.Fatalf("v1 key check = %v", chk)
	}

	frozen := h.dbFrozen(keys)
	// Only domain admins (and SYSTEM) use v1; another domain is not found.
	alice.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	alice.Call("/identity/v1/api-key/list", map[string]any{"domain_id": h.domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.anon.As(value).Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "nobody", "domain_id": h.domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "boss", "domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.admin.Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.admin.Call("/identity/v1/api-key/list", map[string]any{"domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.admin.Call("/identity/v1/api-key/stat", map[string]any{"domain_id": otherID, "query": countQuery}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()

	var got map[string]any
	h.admin.Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.domain}).OK(&got)
	sameFields(t, "v1 get", got, v1KeyFields...)
	if got["api_key"] != "" {
		t.Fatalf("v1 get shows the value: %v", got)
	}
	h.admin.Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.domain, "only": []string{"state", "user_id"}}).OK(&got)
	sameFields(t, "v1 get only", got, "state", "user_id")
	h.admin.Call("/identity/v1/api-key/disable", map[string]any{"api_key_id": id, "domain_id": h.domain}).OK(&got)
	sameFields(t, "v1 disable", got, v1KeyFields...)
	if got["state"] != "DISABLED" {
		t.Fatalf("v1 disable = %v", got)
	}
	eventually(t, 5*time.Second, "identity refuses a v1 key disabled", func() bool { return !works(h, value) })
	var list struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	h.admin.Call("/identity/v1/api-key/list", map[string]any{"domain_id": h.domain, "state": "DISABLED"}).OK(&list)
	if list.TotalCount != 1 || list.Results[0]["api_key_id"] != id || list.Results[0]["api_key"] != "" {
		t.Fatalf("v1 list = %+v", list)
	}
	sameFields(t, "v1 list row", list.Results[0], v1KeyFields...)
	h.admin.Call("/identity/v1/api-key/enable", map[string]any{"api_key_id": id, "domain_id": h.domain}).OK(&got)
	if got["state"] != "ENABLED" {
		t.Fatalf("v1 enable = %v", got)
	}
	if n := statCount(h.admin, "/identity/v1/api-key/stat", map[string]any{"domain_id": h.domain}); n != 1 {
		t.Fatalf("v1 stat = %d", n)
	}
	// The v2 shape of the same key, seen by its owner.
	alice.Call("/identity/v2/api-key/get", map[string]any{"api_key_id": id}).OK(&got)
	if got["expired_at"] != "" || got["state"] != "ENABLED" {
		t.Fatalf("a v1 key through v2 = %v", got)
	}

	// SYSTEM may name any domain.
	var bk map[string]any
	h.system.Call("/identity/v1/api-key/create", map[string]any{"user_id": "boss", "domain_id": otherID}).OK(&bk)
	if bk["domain_id"] != otherID {
		t.Fatalf("SYSTEM create in another domain = %v", bk)
	}
	if n := listCount(t, h.system, "/identity/v1/api-key/list", map[string]any{"domain_id": otherID}); n != 1 {
		t.Fatalf("SYSTEM lists %d keys of the other domain", n)
	}
	h.system.Call("/identity/v1/api-key/list", map[string]any{"domain_id": "domain-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// The unversioned alias is v2 for api-key.
	h.admin.Call("/identity/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.domain}).Fails(http.StatusBadRequest, errs.InvalidParameter)

	h.admin.Call("/identity/v1/api-key/delete", map[string]any{"api_key_id": id, "domain_id": h.domain}).OK(nil)
	h.admin.Call("/identity/v1/api-key/get", map[string]any{"api_key_id": id, "domain_id": h.domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	eventually(t, 5*time.Second, "identity refuses a deleted v1 key", func() bool { return !works(h, value) })
}

// An admin of domain B never reads, lists, counts, changes or deletes
// domain A's keys, through v1 or v2.
func TestAPIKeyIsolation(t *testing.T) {
	h := newHarness(t)
	h.directUser(h.domain, "alice", "Alice-Passw0rd")
	otherID, other := h.newDomain("other")
	var ka, kb map[string]any
	h.admin.Call("/identity/v1/api-key/create", map[string]any{"user_id": "alice", "domain_id": h.domain}).OK(&ka)
	h.admin.Call("/identity/v2/api-key/create", map[string]any{"name": "root admin"}).OK(&kb)
	other.Call("/identity/v2/api-key/create", map[string]any{"name": "b"}).OK(nil)

	frozen := h.dbFrozen(core.APIKeysCollection)
	for _, id := range []any{ka["api_key_id"], kb["api_key_id"]} {
		for _, op := range []string{"get", "enable", "disable", "delete"} {
			other.Call("/identity/v2/api-key/"+op, map[string]any{"api_key_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
			other.Call("/identity/v1/api-key/"+op, map[string]any{"api_key_id": id, "domain_id": h.domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
			other.Call("/identity/v1/api-key/"+op, map[string]any{"api_key_id": id, "domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		}
		other.Call("/identity/v2/api-key/update", map[string]any{"api_key_id": id, "name": "mine"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	other.Call("/identity/v1/api-key/list", map[string]any{"domain_id": h.domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call("/identity/v1/api-key/stat", map[string]any{"domain_id": h.domain, "query": countQuery}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// Own lists hold only domain B's key, whatever the filter says.
	for _, body := range []map[string]any{
		nil,
		{"user_id": "alice"},
		{"api_key_id": ka["api_key_id"]},
		{"query": map[string]any{"filter": []any{map[string]any{"k": "domain_id", "v": h.domain, "o": "eq"}}}},
		{"query": map[string]any{"filter_or": []any{map[string]any{"k": "domain_id", "v": h.domain, "o": "eq"}, map[string]any{"k": "user_id", "v": "alice", "o": "eq"}}}},
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
	if n := listCount(t, other, "/identity/v1/api-key/list", map[string]any{"domain_id": otherID, "user_id": "alice"}); n != 0 {
		t.Fatalf("domain B v1-lists %d keys of alice", n)
	}
	if n := statCount(other, "/identity/v2/api-key/stat", nil); n != 1 {
		t.Fatalf("domain B counts %d keys", n)
	}
	if n := statCount(other, "/identity/v1/api-key/stat", map[string]any{"domain_id": otherID}); n != 1 {
		t.Fatalf("domain B v1-counts %d keys", n)
	}
	frozen()
	// And domain A's keys keep working.
	if !works(h, ka["api_key"].(string)) || !works(h, kb["api_key"].(string)) {
		t.Fatal("domain A's keys stopped working")
	}
}
