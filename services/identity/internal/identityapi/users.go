package identityapi

// The rules of users, shared by the v2 user operations (users_v2.go), the
// v2 user profile (profile.go) and the v1 user operations (users_v1.go).
// Those files only declare requests, decide who the target user is and
// convert to their Info shape; every rule lives here once.

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/mail"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

const (
	authLocal      = "LOCAL"
	authExternal   = "EXTERNAL"
	mfaEmail       = "EMAIL"
	mfaOTP         = "OTP"
	purposeMFA     = "mfa"          // enable and disable confirmations
	purposeEmail   = "verify_email" // e-mail address confirmation
	purposeLogin   = "login"        // token/issue second step (token.go)
	actionEnable   = "enable"
	actionDisable  = "disable"
	resetTTL       = 24 * time.Hour         // a reset link, as upstream
	resetMailEvery = time.Minute            // at most one reset mail per user and minute
	resetFloor     = 250 * time.Millisecond // reset_password answers no faster, found or not
)

// userDoc is the stored user with the link state that User (model.go) does
// not carry: the jti of the latest mailed link (invite or reset) and when
// it expires.
type userDoc struct {
	User          `bson:",inline"`
	LinkTokenID   string    `bson:"link_token_id"`
	LinkExpiresAt wire.Time `bson:"link_expires_at"`
}

// isLink reports whether p is the user's latest mailed link, still valid.
func (d *userDoc) isLink(p *auth.Principal) bool {
	return p.TokenID != "" && d.LinkTokenID != "" && time.Now().Before(d.LinkExpiresAt.Time) &&
		subtle.ConstantTimeCompare([]byte(p.TokenID), []byte(d.LinkTokenID)) == 1
}

// ---- Info shapes ----------------------------------------------------------

// userInfoV2 is the v2 UserInfo: every field, never the password hash or
// the login failures.
type userInfoV2 struct {
	UserID          string        `json:"user_id"`
	Name            string        `json:"name"`
	State           string        `json:"state"`
	Email           string        `json:"email"`
	EmailVerified   bool          `json:"email_verified"`
	AuthType        string        `json:"auth_type"`
	RoleID          string        `json:"role_id"`
	RoleType        string        `json:"role_type"`
	MFA             MFA           `json:"mfa"`
	Language        string        `json:"language"`
	Timezone        string        `json:"timezone"`
	RequiredActions []string      `json:"required_actions"`
	Tags            freeform.Flat `json:"tags"`
	DomainID        string        `json:"domain_id"`
	CreatedAt       wire.Time     `json:"created_at"`
	LastAccessedAt  wire.Time     `json:"last_accessed_at"`
}

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
	MFA             MFA           `json:"mfa"`
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

func mfaOf(u *User) MFA {
	m := MFA{State: u.MFA.State, MFAType: u.MFA.MFAType, Options: wire.Object(u.MFA.Options)}
	if m.State == "" {
		m.State = Disabled
	}
	return m
}

func toV2(u *User) *userInfoV2 {
	return &userInfoV2{
		UserID: u.UserID, Name: u.Name, State: u.State, Email: u.Email, EmailVerified: u.EmailVerified,
		AuthType: u.AuthType, RoleID: u.RoleID, RoleType: u.RoleType, MFA: mfaOf(u), Language: u.Language,
		Timezone: u.Timezone, RequiredActions: wire.List(u.RequiredActions), Tags: wire.Object(u.Tags),
		DomainID: u.DomainID, CreatedAt: u.CreatedAt, LastAccessedAt: u.LastAccessedAt,
	}
}

func toV1(u *User) *userInfoV1 {
	return &userInfoV1{
		UserID: u.UserID, Name: u.Name, State: u.State, Email: u.Email, UserType: u.UserType, Backend: u.AuthType,
		Language: u.Language, Timezone: u.Timezone, RequiredActions: wire.List(u.RequiredActions), Tags: wire.Object(u.Tags),
		LastAccessedAt: u.LastAccessedAt, CreatedAt: u.CreatedAt, DomainID: u.DomainID, EmailVerified: u.EmailVerified,
		MFA: mfaOf(u),
	}
}

// convert maps a handler that answers a *User to one that answers an Info.
func asInfo[Req, Info any](to func(*User) *Info, h func(context.Context, *auth.Principal, *Req) (*User, error)) func(context.Context, *auth.Principal, *Req) (*Info, error) {
	return func(ctx context.Context, p *auth.Principal, r *Req) (*Info, error) {
		u, err := h(ctx, p, r)
		if err != nil {
			return nil, err
		}
		return to(u), nil
	}
}

