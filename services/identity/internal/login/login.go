// Package login is the password check of a login and its throttle
// (docs/decisions.md "Credentials under attack"). token/issue and the
// takeover rules (a current password) check passwords through it, so
// every guess is throttled alike. It must not compare a password before
// the attempt has claimed its slot, nor tell a blocked unknown user from
// a blocked known one.
package login

import (
	"context"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/password"
)

// Every password attempt claims a slot before the password is compared,
// so a burst judges no more attempts than there are slots, however many
// run in parallel. Attempts are counted in windows (store.Window):
//
//   - per account and source (the caller's address): MaxLoginFailures in
//     LoginBlock, and 3×MaxLoginFailures in 16×LoginBlock, so a source
//     that keeps coming back waits longer each time (backoff);
//   - per account from every source: 10×MaxLoginFailures in LoginBlock,
//     which bounds guessing spread over many addresses.
//
// A stranger at one address therefore blocks only itself; the owner,
// elsewhere, still logs in. Only many addresses at once block an account,
// and only while they keep at it: the windows slide, nothing is locked
// for good. The account is named by the request, known or not, so a
// blocked unknown user answers as a blocked known one.
type Throttle struct {
	pair, pairLong, account store.Window
}

const (
	backoffFactor = 3  // pairLong holds this many times the limit...
	backoffWindow = 16 // ...over this many times LoginBlock
	accountFactor = 10 // the account-wide bound, in times the limit
)

// ThrottleOf is the throttle of d's counters and configuration (it holds
// no state of its own: the counts are stored).
func ThrottleOf(d *core.Deps) Throttle {
	counters, cfg := d.DB.Collection(core.CountersCollection), d.Cfg
	return Throttle{
		pair:     store.Window{C: counters, Max: cfg.MaxLoginFailures, TTL: cfg.LoginBlock},
		pairLong: store.Window{C: counters, Max: backoffFactor * cfg.MaxLoginFailures, TTL: backoffWindow * cfg.LoginBlock},
		account:  store.Window{C: counters, Max: accountFactor * cfg.MaxLoginFailures, TTL: cfg.LoginBlock},
	}
}

var errLoginBlocked = errs.New(errs.LoginBlocked, "Too many failed logins; try again later.")

func loginKeys(ctx context.Context, userKey string) (pair, account string) {
	return "login:" + userKey + "|" + auth.SourceFromContext(ctx), "login:" + userKey
}

// Claim takes a slot of each counter for one attempt at userKey's
// password, or answers errLoginBlocked.
func (t Throttle) Claim(ctx context.Context, userKey string) error {
	pair, account := loginKeys(ctx, userKey)
	for _, c := range []struct {
		s   store.Window
		key string
	}{{t.pair, pair}, {t.pairLong, pair + "|long"}, {t.account, account}} {
		ok, err := c.s.Take(ctx, c.key)
		if err != nil {
			return err
		}
		if !ok {
			return errLoginBlocked
		}
	}
	return nil
}

// Succeeded frees the caller's own slots: it knew the password (and the
// second factor). The account-wide count stays, so an owner logging in
// does not give strangers elsewhere their guesses back.
func (t Throttle) Succeeded(ctx context.Context, userKey string) error {
	pair, _ := loginKeys(ctx, userKey)
	if err := t.pair.Reset(ctx, pair); err != nil {
		return err
	}
	return t.pairLong.Reset(ctx, pair+"|long")
}

// Lift is a new password: whatever was guessed at is moot, so the
// account-wide block and the caller's own ones end (other sources' pair
// counts end with their window).
func (t Throttle) Lift(ctx context.Context, userKey string) error {
	_, account := loginKeys(ctx, userKey)
	if err := t.account.Reset(ctx, account); err != nil {
		return err
	}
	return t.Succeeded(ctx, userKey)
}

var ErrLogin = errs.New(errs.AuthenticationFailure, "Authenticate failure. (message = user_id or password is wrong)")

// Check checks a password under the throttle: the attempt is claimed
// first, for the user the request names, known or not, so a blocked
// unknown user answers as a blocked known one and no burst compares more
// passwords than the throttle has slots. The claim is given back only by
// a complete login (Throttle.Succeeded).
func Check(ctx context.Context, d *core.Deps, domainID, userID, pw string) (*core.User, error) {
	if err := ThrottleOf(d).Claim(ctx, core.UserKey(domainID, userID)); err != nil {
		return nil, err
	}
	u, err := store.GetLive[core.User](ctx, d.Users, "user_id", core.UserKey(domainID, userID)) // a user being deleted logs in no more
	if err != nil {
		if errs.Is(err, errs.NotFoundCode) {
			password.Matches("", pw, d.Cfg.PasswordCost)
			return nil, ErrLogin
		}
		return nil, err
	}
	if u.AuthType != core.AuthLocal || !password.Matches(u.PasswordHash, pw, d.Cfg.PasswordCost) {
		return nil, ErrLogin
	}
	if u.State == core.Disabled {
		return nil, errs.New(errs.UserStateDisabled, "User is disabled.")
	}
	return u, nil
}
