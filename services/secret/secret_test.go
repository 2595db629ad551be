package secret_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/secret"
	"github.com/nubes-io/nubes/services/secret/internal/usersecret"
)

var (
	idPattern = regexp.MustCompile(`^user-secret-[0-9a-f]{12}$`)
	isoMillis = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
)

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestUserSecretLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.create(h.alice, map[string]any{"name": "db password", "data": map[string]any{"password": "p1"},
		"tags": map[string]any{"env": "prod"}})
	if !idPattern.MatchString(s.UserSecretID) || s.Name != "db password" || s.SchemaID != "" || s.Provider != "" ||
		s.Tags["env"] != "prod" || s.DomainID != "domain-a" || s.UserID != "alice" || !isoMillis.MatchString(s.CreatedAt) {
		t.Fatalf("create = %+v", s)
	}
	// UserSecretInfo carries exactly its fields: never data, never how it is stored.
	raw := h.alice.Call(p+"get", map[string]any{"user_secret_id": s.UserSecretID}).JSON()
	want := []string{"created_at", "domain_id", "name", "provider", "schema_id", "tags", "user_id", "user_secret_id"}
	if got := keysOf(raw); !slices.Equal(got, want) {
		t.Fatalf("get fields = %v, want %v", got, want)
	}

	var got info
	h.alice.Call(p+"update", map[string]any{"user_secret_id": s.UserSecretID, "name": "renamed", "tags": map[string]any{"team": "db"}}).OK(&got)
	if got.Name != "renamed" || len(got.Tags) != 1 || got.Tags["team"] != "db" || got.CreatedAt != s.CreatedAt {
		t.Fatalf("update = %+v", got)
	}
	h.alice.Call(p+"update", map[string]any{"user_secret_id": s.UserSecretID}).OK(&got)
	if got.Name != "renamed" || got.Tags["team"] != "db" {
		t.Fatalf("an empty update changed the secret: %+v", got)
	}
	// lowerCamelCase names, as the console sends them, work too.
	h.alice.Call(p+"get", map[string]any{"userSecretId": s.UserSecretID}).OK(&got)

	if d := h.getData(s.UserSecretID, "domain-a"); d.Encrypted || d.EncryptOptions == nil || len(d.EncryptOptions) != 0 || d.Data["password"] != "p1" {
		t.Fatalf("get_data = %+v", d)
	}
	h.alice.Call(p+"update-data", map[string]any{"user_secret_id": s.UserSecretID, "schema_id": "plain", "data": map[string]any{"password": "p2", "user": "app"}}).OK(nil)
	if d := h.getData(s.UserSecretID, "domain-a"); d.Data["password"] != "p2" || d.Data["user"] != "app" || len(d.Data) != 2 {
		t.Fatalf("get_data after update_data = %+v", d)
	}
	h.alice.Call(p+"get", map[string]any{"user_secret_id": s.UserSecretID}).OK(&got)
	if got.SchemaID != "plain" || got.Name != "renamed" {
		t.Fatalf("after update_data = %+v", got)
	}

	second := h.create(h.alice, map[string]any{"name": "api token", "data": map[string]any{"token": "t"}, "schema_id": "plain"})
	var l list
	h.alice.Call(p+"list", map[string]any{}).OK(&l)
	if l.TotalCount != 2 || len(l.Results) != 2 || l.Results[0].UserSecretID != second.UserSecretID {
		t.Fatalf("list (newest first) = %+v", l)
	}
	h.alice.Call(p+"list", map[string]any{"name": "renamed"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].UserSecretID != s.UserSecretID {
		t.Fatalf("list by name = %+v", l)
	}
	h.alice.Call(p+"list", map[string]any{"schema_id": "plain", "query": map[string]any{"sort": map[string]any{"key": "name"}}}).OK(&l)
	if l.TotalCount != 2 || l.Results[0].Name != "api token" {
		t.Fatalf("list by schema_id sorted by name = %+v", l)
	}
	h.alice.Call(p+"list", map[string]any{"query": map[string]any{"keyword": "api"}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].UserSecretID != second.UserSecretID {
		t.Fatalf("list by keyword = %+v", l)
	}
	h.alice.Call(p+"list", map[string]any{"user_secret_id": second.UserSecretID, "query": map[string]any{"only": []string{"name"}}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].Name != "api token" || l.Results[0].UserSecretID != "" {
		t.Fatalf("list only name = %+v", l)
	}
	st := h.alice.Call(p+"stat", map[string]any{"domain_id": "domain-a", "query": map[string]any{
		"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "schema_id", "name": "schema"}},
			"fields": []any{map[string]any{"operator": "count", "name": "n"}}}}}}}).JSON()
	if rows := st["results"].([]any); len(rows) != 1 || rows[0].(map[string]any)["n"] != float64(2) || rows[0].(map[string]any)["schema"] != "plain" {
		t.Fatalf("stat = %v", st)
	}

	h.alice.Call(p+"delete", map[string]any{"user_secret_id": s.UserSecretID}).OK(nil)
	for _, path := range []string{"get", "delete", "update"} {
		fails(t, h.alice.Call(p+path, map[string]any{"user_secret_id": s.UserSecretID}), http.StatusNotFound, errs.NotFoundCode)
	}
	fails(t, h.system.Call(p+"get-data", map[string]any{"user_secret_id": s.UserSecretID, "domain_id": "domain-a"}), http.StatusNotFound, errs.NotFoundCode)
	if n := len(h.docs()); n != 1 {
		t.Fatalf("%d documents after delete, want 1 (its sealed data goes with it)", n)
	}
}

