package core

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
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
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

const (
	AuthLocal      = "LOCAL"
	AuthExternal   = "EXTERNAL"
	MFAEmail       = "EMAIL"
	MFAOTP         = "OTP"
	PurposeMFA     = "mfa"          // enable and disable confirmations
	PurposeEmail   = "verify_email" // e-mail address confirmation
	PurposeLogin   = "login"        // token/issue second step (token.go)
	ActionEnable   = "enable"
	ActionDisable  = "disable"
	ResetTTL       = 24 * time.Hour         // a reset link, as upstream
	ResetMailEvery = time.Minute            // at most one reset mail per user and minute
	ResetFloor     = 250 * time.Millisecond // reset_password answers no faster, found or not
)

// UserDoc is the stored user with the link state that User (model.go) does
// not carry: the jti of the latest mailed link (invite or reset) and when
// it expires.
type UserDoc struct {
	User          `bson:",inline"`
	LinkTokenID   string    `bson:"link_token_id"`
	LinkExpiresAt wire.Time `bson:"link_expires_at"`
}

// isLink reports whether p is the user's latest mailed link, still valid.
func (d *UserDoc) IsLink(p *auth.Principal) bool {
	return p.TokenID != "" && d.LinkTokenID != "" && time.Now().Before(d.LinkExpiresAt.Time) &&
		subtle.ConstantTimeCompare([]byte(p.TokenID), []byte(d.LinkTokenID)) == 1
}

// UserInfoV2 is the v2 UserInfo: every field, never the password hash or
// the login failures.
type UserInfoV2 struct {
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
	// APIKeyCount is how many API keys the user holds (upstream keeps it
	// on the user; the console's user list reads it). Filled by
	// AsInfoV2 and Deps.CountAPIKeys, never stored.
	APIKeyCount int `json:"api_key_count"`
}

func MFAOf(u *User) MFA {
	m := MFA{State: u.MFA.State, MFAType: u.MFA.MFAType, Options: wire.Object(u.MFA.Options)}
	if m.State == "" {
		m.State = Disabled
	}
	return m
}

func ToV2(u *User) *UserInfoV2 {
	return &UserInfoV2{
		UserID: u.UserID, Name: u.Name, State: u.State, Email: u.Email, EmailVerified: u.EmailVerified,
		AuthType: u.AuthType, RoleID: u.RoleID, RoleType: u.RoleType, MFA: MFAOf(u), Language: u.Language,
		Timezone: u.Timezone, RequiredActions: wire.List(u.RequiredActions), Tags: wire.Object(u.Tags),
		DomainID: u.DomainID, CreatedAt: u.CreatedAt, LastAccessedAt: u.LastAccessedAt,
	}
}

// AsInfoV2 is AsInfo(ToV2, h) with the user's api_key_count.
func AsInfoV2[Req any](s *Deps, h func(context.Context, *auth.Principal, *Req) (*User, error)) func(context.Context, *auth.Principal, *Req) (*UserInfoV2, error) {
	return func(ctx context.Context, p *auth.Principal, r *Req) (*UserInfoV2, error) {
		u, err := h(ctx, p, r)
		if err != nil {
			return nil, err
		}
		info := ToV2(u)
		if err := s.CountAPIKeys(ctx, u.DomainID, info); err != nil {
			return nil, err
		}
		return info, nil
	}
}

