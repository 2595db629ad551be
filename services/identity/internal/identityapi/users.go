package identityapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// ---- Info shapes ----------------------------------------------------------

// userInfoV1 is the v1 UserInfo (backend and user_type instead of
// auth_type and roles). only, when set, keeps just those top-level fields.
type userInfoV1 struct {
	UserID          string        `json:"user_id"`
	Name            string        `json:"name"`
	State           string        `json:"state"`
	Email           string        `json:"email"`
	UserType        string        `json:"user_type"`
	Backend         string        `json:"backend"`
	Language        string        `json:"language"`
	Timezone        string        `json:"timezone"`
	RequiredActions []string      `json:"required_actions"`
	Tags            freeform.Flat `json:"tags"`
	LastAccessedAt  wire.Time     `json:"last_accessed_at"`
	CreatedAt       wire.Time     `json:"created_at"`
	DomainID        string        `json:"domain_id"`
	EmailVerified   bool          `json:"email_verified"`
	MFA             core.MFA      `json:"mfa"`
	only            []string
}

// MarshalJSON writes every field, or only the requested ones.
func (u userInfoV1) MarshalJSON() ([]byte, error) {
	type plain userInfoV1
	b, err := json.Marshal(plain(u))
	if err != nil || len(u.only) == 0 {
		return b, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	keep := map[string]json.RawMessage{}
	for _, f := range u.only {
		top, _, _ := strings.Cut(f, ".")
		if v, ok := all[top]; ok {
			keep[top] = v
		}
	}
	return json.Marshal(keep)
}

func toV1(u *core.User) *userInfoV1 {
	return &userInfoV1{
		UserID: u.UserID, Name: u.Name, State: u.State, Email: u.Email, UserType: u.UserType, Backend: u.AuthType,
		Language: u.Language, Timezone: u.Timezone, RequiredActions: wire.List(u.RequiredActions), Tags: wire.Object(u.Tags),
		LastAccessedAt: u.LastAccessedAt, CreatedAt: u.CreatedAt, DomainID: u.DomainID, EmailVerified: u.EmailVerified,
		MFA: core.MFAOf(u),
	}
}

// ---- loading and writing --------------------------------------------------

// ---- checks ---------------------------------------------------------------

// ---- create ---------------------------------------------------------------

type newUser struct {
	DomainID, UserID, AuthType, UserType string
	AuthKey                              string // name of the auth type field: auth_type (v2) or backend (v1)
	Password, Name, Email                string
	Language, Timezone                   string
	Tags                                 freeform.Flat
	ResetPassword                        bool
}

// createUser makes a PENDING user. A LOCAL user needs a password unless
// reset_password is set; then an invitation link goes to its e-mail and
// UPDATE_PASSWORD is pending.
func (s *Service) createUser(ctx context.Context, n newUser) (*core.User, error) {
	if err := core.CheckUserID(n.UserID); err != nil {
		return nil, err
	}
	if n.AuthType == core.AuthExternal {
		return nil, errs.Invalid(n.AuthKey, "EXTERNAL users need an external auth plugin, which Nubes does not support; use LOCAL")
	}
	if err := core.CheckEmailAddress("email", n.Email); err != nil {
		return nil, err
	}
	if err := core.CheckName(n.Name); err != nil {
		return nil, err
	}
	if err := core.CheckLocale(n.Language, n.Timezone); err != nil {
		return nil, err
	}
	if n.Password == "" && !n.ResetPassword {
		return nil, errs.Required("password")
	}
	if n.ResetPassword && n.Email == "" {
		return nil, errs.Required("email")
	}
	if err := core.CheckPasswordIfSet(n.Password); err != nil {
		return nil, err
	}
	if _, err := s.UserByKey(ctx, n.DomainID, n.UserID); err == nil {
		return nil, errs.Duplicate("user_id", n.UserID)
	} else if !core.IsNotFound(err) {
		return nil, err
	}
	hash := "" // no password: nobody can log in until the invitation is used
	if n.Password != "" {
		var err error
		if hash, err = core.HashPassword(n.Password); err != nil {
			return nil, err
		}
	}
	actions := []string{}
	if n.ResetPassword {
		actions = append(actions, core.UpdatePassword)
	}
	now := wire.T(wire.Now())
	u := &core.User{
		ID: core.UserKey(n.DomainID, n.UserID), UserID: n.UserID, DomainID: n.DomainID, Name: n.Name, State: core.Pending,
		Email: n.Email, AuthType: n.AuthType, UserType: n.UserType, RoleType: string(auth.User),
		MFA: core.MFA{State: core.Disabled, Options: map[string]any{}}, Language: core.FirstNonEmpty(n.Language, "en"), Timezone: core.FirstNonEmpty(n.Timezone, "UTC"),
		RequiredActions: actions, Tags: wire.Object(n.Tags), PasswordHash: hash, CreatedAt: now,
		SessionEpoch: core.NewEpoch(), // a token of an earlier user of the same id is not this one's
	}
	if _, err := s.Users.InsertOne(ctx, u); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.Duplicate("user_id", n.UserID)
		}
		return nil, store.Wrap(err)
	}
	// A binding or API key left from an earlier user of the same id (a
	// binding created while that user was being deleted) must not give the
	// new user anything.
	orphan := bson.D{{Key: "domain_id", Value: n.DomainID}, {Key: "user_id", Value: n.UserID}, {Key: "created_at", Value: bson.D{{Key: "$lt", Value: now}}}}
	for _, c := range []*mongo.Collection{s.Bindings, s.APIKeys} {
		if _, err := c.DeleteMany(ctx, orphan); err != nil {
			return nil, store.Wrap(err)
		}
	}
	if n.ResetPassword {
		if err := s.MailLink(ctx, u, "invite", s.Cfg.InviteTTL); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// ---- links (invite, reset) ------------------------------------------------

// requestReset is the unauthenticated password reset. It answers the same
// (nil, after ResetFloor) whether or not the user exists, has a verified
// e-mail or was just sent a mail: only an eligible user (LOCAL, not
// disabled, verified e-mail, enabled domain) gets a reset link, at most
// one per ResetMailEvery. Nothing of the user changes until the link is
// used, so a stranger who knows a user id cannot lock its owner out.
func (s *Service) requestReset(ctx context.Context, domainID, userID string) error {
	start := time.Now()
	defer func() {
		if d := core.ResetFloor - time.Since(start); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
	}()
	u, err := s.UserByKey(ctx, domainID, userID)
	if core.IsNotFound(err) {
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
	mailed := store.Slots{C: s.DB.Collection(core.CountersCollection), Max: 1, TTL: core.ResetMailEvery}
	if ok, err := mailed.Take(ctx, "reset_mail:"+u.ID); err != nil || !ok {
		return err // !ok: mailed a moment ago, say nothing
	}
	return s.MailLink(ctx, &u.User, "reset_password", core.ResetTTL)
}

// ---- changes --------------------------------------------------------------

// userChange is what update (v1, v2, profile) may change.
type userChange struct {
	Name, Email, Language, Timezone string
	Tags                            freeform.Flat
}

func (c userChange) check() error {
	if err := core.CheckName(c.Name); err != nil {
		return err
	}
	if err := core.CheckEmailAddress("email", c.Email); err != nil {
		return err
	}
	return core.CheckLocale(c.Language, c.Timezone)
}

// fields returns the $set of c against u: a new e-mail is unverified.
func (c userChange) fields(u *core.User) bson.D {
	set := bson.D{}
	for _, f := range []struct{ k, v string }{{"name", c.Name}, {"language", c.Language}, {"timezone", c.Timezone}} {
		if f.v != "" {
			set = append(set, bson.E{Key: f.k, Value: f.v})
		}
	}
	if c.Email != "" && c.Email != u.Email {
		set = append(set, bson.E{Key: "email", Value: c.Email}, bson.E{Key: "email_verified", Value: false})
	}
	if c.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: c.Tags})
	}
	return set
}

