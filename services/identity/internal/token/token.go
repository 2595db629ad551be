package token

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/credential"
	"github.com/nubes-io/nubes/services/identity/internal/login"
	"github.com/nubes-io/nubes/services/identity/internal/password"
	"github.com/nubes-io/nubes/services/identity/internal/session"
	"github.com/nubes-io/nubes/services/identity/internal/verification"
)

type credentials struct {
	UserID   string `json:"user_id" v:"required,max=60"`
	Password string `json:"password" v:"required,max=72"`
}

type issueToken struct {
	Credentials credentials `json:"credentials" v:"required"`
	AuthType    string      `json:"auth_type" v:"required,enum=LOCAL|MFA"`
	Timeout     int         `json:"timeout" v:"min=0"`
	VerifyCode  string      `json:"verify_code" v:"max=16"`
	DomainID    string      `json:"domain_id" v:"required"`
}

type tokenPair struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

// grantToken is what the console and the CLI send (spec/clients.md
// sections 9.1 and 12). token may instead come as the Bearer
// credential; domain_id, when given, must be the refresh token's.
type grantToken struct {
	GrantType   string `json:"grant_type" v:"required,enum=REFRESH_TOKEN"`
	Token       string `json:"token"`
	Scope       string `json:"scope" v:"required,enum=SYSTEM|DOMAIN|WORKSPACE|USER"`
	WorkspaceID string `json:"workspace_id"`
	DomainID    string `json:"domain_id"`
	Timeout     int    `json:"timeout" v:"min=0"`
}

type grantedToken struct {
	AccessToken string `json:"access_token"`
	RoleType    string `json:"role_type"`
	RoleID      string `json:"role_id"`
	DomainID    string `json:"domain_id"`
	WorkspaceID string `json:"workspace_id"`
}

type refreshToken struct {
	RefreshToken string `json:"refresh_token" v:"required"`
}

type checkedToken struct {
	TokenType   string `json:"token_type"`
	DomainID    string `json:"domain_id"`
	UserID      string `json:"user_id"`
	RoleType    string `json:"role_type"`
	WorkspaceID string `json:"workspace_id"`
}

func (s *service) routes() []api.Route {
	return []api.Route{
		api.Op[issueToken, tokenPair]{Path: "/identity/v2/token/issue", Access: auth.Public(), Summary: "Log in: a USER-scope access token and a refresh token (MFA: a second call with verify_code).", Handle: s.issue},
		api.Op[grantToken, grantedToken]{Path: "/identity/v2/token/grant", Access: auth.Public(), Summary: "Exchange a refresh token for an access token of a scope (SYSTEM, DOMAIN, WORKSPACE, USER).", Handle: s.grant},
		api.Op[refreshToken, tokenPair]{Path: "/identity/v2/token/refresh", Access: auth.Public(), Summary: "Exchange a refresh token for a new USER-scope pair.", Handle: s.refresh},
		api.Op[api.Empty, checkedToken]{Path: "/identity/v2/token/check", Access: core.AnyRole, Summary: "Whether the bearer credential is still good (services ask this; answers are cached for seconds).", Handle: s.check},
		api.Op[api.Empty, json.RawMessage]{Path: "/identity/v2/token/get-public-keys", Access: auth.Public(), Summary: "The JWK set that verifies tokens.", Handle: func(context.Context, *auth.Principal, *api.Empty) (*json.RawMessage, error) {
			raw := json.RawMessage(s.JWKS())
			return &raw, nil
		}},
	}
}