// Every role keeps secrets of its own.
func TestEveryRoleKeepsItsOwn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, c := range []*testkit.Client{h.alice, h.adminA, h.ws, h.bob, h.system, h.sysAdm} {
		s := h.create(c, map[string]any{"name": "mine", "data": map[string]any{"k": "v"}})
		var l list
		c.Call(p+"list", nil).OK(&l)
		if l.TotalCount != 1 || l.Results[0].UserSecretID != s.UserSecretID {
			t.Fatalf("%s/%s sees %+v", s.DomainID, s.UserID, l)
		}
	}
	fails(t, h.anon.Call(p+"list", nil), http.StatusUnauthorized, errs.AuthenticateFailure)
	fails(t, h.anon.Call(p+"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}}), http.StatusUnauthorized, errs.AuthenticateFailure)
}

// A secret is its creator's alone: another user of the domain, the
// domain's admin and any other domain get 404 on every operation, and
// never see it in list or stat.
func TestOwnerOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.create(h.alice, map[string]any{"name": "alice's", "data": map[string]any{"k": "v"}, "schema_id": "plain"})
	others := map[string]*testkit.Client{"same domain user": h.amy, "domain admin": h.adminA, "workspace member": h.ws,
		"other domain, same user id": h.bob, "system": h.system}
	before := h.snapshot()
	id := map[string]any{"user_secret_id": s.UserSecretID}
	for name, c := range others {
		t.Run(name, func(t *testing.T) {
			for path, body := range map[string]map[string]any{
				"get":         id,
				"delete":      id,
				"update":      {"user_secret_id": s.UserSecretID, "name": "stolen"},
				"update-data": {"user_secret_id": s.UserSecretID, "schema_id": "plain", "data": map[string]any{"k": "overwritten"}},
			} {
				fails(t, c.Call(p+path, body), http.StatusNotFound, errs.NotFoundCode)
			}
			var l list
			c.Call(p+"list", nil).OK(&l)
			c.Call(p+"list", id).OK(&l)
			if l.TotalCount != 0 || len(l.Results) != 0 {
				t.Fatalf("list shows %+v", l)
			}
			c.Call(p+"list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "user_id", "v": "alice", "o": "eq"}}}}).OK(&l)
			if l.TotalCount != 0 {
				t.Fatalf("a filter on user_id reaches alice's secrets: %+v", l)
			}
			st := c.Call(p+"stat", map[string]any{"domain_id": "domain-a", "query": map[string]any{"count": map[string]any{"name": "n"}}}).JSON()
			if rows, _ := st["results"].([]any); len(rows) != 0 && rows[0].(map[string]any)["n"] != float64(0) {
				t.Fatalf("stat = %v", st)
			}
		})
	}
	if h.snapshot() != before {
		t.Fatal("a refused call changed the stored secret")
	}
	if d := h.getData(s.UserSecretID, "domain-a"); d.Data["k"] != "v" {
		t.Fatalf("data = %v", d.Data)
	}
	// get_data names the domain: a secret of domain-a is not found as one of domain-b.
	fails(t, h.system.Call(p+"get-data", map[string]any{"user_secret_id": s.UserSecretID, "domain_id": "domain-b"}), http.StatusNotFound, errs.NotFoundCode)
}

// get_data is for services (SYSTEM tokens) only: everyone else, the owner
// and a person's SYSTEM_ADMIN grant included, gets 403 whether the secret
// exists or not.
func TestGetDataIsSystemOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.create(h.alice, map[string]any{"name": "n", "data": map[string]any{"k": "v"}})
	body := map[string]any{"user_secret_id": s.UserSecretID, "domain_id": "domain-a"}
	// A person's SYSTEM_ADMIN grant is no service credential (issue 21).
	for name, c := range map[string]*testkit.Client{"owner": h.alice, "domain admin": h.adminA, "same domain user": h.amy,
		"workspace member": h.ws, "other domain": h.bob, "a person's SYSTEM_ADMIN grant": h.sysAdm} {
		fails(t, c.Call(p+"get-data", body), http.StatusForbidden, errs.PermissionDenied, "\"v\"")
		fails(t, c.Call(p+"get-data", map[string]any{"user_secret_id": "user-secret-000000000000", "domain_id": "domain-a"}), http.StatusForbidden, errs.PermissionDenied)
		_ = name
	}
	fails(t, h.anon.Call(p+"get-data", body), http.StatusUnauthorized, errs.AuthenticateFailure)
	for _, c := range []*testkit.Client{h.system} {
		raw := c.Call(p+"get-data", body).JSON()
		if got := keysOf(raw); !slices.Equal(got, []string{"data", "encrypt_options", "encrypted"}) {
			t.Fatalf("get_data fields = %v", got)
		}
		if b, _ := json.Marshal(raw); string(b) != `{"data":{"k":"v"},"encrypt_options":{},"encrypted":false}` {
			t.Fatalf("get_data = %s", b)
		}
	}
	if !strings.Contains(h.logs.String(), `"msg":"user secret data read"`) {
		t.Fatal("a get_data read is not logged")
	}
}