// CountAPIKeys sets the api_key_count of users of domainID. A key counts
// for the user of its own domain and user id only: a user of another
// domain with the same id adds nothing.
func (s *Deps) CountAPIKeys(ctx context.Context, domainID string, users ...*UserInfoV2) error {
	if len(users) == 0 {
		return nil
	}
	ids := bson.A{}
	for _, u := range users {
		ids = append(ids, u.UserID)
	}
	cur, err := s.APIKeys.Find(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "user_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "user_id", Value: 1}}))
	if err != nil {
		return store.Wrap(err)
	}
	var keys []struct {
		UserID string `bson:"user_id"`
	}
	if err := cur.All(ctx, &keys); err != nil {
		return store.Wrap(err)
	}
	n := map[string]int{}
	for _, k := range keys {
		n[k.UserID]++
	}
	for _, u := range users {
		u.APIKeyCount = n[u.UserID]
	}
	return nil
}

// convert maps a handler that answers a *User to one that answers an Info.
func AsInfo[Req, Info any](to func(*User) *Info, h func(context.Context, *auth.Principal, *Req) (*User, error)) func(context.Context, *auth.Principal, *Req) (*Info, error) {
	return func(ctx context.Context, p *auth.Principal, r *Req) (*Info, error) {
		u, err := h(ctx, p, r)
		if err != nil {
			return nil, err
		}
		return to(u), nil
	}
}

// userFor loads a user of p's domain that p reaches (UserResource);
// userToChange one it may change. The _id holds the domain, so a user of
// another domain cannot even be addressed: it is not found.
func (s *Deps) UserFor(ctx context.Context, p *auth.Principal, userID string) (*User, error) {
	d, err := s.UserDocFor(ctx, p, UserResource, userID, false)
	if err != nil {
		return nil, err
	}
	return &d.User, nil
}

func (s *Deps) UserToChange(ctx context.Context, p *auth.Principal, userID string) (*User, error) {
	d, err := s.UserDocFor(ctx, p, UserResource, userID, true)
	if err != nil {
		return nil, err
	}
	return &d.User, nil
}

func (s *Deps) UserDocFor(ctx context.Context, p *auth.Principal, r query.Resource, userID string, change bool) (*UserDoc, error) {
	load := store.GetFor[UserDoc]
	if change {
		load = store.GetToChange[UserDoc]
	}
	d, err := load(ctx, s.Users, r, p, "user_id", UserKey(p.DomainID, userID))
	if IsNotFound(err) {
		return nil, errs.NotFound("user_id", userID)
	}
	return d, err
}

// userByKey loads a user for the flows that run before there is a caller
// (login, reset links, a new user's id): the key names the domain.
func (s *Deps) UserByKey(ctx context.Context, domainID, userID string) (*UserDoc, error) {
	d, err := store.Get[UserDoc](ctx, s.Users, "user_id", UserKey(domainID, userID))
	if IsNotFound(err) {
		return nil, errs.NotFound("user_id", userID)
	}
	return d, err
}

// updateUser applies update to u (only while cond also holds, when given)
// and returns the stored user afterwards.
func (s *Deps) UpdateUser(ctx context.Context, u *User, cond bson.D, update bson.D) (*User, error) {
	filter := append(bson.D{{Key: "_id", Value: u.ID}}, cond...)
	var out User
	err := s.Users.FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&out)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, ErrUserChanged
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &out, nil
}

// ErrUserChanged is what updateUser answers when the user is gone or cond no
// longer holds; callers turn it into their own conflict.
var ErrUserChanged = errors.New("user changed meanwhile")

func (s *Deps) SetUser(ctx context.Context, u *User, set bson.D) (*User, error) {
	out, err := s.UpdateUser(ctx, u, nil, bson.D{{Key: "$set", Value: set}})
	if errors.Is(err, ErrUserChanged) {
		return nil, errs.NotFound("user_id", u.UserID)
	}
	return out, err
}

func CheckUserID(id string) error {
	for _, r := range id {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return errs.Invalid("user_id", "no spaces or control characters")
		}
	}
	return nil
}

