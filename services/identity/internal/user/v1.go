package user

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/takeover"
	"github.com/nubes-io/nubes/services/identity/internal/userprofile"
)

// The v1 user operations. Requests name their domain_id: it must be the
// caller's (a SYSTEM caller may name any), else the answer is not found.
// Administration needs a domain admin; the self-service operations
// (update, e-mail, MFA, get) take a domain admin on any user of the
// domain, anyone else on itself only. The rules are in user.go, and userprofile.Profile's.

type createUserV1 struct {
	UserID        string        `json:"user_id" v:"required,max=40"`
	Backend       string        `json:"backend" v:"required,enum=LOCAL|EXTERNAL" doc:"EXTERNAL is refused: Nubes has no external auth plugin"`
	DomainID      string        `json:"domain_id" v:"required,max=64"`
	Password      string        `json:"password" v:"max=72" doc:"required for LOCAL unless reset_password is true"`
	Name          string        `json:"name" v:"max=128"`
	Email         string        `json:"email" v:"max=255"`
	UserType      string        `json:"user_type" v:"enum=USER|API_USER"`
	Language      string        `json:"language" v:"max=16"`
	Timezone      string        `json:"timezone" v:"max=64"`
	Tags          freeform.Flat `json:"tags"`
	ResetPassword bool          `json:"reset_password"`
}

type updateUserV1 struct {
	UserID        string        `json:"user_id" v:"required,max=60"`
	DomainID      string        `json:"domain_id" v:"required,max=64"`
	Password      string        `json:"password" v:"max=72" doc:"a domain admin only; a user changes its own with /identity/v2/user-profile/update"`
	Name          string        `json:"name" v:"max=128"`
	Email         string        `json:"email" v:"max=255"`
	Language      string        `json:"language" v:"max=16"`
	Timezone      string        `json:"timezone" v:"max=64"`
	Tags          freeform.Flat `json:"tags"`
	ResetPassword bool          `json:"reset_password" doc:"a domain admin only"`
	// Nubes: no takeover from a token alone.
	CurrentPassword string `json:"current_password" v:"max=72" doc:"one's own password, e-mail or reset only: the current password"`
}

type verifyEmailV1 struct {
	UserID   string `json:"user_id" v:"required,max=60"`
	DomainID string `json:"domain_id" v:"required,max=64"`
	Email    string `json:"email" v:"max=255"`
	Force    bool   `json:"force" doc:"a domain admin only: mark verified without a code"`
	// Nubes: no takeover from a token alone.
	CurrentPassword string `json:"current_password" v:"max=72" doc:"required for one's own new address"`
}

type codeRequestV1 struct {
	UserID     string `json:"user_id" v:"required,max=60"`
	VerifyCode string `json:"verify_code" v:"required,max=16"`
	DomainID   string `json:"domain_id" v:"required,max=64"`
}

type userRequestV1 struct {
	UserID   string `json:"user_id" v:"required,max=60"`
	DomainID string `json:"domain_id" v:"required,max=64"`
}

type setRequiredActionsV1 struct {
	UserID   string   `json:"user_id" v:"required,max=60"`
	Actions  []string `json:"actions" v:"required,max=10,enum=UPDATE_PASSWORD" doc:"added to the pending actions"`
	DomainID string   `json:"domain_id" v:"required,max=64"`
}

type enableMFAV1 struct {
	UserID   string         `json:"user_id" v:"required,max=60"`
	MFAType  string         `json:"mfa_type" v:"required,enum=EMAIL|OTP" doc:"EMAIL: codes by mail; OTP: an authenticator app (TOTP)"`
	Options  map[string]any `json:"options" doc:"EMAIL: {email}; OTP: none (the answer carries options.otp_qrcode_uri once)"`
	DomainID string         `json:"domain_id" v:"required,max=64"`
	// Nubes: no takeover from a token alone.
	CurrentPassword string `json:"current_password" v:"max=72" doc:"one's own MFA: required unless ENFORCE_MFA is pending"`
}