// encrypted and encrypt_options are kept as the client sends them (the
// client may send data it encrypted itself) and answered by get_data.
func TestClientEncryptedData(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	opts := map[string]any{"encrypt_algorithm": "AES", "nonce": "bm9uY2U=", "nested": map[string]any{"a": []any{1.5, "b"}}}
	s := h.create(h.alice, map[string]any{"name": "n", "data": map[string]any{"encrypted_data": "Y2lwaGVy"}, "encrypted": true, "encrypt_options": opts})
	d := h.getData(s.UserSecretID, "domain-a")
	if b, _ := json.Marshal(d); string(b) != `{"encrypted":true,"encrypt_options":{"encrypt_algorithm":"AES","nested":{"a":[1.5,"b"]},"nonce":"bm9uY2U="},"data":{"encrypted_data":"Y2lwaGVy"}}` {
		t.Fatalf("get_data = %s", b)
	}
	// update_data replaces all three: here with plain data.
	h.alice.Call(p+"update-data", map[string]any{"user_secret_id": s.UserSecretID, "schema_id": "x", "data": map[string]any{"k": "v"}}).OK(nil)
	d = h.getData(s.UserSecretID, "domain-a")
	if b, _ := json.Marshal(d); string(b) != `{"encrypted":false,"encrypt_options":{},"data":{"k":"v"}}` {
		t.Fatalf("get_data after update_data = %s", b)
	}
	h.alice.Call(p+"update-data", map[string]any{"user_secret_id": s.UserSecretID, "schema_id": "x", "data": map[string]any{"encrypted_data": "eA=="},
		"encrypted": true, "encryptOptions": map[string]any{"encrypt_algorithm": "AES"}}).OK(nil)
	if d = h.getData(s.UserSecretID, "domain-a"); !d.Encrypted || d.EncryptOptions["encrypt_algorithm"] != "AES" {
		t.Fatalf("get_data after encrypted update_data = %+v", d)
	}
}