// ---- loading and writing --------------------------------------------------

// userFor loads a user of p's domain that p reaches (userResource);
// userToChange one it may change. The _id holds the domain, so a user of
// another domain cannot even be addressed: it is not found.
func (s *Service) userFor(ctx context.Context, p *auth.Principal, userID string) (*User, error) {
	d, err := s.userDocFor(ctx, p, userResource, userID, false)
	if err != nil {
		return nil, err
	}
	return &d.User, nil
}

func (s *Service) userToChange(ctx context.Context, p *auth.Principal, userID string) (*User, error) {
	d, err := s.userDocFor(ctx, p, userResource, userID, true)
	if err != nil {
		return nil, err
	}
	return &d.User, nil
}

func (s *Service) userDocFor(ctx context.Context, p *auth.Principal, r query.Resource, userID string, change bool) (*userDoc, error) {
	load := store.GetFor[userDoc]
	if change {
		load = store.GetToChange[userDoc]
	}
	d, err := load(ctx, s.users, r, p, "user_id", UserKey(p.DomainID, userID))
	if isNotFound(err) {
		return nil, errs.NotFound("user_id", userID)
	}
	return d, err
}

// userByKey loads a user for the flows that run before there is a caller
// (login, reset links, a new user's id): the key names the domain.
func (s *Service) userByKey(ctx context.Context, domainID, userID string) (*userDoc, error) {
	d, err := store.Get[userDoc](ctx, s.users, "user_id", UserKey(domainID, userID))
	if isNotFound(err) {
		return nil, errs.NotFound("user_id", userID)
	}
	return d, err
}

// updateUser applies update to u (only while cond also holds, when given)
// and returns the stored user afterwards.
func (s *Service) updateUser(ctx context.Context, u *User, cond bson.D, update bson.D) (*User, error) {
	filter := append(bson.D{{Key: "_id", Value: u.ID}}, cond...)
	var out User
	err := s.users.FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&out)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errUserChanged
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &out, nil
}

// errUserChanged is what updateUser answers when the user is gone or cond no
// longer holds; callers turn it into their own conflict.
var errUserChanged = errors.New("user changed meanwhile")

func (s *Service) setUser(ctx context.Context, u *User, set bson.D) (*User, error) {
	out, err := s.updateUser(ctx, u, nil, bson.D{{Key: "$set", Value: set}})
	if errors.Is(err, errUserChanged) {
		return nil, errs.NotFound("user_id", u.UserID)
	}
	return out, err
}

// ---- checks ---------------------------------------------------------------

func checkUserID(id string) error {
	for _, r := range id {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return errs.Invalid("user_id", "no spaces or control characters")
		}
	}
	return nil
}

