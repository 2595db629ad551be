package token

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/session"
)

// Sessions (docs/decisions.md "Credentials under attack"): every access
// and refresh token carries its user's session epoch (claim ses), and
// Check refuses one whose user has moved on to a newer epoch. Check runs
// at identity for every credential, fresh for token/check, whose answers
// other services keep for auth.CheckTTL: a session ended here is refused
// everywhere within that time, as a revoked API key is.

// spendRefresh marks a refresh token used (token/refresh rotates it). A
// token used before is a stolen copy or its owner's, and Nubes cannot
// tell which: its chain ends with every other session of the user.
func (s *service) spendRefresh(ctx context.Context, u *core.User, jti string) error {
	first, err := s.spentRefresh.Take(ctx, "refresh:"+jti)
	if err != nil {
		return err
	}
	if !first {
		return s.refreshReused(ctx, u)
	}
	return nil
}

// refreshSpent refuses a refresh token that token/refresh already
// exchanged, ending the user's sessions as spendRefresh does.
func (s *service) refreshSpent(ctx context.Context, u *core.User, jti string) error {
	n, err := s.spentRefresh.Used(ctx, "refresh:"+jti)
	if err != nil || n == 0 {
		return err
	}
	return s.refreshReused(ctx, u)
}

func (s *service) refreshReused(ctx context.Context, u *core.User) error {
	if _, err := s.Users.UpdateOne(ctx, bson.D{{Key: "_id", Value: u.ID}}, bson.D{{Key: "$set", Value: bson.D{session.End()}}}); err != nil {
		return store.Wrap(err)
	}
	return errs.Unauthenticated("This refresh token was used before; every session of the user has ended. Sign in again.")
}
