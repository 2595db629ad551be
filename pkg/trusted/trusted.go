// Package trusted is how a service of the suite uses identity's trusted
// accounts (provider credentials a domain or a workspace holds) and trusted
// service accounts (the provider accounts they reach): it lists them and
// reads a trusted account's secret data through identity's API, with the
// service credential (a schedule or a worker has no caller, and
// get-secret-data is for SYSTEM callers only), and it picks the accounts
// a resource uses (inventory's collectors, cost analysis' data sources)
// from its tenancy and its secret filter.
//
// Whatever identity answers, what it returns belongs to the domain asked
// for. It never stores, logs or returns secret data other than to its
// caller, and holds no rule of the services that use it (what a task
// keeps, where its records go beyond the account's workspace).
package trusted

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Identity paths called.
const (
	AccountListPath        = "/identity/v2/trusted-account/list"
	SecretDataPath         = "/identity/v2/trusted-account/get-secret-data"
	ServiceAccountListPath = "/identity/v2/trusted-service-account/list"
)

// Secret service paths called (issue 36): the secrets of identity's
// general service accounts, which collect as upstream collects, from the
// secret service.
const (
	SecretListPath    = "/secret/v1/secret/list"
	SecretGetDataPath = "/secret/v1/secret/get-data"
)

// ServiceAccountPrefix starts the ids of identity's general service
// accounts: an Account with such an id is a secret of the secret service.
const ServiceAccountPrefix = "sa-"

// Global is the workspace_id of a domain-wide account.
const Global = "*"

// States of a secret filter, and the resource group of a resource bound to
// one workspace.
const (
	Enabled        = "ENABLED"
	Disabled       = "DISABLED"
	GroupWorkspace = "WORKSPACE"
)

// Account is what a service needs of a trusted account (TrustedAccountInfo,
// spec part 1): whose it is and which secret it holds. The secret data
// itself is read apart (SecretData).
type Account struct {
	TrustedAccountID string `json:"trusted_account_id"`
	Name             string `json:"name"`
	Provider         string `json:"provider"`
	ResourceGroup    string `json:"resource_group"`
	DomainID         string `json:"domain_id"`
	WorkspaceID      string `json:"workspace_id"`
	SecretSchemaID   string `json:"secret_schema_id"`
	TrustedSecretID  string `json:"trusted_secret_id"`
	// ProjectID is the project of a general service account's secret
	// ("" for a trusted account).
	ProjectID string `json:"project_id"`
}

// secret is what is read of the secret service's SecretInfo. As an
// Account, a secret is its service account (TrustedAccountID, so that
// secret_filter.service_accounts names it, as upstream), its secret
// (TrustedSecretID: secrets) and its schema (schemas).
type secret struct {
	SecretID         string `json:"secret_id"`
	Name             string `json:"name"`
	SchemaID         string `json:"schema_id"`
	Provider         string `json:"provider"`
	ServiceAccountID string `json:"service_account_id"`
	ResourceGroup    string `json:"resource_group"`
	ProjectID        string `json:"project_id"`
	WorkspaceID      string `json:"workspace_id"`
	DomainID         string `json:"domain_id"`
}

func (s secret) account() Account {
	return Account{TrustedAccountID: s.ServiceAccountID, Name: s.Name, Provider: s.Provider, ResourceGroup: s.ResourceGroup,
		DomainID: s.DomainID, WorkspaceID: s.WorkspaceID, SecretSchemaID: s.SchemaID, TrustedSecretID: s.SecretID, ProjectID: s.ProjectID}
}

// ServiceAccount is a trusted service account (TrustedServiceAccountInfo,
// spec part 1). It has no project.
type ServiceAccount struct {
	TrustedServiceAccountID string         `json:"trusted_service_account_id"`
	Name                    string         `json:"name"`
	Data                    map[string]any `json:"data"`
	Provider                string         `json:"provider"`
	Scope                   string         `json:"scope"`
	DomainID                string         `json:"domain_id"`
	WorkspaceID             string         `json:"workspace_id"`
}

// Identity calls identity's trusted-account operations and, when Secrets
// is set, the secret service's secrets of general service accounts.
type Identity struct {
	Client *call.Client
	// Secrets is the secret service (nil: trusted accounts alone).
	Secrets *call.Client
}