// checkEmail accepts one bare address (no display name, no header
// characters), so an address can never inject a mail header.
func checkEmailAddress(key, e string) error {
	if e == "" {
		return nil
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || a.Name != "" {
		return errs.Invalid(key, "not an e-mail address")
	}
	return nil
}

// checkLocale keeps language ("en", "ko", "ko-KR") and timezone ("UTC",
// "Asia/Seoul") to the characters their names use.
func checkLocale(language, timezone string) error {
	for _, r := range language {
		if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || r == '-' || r == '_')) {
			return errs.Invalid("language", "a language tag such as en or ko")
		}
	}
	for _, r := range timezone {
		if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("/_+-", r))) {
			return errs.Invalid("timezone", "a zone name such as UTC or Asia/Seoul")
		}
	}
	return nil
}

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
func (s *Service) createUser(ctx context.Context, n newUser) (*User, error) {
	if err := checkUserID(n.UserID); err != nil {
		return nil, err
	}
	if n.AuthType == authExternal {
		return nil, errs.Invalid(n.AuthKey, "EXTERNAL users need an external auth plugin, which Nubes does not support; use LOCAL")
	}
	if err := checkEmailAddress("email", n.Email); err != nil {
		return nil, err
	}
	if err := checkName(n.Name); err != nil {
		return nil, err
	}
	if err := checkLocale(n.Language, n.Timezone); err != nil {
		return nil, err
	}
	if n.Password == "" && !n.ResetPassword {
		return nil, errs.Required("password")
	}
	if n.ResetPassword && n.Email == "" {
		return nil, errs.Required("email")
	}
	if err := checkPasswordIfSet(n.Password); err != nil {
		return nil, err
	}
	if _, err := s.userByKey(ctx, n.DomainID, n.UserID); err == nil {
		return nil, errs.Duplicate("user_id", n.UserID)
	} else if !isNotFound(err) {
		return nil, err
	}
	hash := "" // no password: nobody can log in until the invitation is used
	if n.Password != "" {
		var err error
		if hash, err = HashPassword(n.Password); err != nil {
			return nil, err
		}
	}
	actions := []string{}
	if n.ResetPassword {
		actions = append(actions, UpdatePassword)
	}
	now := wire.T(wire.Now())
	u := &User{
		ID: UserKey(n.DomainID, n.UserID), UserID: n.UserID, DomainID: n.DomainID, Name: n.Name, State: Pending,
		Email: n.Email, AuthType: n.AuthType, UserType: n.UserType, RoleType: string(auth.User),
		MFA: MFA{State: Disabled, Options: map[string]any{}}, Language: firstNonEmpty(n.Language, "en"), Timezone: firstNonEmpty(n.Timezone, "UTC"),
		RequiredActions: actions, Tags: wire.Object(n.Tags), PasswordHash: hash, CreatedAt: now,
		SessionEpoch: newEpoch(), // a token of an earlier user of the same id is not this one's
	}
	if _, err := s.users.InsertOne(ctx, u); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.Duplicate("user_id", n.UserID)
		}
		return nil, store.Wrap(err)
	}
	// A binding or API key left from an earlier user of the same id (a
	// binding created while that user was being deleted) must not give the
	// new user anything.
	orphan := bson.D{{Key: "domain_id", Value: n.DomainID}, {Key: "user_id", Value: n.UserID}, {Key: "created_at", Value: bson.D{{Key: "$lt", Value: now}}}}
	for _, c := range []*mongoCollection{s.bindings, s.apiKeys} {
		if _, err := c.DeleteMany(ctx, orphan); err != nil {
			return nil, store.Wrap(err)
		}
	}
	if n.ResetPassword {
		if err := s.mailLink(ctx, u, "invite", s.cfg.InviteTTL); err != nil {
			return nil, err
		}
	}
	return u, nil
}

func checkPasswordIfSet(pw string) error {
	if pw == "" {
		return nil
	}
	return CheckPassword(pw)
}

