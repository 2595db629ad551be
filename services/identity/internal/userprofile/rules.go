package userprofile

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/password"
	"github.com/nubes-io/nubes/services/identity/internal/session"
	"github.com/nubes-io/nubes/services/identity/internal/takeover"
	"github.com/nubes-io/nubes/services/identity/internal/verification"
)

// requestReset is the unauthenticated password reset. It answers the same
// (nil, after ResetFloor) whether or not the user exists, has a verified
// e-mail or was just sent a mail: only an eligible user (LOCAL, not
// disabled, verified e-mail, enabled domain) gets a reset link, at most
// one per ResetMailEvery. Nothing of the user changes until the link is
// used, so a stranger who knows a user id cannot lock its owner out.
func (s *Profile) RequestReset(ctx context.Context, domainID, userID string) error {
	start := time.Now()
	defer func() {
		if d := ResetFloor - time.Since(start); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
	}()
	u, err := s.UserByKey(ctx, domainID, userID)
	if errs.Is(err, errs.NotFoundCode) {
		return nil
	}
	if err != nil {
		return err
	}
	if u.AuthType != core.AuthLocal || u.State == core.Disabled || u.Email == "" || !u.EmailVerified {
		return nil
	}
	d, err := store.Get[core.Domain](ctx, s.Domains, "domain_id", domainID)
	if err != nil || d.State != core.Enabled {
		return nil
	}
	mailed := store.Window{C: s.DB.Collection(core.CountersCollection), Max: 1, TTL: ResetMailEvery}
	if ok, err := mailed.Take(ctx, "reset_mail:"+u.ID); err != nil || !ok {
		return err // !ok: mailed a moment ago, say nothing
	}
	return takeover.MailLink(ctx, s.Deps, &u.User, "reset_password", ResetTTL)
}

// selfUpdate is update by the user itself (profile): a password change
// needs the current password unless UPDATE_PASSWORD is pending or the
// caller came through its latest mailed link; a wrong current password
// counts as a failed login. Success clears UPDATE_PASSWORD, voids the
// link and lifts a login block.
func (s *Profile) selfUpdate(ctx context.Context, d *core.UserDoc, p *auth.Principal, c UserChange, pw, current string) (*core.User, error) {
	u := &d.User
	if err := c.Check(); err != nil {
		return nil, err
	}
	set := c.Fields(u)
	var update bson.D
	newEmail := c.Email != "" && c.Email != u.Email
	if pw != "" {
		if u.AuthType != core.AuthLocal {
			return nil, errs.Invalid("password", "only LOCAL users have a password")
		}
		if err := password.Check(pw); err != nil {
			return nil, err
		}
	}
	if pw != "" || newEmail {
		// UPDATE_PASSWORD pending exempts a password change, not a new address.
		exempt := !newEmail && slices.Contains(u.RequiredActions, core.UpdatePassword)
		if err := takeover.Guard(ctx, s.Deps, p, u, current, exempt); err != nil {
			return nil, err
		}
	}
	if pw != "" {
		if password.Matches(u.PasswordHash, pw, s.Cfg.PasswordCost) {
			return nil, errs.New(errs.PasswordNotChanged, "The new password is the same as the current one.")
		}
		hash, err := password.Hash(pw, s.Cfg.PasswordCost)
		if err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "password_hash", Value: hash}, session.End(),
			bson.E{Key: "required_actions", Value: WithoutAction(u.RequiredActions, core.UpdatePassword)})
		update = bson.D{{Key: "$unset", Value: bson.D{{Key: "link_token_id", Value: ""}, {Key: "link_expires_at", Value: ""}}}}
	}
	if len(set) == 0 {
		return u, nil
	}
	out, err := s.UpdateUser(ctx, u, nil, append(bson.D{{Key: "$set", Value: set}}, update...))
	if errors.Is(err, core.ErrUserChanged) {
		return nil, errs.NotFound("user_id", u.UserID)
	}
	if err != nil {
		return nil, err
	}
	return out, takeover.Changed(ctx, s.Deps, u, newEmail, pw != "")
}