// The plaintext never reaches the store, a log line, or any response but
// get_data, whatever the operation and whether it succeeds or fails.
func TestDataNeverLeaks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.repo.add("domain-a", "strict", map[string]any{"type": "object", "required": []any{"user", "password"},
		"properties": map[string]any{"user": map[string]any{"type": "string"}, "password": map[string]any{"type": "string", "pattern": "^pw-"},
			"pin": map[string]any{"enum": []any{"1111", "2222"}}}}, nil)
	stamp := time.Now().Format("150405.000000")
	secretValues := []string{"hunter2-" + stamp, "pw-correct-horse-" + stamp, "pw-battery-staple-" + stamp, "bad-pattern-" + stamp, "9999" + stamp}
	var responses []*testkit.Response
	call := func(c *testkit.Client, path string, body any) *testkit.Response {
		r := c.Call(p+path, body)
		responses = append(responses, r)
		return r
	}
	call(h.alice, "create", map[string]any{"name": "first", "data": map[string]any{"password": secretValues[0], "nested": map[string]any{"deep": []any{secretValues[0]}}}}).OK(nil)
	var s info
	call(h.alice, "create", map[string]any{"name": "second", "schema_id": "strict", "data": map[string]any{"user": "u", "password": secretValues[1]}}).OK(&s)
	call(h.alice, "update-data", map[string]any{"user_secret_id": s.UserSecretID, "schema_id": "strict", "data": map[string]any{"user": "u", "password": secretValues[2]}}).OK(nil)
	// Refused requests that carry secret data: the value must not come back.
	fails(t, call(h.alice, "create", map[string]any{"name": "bad", "schema_id": "strict", "data": map[string]any{"user": "u", "password": secretValues[3]}}),
		http.StatusBadRequest, errs.InvalidParameter, secretValues[3])
	fails(t, call(h.alice, "update-data", map[string]any{"user_secret_id": s.UserSecretID, "schema_id": "strict", "data": map[string]any{"user": "u", "password": "pw-x", "pin": secretValues[4]}}),
		http.StatusBadRequest, errs.InvalidParameter, secretValues[4])
	fails(t, call(h.alice, "update", map[string]any{"user_secret_id": s.UserSecretID, "data": map[string]any{"password": secretValues[0]}}),
		http.StatusBadRequest, errs.InvalidParameter, secretValues[0])
	fails(t, call(h.amy, "update-data", map[string]any{"user_secret_id": s.UserSecretID, "schema_id": "x", "data": map[string]any{"p": secretValues[0]}}),
		http.StatusNotFound, errs.NotFoundCode, secretValues[0])
	call(h.alice, "get", map[string]any{"user_secret_id": s.UserSecretID}).OK(nil)
	call(h.alice, "list", map[string]any{}).OK(nil)
	call(h.alice, "list", map[string]any{"query": map[string]any{"only": []string{"user_secret_id", "name", "tags"}}}).OK(nil)
	call(h.alice, "stat", map[string]any{"query": map[string]any{"distinct": "name"}}).OK(nil)
	call(h.alice, "update", map[string]any{"user_secret_id": s.UserSecretID, "name": "third"}).OK(nil)
	// Queries cannot reach the sealed record either.
	for _, body := range []map[string]any{
		{"query": map[string]any{"only": []string{"sealed"}}},
		{"query": map[string]any{"filter": []any{map[string]any{"k": "sealed.data", "v": true, "o": "exists"}}}},
		{"query": map[string]any{"sort": map[string]any{"key": "sealed.nonce"}}},
	} {
		fails(t, call(h.alice, "list", body), http.StatusBadRequest, errs.InvalidParameter)
	}
	// A stored field the Info leaves out reads as a field no secret has.
	call(h.alice, "list", map[string]any{"query": map[string]any{"sort": map[string]any{"key": "encrypt_options"}, "only": []string{"encrypt_options", "name"}}}).OK(nil)
	fails(t, call(h.alice, "stat", map[string]any{"query": map[string]any{"distinct": "sealed"}}), http.StatusBadRequest, errs.InvalidParameter)

	for _, r := range responses {
		for _, v := range secretValues {
			if strings.Contains(string(r.Body), v) {
				t.Fatalf("%s answers the secret data: %s", r.Path, r.Body)
			}
		}
	}
	for _, d := range h.docs() {
		for _, v := range secretValues {
			if strings.Contains(d.String(), v) || strings.Contains(string(d), v) {
				t.Fatalf("the store holds secret data in clear: %s", d)
			}
		}
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "request refused") {
		t.Fatal("no log lines captured: the check would prove nothing")
	}
	for _, v := range secretValues {
		if strings.Contains(logs, v) {
			t.Fatalf("the logs hold secret data: %s", logs)
		}
	}
	// And get_data does answer it, decrypted.
	if d := h.getData(s.UserSecretID, "domain-a"); d.Data["password"] != secretValues[2] {
		t.Fatalf("get_data = %v", d.Data)
	}
}