// adminUpdate is update by a domain admin: fields, a new password (rules,
// no current password), and reset_password, which mails a reset link and
// makes UPDATE_PASSWORD pending.
func (s *Service) adminUpdate(ctx context.Context, u *core.User, c userChange, password string, reset bool) (*core.User, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := core.CheckPasswordIfSet(password); err != nil {
		return nil, err
	}
	if reset {
		if u.AuthType != core.AuthLocal {
			return nil, errs.Invalid("reset_password", "only LOCAL users have a password")
		}
		if core.FirstNonEmpty(c.Email, u.Email) == "" {
			return nil, errs.Required("email")
		}
	}
	set := c.fields(u)
	if password != "" {
		hash, err := core.HashPassword(password)
		if err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "password_hash", Value: hash})
	}
	if reset {
		set = append(set, bson.E{Key: "required_actions", Value: core.WithAction(u.RequiredActions, core.UpdatePassword)})
	}
	if password != "" || reset {
		set = append(set, core.EndSessions())
	}
	if len(set) == 0 {
		return u, nil
	}
	out, err := s.SetUser(ctx, u, set)
	if err != nil {
		return nil, err
	}
	if err := s.Changed(ctx, u, c.Email != "" && c.Email != u.Email, password != ""); err != nil {
		return nil, err
	}
	if reset {
		if err := s.MailLink(ctx, out, "reset_password", core.ResetTTL); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// selfUpdate is update by the user itself (profile): a password change
// needs the current password unless UPDATE_PASSWORD is pending or the
// caller came through its latest mailed link; a wrong current password
// counts as a failed login. Success clears UPDATE_PASSWORD, voids the
// link and lifts a login block.
func (s *Service) selfUpdate(ctx context.Context, d *core.UserDoc, p *auth.Principal, c userChange, password, current string) (*core.User, error) {
	u := &d.User
	if err := c.check(); err != nil {
		return nil, err
	}
	set := c.fields(u)
	var update bson.D
	newEmail := c.Email != "" && c.Email != u.Email
	if password != "" {
		if u.AuthType != core.AuthLocal {
			return nil, errs.Invalid("password", "only LOCAL users have a password")
		}
		if err := core.CheckPassword(password); err != nil {
			return nil, err
		}
	}
	if password != "" || newEmail {
		// UPDATE_PASSWORD pending exempts a password change, not a new address.
		exempt := !newEmail && slices.Contains(u.RequiredActions, core.UpdatePassword)
		if err := s.GuardCredentials(ctx, p, u, current, exempt); err != nil {
			return nil, err
		}
	}
	if password != "" {
		if core.PasswordMatches(u.PasswordHash, password) {
			return nil, errs.New(errs.PasswordNotChanged, "The new password is the same as the current one.")
		}
		hash, err := core.HashPassword(password)
		if err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "password_hash", Value: hash}, core.EndSessions(),
			bson.E{Key: "required_actions", Value: core.WithoutAction(u.RequiredActions, core.UpdatePassword)})
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
	return out, s.Changed(ctx, u, newEmail, password != "")
}