func firstNonEmpty(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// ---- links (invite, reset) ------------------------------------------------

// mailLink mails a console link carrying an access token narrowed to the
// user profile, valid for ttl. Only the latest link of a user works, and
// only until the password is changed (see selfDoc).
func (s *Service) mailLink(ctx context.Context, u *User, template string, ttl time.Duration) error {
	jti, err := newLinkID(16)
	if err != nil {
		return err
	}
	tok, err := s.cfg.Signer.Issue(auth.Principal{TokenID: jti, DomainID: u.DomainID, UserID: u.UserID, Role: auth.User, Permissions: profileOnly, Session: u.SessionEpoch}, ttl)
	if err != nil {
		return err
	}
	set := bson.D{{Key: "link_token_id", Value: jti}, {Key: "link_expires_at", Value: wire.T(time.Now().Add(ttl))}}
	if _, err := s.users.UpdateOne(ctx, bson.D{{Key: "_id", Value: u.ID}}, bson.D{{Key: "$set", Value: set}}); err != nil {
		return store.Wrap(err)
	}
	data := map[string]string{"user_id": u.UserID, "name": mailName(u, u.Email), "link": s.consoleLink(tok),
		"expires_hours": strconv.Itoa(int(ttl.Hours())), "token_id": jti}
	if d, err := store.Get[Domain](ctx, s.domains, "domain_id", u.DomainID); err == nil {
		data["domain_name"] = d.Name
	}
	return s.mail(ctx, u, u.Email, template, data)
}

func (s *Service) consoleLink(token string) string {
	u, err := url.Parse(s.cfg.ConsoleURL)
	if err != nil {
		return s.cfg.ConsoleURL + "?sso_access_token=" + url.QueryEscape(token)
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

// requestReset is the unauthenticated password reset. It answers the same
// (nil, after resetFloor) whether or not the user exists, has a verified
// e-mail or was just sent a mail: only an eligible user (LOCAL, not
// disabled, verified e-mail, enabled domain) gets a reset link, at most
// one per resetMailEvery. Nothing of the user changes until the link is
// used, so a stranger who knows a user id cannot lock its owner out.
func (s *Service) requestReset(ctx context.Context, domainID, userID string) error {
	start := time.Now()
	defer func() {
		if d := resetFloor - time.Since(start); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
	}()
	u, err := s.userByKey(ctx, domainID, userID)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if u.AuthType != authLocal || u.State == Disabled || u.Email == "" || !u.EmailVerified {
		return nil
	}
	d, err := store.Get[Domain](ctx, s.domains, "domain_id", domainID)
	if err != nil || d.State != Enabled {
		return nil
	}
	mailed := store.Slots{C: s.db.Collection(CountersCollection), Max: 1, TTL: resetMailEvery}
	if ok, err := mailed.Take(ctx, "reset_mail:"+u.ID); err != nil || !ok {
		return err // !ok: mailed a moment ago, say nothing
	}
	return s.mailLink(ctx, &u.User, "reset_password", resetTTL)
}

// ---- changes --------------------------------------------------------------

// userChange is what update (v1, v2, profile) may change.
type userChange struct {
	Name, Email, Language, Timezone string
	Tags                            freeform.Flat
}

func (c userChange) check() error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	if err := checkEmailAddress("email", c.Email); err != nil {
		return err
	}
	return checkLocale(c.Language, c.Timezone)
}

// fields returns the $set of c against u: a new e-mail is unverified.
func (c userChange) fields(u *User) bson.D {
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
func (s *Service) adminUpdate(ctx context.Context, u *User, c userChange, password string, reset bool) (*User, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := checkPasswordIfSet(password); err != nil {
		return nil, err
	}
	if reset {
		if u.AuthType != authLocal {
			return nil, errs.Invalid("reset_password", "only LOCAL users have a password")
		}
		if firstNonEmpty(c.Email, u.Email) == "" {
			return nil, errs.Required("email")
		}
	}
	set := c.fields(u)
	if password != "" {
		hash, err := HashPassword(password)
		if err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "password_hash", Value: hash})
	}
	if reset {
		set = append(set, bson.E{Key: "required_actions", Value: withAction(u.RequiredActions, UpdatePassword)})
	}
	if password != "" || reset {
		set = append(set, endSessions())
	}
	if len(set) == 0 {
		return u, nil
	}
	out, err := s.setUser(ctx, u, set)
	if err != nil {
		return nil, err
	}
	if err := s.changed(ctx, u, c.Email != "" && c.Email != u.Email, password != ""); err != nil {
		return nil, err
	}
	if reset {
		if err := s.mailLink(ctx, out, "reset_password", resetTTL); err != nil {
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
func (s *Service) selfUpdate(ctx context.Context, d *userDoc, p *auth.Principal, c userChange, password, current string) (*User, error) {
	u := &d.User
	if err := c.check(); err != nil {
		return nil, err
	}
	set := c.fields(u)
	var update bson.D
	newEmail := c.Email != "" && c.Email != u.Email
	if password != "" {
		if u.AuthType != authLocal {
			return nil, errs.Invalid("password", "only LOCAL users have a password")
		}
		if err := CheckPassword(password); err != nil {
			return nil, err
		}
	}
	if password != "" || newEmail {
		// UPDATE_PASSWORD pending exempts a password change, not a new address.
		exempt := !newEmail && slices.Contains(u.RequiredActions, UpdatePassword)
		if err := s.guardCredentials(ctx, p, u, current, exempt); err != nil {
			return nil, err
		}
	}
	if password != "" {
		if PasswordMatches(u.PasswordHash, password) {
			return nil, errs.New(errs.PasswordNotChanged, "The new password is the same as the current one.")
		}
		hash, err := HashPassword(password)
		if err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "password_hash", Value: hash}, endSessions(),
			bson.E{Key: "required_actions", Value: withoutAction(u.RequiredActions, UpdatePassword)})
		update = bson.D{{Key: "$unset", Value: bson.D{{Key: "link_token_id", Value: ""}, {Key: "link_expires_at", Value: ""}}}}
	}
	if len(set) == 0 {
		return u, nil
	}
	out, err := s.updateUser(ctx, u, nil, append(bson.D{{Key: "$set", Value: set}}, update...))
	if errors.Is(err, errUserChanged) {
		return nil, errs.NotFound("user_id", u.UserID)
	}
	if err != nil {
		return nil, err
	}
	return out, s.changed(ctx, u, newEmail, password != "")
}

// changed follows a change of u (as it was before) to its e-mail address
// or password: the old address is told, and a new password lifts the
// login block.
func (s *Service) changed(ctx context.Context, u *User, email, password bool) error {
	if email {
		if err := s.notify(ctx, u, noticeEmail); err != nil {
			return err
		}
	}
	if !password {
		return nil
	}
	if err := s.notify(ctx, u, noticePassword); err != nil {
		return err
	}
	return s.logins.lift(ctx, u.ID)
}

func withAction(list []string, a string) []string {
	out := wire.List(slices.Clone(list))
	if !slices.Contains(out, a) {
		out = append(out, a)
	}
	return out
}

func withoutAction(list []string, a string) []string {
	out := []string{}
	for _, x := range list {
		if x != a {
			out = append(out, x)
		}
	}
	return out
}

// addRequiredActions adds actions to those pending (set_required_actions
// never removes one: each is cleared by doing it). ENFORCE_MFA is skipped
// for a user whose MFA is already on, who could never clear it.
func (s *Service) addRequiredActions(ctx context.Context, u *User, actions []string) (*User, error) {
	list := wire.List(slices.Clone(u.RequiredActions))
	for _, a := range actions {
		if a == UpdatePassword && u.AuthType != authLocal {
			return nil, errs.Invalid("required_actions", "only LOCAL users have a password")
		}
		if a == EnforceMFA && u.MFA.State == Enabled {
			continue
		}
		list = withAction(list, a)
	}
	return s.setUser(ctx, u, bson.D{{Key: "required_actions", Value: list}})
}

// setState enables or disables a user; the last enabled domain admin
// cannot be disabled. A disabled user's credentials stop working within
// auth.CheckTTL everywhere.
func (s *Service) setState(ctx context.Context, u *User, state string) (*User, error) {
	set := bson.D{{Key: "state", Value: state}}
	if state == Disabled {
		set = append(set, endSessions()) // enabling again revives no token
	}
	if state == Disabled && u.State != Disabled && u.RoleType == string(auth.DomainAdmin) {
		var out *User
		err := s.keepAnAdmin(ctx, u.DomainID, u.UserID, func() (err error) {
			out, err = s.setUser(ctx, u, set)
			return err
		})
		return out, err
	}
	return s.setUser(ctx, u, set)
}

// deleteUser removes a user with its role bindings, API keys and codes
// (the last enabled domain admin stays). The user record goes last, so an
// interrupted delete leaves a user without grants, never grants without a
// user.
func (s *Service) deleteUser(ctx context.Context, u *User) error {
	if u.State != Disabled && u.RoleType == string(auth.DomainAdmin) {
		return s.keepAnAdmin(ctx, u.DomainID, u.UserID, func() error { return s.removeUser(ctx, u) })
	}
	return s.removeUser(ctx, u)
}

func (s *Service) removeUser(ctx context.Context, u *User) error {
	mine := bson.D{{Key: "domain_id", Value: u.DomainID}, {Key: "user_id", Value: u.UserID}}
	for _, c := range []*mongoCollection{s.bindings, s.apiKeys} {
		if _, err := c.DeleteMany(ctx, mine); err != nil {
			return store.Wrap(err)
		}
	}
	if err := s.dropCodes(ctx, u, purposeMFA, purposeEmail, purposeLogin); err != nil {
		return err
	}
	if err := s.logins.lift(ctx, u.ID); err != nil {
		return err
	}
	if _, err := s.users.DeleteOne(ctx, bson.D{{Key: "_id", Value: u.ID}}); err != nil {
		return store.Wrap(err)
	}
	return nil
}

func (s *Service) dropCodes(ctx context.Context, u *User, purposes ...string) error {
	ids := bson.A{}
	for _, p := range purposes {
		ids = append(ids, codeID(p, u.DomainID, u.UserID))
	}
	_, err := s.codes.c.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	return store.Wrap(err)
}

// ---- e-mail verification --------------------------------------------------

// requestEmailCode sets a new address (unverified) when given and mails a
// code to the address to confirm. The code is bound to that address.
func (s *Service) requestEmailCode(ctx context.Context, u *User, email string) error {
	if err := checkEmailAddress("email", email); err != nil {
		return err
	}
	to := firstNonEmpty(email, u.Email)
	if to == "" {
		return errs.Required("email")
	}
	code, err := s.codes.issue(ctx, purposeEmail, u.DomainID, u.UserID, s.cfg.EmailCodeTTL, map[string]string{"email": to})
	if err != nil {
		return err
	}
	if to != u.Email {
		old := u
		if u, err = s.setUser(ctx, u, bson.D{{Key: "email", Value: to}, {Key: "email_verified", Value: false}}); err != nil {
			return err
		}
		if err := s.notify(ctx, old, noticeEmail); err != nil {
			return err
		}
	}
	return s.mail(ctx, u, to, "verify_email", map[string]string{"code": code, "user_id": u.UserID, "name": mailName(u, to),
		"expires_minutes": strconv.Itoa(int(s.cfg.EmailCodeTTL.Minutes()))})
}

// confirmEmail marks the address verified with the code that was mailed
// to it; a code for an address the user has since replaced is invalid.
func (s *Service) confirmEmail(ctx context.Context, u *User, code string) (*User, error) {
	data, err := s.codes.verify(ctx, purposeEmail, u.DomainID, u.UserID, code)
	if err != nil {
		return nil, err
	}
	out, err := s.updateUser(ctx, u, bson.D{{Key: "email", Value: data["email"]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "email_verified", Value: true}}}})
	if errors.Is(err, errUserChanged) {
		return nil, errBadCode
	}
	return out, err
}