// update changes name and tags only.
func TestUpdateChangesNameAndTagsOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.create(h.alice, map[string]any{"name": "n", "data": map[string]any{"k": "v"}, "schema_id": "s1", "tags": map[string]any{"a": "1", "b": "2"}})
	before := h.snapshot()
	for _, body := range []map[string]any{
		{"user_secret_id": s.UserSecretID, "data": map[string]any{"k": "changed"}},
		{"user_secret_id": s.UserSecretID, "name": "x", "data": map[string]any{}},
	} {
		msg := fails(t, h.alice.Call(p+"update", body), http.StatusBadRequest, errs.InvalidParameter)
		if !strings.Contains(msg, "data") {
			t.Fatalf("message %q does not name data", msg)
		}
	}
	for _, field := range []string{"schema_id", "encrypted", "encrypt_options", "provider", "user_id", "domain_id"} {
		fails(t, h.alice.Call(p+"update", map[string]any{"user_secret_id": s.UserSecretID, field: "x"}), http.StatusBadRequest, errs.InvalidParameter)
	}
	if h.snapshot() != before {
		t.Fatal("a refused update changed the secret")
	}
	// tags replace the whole map.
	var got info
	h.alice.Call(p+"update", map[string]any{"user_secret_id": s.UserSecretID, "tags": map[string]any{"c": "3"}}).OK(&got)
	if len(got.Tags) != 1 || got.Tags["c"] != "3" || got.SchemaID != "s1" || got.Name != "n" {
		t.Fatalf("update tags = %+v", got)
	}
	h.alice.Call(p+"update", map[string]any{"user_secret_id": s.UserSecretID, "tags": map[string]any{}}).OK(&got)
	if got.Tags == nil || len(got.Tags) != 0 {
		t.Fatalf("update with empty tags = %+v", got)
	}
	if d := h.getData(s.UserSecretID, "domain-a"); d.Data["k"] != "v" {
		t.Fatalf("data after update = %v", d.Data)
	}
}