// checkEmail accepts one bare address (no display name, no header
// characters), so an address can never inject a mail header.
func CheckEmailAddress(key, e string) error {
	if e == "" {
		return nil
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || a.Name != "" {
		return errs.Invalid(key, "not an e-mail address")
	}
	return nil
}

// CheckLocale keeps language ("en", "ko", "ko-KR") and timezone ("UTC",
// "Asia/Seoul") to the characters their names use.
func CheckLocale(language, timezone string) error {
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

func CheckPasswordIfSet(pw string) error {
	if pw == "" {
		return nil
	}
	return CheckPassword(pw)
}

func FirstNonEmpty(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// mailLink mails a console link carrying an access token narrowed to the
// user profile, valid for ttl. Only the latest link of a user works, and
// only until the password is changed (see selfDoc).
func (s *Deps) MailLink(ctx context.Context, u *User, template string, ttl time.Duration) error {
	jti, err := newLinkID(16)
	if err != nil {
		return err
	}
	tok, err := s.Cfg.Signer.Issue(auth.Principal{TokenID: jti, DomainID: u.DomainID, UserID: u.UserID, Role: auth.User, Permissions: ProfileOnly, Session: u.SessionEpoch}, ttl)
	if err != nil {
		return err
	}
	set := bson.D{{Key: "link_token_id", Value: jti}, {Key: "link_expires_at", Value: wire.T(time.Now().Add(ttl))}}
	if _, err := s.Users.UpdateOne(ctx, bson.D{{Key: "_id", Value: u.ID}}, bson.D{{Key: "$set", Value: set}}); err != nil {
		return store.Wrap(err)
	}
	data := map[string]string{"user_id": u.UserID, "name": MailName(u, u.Email), "link": s.consoleLink(tok),
		"expires_hours": strconv.Itoa(int(ttl.Hours())), "token_id": jti}
	if d, err := store.Get[Domain](ctx, s.Domains, "domain_id", u.DomainID); err == nil {
		data["domain_name"] = d.Name
	}
	return s.Mail(ctx, u, u.Email, template, data)
}

func (s *Deps) consoleLink(token string) string {
	u, err := url.Parse(s.Cfg.ConsoleURL)
	if err != nil {
		return s.Cfg.ConsoleURL + "?sso_access_token=" + url.QueryEscape(token)
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

// changed follows a change of u (as it was before) to its e-mail address
// or password: the old address is told, and a new password lifts the
// login block.
func (s *Deps) Changed(ctx context.Context, u *User, email, password bool) error {
	if email {
		if err := s.Notify(ctx, u, NoticeEmail); err != nil {
			return err
		}
	}
	if !password {
		return nil
	}
	if err := s.Notify(ctx, u, NoticePassword); err != nil {
		return err
	}
	return s.Logins.Lift(ctx, u.ID)
}

func WithAction(list []string, a string) []string {
	out := wire.List(slices.Clone(list))
	if !slices.Contains(out, a) {
		out = append(out, a)
	}
	return out
}

func WithoutAction(list []string, a string) []string {
	out := []string{}
	for _, x := range list {
		if x != a {
			out = append(out, x)
		}
	}
	return out
}

func (s *Deps) DropCodes(ctx context.Context, u *User, purposes ...string) error {
	ids := bson.A{}
	for _, p := range purposes {
		ids = append(ids, CodeID(p, u.DomainID, u.UserID))
	}
	_, err := s.Codes.C.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	return store.Wrap(err)
}

// UserFields are the fields of a user a query may read. password_hash,
// login_failures and the link state are not among them: a filter on them
// answers as for a field no user has (query.Resource.Unshown), a sort or
// only drops them, and a stat stage on them is 400.
var UserFields = []string{"user_id", "name", "state", "email", "email_verified", "auth_type", "user_type", "role_id",
	"role_type", "mfa", "language", "timezone", "required_actions", "tags", "domain_id", "created_at", "last_accessed_at"}

var UserKeywords = []string{"user_id", "name", "email"}

// UserResource: a user is its domain's. A domain admin (or SYSTEM)
// reaches every user of its domain; what a user does on itself goes
// through SelfResource, or names itself (v1, checked before loading).
var UserResource = query.Resource{KeywordFields: UserKeywords, Fields: UserFields, Secret: UserSecret, Tenancy: tenancy.InDomain}

// SelfResource is the caller's own user (the kit's Owner rule on
// user_id): the profile operations reach that user and no other, whatever
// the role.
var SelfResource = query.Resource{Tenancy: tenancy.Fields{Domain: "domain_id", Owner: "user_id"}}

// UserSecret are the stored fields of a user holding a credential.
var (
	UserSecret = []string{"password_hash", "otp_secret", "otp_pending"}
	AnyRole    = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)
)

// ProfileOnly is what a token may reach while UPDATE_PASSWORD (or
// ENFORCE_MFA) is pending.
var ProfileOnly = []string{"/identity/v2/user-profile/"}

func PendingPermissions(u *User) []string {
	for _, a := range u.RequiredActions {
		if a == UpdatePassword || a == EnforceMFA {
			return ProfileOnly
		}
	}
	return nil
}
