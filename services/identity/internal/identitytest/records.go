package identitytest

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/password"
)

// IsoMillis is a time as identity answers it.
var IsoMillis = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// DirectUser stores an enabled LOCAL user without a role binding straight
// in the database (the user operations are another package's business)
// and returns its USER-scope access token.
func (h *Harness) DirectUser(domainID, userID, pw string) string {
	h.T.Helper()
	hash, err := password.Hash(pw, bcrypt.MinCost)
	if err != nil {
		h.T.Fatal(err)
	}
	u := core.User{
		ID: core.UserKey(domainID, userID), UserID: userID, DomainID: domainID, Name: userID, State: core.Enabled,
		AuthType: "LOCAL", UserType: "USER", RoleType: "USER", MFA: core.MFA{State: core.Disabled, Options: map[string]any{}},
		Language: "en", Timezone: "UTC", RequiredActions: []string{}, Tags: map[string]any{}, PasswordHash: hash,
	}
	u.CreatedAt.Time = time.Now().UTC().Add(-time.Second).Truncate(time.Millisecond)
	if _, err := h.DB.Collection(core.UsersCollection).InsertOne(context.Background(), u); err != nil {
		h.T.Fatal(err)
	}
	return h.LoginIn(domainID, userID, pw).AccessToken
}

// Bind stores userID's binding to a managed role in workspaceID ("" for
// the domain) as role-binding/create would, without its operations.
func (h *Harness) Bind(userID, roleID, workspaceID string) {
	h.T.Helper()
	r, _ := core.ManagedRole(roleID)
	group := "DOMAIN"
	if workspaceID != "" {
		group = "WORKSPACE"
	}
	if _, err := h.Deps.Bindings.InsertOne(context.Background(), core.NewBinding(h.Domain, userID, roleID, r.RoleType, group, workspaceID)); err != nil {
		h.T.Fatal(err)
	}
}

// DBFrozen snapshots the collections and returns a check that they are
// exactly as they were: refused requests change nothing.
func (h *Harness) DBFrozen(colls ...string) func() {
	h.T.Helper()
	before := h.Dump(colls...)
	return func() {
		h.T.Helper()
		if after := h.Dump(colls...); after != before {
			h.T.Fatalf("a refused request changed the database:\nbefore %s\nafter  %s", before, after)
		}
	}
}

// Dump is the collections' documents in _id order, as text.
func (h *Harness) Dump(colls ...string) string {
	h.T.Helper()
	var b strings.Builder
	for _, c := range colls {
		cur, err := h.DB.Collection(c).Find(context.Background(), bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			h.T.Fatal(err)
		}
		var docs []bson.Raw
		if err := cur.All(context.Background(), &docs); err != nil {
			h.T.Fatal(err)
		}
		b.WriteString(c + ":")
		for _, d := range docs {
			b.WriteString(d.String())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// SameFields asserts that got has exactly the fields want.
func SameFields(t *testing.T, what string, got map[string]any, want ...string) {
	t.Helper()
	slices.Sort(want)
	var g []string
	for k := range got {
		g = append(g, k)
	}
	slices.Sort(g)
	if !slices.Equal(g, want) {
		t.Fatalf("%s fields = %v, want %v", what, g, want)
	}
}

// CountQuery counts every record a stat reaches.
var CountQuery = map[string]any{"aggregate": []any{map[string]any{"group": map[string]any{"fields": []any{map[string]any{"name": "n", "operator": "count"}}}}}}

// StatCount runs a count-all stat at path and returns the count.
func StatCount(c *testkit.Client, path string, extra map[string]any) int {
	body := map[string]any{"query": CountQuery}
	for k, v := range extra {
		body[k] = v
	}
	var out struct {
		Results []struct {
			N int `json:"n"`
		} `json:"results"`
	}
	c.Call(path, body).OK(&out)
	if len(out.Results) == 0 {
		return 0
	}
	return out.Results[0].N
}

// ListCount lists at path and returns total_count (checking that it
// matches the rows when the list is short).
func ListCount(t *testing.T, c *testkit.Client, path string, body map[string]any) int {
	t.Helper()
	var out struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	var b any = body
	if body == nil {
		b = nil
	}
	c.Call(path, b).OK(&out)
	if len(out.Results) != out.TotalCount {
		t.Fatalf("%s: %d rows, total_count %d", path, len(out.Results), out.TotalCount)
	}
	return out.TotalCount
}
