package userprofile

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/session"
	"github.com/nubes-io/nubes/services/identity/internal/takeover"
)

// The v2 user profile: any signed-in user acting on itself (the user in
// its token), including with a token narrowed to the profile while
// UPDATE_PASSWORD or ENFORCE_MFA is pending or from a mailed link; and the
// unauthenticated password reset. The rules are in rules.go.

type updateProfile struct {
	Password        string        `json:"password" v:"max=72"`
	CurrentPassword string        `json:"current_password" v:"max=72" doc:"required to change the password (unless UPDATE_PASSWORD is pending) or the e-mail address, unless the caller came through its latest mailed link"`
	Name            string        `json:"name" v:"max=128"`
	Email           string        `json:"email" v:"max=255" doc:"a new address is unverified"`
	Language        string        `json:"language" v:"max=16"`
	Timezone        string        `json:"timezone" v:"max=64"`
	Tags            freeform.Flat `json:"tags"`
}

type verifyEmail struct {
	Email           string `json:"email" v:"max=255"`
	CurrentPassword string `json:"current_password" v:"max=72" doc:"required with an address other than the current one (Nubes: no takeover from a token alone)"`
}

type confirmCode struct {
	VerifyCode string `json:"verify_code" v:"required,max=16"`
}

type passwordReset struct {
	UserID   string `json:"user_id" v:"required,max=60"`
	DomainID string `json:"domain_id" v:"required,max=64"`
}

type enableMFA struct {
	MFAType string         `json:"mfa_type" v:"required,enum=EMAIL|OTP" doc:"EMAIL: codes by mail; OTP: an authenticator app (TOTP)"`
	Options map[string]any `json:"options" doc:"EMAIL: {email}; OTP: none (the answer carries options.otp_qrcode_uri once)"`
	// Nubes: no takeover from a token alone.
	CurrentPassword string `json:"current_password" v:"max=72" doc:"required unless ENFORCE_MFA is pending or the caller came through its latest mailed link"`
}

type disableMFA struct {
	UserID   string `json:"user_id" v:"max=60" doc:"ignored: the user is the caller"`
	Force    bool   `json:"force" doc:"not for oneself: an admin uses /identity/v2/user/disable-mfa"`
	DomainID string `json:"domain_id" v:"max=64" doc:"ignored: the domain is the caller's"`
}

type myWorkspacesReq struct {
	// The console's landing page sends it for a workspace group's tab.
	WorkspaceGroupID string `json:"workspace_group_id" v:"max=64" doc:"upstream's workspace groups: Nubes has none, so no workspace is in one"`
}

type myWorkspace struct {
	WorkspaceID  string        `json:"workspace_id"`
	Name         string        `json:"name"`
	State        string        `json:"state"`
	RoleName     string        `json:"role_name"`
	RoleType     string        `json:"role_type"`
	Tags         freeform.Flat `json:"tags"`
	IsDormant    bool          `json:"is_dormant"`
	CreatedBy    string        `json:"created_by"`
	ReferenceID  string        `json:"reference_id"`
	IsManaged    bool          `json:"is_managed"`
	DomainID     string        `json:"domain_id"`
	RoleID       string        `json:"role_id"`
	CreatedAt    wire.Time     `json:"created_at"`
	LastSyncedAt wire.Time     `json:"last_synced_at"`
}