// Bad input on every operation: 400 with a code, nothing stored or changed.
func TestBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.create(h.alice, map[string]any{"name": "n", "data": map[string]any{"k": "v"}})
	id := s.UserSecretID
	long := strings.Repeat("x", 256)
	tests := []struct {
		path string
		body any
		code string
	}{
		{"create", `{"name": "x", "data": {"k": "v"}`, errs.JSONFormat},
		{"create", `[]`, errs.JSONFormat},
		{"create", map[string]any{"data": map[string]any{"k": "v"}}, errs.RequiredParameter},
		{"create", map[string]any{"name": "  ", "data": map[string]any{"k": "v"}}, errs.RequiredParameter},
		{"create", map[string]any{"name": "x"}, errs.RequiredParameter},
		{"create", map[string]any{"name": "x", "data": nil}, errs.RequiredParameter},
		{"create", map[string]any{"name": "x", "data": map[string]any{}}, errs.InvalidParameter},
		{"create", map[string]any{"name": "x", "data": "secret"}, errs.InvalidParameterType},
		{"create", map[string]any{"name": "x", "data": []any{"a"}}, errs.InvalidParameterType},
		{"create", map[string]any{"name": long, "data": map[string]any{"k": "v"}}, errs.InvalidParameter},
		{"create", map[string]any{"name": 5, "data": map[string]any{"k": "v"}}, errs.InvalidParameterType},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "schema_id": long}, errs.InvalidParameter},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "tags": "t"}, errs.InvalidParameterType},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "tags": map[string]any{"": 1}}, errs.InvalidParameter},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "tags": map[string]any{"a\x00b": 1}}, errs.InvalidParameter},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "encrypted": "yes"}, errs.InvalidParameterType},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "encrypt_options": map[string]any{"": 1}}, errs.InvalidParameter},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "user_id": "mallory"}, errs.InvalidParameter},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "domain_id": "domain-b"}, errs.InvalidParameter},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "provider": "aws"}, errs.InvalidParameter},
		{"create", map[string]any{"name": "x", "data": map[string]any{"k": "v"}, "user_secret_id": "user-secret-aaaaaaaaaaaa"}, errs.InvalidParameter},
		{"update", map[string]any{"name": "x"}, errs.RequiredParameter},
		{"update", map[string]any{"user_secret_id": id, "name": long}, errs.InvalidParameter},
		{"update", map[string]any{"user_secret_id": id, "tags": []any{}}, errs.InvalidParameterType},
		{"update", map[string]any{"user_secret_id": id, "tags": map[string]any{"": 1}}, errs.InvalidParameter},
		{"update", map[string]any{"user_secret_id": 7}, errs.InvalidParameterType},
		{"delete", map[string]any{}, errs.RequiredParameter},
		{"delete", map[string]any{"user_secret_id": id, "force": true}, errs.InvalidParameter},
		{"update-data", map[string]any{"user_secret_id": id, "data": map[string]any{"k": "v"}}, errs.RequiredParameter},
		{"update-data", map[string]any{"user_secret_id": id, "schema_id": "s"}, errs.RequiredParameter},
		{"update-data", map[string]any{"schema_id": "s", "data": map[string]any{"k": "v"}}, errs.RequiredParameter},
		{"update-data", map[string]any{"user_secret_id": id, "schema_id": "s", "data": map[string]any{}}, errs.InvalidParameter},
		{"update-data", map[string]any{"user_secret_id": id, "schema_id": "s", "data": 1}, errs.InvalidParameterType},
		{"update-data", map[string]any{"user_secret_id": id, "schema_id": "s", "data": map[string]any{"k": "v"}, "name": "x"}, errs.InvalidParameter},
		{"update-data", map[string]any{"user_secret_id": id, "schema_id": "s", "data": map[string]any{"k": "v"}, "encrypt_options": map[string]any{"a\x00b": 1}}, errs.InvalidParameter},
		{"get", map[string]any{}, errs.RequiredParameter},
		{"get", map[string]any{"user_secret_id": id, "domain_id": "domain-a", "extra": 1}, errs.InvalidParameter},
		{"get", map[string]any{"user_secret_id": []any{id}}, errs.InvalidParameterType},
		{"list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "name", "v": "x", "o": "like"}}}}, errs.DBQuery},
		{"list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "password", "v": []any{"x"}, "o": "eq"}}}}, errs.OperatorValueType},
		{"list", map[string]any{"query": map[string]any{"page": map[string]any{"limit": "ten"}}}, errs.InvalidParameterType},
		{"list", map[string]any{"state": "ENABLED"}, errs.InvalidParameter},
		{"list", map[string]any{"name": 1}, errs.InvalidParameterType},
		{"stat", map[string]any{}, errs.RequiredParameter},
		{"stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"nope": 1}}}}, errs.InvalidParameter},
		{"stat", map[string]any{"query": "count"}, errs.InvalidParameterType},
	}
	before := h.snapshot()
	for _, tt := range tests {
		r := h.alice.Call(p+tt.path, tt.body)
		if r.Status != http.StatusBadRequest {
			t.Errorf("%s %v: status %d, want 400: %s", tt.path, tt.body, r.Status, r.Body)
			continue
		}
		var e struct {
			Detail struct{ Code string } `json:"detail"`
		}
		if json.Unmarshal(r.Body, &e); e.Detail.Code != tt.code {
			t.Errorf("%s %v: code %s, want %s: %s", tt.path, tt.body, e.Detail.Code, tt.code, r.Body)
		}
	}
	// get_data's bad input, as a SYSTEM caller.
	for _, body := range []map[string]any{{"user_secret_id": id}, {"domain_id": "domain-a"}, {"user_secret_id": id, "domain_id": "domain-a", "x": 1}} {
		r := h.system.Call(p+"get-data", body)
		if r.Status != http.StatusBadRequest {
			t.Errorf("get-data %v: status %d: %s", body, r.Status, r.Body)
		}
	}
	if h.snapshot() != before {
		t.Fatal("a refused request changed the store")
	}
	for _, path := range []string{"get", "update", "delete"} {
		fails(t, h.alice.Call(p+path, map[string]any{"user_secret_id": "user-secret-000000000000"}), http.StatusNotFound, errs.NotFoundCode)
	}
	fails(t, h.alice.Call(p+"update-data", map[string]any{"user_secret_id": "nope", "schema_id": "s", "data": map[string]any{"k": "v"}}), http.StatusNotFound, errs.NotFoundCode)
}

// A schema of the repository checks the data: 400 with the failing place
// in data and nothing stored; a repository that does not answer is 503.
func TestSchemaValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.repo.add("domain-a", "aws-access-key", map[string]any{"type": "object", "required": []any{"aws_access_key_id", "aws_secret_access_key"},
		"properties": map[string]any{"aws_access_key_id": map[string]any{"type": "string", "pattern": "^AKIA"},
			"aws_secret_access_key": map[string]any{"type": "string", "minLength": 8}}, "additionalProperties": false},
		map[string]any{"provider": "aws"})
	good := map[string]any{"aws_access_key_id": "AKIA1234", "aws_secret_access_key": "abcdefgh12"}
	s := h.create(h.alice, map[string]any{"name": "aws", "schema_id": "aws-access-key", "data": good})
	if s.SchemaID != "aws-access-key" || s.Provider != "aws" {
		t.Fatalf("create with schema = %+v", s)
	}
	h.repo.mu.Lock()
	last, bearer := h.repo.calls[len(h.repo.calls)-1], h.repo.bearers[len(h.repo.bearers)-1]
	h.repo.mu.Unlock()
	if last["name"] != "aws-access-key" || last["domain_id"] != "domain-a" || !strings.HasPrefix(bearer, "Bearer ") {
		t.Fatalf("repository asked %v with %q", last, bearer)
	}

	bad := []struct {
		name string
		data map[string]any
		key  string
	}{
		{"missing member", map[string]any{"aws_access_key_id": "AKIA1234"}, "data/aws_secret_access_key"},
		{"wrong type", map[string]any{"aws_access_key_id": 5, "aws_secret_access_key": "abcdefgh12"}, "data/aws_access_key_id"},
		{"pattern", map[string]any{"aws_access_key_id": "NOPE-VALUE", "aws_secret_access_key": "abcdefgh12"}, "data/aws_access_key_id"},
		{"too short", map[string]any{"aws_access_key_id": "AKIA1", "aws_secret_access_key": "short"}, "data/aws_secret_access_key"},
		{"extra member", map[string]any{"aws_access_key_id": "AKIA1", "aws_secret_access_key": "abcdefgh12", "other": "x"}, "data"},
	}
	before := h.snapshot()
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			for _, r := range []*testkit.Response{
				h.alice.Call(p+"create", map[string]any{"name": "x", "schema_id": "aws-access-key", "data": b.data}),
				h.alice.Call(p+"update-data", map[string]any{"user_secret_id": s.UserSecretID, "schema_id": "aws-access-key", "data": b.data}),
			} {
				msg := fails(t, r, http.StatusBadRequest, errs.InvalidParameter, "NOPE-VALUE", "short")
				if !strings.Contains(msg, "key = "+b.key) {
					t.Fatalf("message %q does not name %s", msg, b.key)
				}
			}
		})
	}
	if h.snapshot() != before {
		t.Fatal("data refused by the schema changed the store")
	}

	// A schema_id the repository does not know is the client's own label.
	free := h.create(h.alice, map[string]any{"name": "free", "schema_id": "my-form", "data": map[string]any{"anything": 1}})
	if free.SchemaID != "my-form" || free.Provider != "" {
		t.Fatalf("create with an unknown schema = %+v", free)
	}
	// Schemas are per domain: domain-b's user gets no validation from domain-a's.
	other := h.create(h.bob, map[string]any{"name": "b", "schema_id": "aws-access-key", "data": map[string]any{"x": 1}})
	if other.Provider != "" {
		t.Fatalf("domain-b used domain-a's schema: %+v", other)
	}
	// update_data to a schema, then its provider and schema follow.
	h.alice.Call(p+"update-data", map[string]any{"user_secret_id": free.UserSecretID, "schema_id": "aws-access-key", "data": good}).OK(nil)
	var got info
	h.alice.Call(p+"get", map[string]any{"user_secret_id": free.UserSecretID}).OK(&got)
	if got.SchemaID != "aws-access-key" || got.Provider != "aws" {
		t.Fatalf("after update_data = %+v", got)
	}

	// A repository that answers without the schema path, then one that is down: 503, nothing stored.
	before = h.snapshot()
	h.repo.mu.Lock()
	h.repo.mode = "unrouted"
	h.repo.mu.Unlock()
	fails(t, h.alice.Call(p+"create", map[string]any{"name": "x", "schema_id": "aws-access-key", "data": good}), http.StatusServiceUnavailable, errs.Unavailable)
	h.repo.srv.Close()
	fails(t, h.alice.Call(p+"create", map[string]any{"name": "x", "schema_id": "aws-access-key", "data": good}), http.StatusServiceUnavailable, errs.Unavailable)
	fails(t, h.alice.Call(p+"update-data", map[string]any{"user_secret_id": s.UserSecretID, "schema_id": "aws-access-key", "data": good}), http.StatusServiceUnavailable, errs.Unavailable)
	if h.snapshot() != before {
		t.Fatal("a call refused for the repository changed the store")
	}
	// Without a schema_id the repository is not needed.
	h.create(h.alice, map[string]any{"name": "no schema", "data": map[string]any{"k": "v"}})
}