func (s *service) issue(ctx context.Context, _ *auth.Principal, r *issueToken) (*tokenPair, error) {
	d, err := store.Get[core.Domain](ctx, s.Domains, "domain_id", r.DomainID)
	if err != nil {
		if errs.Is(err, errs.NotFoundCode) {
			password.Matches("", r.Credentials.Password, s.Cfg.PasswordCost)
			return nil, login.ErrLogin
		}
		return nil, err
	}
	if d.State != core.Enabled {
		return nil, errs.New(errs.DomainState, "Domain is disabled. (domain_id = %s)", d.DomainID)
	}
	if r.AuthType == "MFA" && r.VerifyCode == "" { // before the attempt is claimed: a malformed request is no guess
		return nil, errs.Required("verify_code")
	}
	u, err := login.Check(ctx, s.Deps, d.DomainID, r.Credentials.UserID, r.Credentials.Password)
	if err != nil {
		return nil, err
	}
	switch {
	case r.AuthType == "MFA" && u.MFA.State != core.Enabled:
		return nil, errs.New(errs.MFANotActivated, "MFA is not enabled for this user.")
	case r.AuthType == "MFA":
		if r.VerifyCode == "" {
			return nil, errs.Required("verify_code")
		}
		if u.MFA.MFAType == core.MFAOTP {
			// The attempt's login claim stays taken when the code is
			// wrong: the password is known, so the login throttle
			// bounds the guessing.
			if err := verification.CheckOTP(ctx, s.Deps, u, u.OTPSecret, strings.TrimSpace(r.VerifyCode)); err != nil {
				return nil, err
			}
			break
		}
		if _, err := verification.CodesOf(s.Deps).Verify(ctx, "login", u.DomainID, u.UserID, r.VerifyCode); err != nil {
			return nil, err
		}
	case u.MFA.State == core.Enabled && u.MFA.MFAType == core.MFAOTP:
		return nil, errs.New(errs.MFARequired, "MFA is required: repeat with auth_type MFA and verify_code from your authenticator app. (mfa_type = OTP)")
	case u.MFA.State == core.Enabled:
		email, _ := u.MFA.Options["email"].(string)
		code, err := verification.CodesOf(s.Deps).Issue(ctx, "login", u.DomainID, u.UserID, s.Cfg.MFACodeTTL, nil)
		if err != nil {
			return nil, err
		}
		if err := s.Mail(ctx, u, email, "mfa_code", map[string]string{"code": code, "user_id": u.UserID, "purpose": "login"}); err != nil {
			return nil, err
		}
		return nil, errs.New(errs.MFARequired, "MFA is required: a verification code was sent to %s. Repeat with auth_type MFA and verify_code. (mfa_type = EMAIL)", maskEmail(email))
	}
	if err := login.ThrottleOf(s.Deps).Succeeded(ctx, u.ID); err != nil {
		return nil, err
	}
	set := bson.D{{Key: "last_accessed_at", Value: wire.T(wire.Now())}}
	if u.State == core.Pending {
		set = append(set, bson.E{Key: "state", Value: core.Enabled})
	}
	if _, err := s.Users.UpdateOne(ctx, bson.D{{Key: "_id", Value: u.ID}}, bson.D{{Key: "$set", Value: set}}); err != nil {
		return nil, store.Wrap(err)
	}
	return s.pair(u, r.Timeout)
}

// pair issues a USER-scope access token and a refresh token.
func (s *service) pair(u *core.User, timeout int) (*tokenPair, error) {
	ttl := s.Cfg.AccessTTL
	if timeout > 0 {
		ttl = min(time.Duration(timeout)*time.Second, s.Cfg.MaxAccessTTL)
	}
	p := auth.Principal{DomainID: u.DomainID, UserID: u.UserID, Role: auth.User, Permissions: session.PendingPermissions(u), Session: u.SessionEpoch}
	access, err := s.Cfg.Signer.Issue(p, ttl)
	if err != nil {
		return nil, err
	}
	p.TokenType = auth.RefreshToken
	p.Permissions = nil
	refresh, err := s.Cfg.Signer.Issue(p, s.Cfg.RefreshTTL)
	if err != nil {
		return nil, err
	}
	return &tokenPair{AccessToken: access, RefreshToken: refresh}, nil
}

// fromRefresh verifies a refresh token and loads its user, who must still
// be allowed in (its session too), and answers the token's id.
func (s *service) fromRefresh(ctx context.Context, token string) (*core.User, string, error) {
	c, err := s.Verifier.Parse(token)
	if err != nil {
		return nil, "", err
	}
	if c.Type != auth.RefreshToken {
		return nil, "", errs.New(errs.InvalidGrantType, "The token is not a refresh token.")
	}
	p := c.Principal()
	if err := (credential.Checker{Deps: s.Deps}).Check(ctx, token, p); err != nil {
		return nil, "", err
	}
	u, err := store.GetLive[core.User](ctx, s.Users, "user_id", core.UserKey(p.DomainID, p.UserID)) // a user being deleted is as deleted
	return u, p.TokenID, err
}

// refresh rotates: the refresh token is spent and a new pair answered;
// spending it twice ends the user's sessions (sessions.go).
func (s *service) refresh(ctx context.Context, _ *auth.Principal, r *refreshToken) (*tokenPair, error) {
	u, jti, err := s.fromRefresh(ctx, r.RefreshToken)
	if err != nil {
		return nil, err
	}
	if err := s.spendRefresh(ctx, u, jti); err != nil {
		return nil, err
	}
	return s.pair(u, 0)
}