// markEmailVerified is the admin's verification: no code.
func (s *Service) markEmailVerified(ctx context.Context, u *User, email string) (*User, error) {
	if err := checkEmailAddress("email", email); err != nil {
		return nil, err
	}
	to := firstNonEmpty(email, u.Email)
	if to == "" {
		return nil, errs.Required("email")
	}
	return s.setUser(ctx, u, bson.D{{Key: "email", Value: to}, {Key: "email_verified", Value: true}})
}

// ---- MFA ------------------------------------------------------------------

var (
	errMFAOn  = errs.New(errs.MFAAlreadyEnabled, "MFA is already enabled.")
	errMFAOff = errs.New(errs.MFAAlreadyDisabled, "MFA is already disabled.")
)

// enableMFA saves the options (state stays DISABLED) and mails a code to
// options.email; confirmMFA turns MFA on with that address. guard (the
// takeover rule) runs once the request is known to be valid.
func (s *Service) enableMFA(ctx context.Context, u *User, mfaType string, opts map[string]any, guard func() error) (*User, error) {
	if mfaType == mfaOTP {
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
	if err := checkEmailAddress("options.email", email); err != nil {
		return nil, err
	}
	if u.AuthType != authLocal {
		return nil, errs.Invalid("mfa_type", "MFA is for LOCAL users")
	}
	if u.MFA.State == Enabled {
		return nil, errMFAOn
	}
	if err := guard(); err != nil {
		return nil, err
	}
	code, err := s.mfaCode(ctx, u, email, actionEnable) // first: past the cap, nothing changes
	if err != nil {
		return nil, err
	}
	out, err := s.updateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: Enabled}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "mfa", Value: MFA{State: Disabled, MFAType: mfaEmail, Options: map[string]any{"email": email}}}}}})
	if errors.Is(err, errUserChanged) {
		return nil, errMFAOn
	}
	if err != nil {
		return nil, err
	}
	return out, s.mailMFACode(ctx, out, email, actionEnable, code)
}

