package user

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/domainadmin"
	"github.com/nubes-io/nubes/services/identity/internal/login"
	"github.com/nubes-io/nubes/services/identity/internal/password"
	"github.com/nubes-io/nubes/services/identity/internal/session"
	"github.com/nubes-io/nubes/services/identity/internal/takeover"
	"github.com/nubes-io/nubes/services/identity/internal/userprofile"
	"github.com/nubes-io/nubes/services/identity/internal/verification"
)

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
		MFA: userprofile.MFAOf(u),
	}
}

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
func (s *service) createUser(ctx context.Context, n newUser) (*core.User, error) {
	if err := CheckUserID(n.UserID); err != nil {
		return nil, err
	}
	if n.AuthType == core.AuthExternal {
		return nil, errs.Invalid(n.AuthKey, "EXTERNAL users need an external auth plugin, which Nubes does not support; use LOCAL")
	}
	if err := userprofile.CheckEmailAddress("email", n.Email); err != nil {
		return nil, err
	}
	if err := userprofile.CheckName(n.Name); err != nil {
		return nil, err
	}
	if err := userprofile.CheckLocale(n.Language, n.Timezone); err != nil {
		return nil, err
	}
	if n.Password == "" && !n.ResetPassword {
		return nil, errs.Required("password")
	}
	if n.ResetPassword && n.Email == "" {
		return nil, errs.Required("email")
	}
	if err := password.CheckIfSet(n.Password); err != nil {
		return nil, err
	}
	if _, err := s.UserByKey(ctx, n.DomainID, n.UserID); err == nil {
		return nil, errs.Duplicate("user_id", n.UserID)
	} else if !errs.Is(err, errs.NotFoundCode) {
		return nil, err
	}
	hash := "" // no password: nobody can log in until the invitation is used
	if n.Password != "" {
		var err error
		if hash, err = password.Hash(n.Password, s.Cfg.PasswordCost); err != nil {
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
		MFA: core.MFA{State: core.Disabled, Options: map[string]any{}}, Language: cmp.Or(n.Language, "en"), Timezone: cmp.Or(n.Timezone, "UTC"),
		RequiredActions: actions, Tags: wire.Object(n.Tags), PasswordHash: hash, CreatedAt: now,
		SessionEpoch: session.NewEpoch(), // a token of an earlier user of the same id is not this one's
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
		if err := takeover.MailLink(ctx, s.Deps, u, "invite", s.Cfg.InviteTTL); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// adminUpdate is update by a domain admin: fields, a new password (rules,
// no current password), and reset_password, which mails a reset link and
// makes UPDATE_PASSWORD pending.
func (s *service) adminUpdate(ctx context.Context, u *core.User, c userprofile.UserChange, pw string, reset bool) (*core.User, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if err := password.CheckIfSet(pw); err != nil {
		return nil, err
	}
	if reset {
		if u.AuthType != core.AuthLocal {
			return nil, errs.Invalid("reset_password", "only LOCAL users have a password")
		}
		if cmp.Or(c.Email, u.Email) == "" {
			return nil, errs.Required("email")
		}
	}
	set := c.Fields(u)
	if pw != "" {
		hash, err := password.Hash(pw, s.Cfg.PasswordCost)
		if err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "password_hash", Value: hash})
	}
	if reset {
		set = append(set, bson.E{Key: "required_actions", Value: WithAction(u.RequiredActions, core.UpdatePassword)})
	}
	if pw != "" || reset {
		set = append(set, session.End())
	}
	if len(set) == 0 {
		return u, nil
	}
	out, err := s.SetUser(ctx, u, set)
	if err != nil {
		return nil, err
	}
	if err := takeover.Changed(ctx, s.Deps, u, c.Email != "" && c.Email != u.Email, pw != ""); err != nil {
		return nil, err
	}
	if reset {
		if err := takeover.MailLink(ctx, s.Deps, out, "reset_password", userprofile.ResetTTL); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// addRequiredActions adds actions to those pending (set_required_actions
// never removes one: each is cleared by doing it). ENFORCE_MFA is skipped
// for a user whose MFA is already on, who could never clear it.
func (s *service) addRequiredActions(ctx context.Context, u *core.User, actions []string) (*core.User, error) {
	list := wire.List(slices.Clone(u.RequiredActions))
	for _, a := range actions {
		if a == core.UpdatePassword && u.AuthType != core.AuthLocal {
			return nil, errs.Invalid("required_actions", "only LOCAL users have a password")
		}
		if a == core.EnforceMFA && u.MFA.State == core.Enabled {
			continue
		}
		list = WithAction(list, a)
	}
	return s.SetUser(ctx, u, bson.D{{Key: "required_actions", Value: list}})
}

// setState enables or disables a user; the last enabled domain admin
// cannot be disabled. A disabled user's credentials stop working within
// auth.CheckTTL everywhere.
func (s *service) setState(ctx context.Context, u *core.User, state string) (*core.User, error) {
	set := bson.D{{Key: "state", Value: state}}
	if state == core.Disabled {
		set = append(set, session.End()) // enabling again revives no token
	}
	if state == core.Disabled && u.State != core.Disabled && u.RoleType == string(auth.DomainAdmin) {
		var out *core.User
		err := domainadmin.Keep(ctx, s.Deps, u.DomainID, u.UserID, func() (err error) {
			out, err = s.SetUser(ctx, u, set)
			return err
		})
		return out, err
	}
	return s.SetUser(ctx, u, set)
}

// deleteUser deletes the user userID of p's domain (store.Teardown,
// core.UserRecords): marked first, so that it leaves every read; then
// its role bindings, API keys, codes and throttle; then the record. The
// last enabled domain admin stays (counted without marked users). A
// delete that failed half-way leaves the user marked and out of reads,
// and a retry finds it and finishes (404 only once it is gone).
func (s *service) deleteUser(ctx context.Context, p *auth.Principal, userID string) error {
	// Read as stored, marked or not (a retry finishes a marked one); the
	// teardown loads it again under p's tenancy.
	u, err := store.Get[core.User](ctx, s.Users, "user_id", core.UserKey(p.DomainID, userID))
	if errs.Is(err, errs.NotFoundCode) {
		return errs.NotFound("user_id", userID)
	}
	if err != nil {
		return err
	}
	td := s.UserRecords()
	grants := td.Children
	td.Children = func(ctx context.Context, u *core.User) error {
		if err := grants(ctx, u); err != nil {
			return err
		}
		if err := verification.CodesOf(s.Deps).Drop(ctx, u, core.PurposeMFA, core.PurposeEmail, core.PurposeLogin); err != nil {
			return err
		}
		return login.ThrottleOf(s.Deps).Lift(ctx, u.ID)
	}
	remove := func() error {
		_, err := td.Delete(ctx, p, u.ID)
		if errs.Is(err, errs.NotFoundCode) {
			return errs.NotFound("user_id", userID)
		}
		return err
	}
	if u.State != core.Disabled && u.RoleType == string(auth.DomainAdmin) {
		return domainadmin.Keep(ctx, s.Deps, u.DomainID, u.UserID, remove)
	}
	return remove()
}

// userStat runs a StatisticsQuery over the users of a domain. A query
// whose stages never build new rows gets a final project of the Info
// fields (names maps a stored field to its wire name, for v1).
func (s *service) userStat(ctx context.Context, p *auth.Principal, q *stat.Query, rename func(at string, p *string) error, info []string, names map[string]string) (*map[string]any, error) {
	reshaped, err := q.Paths(rename)
	if err != nil {
		return nil, err
	}
	if !reshaped && len(q.Aggregate) > 0 {
		fields := make([]stat.ProjectField, 0, len(info))
		for _, f := range info {
			fields = append(fields, stat.ProjectField{Key: f, Name: cmp.Or(names[f], f)})
		}
		q.Aggregate = append(q.Aggregate, stat.Stage{Project: &stat.Project{Fields: fields, ExcludeKeys: true}})
	}
	return core.StatFor(ctx, s.Users, p, core.UserResource, q)
}

func noRename(string, *string) error { return nil }

type service struct {
	*core.Deps
	profile *userprofile.Profile // e-mail, MFA and reset rules (v1's self-service operations)
}

// Routes are the operations of users, v2 and v1.
func Routes(d *core.Deps) []api.Route {
	s := &service{Deps: d, profile: &userprofile.Profile{Deps: d}}
	return append(s.userRoutesV2(), s.userRoutesV1()...)
}