// grant turns a refresh token into an access token of a scope, with the
// role of the user's binding (spec/semantics.md 4.1).
//
// The refresh token is the body's token; without one, the Bearer
// credential (the console's automatic refresh sends it in both places).
// The body wins when both are there: a client that attaches its access
// token to every call still grants with the token it names.
func (s *service) grant(ctx context.Context, _ *auth.Principal, r *grantToken) (*grantedToken, error) {
	token := r.Token
	if token == "" {
		token = auth.BearerFromContext(ctx)
	}
	if token == "" {
		return nil, errs.Required("token")
	}
	// grant does not rotate (the console grants with the same refresh
	// token for hours, spec/clients.md 9.1), but refuses a spent one.
	u, jti, err := s.fromRefresh(ctx, token)
	if err != nil {
		return nil, err
	}
	if err := s.refreshSpent(ctx, u, jti); err != nil {
		return nil, err
	}
	if r.DomainID != "" && r.DomainID != u.DomainID {
		return nil, errs.Unauthenticated("the refresh token is not of domain " + r.DomainID)
	}
	if session.PendingPermissions(u) != nil {
		return nil, errs.New(errs.UpdatePasswordRequired, "Update the password (or enable MFA) first.")
	}
	out := &grantedToken{DomainID: u.DomainID}
	p := auth.Principal{DomainID: u.DomainID, UserID: u.UserID, Session: u.SessionEpoch}
	domainBinding, err := s.Binding(ctx, u.DomainID, u.UserID, "")
	if err != nil {
		return nil, err
	}
	isDomainAdmin := domainBinding != nil && domainBinding.RoleType == string(auth.DomainAdmin)
	switch r.Scope {
	case "USER":
		p.Role = auth.User
	case "DOMAIN":
		if !isDomainAdmin {
			return nil, errs.Forbidden()
		}
		p.Role, out.RoleID = auth.DomainAdmin, domainBinding.RoleID
	case "SYSTEM":
		// The root domain is the one the bootstrap recorded, by id: a
		// domain later named like it is not.
		root, err := s.RootDomainID(ctx)
		if err != nil {
			return nil, err
		}
		if !isDomainAdmin || u.DomainID != root {
			return nil, errs.Forbidden()
		}
		p.Role, out.RoleID = auth.SystemAdmin, domainBinding.RoleID
	case "WORKSPACE":
		if r.WorkspaceID == "" {
			return nil, errs.Required("workspace_id")
		}
		w, err := store.GetFor[core.Workspace](ctx, s.Workspaces, core.WorkspaceInDomain, &p, "workspace_id", r.WorkspaceID)
		if err != nil {
			return nil, err
		}
		if w.State != core.Enabled {
			return nil, errs.Invalid("workspace_id", "the workspace is disabled")
		}
		p.WorkspaceID, out.WorkspaceID = w.WorkspaceID, w.WorkspaceID
		if isDomainAdmin {
			p.Role, out.RoleID = auth.WorkspaceOwner, "managed-workspace-owner"
			break
		}
		b, err := s.Binding(ctx, u.DomainID, u.UserID, w.WorkspaceID)
		if err != nil {
			return nil, err
		}
		if b == nil {
			return nil, errs.Forbidden()
		}
		p.Role, out.RoleID = auth.Role(b.RoleType), b.RoleID
		if p.Role == auth.WorkspaceMember {
			if p.Projects, err = s.MemberProjects(ctx, u.DomainID, w.WorkspaceID, u.UserID); err != nil {
				return nil, err
			}
		}
	}
	ttl := s.Cfg.AccessTTL
	if r.Timeout > 0 {
		ttl = min(time.Duration(r.Timeout)*time.Second, s.Cfg.MaxAccessTTL)
	}
	if out.AccessToken, err = s.Cfg.Signer.Issue(p, ttl); err != nil {
		return nil, err
	}
	out.RoleType = string(p.Role)
	return out, nil
}

func (s *service) check(ctx context.Context, p *auth.Principal, _ *api.Empty) (*checkedToken, error) {
	// Authentication answered from identity's cache (up to auth.CheckTTL
	// old), and the asking service caches this answer again: look at the
	// records afresh, or a revocation could take two cache lifetimes.
	if p.TokenType != auth.SystemToken {
		if err := (credential.Checker{Deps: s.Deps}).Check(ctx, "", p); err != nil {
			return nil, err
		}
	}
	return &checkedToken{TokenType: p.TokenType, DomainID: p.DomainID, UserID: p.UserID, RoleType: string(p.Role), WorkspaceID: p.WorkspaceID}, nil
}

func maskEmail(e string) string {
	name, host, ok := strings.Cut(e, "@")
	if !ok || len(name) < 2 {
		return "***"
	}
	return name[:1] + strings.Repeat("*", len(name)-1) + "@" + host
}

type service struct {
	*core.Deps
	spentRefresh store.Window // refresh tokens token/refresh exchanged (sessions.go)
}

// Routes are the operations of tokens.
func Routes(d *core.Deps) []api.Route {
	return (&service{Deps: d, spentRefresh: store.Window{C: d.DB.Collection(core.CountersCollection), Max: 1, TTL: d.Cfg.RefreshTTL + time.Minute}}).routes()
}