type disableMFAV1 struct {
	UserID   string `json:"user_id" v:"required,max=60"`
	DomainID string `json:"domain_id" v:"required,max=64"`
	Force    bool   `json:"force" doc:"a domain admin only: turn MFA off without a code"`
}

type getUserV1 struct {
	UserID   string   `json:"user_id" v:"required,max=60"`
	DomainID string   `json:"domain_id" v:"required,max=64"`
	Only     []string `json:"only" v:"max=50"`
}

type userQueryV1 struct {
	Query    *query.Query `json:"query"`
	UserID   string       `json:"user_id"`
	Name     string       `json:"name"`
	State    string       `json:"state" v:"enum=ENABLED|DISABLED|PENDING"`
	Email    string       `json:"email"`
	UserType string       `json:"user_type" v:"enum=USER|API_USER"`
	Backend  string       `json:"backend" v:"enum=LOCAL|EXTERNAL"`
	DomainID string       `json:"domain_id" v:"required,max=64"`
}

type userStatV1 struct {
	Query    *stat.Query `json:"query" v:"required"`
	DomainID string      `json:"domain_id" v:"required,max=64"`
}

type findUserSearch struct {
	UserID  string `json:"user_id" v:"max=60"`
	Keyword string `json:"keyword" v:"max=128"`
}

type findUserV1 struct {
	Search   *findUserSearch `json:"search" v:"required" doc:"user_id (exact) and/or keyword (user_id, name, email)"`
	DomainID string          `json:"domain_id" v:"required,max=64"`
}

type findUserInfo struct {
	UserID string        `json:"user_id"`
	Name   string        `json:"name"`
	Email  string        `json:"email"`
	Tags   freeform.Flat `json:"tags"`
}

const findLimit = 100

var userResourceV1 = query.Resource{KeywordFields: core.UserKeywords, DefaultSort: []query.SortKey{{Key: "name"}, {Key: "user_id"}},
	MinimalFields: []string{"user_id", "name", "state", "auth_type", "user_type"}, Fields: core.UserFields, Secret: core.UserSecret, Maps: freeform.Fields{"tags": freeform.Whole},
	Tenancy: core.UserResource.Tenancy}

// infoFieldsV1 are the stored fields of the v1 UserInfo; namesV1 their wire names where they differ.
var infoFieldsV1 = []string{"user_id", "name", "state", "email", "user_type", "auth_type", "language", "timezone",
	"required_actions", "tags", "last_accessed_at", "created_at", "domain_id", "email_verified", "mfa"}

var namesV1 = map[string]string{"auth_type": "backend"}

func v1Info(u *core.User) *userInfoV1 { return toV1(u) }

