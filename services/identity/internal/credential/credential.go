// Package credential is the check every credential identity issued
// passes on each request, at identity and (through token/check) at every
// other service: the user, the API key and the domain behind it still
// exist and are enabled, its session has not ended and its role is still
// held. It must not issue, extend or refresh a credential, and answers
// a refused one as unauthenticated, never as something else.
package credential

import (
	"cmp"
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// Checker implements auth.Checker over identity's own records.
type Checker struct{ *core.Deps }

// Authenticator verifies with identity's own key and checks its own
// records (cached for auth.CheckTTL), so identity refuses a disabled user
// or API key exactly as other services do.
func Authenticator(d *core.Deps) auth.Authenticator {
	return auth.Checked(d.Verifier, Checker{d}, auth.CheckTTL)
}

// Check implements auth.Checker: the user (and the API key) behind a
// credential must still exist and be enabled, and so must its domain.
func (s Checker) Check(ctx context.Context, _ string, p *auth.Principal) error {
	refused := func(why string) error { return errs.Unauthenticated(why) }
	var key *core.APIKey
	if p.TokenType == auth.APIKey {
		k, err := store.Get[core.APIKey](ctx, s.APIKeys, "api_key_id", p.TokenID)
		if err != nil {
			if errs.Is(err, errs.NotFoundCode) {
				return refused("API key is deleted.")
			}
			return err
		}
		if k.DomainID != p.DomainID || k.UserID != p.UserID {
			return refused("API key does not match its token.")
		}
		if k.State != core.Enabled || (!k.ExpiredAt.IsZero() && time.Now().After(k.ExpiredAt.Time)) {
			return refused("API key is disabled or expired.")
		}
		key = k
	}
	u, err := store.GetLive[core.User](ctx, s.Users, "user_id", core.UserKey(p.DomainID, p.UserID)) // a user being deleted is as deleted
	if err != nil {
		if errs.Is(err, errs.NotFoundCode) {
			return refused("User is deleted.")
		}
		return err
	}
	if u.State == core.Disabled {
		return refused("User is disabled.")
	}
	if key == nil && p.Session != u.SessionEpoch {
		return refused("This session has ended (the user's password, MFA or state changed); sign in again.")
	}
	// A key acts with the role its user had when it was made: it stops
	// when that role changes (a demoted admin), and a key older than its
	// user belonged to an earlier user of the same id.
	if key != nil && (p.Role != KeyRole(u) || key.CreatedAt.Before(u.CreatedAt.Time)) {
		return refused("API key no longer matches its user.")
	}
	if key == nil {
		if held, err := s.roleHeld(ctx, u, p); err != nil || !held {
			return cmp.Or(err, refused("The role of this token was taken away; ask for a new token."))
		}
	}
	d, err := store.Get[core.Domain](ctx, s.Domains, "domain_id", p.DomainID)
	if err != nil {
		if errs.Is(err, errs.NotFoundCode) {
			return refused("Domain is deleted.")
		}
		return err
	}
	if d.State != core.Enabled {
		return refused("Domain is disabled.")
	}
	if key != nil && time.Since(key.LastAccessedAt.Time) > keyAccessResolution {
		set := bson.D{{Key: "last_accessed_at", Value: wire.T(wire.Now())}}
		if _, err := s.APIKeys.UpdateOne(ctx, bson.D{{Key: "_id", Value: key.ID}}, bson.D{{Key: "$set", Value: set}}); err != nil {
			return store.Wrap(err)
		}
	}
	return nil
}

// keyAccessResolution is how stale an API key's last_accessed_at may get:
// it is shown to people, not used for decisions, so a check that finds it
// fresher stays a read.
const keyAccessResolution = time.Minute

// roleHeld reports whether u still has the role its access token was
// granted with, so that removing a role binding takes effect within
// auth.CheckTTL instead of at the token's expiry.
func (s Checker) roleHeld(ctx context.Context, u *core.User, p *auth.Principal) (bool, error) {
	admin := KeyRole(u) == auth.DomainAdmin
	switch p.Role {
	case auth.User:
		return true, nil
	case auth.DomainAdmin, auth.SystemAdmin:
		return admin, nil
	case auth.WorkspaceOwner, auth.WorkspaceMember:
		if admin && p.Role == auth.WorkspaceOwner {
			return true, nil // grant makes domain admins owners of every workspace
		}
		b, err := s.Binding(ctx, p.DomainID, p.UserID, p.WorkspaceID)
		return b != nil && b.RoleType == string(p.Role), err
	}
	return false, nil
}

// KeyRole is the role a new key of u carries, and the role Check wants
// to see in a key of u: DOMAIN_ADMIN for a domain admin, else USER.
func KeyRole(u *core.User) auth.Role {
	if u.RoleType == string(auth.DomainAdmin) {
		return auth.DomainAdmin
	}
	return auth.User
}
