package identitytest

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// Test users get UserPassword through a bcrypt hash of the minimum cost
// written straight to the store (a cost-10 hash takes seconds under
// -race on a small machine).
const UserPassword = "User-Passw0rd1"

var cheapHash = func() string {
	b, err := bcrypt.GenerateFromPassword([]byte(UserPassword), bcrypt.MinCost)
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// SeedUser stores in db an ENABLED LOCAL user of domainID with
// UserPassword; edit adjusts it before it is stored.
func SeedUser(t testing.TB, db *mongo.Database, domainID, userID string, edit ...func(*core.User)) {
	t.Helper()
	u := &core.User{
		ID: core.UserKey(domainID, userID), UserID: userID, DomainID: domainID, Name: "User " + userID, State: core.Enabled,
		AuthType: "LOCAL", UserType: "USER", RoleType: "USER", MFA: core.MFA{State: core.Disabled, Options: map[string]any{}},
		Language: "en", Timezone: "UTC", RequiredActions: []string{}, Tags: map[string]any{}, PasswordHash: cheapHash, CreatedAt: wire.T(wire.Now()),
	}
	for _, e := range edit {
		e(u)
	}
	if _, err := db.Collection(core.UsersCollection).InsertOne(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

// SeedUser is the package's SeedUser on the harness' database.
func (h *Harness) SeedUser(domainID, userID string, edit ...func(*core.User)) {
	h.T.Helper()
	SeedUser(h.T, h.DB, domainID, userID, edit...)
}

// WithEmail sets a seeded user's address.
func WithEmail(addr string, verified bool) func(*core.User) {
	return func(u *core.User) { u.Email, u.EmailVerified = addr, verified }
}

// UserDoc is a user's stored document, nil when there is none.
func (h *Harness) UserDoc(domainID, userID string) bson.M {
	h.T.Helper()
	var m bson.M
	err := h.DB.Collection(core.UsersCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: core.UserKey(domainID, userID)}}).Decode(&m)
	if err != nil {
		return nil
	}
	return m
}

// Same asserts that a stored user did not change since before.
func (h *Harness) Same(domainID, userID string, before bson.M) {
	h.T.Helper()
	if after := h.UserDoc(domainID, userID); !reflect.DeepEqual(before, after) {
		h.T.Fatalf("user %s changed:\nbefore %v\nafter  %v", userID, before, after)
	}
}

// Count counts the documents of collection that match filter (nil: all).
func (h *Harness) Count(collection string, filter bson.D) int64 {
	h.T.Helper()
	if filter == nil {
		filter = bson.D{}
	}
	n, err := h.DB.Collection(collection).CountDocuments(context.Background(), filter)
	if err != nil {
		h.T.Fatal(err)
	}
	return n
}

// As logs userID (root domain, UserPassword) in: a USER-scope client.
func (h *Harness) As(userID string) *testkit.Client {
	h.T.Helper()
	return h.Anon.As(h.LoginIn(h.Domain, userID, UserPassword).AccessToken)
}

// Reissued is a USER-scope client of a root-domain user in its current
// session, signed as identity signs: a password or MFA change ended the
// session a test was using.
func (h *Harness) Reissued(userID string) *testkit.Client {
	h.T.Helper()
	epoch, _ := h.UserDoc(h.Domain, userID)["session_epoch"].(int64)
	tok, err := h.Deps.Cfg.Signer.Issue(auth.Principal{DomainID: h.Domain, UserID: userID, Role: auth.User, Session: epoch}, time.Hour)
	if err != nil {
		h.T.Fatal(err)
	}
	return h.Anon.As(tok)
}

// FailsWith asserts status and code and that the message names want.
func FailsWith(t *testing.T, r *testkit.Response, status int, code, want string) {
	t.Helper()
	r.Fails(status, code)
	var body struct {
		Detail struct{ Message string } `json:"detail"`
	}
	_ = json.Unmarshal(r.Body, &body)
	if !strings.Contains(body.Detail.Message, want) {
		t.Fatalf("%s: message %q does not name %q", r.Path, body.Detail.Message, want)
	}
}
