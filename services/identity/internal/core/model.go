package core

import (
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Collections owned by the identity service.
const (
	DomainsCollection         = "identity_domains"
	UsersCollection           = "identity_users"
	APIKeysCollection         = "identity_api_keys"
	WorkspacesCollection      = "identity_workspaces"
	ProjectsCollection        = "identity_projects"
	RoleBindingsCollection    = "identity_role_bindings"
	TrustedAccountsCollection = "identity_trusted_accounts"
	TrustedSACollection       = "identity_trusted_service_accounts"
	JobsCollection            = "identity_jobs"
	CodesCollection           = "identity_codes"
	CountersCollection        = "identity_counters"
	BootstrapCollection       = "identity_bootstrap"
	OutboxCollection          = "identity_outbox"
	ProjectGroupsCollection   = "identity_project_groups"
	DeadLettersCollection     = "identity_dead_letters" // messages its consumers gave up on (events.DeadRecords)
)

// States and enum values.
const (
	Enabled        = "ENABLED"
	Disabled       = "DISABLED"
	Pending        = "PENDING"
	Expired        = "EXPIRED"
	UpdatePassword = "UPDATE_PASSWORD"
	EnforceMFA     = "ENFORCE_MFA"
)

// Config is what the identity rules need to know.
type Config struct {
	Signer           *auth.Signer
	Cipher           *Cipher // encrypts trusted account secret data
	RootDomain       string  // name of the root domain on first start (SYSTEM scope follows its id)
	RootDomainID     string  // id for the root domain on first start (default: generated)
	AdminUserID      string
	AdminPassword    string // empty: a random one on first start
	AccessTTL        time.Duration
	MaxAccessTTL     time.Duration
	RefreshTTL       time.Duration
	MFACodeTTL       time.Duration
	EmailCodeTTL     time.Duration
	InviteTTL        time.Duration
	MaxLoginFailures int
	LoginBlock       time.Duration
	ConsoleURL       string // links in e-mails: <ConsoleURL>?sso_access_token=...
	// ServiceURLs (config service_urls) name the services of the suite and
	// their base URLs: endpoint/list answers them and the console's
	// reflection list is merged from them.
	ServiceURLs map[string]string
	// EndpointURL, when set, is the one base URL clients reach every
	// service at (the Ingress); endpoint/list answers it instead.
	EndpointURL string
	// GRPCEndpointURL (grpc://host:port: every service on one address, the
	// devstack's) and GRPCServiceURLs (a service's own, the chart's) are
	// where upstream's clients dial each service over gRPC; when a
	// service has one, endpoint/list answers it, as upstream's does.
	GRPCEndpointURL string
	GRPCServiceURLs map[string]string
	// Plugins calls the account collector plugins of trusted-account sync
	// (nil: every sync fails with ERROR_NO_PLUGIN_ENDPOINT).
	Plugins *plugin.Client
	// AccountCollectors maps a provider to the account collector plugin
	// that syncs its trusted accounts: plugin_id or plugin_id@version
	// (config account_collector_plugins).
	AccountCollectors map[string]string
	// SyncAckWait is when an unfinished sync goes to another replica (it
	// must exceed a plugin call, 180 s); SyncScheduleTick is how often sync
	// schedules are looked at.
	SyncAckWait      time.Duration
	SyncScheduleTick time.Duration
	// SyncScheduleClock is the hour the sync schedules fire at (time.Now
	// when nil); tests move it instead of waiting for the wall clock's.
	SyncScheduleClock func() time.Time
	// SystemTokenTTL is the lifetime of the SYSTEM tokens (service
	// credentials) identity issues; VerifyKeys are earlier signing keys
	// still published and accepted until their tokens expire (rotation,
	// docs/operations.md).
	SystemTokenTTL time.Duration
	VerifyKeys     []*auth.Signer
	// PasswordCost is the bcrypt cost of new password hashes (0:
	// bcrypt.DefaultCost). Tests lower it: one hash at the default cost
	// takes seconds under the race detector.
	PasswordCost int
}

// Defaults fills unset durations and limits with upstream's values.
func (c *Config) Defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.AccessTTL, 30*time.Minute)
	set(&c.MaxAccessTTL, 12*time.Hour) // upstream allows 7 days; see docs/decisions.md
	set(&c.RefreshTTL, 3*time.Hour)
	set(&c.MFACodeTTL, 5*time.Minute)
	set(&c.EmailCodeTTL, time.Hour)
	set(&c.InviteTTL, 7*24*time.Hour)
	set(&c.LoginBlock, 5*time.Minute)
	set(&c.SyncAckWait, 4*time.Minute)
	set(&c.SyncScheduleTick, 30*time.Second)
	set(&c.SystemTokenTTL, 30*24*time.Hour)
	if c.PasswordCost == 0 {
		c.PasswordCost = bcrypt.DefaultCost
	}
	if c.MaxLoginFailures == 0 {
		c.MaxLoginFailures = 10
	}
	if c.RootDomain == "" {
		c.RootDomain = "root"
	}
	if c.AdminUserID == "" {
		c.AdminUserID = "admin"
	}
	if c.ConsoleURL == "" {
		c.ConsoleURL = "http://127.0.0.1:8080/console"
	}
}