// mfaCode issues the code that confirms action (enabling MFA to the
// address to, or disabling it).
func (s *Service) mfaCode(ctx context.Context, u *User, to, action string) (string, error) {
	data := map[string]string{"action": action}
	if action == actionEnable {
		data["email"] = to
	}
	return s.codes.issue(ctx, purposeMFA, u.DomainID, u.UserID, s.cfg.MFACodeTTL, data)
}

func (s *Service) mailMFACode(ctx context.Context, u *User, to, action, code string) error {
	return s.mail(ctx, u, to, "mfa_code", map[string]string{"code": code, "purpose": action, "user_id": u.UserID,
		"name": mailName(u, to), "expires_minutes": strconv.Itoa(int(s.cfg.MFACodeTTL.Minutes()))})
}

// enableOTP keeps a new TOTP secret pending (state stays DISABLED) and
// answers it once, as options.otp_qrcode_uri; confirmMFA with a code of
// the app turns MFA on.
func (s *Service) enableOTP(ctx context.Context, u *User, opts map[string]any, guard func() error) (*User, error) {
	for k := range opts {
		return nil, errs.New(errs.InvalidKeyInOptions, "Invalid key in options. (key = options.%s, OTP takes none)", k)
	}
	if u.AuthType != authLocal {
		return nil, errs.Invalid("mfa_type", "MFA is for LOCAL users")
	}
	if u.MFA.State == Enabled {
		return nil, errMFAOn
	}
	if err := guard(); err != nil {
		return nil, err
	}
	secret, err := newOTPSecret()
	if err != nil {
		return nil, err
	}
	sealed, err := s.sealOTP(u, secret)
	if err != nil {
		return nil, err
	}
	if err := s.codes.attempts.Reset(ctx, otpConfirmKey(u)); err != nil {
		return nil, err
	}
	out, err := s.updateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: Enabled}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "mfa", Value: MFA{State: Disabled, MFAType: mfaOTP, Options: map[string]any{}}}, {Key: "otp_pending", Value: sealed}}}})
	if errors.Is(err, errUserChanged) {
		return nil, errMFAOn
	}
	if err != nil {
		return nil, err
	}
	out.MFA.Options = map[string]any{"otp_qrcode_uri": otpURI("Nubes", u.UserID, secret)}
	return out, nil
}