// addRequiredActions adds actions to those pending (set_required_actions
// never removes one: each is cleared by doing it). ENFORCE_MFA is skipped
// for a user whose MFA is already on, who could never clear it.
func (s *Service) addRequiredActions(ctx context.Context, u *core.User, actions []string) (*core.User, error) {
	list := wire.List(slices.Clone(u.RequiredActions))
	for _, a := range actions {
		if a == core.UpdatePassword && u.AuthType != core.AuthLocal {
			return nil, errs.Invalid("required_actions", "only LOCAL users have a password")
		}
		if a == core.EnforceMFA && u.MFA.State == core.Enabled {
			continue
		}
		list = core.WithAction(list, a)
	}
	return s.SetUser(ctx, u, bson.D{{Key: "required_actions", Value: list}})
}

// setState enables or disables a user; the last enabled domain admin
// cannot be disabled. A disabled user's credentials stop working within
// auth.CheckTTL everywhere.
func (s *Service) setState(ctx context.Context, u *core.User, state string) (*core.User, error) {
	set := bson.D{{Key: "state", Value: state}}
	if state == core.Disabled {
		set = append(set, core.EndSessions()) // enabling again revives no token
	}
	if state == core.Disabled && u.State != core.Disabled && u.RoleType == string(auth.DomainAdmin) {
		var out *core.User
		err := s.KeepAnAdmin(ctx, u.DomainID, u.UserID, func() (err error) {
			out, err = s.SetUser(ctx, u, set)
			return err
		})
		return out, err
	}
	return s.SetUser(ctx, u, set)
}