func (s *service) userRoutesV1() []api.Route {
	return []api.Route{
		api.Op[createUserV1, userInfoV1]{Path: "/identity/v1/user/create", Access: core.DomainAdmin, Summary: "Create a user (PENDING); reset_password mails an invitation.", Handle: AsInfo(v1Info, s.createUserV1)},
		api.Op[updateUserV1, userInfoV1]{Path: "/identity/v1/user/update", Access: core.AnyRole, Summary: "Change a user (an admin) or oneself (no password).", Handle: AsInfo(v1Info, s.updateUserV1)},
		api.Op[verifyEmailV1, api.Empty]{Path: "/identity/v1/user/verify-email", Access: core.AnyRole, Summary: "Mail a code to confirm the e-mail (force: an admin marks it verified).", Handle: s.verifyEmailV1},
		api.Op[codeRequestV1, userInfoV1]{Path: "/identity/v1/user/confirm-email", Access: core.AnyRole, Summary: "Confirm the e-mail with the mailed code.", Handle: AsInfo(v1Info, s.v1Code(s.profile.ConfirmEmail))},
		api.Op[userRequestV1, api.Empty]{Path: "/identity/v1/user/reset-password", Access: auth.Public(), Summary: "Mail a password reset link to an eligible user; answers the same whether or not the user exists.", Handle: func(ctx context.Context, _ *auth.Principal, r *userRequestV1) (*api.Empty, error) {
			return &api.Empty{}, s.profile.RequestReset(ctx, r.DomainID, r.UserID)
		}},
		api.Op[setRequiredActionsV1, userInfoV1]{Path: "/identity/v1/user/set-required-actions", Access: core.DomainAdmin, Summary: "Add required actions to a user.", Handle: AsInfo(v1Info, s.setRequiredActionsV1)},
		api.Op[enableMFAV1, userInfoV1]{Path: "/identity/v1/user/enable-mfa", Access: core.AnyRole, Summary: "Start turning MFA on: EMAIL mails a code to options.email; OTP answers the secret as options.otp_qrcode_uri.", Handle: AsInfo(v1Info, s.enableMFAV1)},
		api.Op[disableMFAV1, userInfoV1]{Path: "/identity/v1/user/disable-mfa", Access: core.AnyRole, Summary: "Start turning MFA off with a mailed code (force: an admin turns it off).", Handle: AsInfo(v1Info, s.disableMFAV1)},
		api.Op[codeRequestV1, userInfoV1]{Path: "/identity/v1/user/confirm-mfa", Access: core.AnyRole, Summary: "Confirm the pending MFA change with the mailed code (OTP: a code of the app).", Handle: AsInfo(v1Info, s.v1Code(s.profile.ConfirmMFA))},
		api.Op[userRequestV1, userInfoV1]{Path: "/identity/v1/user/enable", Access: core.DomainAdmin, Summary: "Enable a user.", Handle: AsInfo(v1Info, s.v1Admin(s.stateTo(core.Enabled)))},
		api.Op[userRequestV1, userInfoV1]{Path: "/identity/v1/user/disable", Access: core.DomainAdmin, Summary: "Disable a user (not the last domain admin).", Handle: AsInfo(v1Info, s.v1Admin(s.stateTo(core.Disabled)))},
		api.Op[userRequestV1, api.Empty]{Path: "/identity/v1/user/delete", Access: core.DomainAdmin, Summary: "Delete a user with its role bindings and API keys (not the last domain admin).", Handle: s.deleteUserV1},
		api.Op[getUserV1, userInfoV1]{Path: "/identity/v1/user/get", Access: core.AnyRole, Summary: "Get a user (an admin) or oneself.", Handle: s.getUserV1},
		api.Op[userQueryV1, api.List[userInfoV1]]{Path: "/identity/v1/user/list", Access: core.DomainAdmin, Summary: "List the users of a domain.", Handle: s.listUsersV1},
		api.Op[userStatV1, map[string]any]{Path: "/identity/v1/user/stat", Access: core.DomainAdmin, Summary: "Statistics over the users of a domain.", Handle: s.statUsersV1},
		api.Op[findUserV1, api.List[findUserInfo]]{Path: "/identity/v1/user/find", Access: core.DomainAdmin, Summary: "Find users of a domain by user_id or keyword (at most 100).", Handle: s.findUsersV1},
		api.Op[userRequestV1, userInfoV1]{Path: "/identity/v1/user/sync", Access: core.DomainAdmin, Summary: "Sync a user from its auth backend (a LOCAL user is returned unchanged).", Handle: AsInfo(v1Info, s.v1Admin(nil))},
	}
}

// v1User resolves the target of a self-service operation: a domain admin
// may name any user of the domain, anyone else only itself, and an API
// key may not change its own user.
func (s *service) v1User(ctx context.Context, p *auth.Principal, domainID, userID string, write bool) (*core.User, bool, error) {
	caller, err := s.CallerIn(ctx, p, domainID)
	if err != nil {
		return nil, false, err
	}
	admin := tenancy.DomainWide(p)
	if !admin && (userID != p.UserID || (write && p.TokenType == auth.APIKey)) {
		return nil, false, errs.Forbidden()
	}
	u, err := s.UserDocFor(ctx, caller, core.UserResource, userID, write)
	if err != nil {
		return nil, admin, err
	}
	return &u.User, admin, nil
}