// The sealed data is bound to its record and owner, and keys rotate: old
// records open, new ones use the new key, reseal moves them all, then the
// old key can go.
func TestSealingAndRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	a := h.create(h.alice, map[string]any{"name": "a", "data": map[string]any{"k": "a"}})
	b := h.create(h.alice, map[string]any{"name": "b", "data": map[string]any{"k": "b"}})
	coll := h.db.Collection(usersecret.Collection)
	sealedOf := func(id string) seal.Sealed {
		var doc usersecret.UserSecret
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		return doc.Sealed
	}
	if s := sealedOf(a.UserSecretID); s.KeyID != "1" || len(s.Nonce) != 12 {
		t.Fatalf("sealed = %+v", s)
	}

	// A ciphertext copied onto another record does not open there.
	saved := sealedOf(b.UserSecretID)
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: b.UserSecretID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "sealed", Value: sealedOf(a.UserSecretID)}}}}); err != nil {
		t.Fatal(err)
	}
	r := h.system.Call(p+"get-data", map[string]any{"user_secret_id": b.UserSecretID, "domain_id": "domain-a"})
	fails(t, r, http.StatusInternalServerError, errs.Unknown, `"a"`)
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: b.UserSecretID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "sealed", Value: saved}}}}); err != nil {
		t.Fatal(err)
	}

	// Rotation: key 2 active, key 1 still known.
	newKey := seal.RandomSpec("2")
	rotated, err := seal.Parse(keySpec+","+newKey, "2")
	if err != nil {
		t.Fatal(err)
	}
	h.serve(rotated, h.repo.srv.URL)
	c := h.create(h.alice, map[string]any{"name": "c", "data": map[string]any{"k": "c"}})
	if sealedOf(c.UserSecretID).KeyID != "2" || sealedOf(a.UserSecretID).KeyID != "1" {
		t.Fatal("new writes must use the active key, old records keep theirs until resealed")
	}
	for id, want := range map[string]string{a.UserSecretID: "a", b.UserSecretID: "b", c.UserSecretID: "c"} {
		if d := h.getData(id, "domain-a"); d.Data["k"] != want {
			t.Fatalf("%s opens to %v", id, d.Data)
		}
	}
	// The service with key 1 withdrawn cannot open old records yet.
	onlyNew, _ := seal.Parse(newKey, "")
	h.serve(onlyNew, h.repo.srv.URL)
	h.system.Call(p+"get-data", map[string]any{"user_secret_id": a.UserSecretID, "domain_id": "domain-a"}).Fails(http.StatusInternalServerError, errs.Unknown)

	reps, err := seal.ResealAll(ctx, rotated, secret.ResealTargets(h.db), 2, nil)
	if err != nil || len(reps) != 2 || reps[0].Resealed != 2 || len(reps[0].Failed) != 0 || reps[1].Resealed != 0 || len(reps[1].Failed) != 0 {
		t.Fatalf("reseal = %+v %v", reps, err)
	}
	for id, want := range map[string]string{a.UserSecretID: "a", b.UserSecretID: "b", c.UserSecretID: "c"} {
		if sealedOf(id).KeyID != "2" {
			t.Fatalf("%s still under key %s", id, sealedOf(id).KeyID)
		}
		if d := h.getData(id, "domain-a"); d.Data["k"] != want {
			t.Fatalf("%s opens to %v with key 2 alone", id, d.Data)
		}
	}
}