func (s *Profile) routes() []api.Route {
	return []api.Route{
		api.Op[updatePassword, UserInfoV2]{Path: "/identity/v2/user-profile/update-password", Access: core.AnyRole, Summary: "Change one's own password (current_password needed unless UPDATE_PASSWORD is pending); ends every earlier session.", Handle: AsInfoV2(s.Deps, s.updateOwnPassword)},
		api.Op[updateProfile, UserInfoV2]{Path: "/identity/v2/user-profile/update", Access: core.AnyRole, Summary: "Change one's own profile or password (current_password needed unless UPDATE_PASSWORD is pending).", Handle: AsInfoV2(s.Deps, s.updateProfile)},
		api.Op[verifyEmail, api.Empty]{Path: "/identity/v2/user-profile/verify-email", Access: core.AnyRole, Summary: "Set one's e-mail (unverified) if given and mail a code to confirm it.", Handle: s.verifyOwnEmail},
		api.Op[confirmCode, UserInfoV2]{Path: "/identity/v2/user-profile/confirm-email", Access: core.AnyRole, Summary: "Confirm one's e-mail with the mailed code.", Handle: AsInfoV2(s.Deps, s.self(true, s.ConfirmEmail))},
		api.Op[passwordReset, api.Empty]{Path: "/identity/v2/user-profile/reset-password", Access: auth.Public(), Summary: "Mail a password reset link to an eligible user; answers the same whether or not the user exists.", Handle: func(ctx context.Context, _ *auth.Principal, r *passwordReset) (*api.Empty, error) {
			return &api.Empty{}, s.RequestReset(ctx, r.DomainID, r.UserID)
		}},
		api.Op[enableMFA, UserInfoV2]{Path: "/identity/v2/user-profile/enable-mfa", Access: core.AnyRole, Summary: "Start turning MFA on: EMAIL mails a code to options.email; OTP answers the secret as options.otp_qrcode_uri.", Handle: AsInfoV2(s.Deps, s.enableOwnMFA)},
		api.Op[disableMFA, UserInfoV2]{Path: "/identity/v2/user-profile/disable-mfa", Access: core.AnyRole, Summary: "Start turning MFA off: EMAIL mails a code to the MFA address; OTP waits for a code of the app.", Handle: AsInfoV2(s.Deps, s.disableOwnMFA)},
		api.Op[confirmCode, UserInfoV2]{Path: "/identity/v2/user-profile/confirm-mfa", Access: core.AnyRole, Summary: "Confirm the pending MFA change with the mailed code (OTP: a code of the app).", Handle: AsInfoV2(s.Deps, s.self(true, s.ConfirmMFA))},
		api.Op[api.Empty, UserInfoV2]{Path: "/identity/v2/user-profile/get", Access: core.AnyRole, Summary: "Get one's own user.", Handle: AsInfoV2(s.Deps, s.getProfile)},
		api.Op[myWorkspacesReq, api.List[myWorkspace]]{Path: "/identity/v2/user-profile/get-workspaces", Access: core.AnyRole, Summary: "The enabled workspaces one may enter, with one's role there.", Handle: s.myWorkspaces},
		// Workspace groups are not built (pkg/api NotBuilt): one belongs
		// to none, so the landing page's group tab is empty, not broken.
		api.Op[api.Empty, api.List[map[string]any]]{Path: "/identity/v2/user-profile/get-workspace-groups", Access: core.AnyRole, Summary: "The workspace groups one is in: none while workspace groups are not built.",
			Handle: func(context.Context, *auth.Principal, *api.Empty) (*api.List[map[string]any], error) {
				return &api.List[map[string]any]{}, nil
			}},
	}
}

// selfDoc loads the caller's own user. A token narrowed to the profile
// (pending action or mailed link) works only while its reason lasts; an
// API key may read the profile but not change it.
func (s *Profile) selfDoc(ctx context.Context, p *auth.Principal, write bool) (*core.UserDoc, error) {
	if write && p.TokenType == auth.APIKey {
		return nil, errs.New(errs.PermissionDenied, "Permission denied. (reason = an API key cannot change its user's profile)")
	}
	d, err := s.UserDocFor(ctx, p, core.SelfResource, p.UserID, write)
	if err != nil {
		return nil, err
	}
	if len(p.Permissions) > 0 && session.PendingPermissions(&d.User) == nil && !takeover.IsLink(d, p) {
		return nil, errs.Unauthenticated("this token was for a pending action that is done; sign in again")
	}
	return d, nil
}

// self adapts a rule on the caller's user taking a code (confirm-email,
// confirm-mfa) to a handler.
func (s *Profile) self(write bool, rule func(context.Context, *core.User, string) (*core.User, error)) func(context.Context, *auth.Principal, *confirmCode) (*core.User, error) {
	return func(ctx context.Context, p *auth.Principal, r *confirmCode) (*core.User, error) {
		d, err := s.selfDoc(ctx, p, write)
		if err != nil {
			return nil, err
		}
		return rule(ctx, &d.User, r.VerifyCode)
	}
}

func (s *Profile) getProfile(ctx context.Context, p *auth.Principal, _ *api.Empty) (*core.User, error) {
	d, err := s.selfDoc(ctx, p, false)
	if err != nil {
		return nil, err
	}
	return &d.User, nil
}

func (s *Profile) updateProfile(ctx context.Context, p *auth.Principal, r *updateProfile) (*core.User, error) {
	d, err := s.selfDoc(ctx, p, true)
	if err != nil {
		return nil, err
	}
	return s.selfUpdate(ctx, d, p, UserChange{Name: r.Name, Email: r.Email, Language: r.Language, Timezone: r.Timezone, Tags: r.Tags}, r.Password, r.CurrentPassword)
}

func (s *Profile) verifyOwnEmail(ctx context.Context, p *auth.Principal, r *verifyEmail) (*api.Empty, error) {
	d, err := s.selfDoc(ctx, p, true)
	if err != nil {
		return nil, err
	}
	if err := CheckEmailAddress("email", r.Email); err != nil {
		return nil, err
	}
	if r.Email != "" && r.Email != d.Email {
		if err := takeover.Guard(ctx, s.Deps, p, &d.User, r.CurrentPassword, false); err != nil {
			return nil, err
		}
	}
	return &api.Empty{}, s.RequestEmailCode(ctx, &d.User, r.Email)
}

