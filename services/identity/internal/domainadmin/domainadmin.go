// Package domainadmin is the rule that every domain has an enabled domain
// admin: Ensure makes one (bootstrap, domain/create), Keep refuses to
// take away the last one (unbind, disable, delete). It must not change a
// domain's admins outside the domain's admin lock.
package domainadmin

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/lease"
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
// domainID. Check and change hold the domain's admin lock, so two admins
// removing each other at once cannot leave the domain without one.
func Keep(ctx context.Context, d *core.Deps, domainID, userID string, take func() error) error {
	return lease.Run(ctx, d.DB.Collection(core.CountersCollection), "admins:"+domainID, 30*time.Second, 10*time.Second, func(ctx context.Context) error {
		n, err := d.Users.CountDocuments(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "role_type", Value: string(auth.DomainAdmin)},
			{Key: "state", Value: bson.D{{Key: "$ne", Value: core.Disabled}}}, {Key: "user_id", Value: bson.D{{Key: "$ne", Value: userID}}},
			// A marked admin is being deleted (core.UserRecords): not one that stays.
			{Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}})
		if err != nil {
			return store.Wrap(err)
		}
		if n == 0 {
			return errs.New(errs.LastAdmin, "The last domain admin cannot be disabled or deleted.")
		}
		return take()
	})
}