// `secret reseal` reads the service's own configuration (NUBES_*).
func TestResealCommand(t *testing.T) {
	h := newHarness(t)
	a := h.create(h.alice, map[string]any{"name": "a", "data": map[string]any{"k": "a"}})
	t.Setenv("NUBES_MONGO_URI", testkit.Get().Mongo.URI)
	t.Setenv("NUBES_MONGO_DATABASE", h.db.Name())
	t.Setenv("NUBES_ENCRYPTION_KEYS", keySpec+","+seal.RandomSpec("2"))
	t.Setenv("NUBES_ENCRYPTION_ACTIVE_KEY", "2")
	if code := secret.ResealMain([]string{"-batch", "1"}); code != 0 {
		t.Fatalf("reseal exit %d", code)
	}
	var doc usersecret.UserSecret
	if err := h.db.Collection(usersecret.Collection).FindOne(context.Background(), bson.D{{Key: "_id", Value: a.UserSecretID}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.Sealed.KeyID != "2" {
		t.Fatalf("key after reseal %q", doc.Sealed.KeyID)
	}
	if code := secret.ResealMain([]string{"-batch", "x"}); code != 2 {
		t.Fatalf("a bad flag exits %d", code)
	}
	t.Setenv("NUBES_ENCRYPTION_ACTIVE_KEY", "9")
	if code := secret.ResealMain(nil); code != 1 {
		t.Fatalf("an unknown active key exits %d", code)
	}
}

// The sealed record of a user secret is a secret field: no query reads
// it or a path under it, whatever the caller.
func TestSealedIsNoQueryOracle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.alice.Call(p+"create", map[string]any{"name": "first", "data": map[string]any{"password": "hunter2"}}).OK(nil)
	testkit.SecretOracle(t, h.alice, testkit.Oracle{List: p + "list", Stat: p + "stat", Secret: "sealed",
		Probe: "sealed.key_id", Right: "hunter2", Wrong: "nope"})
}