// Accounts lists the trusted accounts of a provider in a domain (identity
// takes domain_id from SYSTEM callers), in identity's order, then the
// secret service's secrets of that provider with a service account
// (upstream's collect reads Secret.list by provider).
func (i Identity) Accounts(ctx context.Context, domainID, provider string) ([]Account, error) {
	out, err := call.ListAll(ctx, i.Client, AccountListPath, map[string]any{"domain_id": domainID, "provider": provider},
		func(a Account) bool { return a.DomainID == domainID && a.Provider == provider })
	if err != nil || i.Secrets == nil {
		return out, err
	}
	secrets, err := call.ListAll(ctx, i.Secrets, SecretListPath, map[string]any{"domain_id": domainID, "provider": provider},
		func(s secret) bool {
			return s.DomainID == domainID && s.Provider == provider && strings.HasPrefix(s.ServiceAccountID, ServiceAccountPrefix)
		})
	if err != nil {
		return nil, err
	}
	for _, s := range secrets {
		out = append(out, s.account())
	}
	return out, nil
}

// ServiceAccounts lists the trusted service accounts of a domain.
func (i Identity) ServiceAccounts(ctx context.Context, domainID string) ([]ServiceAccount, error) {
	return call.ListAll(ctx, i.Client, ServiceAccountListPath, map[string]any{"domain_id": domainID},
		func(a ServiceAccount) bool { return a.DomainID == domainID })
}

// SecretData is a trusted account's secret data, read through identity's
// SYSTEM-only operation ({} when it holds none). It is for the plugin the
// caller runs, never to be stored, logged or answered.
//
// A general service account's id (sa-) reads its secret from the secret
// service's get-data instead: its own keys over its trusted secret's.
func (i Identity) SecretData(ctx context.Context, domainID, trustedAccountID string) (map[string]any, error) {
	if strings.HasPrefix(trustedAccountID, ServiceAccountPrefix) && i.Secrets != nil {
		return i.accountSecret(ctx, domainID, trustedAccountID)
	}
	var d struct {
		TrustedAccountID string         `json:"trusted_account_id"`
		DomainID         string         `json:"domain_id"`
		Data             map[string]any `json:"data"`
	}
	if err := i.Client.CallAsService(ctx, SecretDataPath, map[string]string{"trusted_account_id": trustedAccountID, "domain_id": domainID}, &d); err != nil {
		return nil, err
	}
	if (d.DomainID != "" && d.DomainID != domainID) || (d.TrustedAccountID != "" && d.TrustedAccountID != trustedAccountID) {
		// Another account's secret is never used in its place.
		return nil, errs.Down("The identity service", fmt.Errorf("%s answered another account", SecretDataPath))
	}
	if d.Data == nil {
		d.Data = map[string]any{}
	}
	return d.Data, nil
}

// Filter narrows the trusted accounts a resource uses (upstream's
// SecretFilter): when ENABLED, secrets (trusted_secret_id),
// service_accounts (trusted_account_id) and schemas (secret_schema_id)
// each hold an account in when they list it or are empty, and the
// exclude_ lists leave out what they name.
type Filter struct {
	State                  string   `bson:"state" json:"state" v:"enum=ENABLED|DISABLED"`
	Secrets                []string `bson:"secrets" json:"secrets" v:"max=1000"`
	ServiceAccounts        []string `bson:"service_accounts" json:"service_accounts" v:"max=1000"`
	Schemas                []string `bson:"schemas" json:"schemas" v:"max=1000"`
	ExcludeSecrets         []string `bson:"exclude_secrets" json:"exclude_secrets" v:"max=1000"`
	ExcludeServiceAccounts []string `bson:"exclude_service_accounts" json:"exclude_service_accounts" v:"max=1000"`
	ExcludeSchemas         []string `bson:"exclude_schemas" json:"exclude_schemas" v:"max=1000"`
}

// maxID bounds one id of a filter list.
const maxID = 255

// Validate: every id of the lists is a non-empty string of at most 255
// characters (the API decoder has trimmed them).
func (f *Filter) Validate() error {
	for _, l := range []struct {
		key string
		ids []string
	}{{"secrets", f.Secrets}, {"service_accounts", f.ServiceAccounts}, {"schemas", f.Schemas},
		{"exclude_secrets", f.ExcludeSecrets}, {"exclude_service_accounts", f.ExcludeServiceAccounts}, {"exclude_schemas", f.ExcludeSchemas}} {
		for _, id := range l.ids {
			if id == "" || utf8.RuneCountInString(id) > maxID {
				return errs.Invalid("secret_filter."+l.key, fmt.Sprintf("ids of 1 to %d characters", maxID))
			}
		}
	}
	return nil
}

