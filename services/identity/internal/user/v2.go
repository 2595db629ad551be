package user

import (
	"cmp"
	"context"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/takeover"
	"github.com/nubes-io/nubes/services/identity/internal/userprofile"
)

// The v2 user operations: a domain admin (or SYSTEM) manages the users of
// its own domain, the one in its token. The rules are in user.go, and userprofile.Profile's.

type createUserV2 struct {
	UserID        string        `json:"user_id" v:"required,max=60"`
	Password      string        `json:"password" v:"max=72" doc:"required for LOCAL unless reset_password is true"`
	Name          string        `json:"name" v:"max=128"`
	Email         string        `json:"email" v:"max=255" doc:"required with reset_password"`
	AuthType      string        `json:"auth_type" v:"required,enum=LOCAL|EXTERNAL" doc:"EXTERNAL is refused: Nubes has no external auth plugin"`
	Language      string        `json:"language" v:"max=16"`
	Timezone      string        `json:"timezone" v:"max=64"`
	Tags          freeform.Flat `json:"tags"`
	ResetPassword bool          `json:"reset_password" doc:"true: mail an invitation link instead of setting a password"`
}

type updateUserV2 struct {
	UserID        string        `json:"user_id" v:"required,max=60"`
	Password      string        `json:"password" v:"max=72"`
	Name          string        `json:"name" v:"max=128"`
	Email         string        `json:"email" v:"max=255"`
	Language      string        `json:"language" v:"max=16"`
	Timezone      string        `json:"timezone" v:"max=64"`
	Tags          freeform.Flat `json:"tags"`
	ResetPassword bool          `json:"reset_password" doc:"true: mail a reset link; UPDATE_PASSWORD becomes pending"`
	// Nubes: no takeover from a token alone.
	CurrentPassword string `json:"current_password" v:"max=72" doc:"one's own password, e-mail or reset only: the current password"`
}

type verifyUserEmailV2 struct {
	UserID string `json:"user_id" v:"required,max=60"`
	Email  string `json:"email" v:"max=255"`
}

type userRequestV2 struct {
	UserID string `json:"user_id" v:"required,max=60"`
}

type setRequiredActionsV2 struct {
	UserID          string   `json:"user_id" v:"required,max=60"`
	RequiredActions []string `json:"required_actions" v:"required,max=10,enum=UPDATE_PASSWORD|ENFORCE_MFA" doc:"added to the pending actions"`
}

type userSearchV2 struct {
	Query    *query.Query `json:"query"`
	UserID   string       `json:"user_id"`
	Name     string       `json:"name"`
	State    string       `json:"state" v:"enum=ENABLED|DISABLED|PENDING"`
	Email    string       `json:"email"`
	AuthType string       `json:"auth_type" v:"enum=LOCAL|EXTERNAL"`
	// DomainID: a SYSTEM caller (the notification service mailing a
	// domain's admins) names the domain; anyone else only their own.
	DomainID string `json:"domain_id" v:"max=64"`
}

var userResourceV2 = query.Resource{KeywordFields: core.UserKeywords, DefaultSort: []query.SortKey{{Key: "name"}, {Key: "user_id"}},
	MinimalFields: []string{"user_id", "name", "state", "auth_type", "role_type"}, Fields: core.UserFields, Secret: core.UserSecret, Maps: freeform.Fields{"tags": freeform.Whole},
	Tenancy: core.UserResource.Tenancy}

var infoFieldsV2 = []string{"user_id", "name", "state", "email", "email_verified", "auth_type", "role_id", "role_type", "mfa",
	"language", "timezone", "required_actions", "tags", "domain_id", "created_at", "last_accessed_at"}