// v1Admin loads the user of an admin operation and applies then (nil:
// return it unchanged).
func (s *service) v1Admin(then func(context.Context, *core.User) (*core.User, error)) func(context.Context, *auth.Principal, *userRequestV1) (*core.User, error) {
	return func(ctx context.Context, p *auth.Principal, r *userRequestV1) (*core.User, error) {
		caller, err := s.CallerIn(ctx, p, r.DomainID)
		if err != nil {
			return nil, err
		}
		if then == nil {
			return s.UserFor(ctx, caller, r.UserID)
		}
		u, err := s.UserToChange(ctx, caller, r.UserID)
		if err != nil {
			return nil, err
		}
		return then(ctx, u)
	}
}

func (s *service) v1Code(rule func(context.Context, *core.User, string) (*core.User, error)) func(context.Context, *auth.Principal, *codeRequestV1) (*core.User, error) {
	return func(ctx context.Context, p *auth.Principal, r *codeRequestV1) (*core.User, error) {
		u, _, err := s.v1User(ctx, p, r.DomainID, r.UserID, true)
		if err != nil {
			return nil, err
		}
		return rule(ctx, u, r.VerifyCode)
	}
}

func adminOnly(what string) error {
	return errs.New(errs.PermissionDenied, "Permission denied. (reason = %s is for a domain admin)", what)
}

