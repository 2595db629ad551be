// Package takeover is the takeover rules (docs/decisions.md "Credentials
// under attack"): a stolen token must not be enough to take an account
// for good. Who may change a password, an e-mail address or MFA (Guard),
// the notices a change sends to the address it leaves (Notify, Changed),
// and the mailed links (invite, reset) that stand in for a password
// (MailLink, IsLink). It must not let an API key change a credential,
// nor put user-written text in a mail to an address the user has not
// verified.
package takeover

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/url"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/login"
	"github.com/nubes-io/nubes/services/identity/internal/session"
)

var errKeyCredentials = errs.New(errs.PermissionDenied,
	"Permission denied. (reason = an API key cannot change a password, an e-mail address or MFA)")

// Guard decides whether p may change u's password, e-mail address or
// MFA. An API key changes none of anyone's. One's own (a domain admin's
// too, on any path) needs the current password, or the latest mailed
// link, unless exempt (a pending required action that asks for this very
// change). An admin acting on another user of its domain needs neither:
// that is the admin's power.
func Guard(ctx context.Context, d *core.Deps, p *auth.Principal, u *core.User, current string, exempt bool) error {
	if p.TokenType == auth.APIKey {
		return errKeyCredentials
	}
	if p.TokenType == auth.SystemToken || p.DomainID != u.DomainID || p.UserID != u.UserID || exempt {
		return nil
	}
	if current == "" {
		doc, err := d.UserDocFor(ctx, p, core.SelfResource, p.UserID, false)
		if err != nil {
			return err
		}
		if IsLink(doc, p) {
			return nil
		}
		return errs.Required("current_password")
	}
	// Checked as a login: wrong guesses here are throttled as there.
	if _, err := login.Check(ctx, d, u.DomainID, u.UserID, current); err != nil {
		if errors.Is(err, login.ErrLogin) {
			return errs.New(errs.PasswordNotMatched, "The current password does not match.")
		}
		return err
	}
	return login.ThrottleOf(d).Succeeded(ctx, u.ID)
}

// Notices of a change to the account's own address (before the change),
// when it is verified. The text is fixed: a notice carries nothing a user
// or a caller wrote.

const (
	NoticeEmail    = "email"
	NoticePassword = "password"
	NoticeMFA      = "mfa"
)

var notices = map[string][2]string{
	NoticeEmail:    {"The e-mail address of your Nubes account was changed", "The e-mail address of your Nubes account was changed to another one. If you did not change it, sign in, change your password and your address back, or ask your domain admin."},
	NoticePassword: {"The password of your Nubes account was changed", "The password of your Nubes account was changed, and every session signed in before was ended. If you did not change it, reset your password or ask your domain admin."},
	NoticeMFA:      {"The multi-factor authentication of your Nubes account was changed", "Multi-factor authentication of your Nubes account was turned on or off, and every session signed in before was ended. If you did not do it, sign in and change your password, or ask your domain admin."},
}

// Notify tells old (the user before the change) of a change, at its
// address if verified.
func Notify(ctx context.Context, d *core.Deps, old *core.User, what string) error {
	if old.Email == "" || !old.EmailVerified {
		return nil
	}
	n := notices[what]
	return d.Mail(ctx, old, old.Email, events.MailGeneric, map[string]string{"subject": n[0], "body": n[1], "user_id": old.UserID})
}

// Changed follows a change of u (as it was before) to its e-mail address
// or password: the old address is told, and a new password lifts the
// login block.
func Changed(ctx context.Context, d *core.Deps, u *core.User, email, password bool) error {
	if email {
		if err := Notify(ctx, d, u, NoticeEmail); err != nil {
			return err
		}
	}
	if !password {
		return nil
	}
	if err := Notify(ctx, d, u, NoticePassword); err != nil {
		return err
	}
	return login.ThrottleOf(d).Lift(ctx, u.ID)
}

// MailName is the user's name for a mail to addr, or "": user-written text
// goes only to an address the user verified.
func MailName(u *core.User, addr string) string {
	if addr != "" && ((addr == u.Email && u.EmailVerified) || (u.MFA.State == core.Enabled && addr == u.MFA.Options["email"])) {
		return u.Name
	}
	return ""
}

// IsLink reports whether p is the user's latest mailed link, still valid.
func IsLink(doc *core.UserDoc, p *auth.Principal) bool {
	return p.TokenID != "" && doc.LinkTokenID != "" && time.Now().Before(doc.LinkExpiresAt.Time) &&
		subtle.ConstantTimeCompare([]byte(p.TokenID), []byte(doc.LinkTokenID)) == 1
}

// MailLink mails a console link carrying an access token narrowed to the
// user profile, valid for ttl. Only the latest link of a user works, and
// only until the password is changed (see IsLink).
func MailLink(ctx context.Context, d *core.Deps, u *core.User, template string, ttl time.Duration) error {
	jti, err := newLinkID(16)
	if err != nil {
		return err
	}
	tok, err := d.Cfg.Signer.Issue(auth.Principal{TokenID: jti, DomainID: u.DomainID, UserID: u.UserID, Role: auth.User, Permissions: session.ProfileOnly, Session: u.SessionEpoch}, ttl)
	if err != nil {
		return err
	}
	set := bson.D{{Key: "link_token_id", Value: jti}, {Key: "link_expires_at", Value: wire.T(time.Now().Add(ttl))}}
	if _, err := d.Users.UpdateOne(ctx, bson.D{{Key: "_id", Value: u.ID}}, bson.D{{Key: "$set", Value: set}}); err != nil {
		return store.Wrap(err)
	}
	data := map[string]string{"user_id": u.UserID, "name": MailName(u, u.Email), "link": consoleLink(d.Cfg.ConsoleURL, tok),
		"expires_hours": strconv.Itoa(int(ttl.Hours())), "token_id": jti}
	if dom, err := store.Get[core.Domain](ctx, d.Domains, "domain_id", u.DomainID); err == nil {
		data["domain_name"] = dom.Name
	}
	return d.Mail(ctx, u, u.Email, template, data)
}

func consoleLink(console, token string) string {
	u, err := url.Parse(console)
	if err != nil {
		return console + "?sso_access_token=" + url.QueryEscape(token)
	}
	q := u.Query()
	q.Set("sso_access_token", token)
	u.RawQuery = q.Encode()
	return u.String()
}

func newLinkID(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