func (s *Profile) enableOwnMFA(ctx context.Context, p *auth.Principal, r *enableMFA) (*core.User, error) {
	d, err := s.selfDoc(ctx, p, true)
	if err != nil {
		return nil, err
	}
	return s.EnableMFA(ctx, &d.User, r.MFAType, r.Options, func() error {
		return takeover.Guard(ctx, s.Deps, p, &d.User, r.CurrentPassword, slices.Contains(d.RequiredActions, core.EnforceMFA))
	})
}

func (s *Profile) disableOwnMFA(ctx context.Context, p *auth.Principal, r *disableMFA) (*core.User, error) {
	if r.Force {
		return nil, errs.New(errs.PermissionDenied, "Permission denied. (reason = force is for an admin: /identity/v2/user/disable-mfa)")
	}
	d, err := s.selfDoc(ctx, p, true)
	if err != nil {
		return nil, err
	}
	return s.RequestMFADisable(ctx, &d.User)
}

// myWorkspaces lists the enabled workspaces the caller may enter: every
// one of the domain for a domain admin (as owner, which is what
// token/grant gives it there), else those of its workspace bindings.
func (s *Profile) myWorkspaces(ctx context.Context, p *auth.Principal, r *myWorkspacesReq) (*api.List[myWorkspace], error) {
	d, err := s.selfDoc(ctx, p, false)
	if err != nil {
		return nil, err
	}
	if r.WorkspaceGroupID != "" { // no workspace is in a group
		return &api.List[myWorkspace]{Results: []myWorkspace{}}, nil
	}
	u := &d.User
	admin, err := s.Binding(ctx, u.DomainID, u.UserID, "")
	if err != nil {
		return nil, err
	}
	filter := bson.D{{Key: "domain_id", Value: u.DomainID}, {Key: "state", Value: core.Enabled},
		{Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}} // a workspace being deleted is not entered
	roleOf := map[string]core.Role{}
	if admin == nil || admin.RoleType != string(auth.DomainAdmin) {
		cur, err := s.Bindings.Find(ctx, bson.D{{Key: "domain_id", Value: u.DomainID}, {Key: "user_id", Value: u.UserID}})
		if err != nil {
			return nil, store.Wrap(err)
		}
		var bs []core.RoleBinding
		if err := cur.All(ctx, &bs); err != nil {
			return nil, store.Wrap(err)
		}
		ids := bson.A{}
		for _, b := range bs {
			if role, ok := core.ManagedRole(b.RoleID); ok && b.WorkspaceID != "" {
				roleOf[b.WorkspaceID] = role
				ids = append(ids, b.WorkspaceID)
			}
		}
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}})
	}
	cur, err := s.Workspaces.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "name", Value: 1}, {Key: "_id", Value: 1}}))
	if err != nil {
		return nil, store.Wrap(err)
	}
	var ws []core.Workspace
	if err := cur.All(ctx, &ws); err != nil {
		return nil, store.Wrap(err)
	}
	owner, _ := core.ManagedRole("managed-workspace-owner")
	out := &api.List[myWorkspace]{Results: make([]myWorkspace, 0, len(ws)), TotalCount: int64(len(ws))}
	for _, w := range ws {
		role, ok := roleOf[w.WorkspaceID]
		if !ok {
			role = owner
		}
		out.Results = append(out.Results, myWorkspace{WorkspaceID: w.WorkspaceID, Name: w.Name, State: w.State, RoleName: role.Name,
			RoleType: role.RoleType, Tags: wire.Object(w.Tags), IsDormant: w.IsDormant, CreatedBy: w.CreatedBy, DomainID: w.DomainID, RoleID: role.RoleID, CreatedAt: w.CreatedAt})
	}
	return out, nil
}

type updatePassword struct {
	CurrentPassword string `json:"current_password" v:"max=72" doc:"required unless UPDATE_PASSWORD is pending or the caller came through its latest mailed link"`
	NewPassword     string `json:"new_password" v:"required,max=72"`
}

// updateOwnPassword is user-profile/update with the password alone: the
// same rules (LOCAL users, the password format, current_password checked
// as a login, not the same password, earlier sessions ended, the user
// told), and no API key.
func (s *Profile) updateOwnPassword(ctx context.Context, p *auth.Principal, r *updatePassword) (*core.User, error) {
	d, err := s.selfDoc(ctx, p, true)
	if err != nil {
		return nil, err
	}
	return s.selfUpdate(ctx, d, p, UserChange{}, r.NewPassword, r.CurrentPassword)
}

// Profile holds the rules of one's own user: the profile, e-mail
// verification, MFA and the password reset. The user package's v1
// self-service operations use them too.
type Profile struct{ *core.Deps }

// Routes are the operations of the user profile.
func Routes(d *core.Deps) []api.Route { return (&Profile{Deps: d}).routes() }