// deleteUser removes a user with its role bindings, API keys and codes
// (the last enabled domain admin stays). The user record goes last, so an
// interrupted delete leaves a user without grants, never grants without a
// user.
func (s *Service) deleteUser(ctx context.Context, u *core.User) error {
	if u.State != core.Disabled && u.RoleType == string(auth.DomainAdmin) {
		return s.KeepAnAdmin(ctx, u.DomainID, u.UserID, func() error { return s.removeUser(ctx, u) })
	}
	return s.removeUser(ctx, u)
}

func (s *Service) removeUser(ctx context.Context, u *core.User) error {
	mine := bson.D{{Key: "domain_id", Value: u.DomainID}, {Key: "user_id", Value: u.UserID}}
	for _, c := range []*mongo.Collection{s.Bindings, s.APIKeys} {
		if _, err := c.DeleteMany(ctx, mine); err != nil {
			return store.Wrap(err)
		}
	}
	if err := s.DropCodes(ctx, u, core.PurposeMFA, core.PurposeEmail, core.PurposeLogin); err != nil {
		return err
	}
	if err := s.Logins.Lift(ctx, u.ID); err != nil {
		return err
	}
	if _, err := s.Users.DeleteOne(ctx, bson.D{{Key: "_id", Value: u.ID}}); err != nil {
		return store.Wrap(err)
	}
	return nil
}

// ---- e-mail verification --------------------------------------------------

// requestEmailCode sets a new address (unverified) when given and mails a
// code to the address to confirm. The code is bound to that address.
func (s *Service) requestEmailCode(ctx context.Context, u *core.User, email string) error {
	if err := core.CheckEmailAddress("email", email); err != nil {
		return err
	}
	to := core.FirstNonEmpty(email, u.Email)
	if to == "" {
		return errs.Required("email")
	}
	code, err := s.Codes.Issue(ctx, core.PurposeEmail, u.DomainID, u.UserID, s.Cfg.EmailCodeTTL, map[string]string{"email": to})
	if err != nil {
		return err
	}
	if to != u.Email {
		old := u
		if u, err = s.SetUser(ctx, u, bson.D{{Key: "email", Value: to}, {Key: "email_verified", Value: false}}); err != nil {
			return err
		}
		if err := s.Notify(ctx, old, core.NoticeEmail); err != nil {
			return err
		}
	}
	return s.Mail(ctx, u, to, "verify_email", map[string]string{"code": code, "user_id": u.UserID, "name": core.MailName(u, to),
		"expires_minutes": strconv.Itoa(int(s.Cfg.EmailCodeTTL.Minutes()))})
}

// confirmEmail marks the address verified with the code that was mailed
// to it; a code for an address the user has since replaced is invalid.
func (s *Service) confirmEmail(ctx context.Context, u *core.User, code string) (*core.User, error) {
	data, err := s.Codes.Verify(ctx, core.PurposeEmail, u.DomainID, u.UserID, code)
	if err != nil {
		return nil, err
	}
	out, err := s.UpdateUser(ctx, u, bson.D{{Key: "email", Value: data["email"]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "email_verified", Value: true}}}})
	if errors.Is(err, core.ErrUserChanged) {
		return nil, core.ErrBadCode
	}
	return out, err
}

// markEmailVerified is the admin's verification: no code.
func (s *Service) markEmailVerified(ctx context.Context, u *core.User, email string) (*core.User, error) {
	if err := core.CheckEmailAddress("email", email); err != nil {
		return nil, err
	}
	to := core.FirstNonEmpty(email, u.Email)
	if to == "" {
		return nil, errs.Required("email")
	}
	return s.SetUser(ctx, u, bson.D{{Key: "email", Value: to}, {Key: "email_verified", Value: true}})
}

// ---- MFA ------------------------------------------------------------------

var errMFAOn = errs.New(errs.MFAAlreadyEnabled, "MFA is already enabled.")

var errMFAOff = errs.New(errs.MFAAlreadyDisabled, "MFA is already disabled.")