// requestEmailCode sets a new address (unverified) when given and mails a
// code to the address to confirm. The code is bound to that address.
func (s *Profile) RequestEmailCode(ctx context.Context, u *core.User, email string) error {
	if err := CheckEmailAddress("email", email); err != nil {
		return err
	}
	to := cmp.Or(email, u.Email)
	if to == "" {
		return errs.Required("email")
	}
	code, err := verification.CodesOf(s.Deps).Issue(ctx, core.PurposeEmail, u.DomainID, u.UserID, s.Cfg.EmailCodeTTL, map[string]string{"email": to})
	if err != nil {
		return err
	}
	if to != u.Email {
		old := u
		if u, err = s.SetUser(ctx, u, bson.D{{Key: "email", Value: to}, {Key: "email_verified", Value: false}}); err != nil {
			return err
		}
		if err := takeover.Notify(ctx, s.Deps, old, takeover.NoticeEmail); err != nil {
			return err
		}
	}
	return s.Mail(ctx, u, to, "verify_email", map[string]string{"code": code, "user_id": u.UserID, "name": takeover.MailName(u, to),
		"expires_minutes": strconv.Itoa(int(s.Cfg.EmailCodeTTL.Minutes()))})
}

// confirmEmail marks the address verified with the code that was mailed
// to it; a code for an address the user has since replaced is invalid.
func (s *Profile) ConfirmEmail(ctx context.Context, u *core.User, code string) (*core.User, error) {
	data, err := verification.CodesOf(s.Deps).Verify(ctx, core.PurposeEmail, u.DomainID, u.UserID, code)
	if err != nil {
		return nil, err
	}
	out, err := s.UpdateUser(ctx, u, bson.D{{Key: "email", Value: data["email"]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "email_verified", Value: true}}}})
	if errors.Is(err, core.ErrUserChanged) {
		return nil, verification.ErrBadCode
	}
	return out, err
}

// markEmailVerified is the admin's verification: no code.
func (s *Profile) MarkEmailVerified(ctx context.Context, u *core.User, email string) (*core.User, error) {
	if err := CheckEmailAddress("email", email); err != nil {
		return nil, err
	}
	to := cmp.Or(email, u.Email)
	if to == "" {
		return nil, errs.Required("email")
	}
	return s.SetUser(ctx, u, bson.D{{Key: "email", Value: to}, {Key: "email_verified", Value: true}})
}

var (
	errMFAOn  = errs.New(errs.MFAAlreadyEnabled, "MFA is already enabled.")
	errMFAOff = errs.New(errs.MFAAlreadyDisabled, "MFA is already disabled.")
)

// enableMFA saves the options (state stays DISABLED) and mails a code to
// options.email; confirmMFA turns MFA on with that address. guard (the
// takeover rule) runs once the request is known to be valid.
func (s *Profile) EnableMFA(ctx context.Context, u *core.User, mfaType string, opts map[string]any, guard func() error) (*core.User, error) {
	if mfaType == core.MFAOTP {
		return s.enableOTP(ctx, u, opts, guard)
	}
	email, _ := opts["email"].(string)
	email = strings.TrimSpace(email)
	if email == "" {
		return nil, errs.Required("options.email")
	}
	for k := range opts {
		if k != "email" {
			return nil, errs.New(errs.InvalidKeyInOptions, "Invalid key in options. (key = options.%s, allowed = email)", k)
		}
	}
	if err := CheckEmailAddress("options.email", email); err != nil {
		return nil, err
	}
	if u.AuthType != core.AuthLocal {
		return nil, errs.Invalid("mfa_type", "MFA is for LOCAL users")
	}
	if u.MFA.State == core.Enabled {
		return nil, errMFAOn
	}
	if err := guard(); err != nil {
		return nil, err
	}
	code, err := s.mfaCode(ctx, u, email, core.ActionEnable) // first: past the cap, nothing changes
	if err != nil {
		return nil, err
	}
	out, err := s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: core.Enabled}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "mfa", Value: core.MFA{State: core.Disabled, MFAType: core.MFAEmail, Options: map[string]any{"email": email}}}}}})
	if errors.Is(err, core.ErrUserChanged) {
		return nil, errMFAOn
	}
	if err != nil {
		return nil, err
	}
	return out, s.mailMFACode(ctx, out, email, core.ActionEnable, code)
}

// mfaCode issues the code that confirms action (enabling MFA to the
// address to, or disabling it).
func (s *Profile) mfaCode(ctx context.Context, u *core.User, to, action string) (string, error) {
	data := map[string]string{"action": action}
	if action == core.ActionEnable {
		data["email"] = to
	}
	return verification.CodesOf(s.Deps).Issue(ctx, core.PurposeMFA, u.DomainID, u.UserID, s.Cfg.MFACodeTTL, data)
}