func otpConfirmKey(u *User) string { return "otp-confirm:" + u.ID }

// confirmOTP turns OTP MFA on (a secret is pending) or off (disable-mfa
// asked for it lately) with a code of the app. Wrong codes count, per
// secret: after maxCodeAttempts a pending enable needs a new enable-mfa (a
// new secret), a disable waits a day or an admin's disable-mfa.
func (s *Service) confirmOTP(ctx context.Context, u *User, code string) (*User, error) {
	enabling := u.MFA.State != Enabled
	sealed := u.OTPSecret
	if enabling {
		sealed = u.OTPPending
	} else if time.Now().After(u.OTPDisableBy.Time) {
		return nil, errBadCode
	}
	// Claimed before the comparison, as codes.verify does.
	key := otpConfirmKey(u)
	if ok, err := s.codes.attempts.Take(ctx, key); err != nil || !ok {
		return nil, cmp.Or(err, errTooManyTries)
	}
	if err := s.checkOTP(ctx, u, sealed, strings.TrimSpace(code)); err != nil {
		return nil, err
	}
	if err := s.codes.attempts.Reset(ctx, key); err != nil {
		return nil, err
	}
	if enabling {
		out, err := s.updateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: Enabled}}}, {Key: "mfa.mfa_type", Value: mfaOTP}},
			bson.D{{Key: "$set", Value: bson.D{endSessions(), {Key: "mfa", Value: MFA{State: Enabled, MFAType: mfaOTP, Options: map[string]any{}}},
				{Key: "otp_secret", Value: u.OTPPending}, {Key: "required_actions", Value: withoutAction(u.RequiredActions, EnforceMFA)}}},
				{Key: "$unset", Value: bson.D{{Key: "otp_pending", Value: ""}}}})
		if errors.Is(err, errUserChanged) {
			return nil, errMFAOn
		}
		return out, err
	}
	out, err := s.updateUser(ctx, u, bson.D{{Key: "mfa.state", Value: Enabled}},
		bson.D{{Key: "$set", Value: bson.D{endSessions(), {Key: "mfa", Value: MFA{State: Disabled, Options: map[string]any{}}}}},
			{Key: "$unset", Value: bson.D{{Key: "otp_secret", Value: ""}, {Key: "otp_disable_by", Value: ""}}}})
	if errors.Is(err, errUserChanged) {
		return nil, errMFAOff
	}
	return out, err
}

// requestMFADisable mails a code to the MFA address (EMAIL), or opens a
// window of MFACodeTTL for a code of the app (OTP); confirmMFA then turns
// MFA off.
func (s *Service) requestMFADisable(ctx context.Context, u *User) (*User, error) {
	if u.MFA.State != Enabled {
		return nil, errMFAOff
	}
	if u.MFA.MFAType == mfaOTP {
		// Wrong codes are not forgiven here: asking again must not buy
		// more guesses at the same secret (an admin's disable-mfa helps a
		// user who ran out).
		return s.setUser(ctx, u, bson.D{{Key: "otp_disable_by", Value: wire.T(time.Now().Add(s.cfg.MFACodeTTL))}})
	}
	email, _ := u.MFA.Options["email"].(string)
	code, err := s.mfaCode(ctx, u, email, actionDisable)
	if err != nil {
		return nil, err
	}
	return u, s.mailMFACode(ctx, u, email, actionDisable, code)
}