func (s *service) userRoutesV2() []api.Route {
	return []api.Route{
		api.Op[createUserV2, userprofile.UserInfoV2]{Path: "/identity/v2/user/create", Access: core.DomainAdmin, Summary: "Create a user (PENDING) in the caller's domain; reset_password mails an invitation.", Handle: userprofile.AsInfoV2(s.Deps, s.createUserV2)},
		api.Op[updateUserV2, userprofile.UserInfoV2]{Path: "/identity/v2/user/update", Access: core.DomainAdmin, Summary: "Change a user; a new e-mail is unverified; reset_password mails a reset link.", Handle: userprofile.AsInfoV2(s.Deps, s.updateUserV2)},
		api.Op[verifyUserEmailV2, api.Empty]{Path: "/identity/v2/user/verify-email", Access: core.DomainAdmin, Summary: "Mark a user's e-mail (optionally a new one) verified, without a code.", Handle: s.verifyUserEmailV2},
		api.Op[userRequestV2, userprofile.UserInfoV2]{Path: "/identity/v2/user/disable-mfa", Access: core.DomainAdmin, Summary: "Turn a user's MFA off without a code (not one's own, not with an API key).", Handle: userprofile.AsInfoV2(s.Deps, s.disableMFAV2)},
		api.Op[setRequiredActionsV2, userprofile.UserInfoV2]{Path: "/identity/v2/user/set-required-actions", Access: core.DomainAdmin, Summary: "Add required actions (UPDATE_PASSWORD, ENFORCE_MFA) to a user.", Handle: userprofile.AsInfoV2(s.Deps, s.setRequiredActionsV2)},
		api.Op[userRequestV2, userprofile.UserInfoV2]{Path: "/identity/v2/user/enable", Access: core.DomainAdmin, Summary: "Enable a user.", Handle: userprofile.AsInfoV2(s.Deps, s.v2Target(s.stateTo(core.Enabled)))},
		api.Op[userRequestV2, userprofile.UserInfoV2]{Path: "/identity/v2/user/disable", Access: core.DomainAdmin, Summary: "Disable a user: its credentials stop working (not the last domain admin).", Handle: userprofile.AsInfoV2(s.Deps, s.v2Target(s.stateTo(core.Disabled)))},
		api.Op[userRequestV2, api.Empty]{Path: "/identity/v2/user/delete", Access: core.DomainAdmin, Summary: "Delete a user with its role bindings and API keys (not the last domain admin).", Handle: s.deleteUserV2},
		api.Op[userRequestV2, userprofile.UserInfoV2]{Path: "/identity/v2/user/get", Access: core.DomainAdmin, Summary: "Get a user.", Handle: userprofile.AsInfoV2(s.Deps, s.v2Target(nil))},
		api.Op[userSearchV2, api.List[userprofile.UserInfoV2]]{Path: "/identity/v2/user/list", Access: core.DomainAdmin, Summary: "List the users of the caller's domain.", Handle: s.listUsersV2},
		api.Op[core.StatRequest, map[string]any]{Path: "/identity/v2/user/stat", Access: core.DomainAdmin, Summary: "Statistics over the users of the caller's domain.", Handle: func(ctx context.Context, p *auth.Principal, r *core.StatRequest) (*map[string]any, error) {
			return s.userStat(ctx, p, r.Query, noRename, infoFieldsV2, nil)
		}},
	}
}

// v2Target loads the user named by the request in the caller's domain and
// applies then (nil: just return it).
func (s *service) v2Target(then func(context.Context, *core.User) (*core.User, error)) func(context.Context, *auth.Principal, *userRequestV2) (*core.User, error) {
	return func(ctx context.Context, p *auth.Principal, r *userRequestV2) (*core.User, error) {
		if then == nil {
			return s.UserFor(ctx, p, r.UserID)
		}
		u, err := s.UserToChange(ctx, p, r.UserID)
		if err != nil {
			return nil, err
		}
		return then(ctx, u)
	}
}

func (s *service) stateTo(state string) func(context.Context, *core.User) (*core.User, error) {
	return func(ctx context.Context, u *core.User) (*core.User, error) { return s.setState(ctx, u, state) }
}

