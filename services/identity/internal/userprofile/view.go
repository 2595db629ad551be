package userprofile

// The user's view and the user fields a caller may change, shared by
// userprofile and user (v1 and v2), which imports this package.

import (
	"context"
	"net/mail"
	"strings"
	"time"
	"unicode"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

const (
	ResetTTL       = 24 * time.Hour         // a reset link, as upstream
	ResetMailEvery = time.Minute            // at most one reset mail per user and minute
	ResetFloor     = 250 * time.Millisecond // reset_password answers no faster, found or not
)

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
	MFA             core.MFA      `json:"mfa"`
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

func MFAOf(u *core.User) core.MFA {
	m := core.MFA{State: u.MFA.State, MFAType: u.MFA.MFAType, Options: wire.Object(u.MFA.Options)}
	if m.State == "" {
		m.State = core.Disabled
	}
	return m
}

func ToV2(u *core.User) *UserInfoV2 {
	return &UserInfoV2{
		UserID: u.UserID, Name: u.Name, State: u.State, Email: u.Email, EmailVerified: u.EmailVerified,
		AuthType: u.AuthType, RoleID: u.RoleID, RoleType: u.RoleType, MFA: MFAOf(u), Language: u.Language,
		Timezone: u.Timezone, RequiredActions: wire.List(u.RequiredActions), Tags: wire.Object(u.Tags),
		DomainID: u.DomainID, CreatedAt: u.CreatedAt, LastAccessedAt: u.LastAccessedAt,
	}
}

// AsInfoV2 is AsInfo(ToV2, h) with the user's api_key_count.
func AsInfoV2[Req any](d *core.Deps, h func(context.Context, *auth.Principal, *Req) (*core.User, error)) func(context.Context, *auth.Principal, *Req) (*UserInfoV2, error) {
	return func(ctx context.Context, p *auth.Principal, r *Req) (*UserInfoV2, error) {
		u, err := h(ctx, p, r)
		if err != nil {
			return nil, err
		}
		info := ToV2(u)
		if err := CountAPIKeys(ctx, d, u.DomainID, info); err != nil {
			return nil, err
		}
		return info, nil
	}
}

// CountAPIKeys sets the api_key_count of users of domainID. A key counts
// for the user of its own domain and user id only: a user of another
// domain with the same id adds nothing.
func CountAPIKeys(ctx context.Context, d *core.Deps, domainID string, users ...*UserInfoV2) error {
	if len(users) == 0 {
		return nil
	}
	ids := bson.A{}
	for _, u := range users {
		ids = append(ids, u.UserID)
	}
	cur, err := d.APIKeys.Find(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "user_id", Value: bson.D{{Key: "$in", Value: ids}}}},
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

// CheckEmailAddress accepts one bare address (no display name, no header
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

// UserChange is what update (v1, v2, profile) may change.
type UserChange struct {
	Name, Email, Language, Timezone string
	Tags                            freeform.Flat
}

func (c UserChange) Check() error {
	if err := CheckName(c.Name); err != nil {
		return err
	}
	if err := CheckEmailAddress("email", c.Email); err != nil {
		return err
	}
	return CheckLocale(c.Language, c.Timezone)
}

// Fields returns the $set of c against u: a new e-mail is unverified.
func (c UserChange) Fields(u *core.User) bson.D {
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

// WithoutAction is list without a.
func WithoutAction(list []string, a string) []string {
	out := []string{}
	for _, x := range list {
		if x != a {
			out = append(out, x)
		}
	}
	return out
}