// enableMFA saves the options (state stays DISABLED) and mails a code to
// options.email; confirmMFA turns MFA on with that address. guard (the
// takeover rule) runs once the request is known to be valid.
func (s *Service) enableMFA(ctx context.Context, u *core.User, mfaType string, opts map[string]any, guard func() error) (*core.User, error) {
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
	if err := core.CheckEmailAddress("options.email", email); err != nil {
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
func (s *Service) mfaCode(ctx context.Context, u *core.User, to, action string) (string, error) {
	data := map[string]string{"action": action}
	if action == core.ActionEnable {
		data["email"] = to
	}
	return s.Codes.Issue(ctx, core.PurposeMFA, u.DomainID, u.UserID, s.Cfg.MFACodeTTL, data)
}

func (s *Service) mailMFACode(ctx context.Context, u *core.User, to, action, code string) error {
	return s.Mail(ctx, u, to, "mfa_code", map[string]string{"code": code, "purpose": action, "user_id": u.UserID,
		"name": core.MailName(u, to), "expires_minutes": strconv.Itoa(int(s.Cfg.MFACodeTTL.Minutes()))})
}

// enableOTP keeps a new TOTP secret pending (state stays DISABLED) and
// answers it once, as options.otp_qrcode_uri; confirmMFA with a code of
// the app turns MFA on.
func (s *Service) enableOTP(ctx context.Context, u *core.User, opts map[string]any, guard func() error) (*core.User, error) {
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
	secret, err := core.NewOTPSecret()
	if err != nil {
		return nil, err
	}
	sealed, err := s.SealOTP(u, secret)
	if err != nil {
		return nil, err
	}
	if err := s.Codes.Attempts.Reset(ctx, otpConfirmKey(u)); err != nil {
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
	out.MFA.Options = map[string]any{"otp_qrcode_uri": core.OTPURI("Nubes", u.UserID, secret)}
	return out, nil
}

func otpConfirmKey(u *core.User) string { return "otp-confirm:" + u.ID }

// confirmOTP turns OTP MFA on (a secret is pending) or off (disable-mfa
// asked for it lately) with a code of the app. Wrong codes count, per
// secret: after maxCodeAttempts a pending enable needs a new enable-mfa (a
// new secret), a disable waits a day or an admin's disable-mfa.
func (s *Service) confirmOTP(ctx context.Context, u *core.User, code string) (*core.User, error) {
	enabling := u.MFA.State != core.Enabled
	sealed := u.OTPSecret
	if enabling {
		sealed = u.OTPPending
	} else if time.Now().After(u.OTPDisableBy.Time) {
		return nil, core.ErrBadCode
	}
	// Claimed before the comparison, as codes.verify does.
	key := otpConfirmKey(u)
	if ok, err := s.Codes.Attempts.Take(ctx, key); err != nil || !ok {
		return nil, cmp.Or(err, core.ErrTooManyTries)
	}
	if err := s.CheckOTP(ctx, u, sealed, strings.TrimSpace(code)); err != nil {
		return nil, err
	}
	if err := s.Codes.Attempts.Reset(ctx, key); err != nil {
		return nil, err
	}
	if enabling {
		out, err := s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: core.Enabled}}}, {Key: "mfa.mfa_type", Value: core.MFAOTP}},
			bson.D{{Key: "$set", Value: bson.D{core.EndSessions(), {Key: "mfa", Value: core.MFA{State: core.Enabled, MFAType: core.MFAOTP, Options: map[string]any{}}},
				{Key: "otp_secret", Value: u.OTPPending}, {Key: "required_actions", Value: core.WithoutAction(u.RequiredActions, core.EnforceMFA)}}},
				{Key: "$unset", Value: bson.D{{Key: "otp_pending", Value: ""}}}})
		if errors.Is(err, core.ErrUserChanged) {
			return nil, errMFAOn
		}
		return out, err
	}
	out, err := s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: core.Enabled}},
		bson.D{{Key: "$set", Value: bson.D{core.EndSessions(), {Key: "mfa", Value: core.MFA{State: core.Disabled, Options: map[string]any{}}}}},
			{Key: "$unset", Value: bson.D{{Key: "otp_secret", Value: ""}, {Key: "otp_disable_by", Value: ""}}}})
	if errors.Is(err, core.ErrUserChanged) {
		return nil, errMFAOff
	}
	return out, err
}