func (s *Profile) mailMFACode(ctx context.Context, u *core.User, to, action, code string) error {
	return s.Mail(ctx, u, to, "mfa_code", map[string]string{"code": code, "purpose": action, "user_id": u.UserID,
		"name": takeover.MailName(u, to), "expires_minutes": strconv.Itoa(int(s.Cfg.MFACodeTTL.Minutes()))})
}

// enableOTP keeps a new TOTP secret pending (state stays DISABLED) and
// answers it once, as options.otp_qrcode_uri; confirmMFA with a code of
// the app turns MFA on.
func (s *Profile) enableOTP(ctx context.Context, u *core.User, opts map[string]any, guard func() error) (*core.User, error) {
	for k := range opts {
		return nil, errs.New(errs.InvalidKeyInOptions, "Invalid key in options. (key = options.%s, OTP takes none)", k)
	}
	if u.AuthType != core.AuthLocal {
		return nil, errs.Invalid("mfa_type", "MFA is for LOCAL users")
	}
	if u.MFA.State == core.Enabled {
		return nil, errMFAOn
	}
	if err := guard(); err != nil {
		return nil, err
	}
	secret, err := verification.NewOTPSecret()
	if err != nil {
		return nil, err
	}
	sealed, err := verification.SealOTP(s.Deps, u, secret)
	if err != nil {
		return nil, err
	}
	if err := verification.CodesOf(s.Deps).Attempts.Reset(ctx, otpConfirmKey(u)); err != nil {
		return nil, err
	}
	out, err := s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: core.Enabled}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "mfa", Value: core.MFA{State: core.Disabled, MFAType: core.MFAOTP, Options: map[string]any{}}}, {Key: "otp_pending", Value: sealed}}}})
	if errors.Is(err, core.ErrUserChanged) {
		return nil, errMFAOn
	}
	if err != nil {
		return nil, err
	}
	out.MFA.Options = map[string]any{"otp_qrcode_uri": verification.OTPURI("Nubes", u.UserID, secret)}
	return out, nil
}

func otpConfirmKey(u *core.User) string { return "otp-confirm:" + u.ID }

// confirmOTP turns OTP MFA on (a secret is pending) or off (disable-mfa
// asked for it lately) with a code of the app. Wrong codes count, per
// secret: after maxCodeAttempts a pending enable needs a new enable-mfa (a
// new secret), a disable waits a day or an admin's disable-mfa.
func (s *Profile) confirmOTP(ctx context.Context, u *core.User, code string) (*core.User, error) {
	enabling := u.MFA.State != core.Enabled
	sealed := u.OTPSecret
	if enabling {
		sealed = u.OTPPending
	} else if time.Now().After(u.OTPDisableBy.Time) {
		return nil, verification.ErrBadCode
	}
	// Claimed before the comparison, as codes.verify does.
	key := otpConfirmKey(u)
	if ok, err := verification.CodesOf(s.Deps).Attempts.Take(ctx, key); err != nil || !ok {
		return nil, cmp.Or(err, verification.ErrTooManyTries)
	}
	if err := verification.CheckOTP(ctx, s.Deps, u, sealed, strings.TrimSpace(code)); err != nil {
		return nil, err
	}
	if err := verification.CodesOf(s.Deps).Attempts.Reset(ctx, key); err != nil {
		return nil, err
	}
	if enabling {
		out, err := s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: core.Enabled}}}, {Key: "mfa.mfa_type", Value: core.MFAOTP}},
			bson.D{{Key: "$set", Value: bson.D{session.End(), {Key: "mfa", Value: core.MFA{State: core.Enabled, MFAType: core.MFAOTP, Options: map[string]any{}}},
				{Key: "otp_secret", Value: u.OTPPending}, {Key: "required_actions", Value: WithoutAction(u.RequiredActions, core.EnforceMFA)}}},
				{Key: "$unset", Value: bson.D{{Key: "otp_pending", Value: ""}}}})
		if errors.Is(err, core.ErrUserChanged) {
			return nil, errMFAOn
		}
		return out, err
	}
	out, err := s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: core.Enabled}},
		bson.D{{Key: "$set", Value: bson.D{session.End(), {Key: "mfa", Value: core.MFA{State: core.Disabled, Options: map[string]any{}}}}},
			{Key: "$unset", Value: bson.D{{Key: "otp_secret", Value: ""}, {Key: "otp_disable_by", Value: ""}}}})
	if errors.Is(err, core.ErrUserChanged) {
		return nil, errMFAOff
	}
	return out, err
}

