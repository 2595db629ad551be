// Package auth authenticates callers and decides what they may call.
//
// Tokens are RS256 JWTs shaped after the upstream platform (claims did, aud,
// rol, wid, typ, ver "2.0"), verified offline against a JWK set. The package
// knows nothing of HTTP routing or storage: the server middleware feeds it
// the bearer string and puts the resulting Principal in the request context.
package auth

import (
	"context"
	"slices"
	"strings"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Role is the role a token carries (claim rol).
type Role string

// The roles of the platform, from most to least powerful.
const (
	SystemAdmin     Role = "SYSTEM_ADMIN"
	DomainAdmin     Role = "DOMAIN_ADMIN"
	WorkspaceOwner  Role = "WORKSPACE_OWNER"
	WorkspaceMember Role = "WORKSPACE_MEMBER"
	User            Role = "USER"
)

// Token types (claim typ).
const (
	AccessToken  = "ACCESS_TOKEN"
	RefreshToken = "REFRESH_TOKEN" // only identity's token/grant and token/refresh take it
	SystemToken  = "SYSTEM_TOKEN"
	APIKey       = "API_KEY" // jti is the api_key_id
)

// Principal is the authenticated caller. Tenancy (domain, workspace) comes
// from here, never from a request body.
type Principal struct {
	TokenType   string
	TokenID     string // jti; the api_key_id of an API key
	DomainID    string
	UserID      string
	WorkspaceID string
	Role        Role
	Projects    []string
	// Permissions, when not empty, narrow the token to operations whose
	// path starts with one of them (a token issued while UPDATE_PASSWORD is
	// pending reaches only /identity/v2/user-profile/).
	Permissions []string
	// Session is the user's session epoch the token was issued in: the
	// issuer's checker refuses a token whose user has a newer one (a
	// password, MFA or state change ends every session before it).
	Session int64
}

// Allows reports whether the token's permissions reach path.
func (p *Principal) Allows(path string) bool {
	if p == nil || len(p.Permissions) == 0 {
		return true
	}
	for _, prefix := range p.Permissions {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// IsSystem reports whether the caller has SYSTEM permission: a service
// credential or a person's SYSTEM_ADMIN grant.
func (p *Principal) IsSystem() bool {
	return p != nil && (p.Role == SystemAdmin || p.TokenType == SystemToken)
}

// IsService reports whether the caller is a service of the suite (a
// SYSTEM token, what `identity system-token` prints), not a person. Only
// a service reads secret data or acts inside another domain: a person's
// SYSTEM_ADMIN grant does neither.
func (p *Principal) IsService() bool {
	return p != nil && p.TokenType == SystemToken
}

// Access says who may call an operation.
type Access struct {
	public  bool
	service bool
	roles   []Role
}

// Public operations need no credentials.
func Public() Access { return Access{public: true} }

// Service lets in only services of the suite (SYSTEM tokens): a person's
// SYSTEM_ADMIN grant is refused with 403.
func Service() Access { return Access{service: true} }

// Roles lets callers with one of the roles in; a SYSTEM token always passes.
func Roles(roles ...Role) Access { return Access{roles: roles} }

// IsPublic reports whether no credentials are needed.
func (a Access) IsPublic() bool { return a.public }

// RoleList returns the allowed roles, for documentation (Service: none
// but SYSTEM tokens, which every operation lets in).
func (a Access) RoleList() []Role { return a.roles }

// IsService reports whether only services may call.
func (a Access) IsService() bool { return a.service }

// Check returns nil when p may call, 401 without a principal, 403 otherwise.
func (a Access) Check(p *Principal) error {
	if a.public {
		return nil
	}
	if p == nil {
		return errs.Unauthenticated("empty token provided.")
	}
	if p.TokenType == SystemToken || (!a.service && slices.Contains(a.roles, p.Role)) {
		return nil
	}
	return errs.Forbidden()
}

// Authenticator turns a bearer credential into a Principal. Implementations
// answer *errs.Error (401) for a bad credential.
type Authenticator interface {
	Authenticate(ctx context.Context, bearer string) (*Principal, error)
}

type (
	principalKey struct{}
	bearerKey    struct{}
	sourceKey    struct{}
)

// WithSource stores the caller's network address (the server's view of
// it), which throttles of credential guessing count per.
func WithSource(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, sourceKey{}, addr)
}

// SourceFromContext returns the caller's network address, or "".
func SourceFromContext(ctx context.Context) string {
	a, _ := ctx.Value(sourceKey{}).(string)
	return a
}

// WithBearer stores the caller's raw credential in ctx, so a call to
// another service of the suite can act on the caller's behalf.
func WithBearer(ctx context.Context, bearer string) context.Context {
	return context.WithValue(ctx, bearerKey{}, bearer)
}

// BearerFromContext returns the caller's raw credential, or "".
func BearerFromContext(ctx context.Context) string {
	b, _ := ctx.Value(bearerKey{}).(string)
	return b
}

// WithPrincipal stores p in ctx.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller, or nil for an anonymous request.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}
