package secret_test

import (
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/secret/internal/usersecret"
)

// The kit's tenancy matrix over a user secret: another domain's admin, a
// plain user of the domain, workspace owners read nothing of it and
// change nothing (its owner is the insider).
func TestTenancyMatrix(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.create(h.alice, map[string]any{"name": "matrix", "data": map[string]any{"password": "p1"}})
	id := s.UserSecretID
	testkit.Tenancy{
		Handler: h.handler, Coll: h.db.Collection(usersecret.Collection), ID: id, Domain: "domain-a",
		Get:  testkit.Req{Path: p + "get", Body: map[string]any{"user_secret_id": id}},
		List: testkit.Req{Path: p + "list", Body: map[string]any{"user_secret_id": id}},
		Stat: &testkit.Req{Path: p + "stat", Body: map[string]any{"query": map[string]any{
			"filter":    []any{map[string]any{"k": "user_secret_id", "v": id, "o": "eq"}},
			"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "name", "name": "n"}}}}}}}},
		Changes: []testkit.Req{
			{Path: p + "update", Body: map[string]any{"user_secret_id": id, "name": "taken"}},
			{Path: p + "update-data", Body: map[string]any{"user_secret_id": id, "schema_id": "plain", "data": map[string]any{"password": "x"}}},
			{Path: p + "delete", Body: map[string]any{"user_secret_id": id}},
		},
		Insider: auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.User},
	}.Run(t)
}