func (s *service) createUserV1(ctx context.Context, p *auth.Principal, r *createUserV1) (*core.User, error) {
	dom, err := s.DomainOfRequest(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return s.createUser(ctx, newUser{DomainID: dom, UserID: r.UserID, AuthType: r.Backend, UserType: cmp.Or(r.UserType, "USER"), AuthKey: "backend",
		Password: r.Password, Name: r.Name, Email: r.Email, Language: r.Language, Timezone: r.Timezone, Tags: r.Tags, ResetPassword: r.ResetPassword})
}

func (s *service) updateUserV1(ctx context.Context, p *auth.Principal, r *updateUserV1) (*core.User, error) {
	u, admin, err := s.v1User(ctx, p, r.DomainID, r.UserID, true)
	if err != nil {
		return nil, err
	}
	if !admin && (r.Password != "" || r.ResetPassword) {
		return nil, errs.New(errs.PermissionDenied, "Permission denied. (reason = change your own password with /identity/v2/user-profile/update and current_password)")
	}
	if r.Password != "" || r.ResetPassword || (r.Email != "" && r.Email != u.Email) {
		if err := takeover.Guard(ctx, s.Deps, p, u, r.CurrentPassword, false); err != nil {
			return nil, err
		}
	}
	return s.adminUpdate(ctx, u, userprofile.UserChange{Name: r.Name, Email: r.Email, Language: r.Language, Timezone: r.Timezone, Tags: r.Tags}, r.Password, r.ResetPassword)
}

func (s *service) verifyEmailV1(ctx context.Context, p *auth.Principal, r *verifyEmailV1) (*api.Empty, error) {
	u, admin, err := s.v1User(ctx, p, r.DomainID, r.UserID, true)
	if err != nil {
		return nil, err
	}
	if r.Force && !admin {
		return nil, adminOnly("force")
	}
	if err := userprofile.CheckEmailAddress("email", r.Email); err != nil {
		return nil, err
	}
	if r.Force || (r.Email != "" && r.Email != u.Email) {
		if err := takeover.Guard(ctx, s.Deps, p, u, r.CurrentPassword, false); err != nil {
			return nil, err
		}
	}
	if r.Force {
		_, err = s.profile.MarkEmailVerified(ctx, u, r.Email)
	} else {
		err = s.profile.RequestEmailCode(ctx, u, r.Email)
	}
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *service) setRequiredActionsV1(ctx context.Context, p *auth.Principal, r *setRequiredActionsV1) (*core.User, error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	u, err := s.UserToChange(ctx, caller, r.UserID)
	if err != nil {
		return nil, err
	}
	return s.addRequiredActions(ctx, u, r.Actions)
}

func (s *service) enableMFAV1(ctx context.Context, p *auth.Principal, r *enableMFAV1) (*core.User, error) {
	u, _, err := s.v1User(ctx, p, r.DomainID, r.UserID, true)
	if err != nil {
		return nil, err
	}
	return s.profile.EnableMFA(ctx, u, r.MFAType, r.Options, func() error {
		return takeover.Guard(ctx, s.Deps, p, u, r.CurrentPassword, slices.Contains(u.RequiredActions, core.EnforceMFA))
	})
}

func (s *service) disableMFAV1(ctx context.Context, p *auth.Principal, r *disableMFAV1) (*core.User, error) {
	u, admin, err := s.v1User(ctx, p, r.DomainID, r.UserID, true)
	if err != nil {
		return nil, err
	}
	if r.Force {
		if !admin {
			return nil, adminOnly("force")
		}
		if err := takeover.Guard(ctx, s.Deps, p, u, "", false); err != nil {
			return nil, err
		}
		return s.profile.ResetMFA(ctx, u)
	}
	return s.profile.RequestMFADisable(ctx, u)
}

func (s *service) deleteUserV1(ctx context.Context, p *auth.Principal, r *userRequestV1) (*api.Empty, error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	if err := s.deleteUser(ctx, caller, r.UserID); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *service) getUserV1(ctx context.Context, p *auth.Principal, r *getUserV1) (*userInfoV1, error) {
	u, _, err := s.v1User(ctx, p, r.DomainID, r.UserID, false)
	if err != nil {
		return nil, err
	}
	info := toV1(u)
	info.only = r.Only
	return info, nil
}

// renameV1 turns the v1 field name backend into the stored auth_type.
func renameV1(_ string, p *string) error {
	if *p == "backend" || strings.HasPrefix(*p, "backend.") {
		*p = "auth_type" + strings.TrimPrefix(*p, "backend")
	}
	return nil
}

func (s *service) listUsersV1(ctx context.Context, p *auth.Principal, r *userQueryV1) (*api.List[userInfoV1], error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	_ = r.Query.Paths(renameV1) // renameV1 never fails
	q := query.With(r.Query, query.Params("user_id", r.UserID, "name", r.Name, "state", r.State, "email", r.Email,
		"user_type", r.UserType, "auth_type", r.Backend)...)
	return searchUsers(ctx, s, caller, q, userResourceV1, func(u *core.User) userInfoV1 { return *toV1(u) }, namesV1)
}

func (s *service) statUsersV1(ctx context.Context, p *auth.Principal, r *userStatV1) (*map[string]any, error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	return s.userStat(ctx, caller, r.Query, renameV1, infoFieldsV1, namesV1)
}

func (s *service) findUsersV1(ctx context.Context, p *auth.Principal, r *findUserV1) (*api.List[findUserInfo], error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	if r.Search.UserID == "" && r.Search.Keyword == "" {
		return nil, errs.Required("search.keyword")
	}
	q := &query.Query{Keyword: r.Search.Keyword, Page: &query.Page{Limit: findLimit}}
	q.Filter = query.Params("user_id", r.Search.UserID)
	return searchUsers(ctx, s, caller, q, userResourceV1, func(u *core.User) findUserInfo {
		return findUserInfo{UserID: u.UserID, Name: u.Name, Email: u.Email, Tags: wire.Object(u.Tags)}
	}, nil)
}
