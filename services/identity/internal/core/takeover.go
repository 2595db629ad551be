package core

import (
	"context"
	"errors"
	"strings"
	"unicode"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
)

// The takeover rules (docs/decisions.md "Credentials under attack"): a
// stolen token must not be enough to take an account for good.

var errKeyCredentials = errs.New(errs.PermissionDenied,
	"Permission denied. (reason = an API key cannot change a password, an e-mail address or MFA)")

// guardCredentials decides whether p may change u's password, e-mail
// address or MFA. An API key changes none of anyone's. One's own (a
// domain admin's too, on any path) needs the current password, or the
// latest mailed link, unless exempt (a pending required action that asks
// for this very change). An admin acting on another user of its domain
// needs neither: that is the admin's power.
func (s *Deps) GuardCredentials(ctx context.Context, p *auth.Principal, u *User, current string, exempt bool) error {
	if p.TokenType == auth.APIKey {
		return errKeyCredentials
	}
	if p.TokenType == auth.SystemToken || p.DomainID != u.DomainID || p.UserID != u.UserID || exempt {
		return nil
	}
	if current == "" {
		d, err := s.UserDocFor(ctx, p, SelfResource, p.UserID, false)
		if err != nil {
			return err
		}
		if d.IsLink(p) {
			return nil
		}
		return errs.Required("current_password")
	}
	// Checked as a login: wrong guesses here are throttled as there.
	if _, err := s.Login(ctx, u.DomainID, u.UserID, current); err != nil {
		if errors.Is(err, ErrLogin) {
			return errs.New(errs.PasswordNotMatched, "The current password does not match.")
		}
		return err
	}
	return s.Logins.Succeeded(ctx, u.ID)
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

// notify tells old (the user before the change) of a change, at its
// address if verified.
func (s *Deps) Notify(ctx context.Context, old *User, what string) error {
	if old.Email == "" || !old.EmailVerified {
		return nil
	}
	n := notices[what]
	return s.Mail(ctx, old, old.Email, events.MailGeneric, map[string]string{"subject": n[0], "body": n[1], "user_id": old.UserID})
}

// maxNameRunes bounds a user's name.
const maxNameRunes = 128

// CheckName keeps a user's name to printable text of a bounded length:
// no control or format characters (line breaks, bidirectional overrides),
// which would let a name pass for something else where it is shown.
func CheckName(name string) error {
	if len([]rune(name)) > maxNameRunes {
		return errs.Invalid("name", "at most 128 characters")
	}
	for _, r := range name {
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf) || (unicode.IsSpace(r) && r != ' ') {
			return errs.Invalid("name", "no control, format or line break characters")
		}
	}
	if strings.TrimSpace(name) != name {
		return errs.Invalid("name", "no leading or trailing spaces")
	}
	return nil
}

// MailName is the user's name for a mail to addr, or "": user-written text
// goes only to an address the user verified.
func MailName(u *User, addr string) string {
	if addr != "" && ((addr == u.Email && u.EmailVerified) || (u.MFA.State == Enabled && addr == u.MFA.Options["email"])) {
		return u.Name
	}
	return ""
}