func (s *service) createUserV2(ctx context.Context, p *auth.Principal, r *createUserV2) (*core.User, error) {
	return s.createUser(ctx, newUser{DomainID: p.DomainID, UserID: r.UserID, AuthType: r.AuthType, UserType: "USER", AuthKey: "auth_type",
		Password: r.Password, Name: r.Name, Email: r.Email, Language: r.Language, Timezone: r.Timezone, Tags: r.Tags, ResetPassword: r.ResetPassword})
}

func (s *service) updateUserV2(ctx context.Context, p *auth.Principal, r *updateUserV2) (*core.User, error) {
	u, err := s.UserToChange(ctx, p, r.UserID)
	if err != nil {
		return nil, err
	}
	if r.Password != "" || r.ResetPassword || (r.Email != "" && r.Email != u.Email) {
		if err := takeover.Guard(ctx, s.Deps, p, u, r.CurrentPassword, false); err != nil {
			return nil, err
		}
	}
	return s.adminUpdate(ctx, u, userprofile.UserChange{Name: r.Name, Email: r.Email, Language: r.Language, Timezone: r.Timezone, Tags: r.Tags}, r.Password, r.ResetPassword)
}

func (s *service) disableMFAV2(ctx context.Context, p *auth.Principal, r *userRequestV2) (*core.User, error) {
	u, err := s.UserToChange(ctx, p, r.UserID)
	if err != nil {
		return nil, err
	}
	if err := takeover.Guard(ctx, s.Deps, p, u, "", false); err != nil {
		return nil, err
	}
	return s.profile.ResetMFA(ctx, u)
}

func (s *service) verifyUserEmailV2(ctx context.Context, p *auth.Principal, r *verifyUserEmailV2) (*api.Empty, error) {
	u, err := s.UserToChange(ctx, p, r.UserID)
	if err != nil {
		return nil, err
	}
	if err := takeover.Guard(ctx, s.Deps, p, u, "", false); err != nil {
		return nil, err
	}
	if _, err := s.profile.MarkEmailVerified(ctx, u, r.Email); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *service) setRequiredActionsV2(ctx context.Context, p *auth.Principal, r *setRequiredActionsV2) (*core.User, error) {
	u, err := s.UserToChange(ctx, p, r.UserID)
	if err != nil {
		return nil, err
	}
	return s.addRequiredActions(ctx, u, r.RequiredActions)
}

func (s *service) deleteUserV2(ctx context.Context, p *auth.Principal, r *userRequestV2) (*api.Empty, error) {
	if err := s.deleteUser(ctx, p, r.UserID); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *service) listUsersV2(ctx context.Context, p *auth.Principal, r *userSearchV2) (*api.List[userprofile.UserInfoV2], error) {
	q := query.With(r.Query, query.Params("user_id", r.UserID, "name", r.Name, "state", r.State, "email", r.Email, "auth_type", r.AuthType)...)
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	out, err := searchUsers(ctx, s, caller, q, userResourceV2, func(u *core.User) userprofile.UserInfoV2 { return *userprofile.ToV2(u) }, nil)
	if err != nil {
		return nil, err
	}
	page := make([]*userprofile.UserInfoV2, len(out.Results))
	for i := range out.Results {
		page[i] = &out.Results[i]
	}
	return out, userprofile.CountAPIKeys(ctx, s.Deps, caller.DomainID, page...)
}

// searchUsers lists the users p reaches as Info rows; names maps stored
// field names to the Info's (v1 backend) for only/minimal.
func searchUsers[Info any](ctx context.Context, s *service, p *auth.Principal, q *query.Query, r query.Resource, to func(*core.User) Info, names map[string]string) (*api.List[Info], error) {
	list, err := store.SearchFor[core.User](ctx, s.Users, q, r, p)
	if err != nil {
		return nil, err
	}
	out := &api.List[Info]{Results: make([]Info, len(list.Results)), TotalCount: list.TotalCount}
	for i := range list.Results {
		out.Results[i] = to(&list.Results[i])
	}
	for _, f := range list.Fields {
		out.Fields = append(out.Fields, cmp.Or(names[f], f))
	}
	return out, nil
}
