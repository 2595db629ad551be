// Package domainadmin is the rule that every domain has an enabled domain
// admin: Ensure makes one (bootstrap, domain/create), Keep refuses to
// take away the last one (unbind, disable, delete). Every removal of a
// domain's admin goes through Keep.
package domainadmin

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/password"
)

// Ensure creates a LOCAL user bound to the domain admin role. Both
// records have deterministic ids, so running it twice (or on two replicas
// at once) makes one user and one binding.
func Ensure(ctx context.Context, d *core.Deps, domainID, userID, pw, email, name string) (bool, error) {
	hash, err := password.Hash(pw, d.Cfg.PasswordCost)
	if err != nil {
		return false, err
	}
	now := wire.T(wire.Now())
	u := &core.User{
		ID: core.UserKey(domainID, userID), UserID: userID, DomainID: domainID, Name: name, State: core.Enabled, Email: email,
		AuthType: core.AuthLocal, UserType: "USER", RoleType: string(auth.DomainAdmin), RoleID: "managed-domain-admin",
		MFA: core.MFA{State: core.Disabled, Options: map[string]any{}}, Language: "en", Timezone: "UTC", RequiredActions: []string{},
		Tags: map[string]any{}, PasswordHash: hash, CreatedAt: now,
	}
	created := true
	if _, err := d.Users.InsertOne(ctx, u); err != nil {
		if !mongo.IsDuplicateKeyError(err) {
			return false, store.Wrap(err)
		}
		created = false
	}
	b := core.NewBinding(domainID, userID, "managed-domain-admin", string(auth.DomainAdmin), "DOMAIN", "")
	if _, err := d.Bindings.InsertOne(ctx, b); err != nil && !mongo.IsDuplicateKeyError(err) {
		return false, store.Wrap(err)
	}
	return created, nil
}

// Keep runs take, which takes userID's domain-admin rights away (unbind,
// disable, delete), unless userID is the last enabled domain admin of
// domainID. Two admins removing each other at once must not leave the
// domain without one, and the count spans many users, so the decision
// is made on one document, the domain's admin guard: a compare-and-set
// (store.Change) that counts the admins who stay, leaving out those
// whose removal another Keep has begun (the guard's leaving list), and
// adds userID to that list. Of two racing Keeps the second decides again
// after the first's entry landed, and so counts without it. The entry
// goes once take is done; one left by a replica that died before
// (take's outcome unknown) counts as leaving until leaveFor has passed.
func Keep(ctx context.Context, d *core.Deps, domainID, userID string, take func() error) error {
	c := d.DB.Collection(core.CountersCollection)
	id := "admin-guard:" + domainID
	if _, err := store.InsertOnce(ctx, c, guard{ID: id, Leaving: []leaving{}}); err != nil {
		return err
	}
	_, err := store.Change(ctx, c, "domain_id", id, func(g *guard) error {
		now := time.Now()
		others := []leaving{}
		out := bson.A{userID}
		for _, l := range g.Leaving {
			if l.UserID != userID && now.Before(l.Until) {
				others = append(others, l)
				out = append(out, l.UserID)
			}
		}
		n, err := d.Users.CountDocuments(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "role_type", Value: string(auth.DomainAdmin)},
			{Key: "state", Value: bson.D{{Key: "$ne", Value: core.Disabled}}}, {Key: "user_id", Value: bson.D{{Key: "$nin", Value: out}}},
			// A marked admin is being deleted (core.UserRecords): not one that stays.
			{Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}})
		if err != nil {
			return store.Wrap(err)
		}
		if n == 0 {
			return errs.New(errs.LastAdmin, "The last domain admin cannot be disabled or deleted.")
		}
		g.Leaving = append(others, leaving{UserID: userID, Until: now.Add(leaveFor)})
		return nil
	})
	if err != nil {
		return err
	}
	err = take()
	// Done (or failed: the admin stays): no longer leaving. Left when the
	// store does not answer: the entry ends at its Until.
	_, _ = c.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "leaving", Value: bson.D{{Key: "user_id", Value: userID}}}}}})
	return err
}

// leaveFor is how long a removal begun counts as under way: far above
// any take (one write, or a user's teardown).
const leaveFor = 5 * time.Minute

// guard is a domain's admin guard (Keep), in the counters collection.
type guard struct {
	ID      string    `bson:"_id"`
	Leaving []leaving `bson:"leaving"`
}

// leaving is an admin whose removal a Keep has begun.
type leaving struct {
	UserID string    `bson:"user_id"`
	Until  time.Time `bson:"until"`
}