// Domain is a tenant.
type Domain struct {
	ID        string        `bson:"_id" json:"-"`
	DomainID  string        `bson:"domain_id" json:"domain_id"`
	Name      string        `bson:"name" json:"name"`
	State     string        `bson:"state" json:"state"`
	Tags      freeform.Flat `bson:"tags" json:"tags"`
	CreatedAt wire.Time     `bson:"created_at" json:"created_at"`
}

// MFA is a user's second factor.
type MFA struct {
	State   string         `bson:"state" json:"state"`
	MFAType string         `bson:"mfa_type" json:"mfa_type"`
	Options map[string]any `bson:"options" json:"options"`
}

// LoginFailures counts failed logins in the current window.
type LoginFailures struct {
	Count int       `bson:"count"`
	Since wire.Time `bson:"since"`
}

// User is a member of a domain. Its _id is "<domain_id>/<user_id>": user
// ids are chosen by the caller and unique per domain.
type User struct {
	ID              string        `bson:"_id"`
	UserID          string        `bson:"user_id"`
	DomainID        string        `bson:"domain_id"`
	Name            string        `bson:"name"`
	State           string        `bson:"state"`
	Email           string        `bson:"email"`
	EmailVerified   bool          `bson:"email_verified"`
	AuthType        string        `bson:"auth_type"`
	UserType        string        `bson:"user_type"` // v1: USER or API_USER
	RoleType        string        `bson:"role_type"` // DOMAIN_ADMIN or USER
	RoleID          string        `bson:"role_id"`
	MFA             MFA           `bson:"mfa"`
	Language        string        `bson:"language"`
	Timezone        string        `bson:"timezone"`
	RequiredActions []string      `bson:"required_actions"`
	Tags            freeform.Flat `bson:"tags"`
	PasswordHash    string        `bson:"password_hash"`
	OTPSecret       *Sealed       `bson:"otp_secret,omitempty"`  // OTP MFA on: the TOTP secret
	OTPPending      *Sealed       `bson:"otp_pending,omitempty"` // from enable-mfa (OTP) to confirm-mfa
	OTPDisableBy    wire.Time     `bson:"otp_disable_by"`        // disable-mfa (OTP): confirm-mfa before this turns it off
	LoginFailures   LoginFailures `bson:"login_failures"`
	// SessionEpoch is stamped into every access and refresh token issued
	// to the user; a password, MFA or state change sets a new one, which
	// ends every token before it (credential.Checker, internal/session).
	SessionEpoch   int64     `bson:"session_epoch"`
	CreatedAt      wire.Time `bson:"created_at"`
	LastAccessedAt wire.Time `bson:"last_accessed_at"`
}

// UserKey is a user's _id.
func UserKey(domainID, userID string) string { return domainID + "/" + userID }