// Normalized has every list non-nil and a state (DISABLED when none).
func (f Filter) Normalized() Filter {
	if f.State == "" {
		f.State = Disabled
	}
	f.Secrets, f.ServiceAccounts, f.Schemas = wire.List(f.Secrets), wire.List(f.ServiceAccounts), wire.List(f.Schemas)
	f.ExcludeSecrets, f.ExcludeServiceAccounts, f.ExcludeSchemas = wire.List(f.ExcludeSecrets), wire.List(f.ExcludeServiceAccounts), wire.List(f.ExcludeSchemas)
	return f
}

// Admits reports whether the filter lets a through (any account when it is
// not ENABLED).
func (f Filter) Admits(a Account) bool {
	if f.State != Enabled {
		return true
	}
	if !in(f.Secrets, a.TrustedSecretID) || !in(f.ServiceAccounts, a.TrustedAccountID) || !in(f.Schemas, a.SecretSchemaID) {
		return false
	}
	return !slices.Contains(f.ExcludeSecrets, a.TrustedSecretID) && !slices.Contains(f.ExcludeServiceAccounts, a.TrustedAccountID) &&
		!slices.Contains(f.ExcludeSchemas, a.SecretSchemaID)
}

// in is an `in` filter that an empty list leaves open.
func in(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }

// Owner is the tenancy of the resource that uses the accounts.
type Owner struct {
	DomainID      string
	ResourceGroup string // WORKSPACE, or DOMAIN
	WorkspaceID   string // "*" for a DOMAIN resource
}

// Reaches reports whether an account is the owner's to use: of its domain,
// holding a secret, and for a WORKSPACE owner of its workspace or
// domain-wide.
func (o Owner) Reaches(a Account) bool {
	if a.DomainID != o.DomainID || a.TrustedSecretID == "" {
		return false
	}
	return o.ResourceGroup != GroupWorkspace || a.WorkspaceID == o.WorkspaceID || a.WorkspaceID == Global
}

// Select picks the accounts the owner uses (semantics.md 7,
// Collector.collect step 2): those it reaches, narrowed to the secret
// secretID when given, and by the filter. The order is identity's.
func Select(accounts []Account, o Owner, f Filter, secretID string) []Account {
	var out []Account
	for _, a := range accounts {
		if o.Reaches(a) && (secretID == "" || a.TrustedSecretID == secretID) && f.Admits(a) {
			out = append(out, a)
		}
	}
	return out
}

// Workspace is where what an account brings belongs: the account's
// workspace, or for a domain-wide account the owner's (which is "*" for a
// DOMAIN owner).
func Workspace(a Account, ownerWorkspace string) string {
	if a.WorkspaceID != "" && a.WorkspaceID != Global {
		return a.WorkspaceID
	}
	return ownerWorkspace
}

// accountSecret is the data of a general service account's secret, read
// as a service: the account's newest secret (upstream keeps one).
func (i Identity) accountSecret(ctx context.Context, domainID, serviceAccountID string) (map[string]any, error) {
	var l struct {
		Results []secret `json:"results"`
	}
	if err := i.Secrets.CallAsService(ctx, SecretListPath, map[string]any{"domain_id": domainID, "service_account_id": serviceAccountID}, &l); err != nil {
		return nil, err
	}
	var s *secret
	for k := range l.Results {
		if l.Results[k].DomainID == domainID && l.Results[k].ServiceAccountID == serviceAccountID {
			s = &l.Results[k]
			break
		}
	}
	if s == nil {
		return nil, errs.NotFound("service_account_id", serviceAccountID)
	}
	var d struct {
		Data map[string]any `json:"data"`
	}
	if err := i.Secrets.CallAsService(ctx, SecretGetDataPath, map[string]string{"secret_id": s.SecretID, "domain_id": domainID}, &d); err != nil {
		return nil, err
	}
	if d.Data == nil {
		d.Data = map[string]any{}
	}
	return d.Data, nil
}