// requestMFADisable mails a code to the MFA address (EMAIL), or opens a
// window of MFACodeTTL for a code of the app (OTP); confirmMFA then turns
// MFA off.
func (s *Profile) RequestMFADisable(ctx context.Context, u *core.User) (*core.User, error) {
	if u.MFA.State != core.Enabled {
		return nil, errMFAOff
	}
	if u.MFA.MFAType == core.MFAOTP {
		// Wrong codes are not forgiven here: asking again must not buy
		// more guesses at the same secret (an admin's disable-mfa helps a
		// user who ran out).
		return s.SetUser(ctx, u, bson.D{{Key: "otp_disable_by", Value: wire.T(time.Now().Add(s.Cfg.MFACodeTTL))}})
	}
	email, _ := u.MFA.Options["email"].(string)
	code, err := s.mfaCode(ctx, u, email, core.ActionDisable)
	if err != nil {
		return nil, err
	}
	return u, s.mailMFACode(ctx, u, email, core.ActionDisable, code)
}

// resetMFA is the admin's (or force) disable: no code, pending codes void.
func (s *Profile) ResetMFA(ctx context.Context, u *core.User) (*core.User, error) {
	if u.MFA.State != core.Enabled {
		return nil, errMFAOff
	}
	out, err := s.UpdateUser(ctx, u, nil, bson.D{{Key: "$set", Value: bson.D{session.End(), {Key: "mfa", Value: core.MFA{State: core.Disabled, Options: map[string]any{}}}}},
		{Key: "$unset", Value: bson.D{{Key: "otp_secret", Value: ""}, {Key: "otp_pending", Value: ""}, {Key: "otp_disable_by", Value: ""}}}})
	if errors.Is(err, core.ErrUserChanged) {
		return nil, errs.NotFound("user_id", u.UserID)
	}
	if err != nil {
		return nil, err
	}
	if err := verification.CodesOf(s.Deps).Attempts.Reset(ctx, otpConfirmKey(u)); err != nil {
		return nil, err
	}
	if err := takeover.Notify(ctx, s.Deps, u, takeover.NoticeMFA); err != nil {
		return nil, err
	}
	return out, verification.CodesOf(s.Deps).Drop(ctx, u, core.PurposeMFA, core.PurposeLogin)
}

// confirmMFA applies the pending enable or disable whose code is given,
// and tells the address the user had.
func (s *Profile) ConfirmMFA(ctx context.Context, u *core.User, code string) (*core.User, error) {
	out, err := s.applyMFA(ctx, u, code)
	if err != nil {
		return nil, err
	}
	return out, takeover.Notify(ctx, s.Deps, u, takeover.NoticeMFA)
}

func (s *Profile) applyMFA(ctx context.Context, u *core.User, code string) (*core.User, error) {
	if u.MFA.MFAType == core.MFAOTP {
		return s.confirmOTP(ctx, u, code)
	}
	data, err := verification.CodesOf(s.Deps).Verify(ctx, core.PurposeMFA, u.DomainID, u.UserID, code)
	if err != nil {
		return nil, err
	}
	var out *core.User
	switch data["action"] {
	case core.ActionEnable:
		on := core.MFA{State: core.Enabled, MFAType: core.MFAEmail, Options: map[string]any{"email": data["email"]}}
		out, err = s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: core.Enabled}}}},
			bson.D{{Key: "$set", Value: bson.D{session.End(), {Key: "mfa", Value: on}, {Key: "required_actions", Value: WithoutAction(u.RequiredActions, core.EnforceMFA)}}}})
		if errors.Is(err, core.ErrUserChanged) {
			return nil, errMFAOn
		}
	case core.ActionDisable:
		out, err = s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: core.Enabled}},
			bson.D{{Key: "$set", Value: bson.D{session.End(), {Key: "mfa", Value: core.MFA{State: core.Disabled, Options: map[string]any{}}}}}})
		if errors.Is(err, core.ErrUserChanged) {
			return nil, errMFAOff
		}
	default:
		return nil, verification.ErrBadCode
	}
	return out, err
}