// requestMFADisable mails a code to the MFA address (EMAIL), or opens a
// window of MFACodeTTL for a code of the app (OTP); confirmMFA then turns
// MFA off.
func (s *Service) requestMFADisable(ctx context.Context, u *core.User) (*core.User, error) {
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
func (s *Service) resetMFA(ctx context.Context, u *core.User) (*core.User, error) {
	if u.MFA.State != core.Enabled {
		return nil, errMFAOff
	}
	out, err := s.UpdateUser(ctx, u, nil, bson.D{{Key: "$set", Value: bson.D{core.EndSessions(), {Key: "mfa", Value: core.MFA{State: core.Disabled, Options: map[string]any{}}}}},
		{Key: "$unset", Value: bson.D{{Key: "otp_secret", Value: ""}, {Key: "otp_pending", Value: ""}, {Key: "otp_disable_by", Value: ""}}}})
	if errors.Is(err, core.ErrUserChanged) {
		return nil, errs.NotFound("user_id", u.UserID)
	}
	if err != nil {
		return nil, err
	}
	if err := s.Codes.Attempts.Reset(ctx, otpConfirmKey(u)); err != nil {
		return nil, err
	}
	if err := s.Notify(ctx, u, core.NoticeMFA); err != nil {
		return nil, err
	}
	return out, s.DropCodes(ctx, u, core.PurposeMFA, core.PurposeLogin)
}

// confirmMFA applies the pending enable or disable whose code is given,
// and tells the address the user had.
func (s *Service) confirmMFA(ctx context.Context, u *core.User, code string) (*core.User, error) {
	out, err := s.applyMFA(ctx, u, code)
	if err != nil {
		return nil, err
	}
	return out, s.Notify(ctx, u, core.NoticeMFA)
}

func (s *Service) applyMFA(ctx context.Context, u *core.User, code string) (*core.User, error) {
	if u.MFA.MFAType == core.MFAOTP {
		return s.confirmOTP(ctx, u, code)
	}
	data, err := s.Codes.Verify(ctx, core.PurposeMFA, u.DomainID, u.UserID, code)
	if err != nil {
		return nil, err
	}
	var out *core.User
	switch data["action"] {
	case core.ActionEnable:
		on := core.MFA{State: core.Enabled, MFAType: core.MFAEmail, Options: map[string]any{"email": data["email"]}}
		out, err = s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: core.Enabled}}}},
			bson.D{{Key: "$set", Value: bson.D{core.EndSessions(), {Key: "mfa", Value: on}, {Key: "required_actions", Value: core.WithoutAction(u.RequiredActions, core.EnforceMFA)}}}})
		if errors.Is(err, core.ErrUserChanged) {
			return nil, errMFAOn
		}
	case core.ActionDisable:
		out, err = s.UpdateUser(ctx, u, bson.D{{Key: "mfa.state", Value: core.Enabled}},
			bson.D{{Key: "$set", Value: bson.D{core.EndSessions(), {Key: "mfa", Value: core.MFA{State: core.Disabled, Options: map[string]any{}}}}}})
		if errors.Is(err, core.ErrUserChanged) {
			return nil, errMFAOff
		}
	default:
		return nil, core.ErrBadCode
	}
	return out, err
}

// ---- list and stat ----------------------------------------------------------

// userStat runs a StatisticsQuery over the users of a domain. A query
// whose stages never build new rows gets a final project of the Info
// fields (names maps a stored field to its wire name, for v1).
func (s *Service) userStat(ctx context.Context, p *auth.Principal, q *stat.Query, rename func(at string, p *string) error, info []string, names map[string]string) (*map[string]any, error) {
	reshaped, err := q.Paths(rename)
	if err != nil {
		return nil, err
	}
	if !reshaped && len(q.Aggregate) > 0 {
		fields := make([]stat.ProjectField, 0, len(info))
		for _, f := range info {
			fields = append(fields, stat.ProjectField{Key: f, Name: core.FirstNonEmpty(names[f], f)})
		}
		q.Aggregate = append(q.Aggregate, stat.Stage{Project: &stat.Project{Fields: fields, ExcludeKeys: true}})
	}
	return core.StatFor(ctx, s.Users, p, core.UserResource, q)
}

func noRename(string, *string) error { return nil }