// APIKey is a bearer credential of a user (v1 and v2 share the collection).
type APIKey struct {
	ID             string    `bson:"_id" json:"-"`
	APIKeyID       string    `bson:"api_key_id" json:"api_key_id"`
	Name           string    `bson:"name" json:"name"`
	State          string    `bson:"state" json:"state"`
	UserID         string    `bson:"user_id" json:"user_id"`
	DomainID       string    `bson:"domain_id" json:"domain_id"`
	AppID          string    `bson:"app_id" json:"app_id"`
	Version        int       `bson:"version" json:"-"` // 1 or 2: the API generation that made it
	ExpiredAt      wire.Time `bson:"expired_at" json:"expired_at"`
	CreatedAt      wire.Time `bson:"created_at" json:"created_at"`
	LastAccessedAt wire.Time `bson:"last_accessed_at" json:"last_accessed_at"`
}

// Workspace groups projects inside a domain.
type Workspace struct {
	ID          string        `bson:"_id" json:"-"`
	WorkspaceID string        `bson:"workspace_id" json:"workspace_id"`
	Name        string        `bson:"name" json:"name"`
	State       string        `bson:"state" json:"state"`
	Tags        freeform.Flat `bson:"tags" json:"tags"`
	// IsDormant is upstream's flag the console filters on (workspace/list
	// is_dormant eq false). The spec gives no rule that makes a workspace
	// dormant, so Nubes stores false (docs/decisions.md, issue 18).
	IsDormant bool      `bson:"is_dormant" json:"is_dormant"`
	DomainID  string    `bson:"domain_id" json:"domain_id"`
	CreatedBy string    `bson:"created_by" json:"created_by"`
	CreatedAt wire.Time `bson:"created_at" json:"created_at"`
}

// Project is a unit of resources inside a workspace.
type Project struct {
	ID          string        `bson:"_id" json:"-"`
	ProjectID   string        `bson:"project_id" json:"project_id"`
	Name        string        `bson:"name" json:"name"`
	ProjectType string        `bson:"project_type" json:"project_type"`
	Users       []string      `bson:"users" json:"users"`
	Tags        freeform.Flat `bson:"tags" json:"tags"`
	WorkspaceID string        `bson:"workspace_id" json:"workspace_id"`
	DomainID    string        `bson:"domain_id" json:"domain_id"`
	CreatedBy   string        `bson:"created_by" json:"created_by"`
	CreatedAt   wire.Time     `bson:"created_at" json:"created_at"`
	// ProjectGroupID is the project's folder in the workspace's tree
	// (internal/projectgroup); "" at the top.
	ProjectGroupID string `bson:"project_group_id" json:"project_group_id"`
}

// RoleBinding gives a user a role in the domain or in one workspace.
type RoleBinding struct {
	ID            string    `bson:"_id" json:"-"`
	RoleBindingID string    `bson:"role_binding_id" json:"role_binding_id"`
	UserID        string    `bson:"user_id" json:"user_id"`
	RoleID        string    `bson:"role_id" json:"role_id"`
	RoleType      string    `bson:"role_type" json:"role_type"`
	ResourceGroup string    `bson:"resource_group" json:"resource_group"`
	WorkspaceID   string    `bson:"workspace_id" json:"workspace_id"`
	DomainID      string    `bson:"domain_id" json:"domain_id"`
	CreatedAt     wire.Time `bson:"created_at" json:"created_at"`
}

// Role is one of the managed roles, present from the start.
type Role struct {
	RoleID      string   `json:"role_id"`
	Name        string   `json:"name"`
	RoleType    string   `json:"role_type"`
	State       string   `json:"state"`
	IsManaged   bool     `json:"is_managed"`
	Permissions []string `json:"permissions"`
}

// ManagedRoles are the roles every domain has.
var ManagedRoles = []Role{
	{RoleID: "managed-domain-admin", Name: "Domain Admin", RoleType: string(auth.DomainAdmin), State: Enabled, IsManaged: true, Permissions: []string{"*"}},
	{RoleID: "managed-workspace-owner", Name: "Workspace Owner", RoleType: string(auth.WorkspaceOwner), State: Enabled, IsManaged: true, Permissions: []string{"*"}},
	{RoleID: "managed-workspace-member", Name: "Workspace Member", RoleType: string(auth.WorkspaceMember), State: Enabled, IsManaged: true, Permissions: []string{"*"}},
}

func ManagedRole(id string) (Role, bool) {
	for _, r := range ManagedRoles {
		if r.RoleID == id {
			return r, true
		}
	}
	return Role{}, false
}