// resetMFA is the admin's (or force) disable: no code, pending codes void.
func (s *Service) resetMFA(ctx context.Context, u *User) (*User, error) {
	if u.MFA.State != Enabled {
		return nil, errMFAOff
	}
	out, err := s.updateUser(ctx, u, nil, bson.D{{Key: "$set", Value: bson.D{endSessions(), {Key: "mfa", Value: MFA{State: Disabled, Options: map[string]any{}}}}},
		{Key: "$unset", Value: bson.D{{Key: "otp_secret", Value: ""}, {Key: "otp_pending", Value: ""}, {Key: "otp_disable_by", Value: ""}}}})
	if errors.Is(err, errUserChanged) {
		return nil, errs.NotFound("user_id", u.UserID)
	}
	if err != nil {
		return nil, err
	}
	if err := s.codes.attempts.Reset(ctx, otpConfirmKey(u)); err != nil {
		return nil, err
	}
	if err := s.notify(ctx, u, noticeMFA); err != nil {
		return nil, err
	}
	return out, s.dropCodes(ctx, u, purposeMFA, purposeLogin)
}

// confirmMFA applies the pending enable or disable whose code is given,
// and tells the address the user had.
func (s *Service) confirmMFA(ctx context.Context, u *User, code string) (*User, error) {
	out, err := s.applyMFA(ctx, u, code)
	if err != nil {
		return nil, err
	}
	return out, s.notify(ctx, u, noticeMFA)
}

func (s *Service) applyMFA(ctx context.Context, u *User, code string) (*User, error) {
	if u.MFA.MFAType == mfaOTP {
		return s.confirmOTP(ctx, u, code)
	}
	data, err := s.codes.verify(ctx, purposeMFA, u.DomainID, u.UserID, code)
	if err != nil {
		return nil, err
	}
	var out *User
	switch data["action"] {
	case actionEnable:
		on := MFA{State: Enabled, MFAType: mfaEmail, Options: map[string]any{"email": data["email"]}}
		out, err = s.updateUser(ctx, u, bson.D{{Key: "mfa.state", Value: bson.D{{Key: "$ne", Value: Enabled}}}},
			bson.D{{Key: "$set", Value: bson.D{endSessions(), {Key: "mfa", Value: on}, {Key: "required_actions", Value: withoutAction(u.RequiredActions, EnforceMFA)}}}})
		if errors.Is(err, errUserChanged) {
			return nil, errMFAOn
		}
	case actionDisable:
		out, err = s.updateUser(ctx, u, bson.D{{Key: "mfa.state", Value: Enabled}},
			bson.D{{Key: "$set", Value: bson.D{endSessions(), {Key: "mfa", Value: MFA{State: Disabled, Options: map[string]any{}}}}}})
		if errors.Is(err, errUserChanged) {
			return nil, errMFAOff
		}
	default:
		return nil, errBadCode
	}
	return out, err
}

// ---- list and stat ----------------------------------------------------------

// userFields are the fields of a user a query may read. password_hash,
// login_failures and the link state are not among them: a filter on them
// answers as for a field no user has (query.Resource.Unshown), a sort or
// only drops them, and a stat stage on them is 400.
var userFields = []string{"user_id", "name", "state", "email", "email_verified", "auth_type", "user_type", "role_id",
	"role_type", "mfa", "language", "timezone", "required_actions", "tags", "domain_id", "created_at", "last_accessed_at"}

var userKeywords = []string{"user_id", "name", "email"}

// userResource: a user is its domain's. A domain admin (or SYSTEM)
// reaches every user of its domain; what a user does on itself goes
// through selfResource, or names itself (v1, checked before loading).
var userResource = query.Resource{KeywordFields: userKeywords, Fields: userFields, Secret: userSecret, Tenancy: tenancy.InDomain}

// selfResource is the caller's own user (the kit's Owner rule on
// user_id): the profile operations reach that user and no other, whatever
// the role.
var selfResource = query.Resource{Tenancy: tenancy.Fields{Domain: "domain_id", Owner: "user_id"}}

// userSecret are the stored fields of a user holding a credential.
var userSecret = []string{"password_hash", "otp_secret", "otp_pending"}

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
			fields = append(fields, stat.ProjectField{Key: f, Name: firstNonEmpty(names[f], f)})
		}
		q.Aggregate = append(q.Aggregate, stat.Stage{Project: &stat.Project{Fields: fields, ExcludeKeys: true}})
	}
	return statFor(ctx, s.users, p, userResource, q)
}

func noRename(string, *string) error { return nil }
