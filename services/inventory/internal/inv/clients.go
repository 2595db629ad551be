package inv

import (
	"context"
	"slices"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/pluginref"
)

// CollectorKind is the kind of plugin a collector runs on.
var CollectorKind = pluginref.Kind{ResourceType: "inventory.Collector", Name: "collector"}

// SupportedProviders is the plugin's capability.supported_providers, nil
// when the plugin does not say.
func SupportedProviders(p *pluginref.Plugin) []string {
	raw, ok := p.Capability["supported_providers"].([]any)
	if !ok {
		return nil
	}
	out := []string{}
	for _, v := range raw {
		if s, ok := v.(string); ok && s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Identity paths inventory calls.
const (
	WorkspaceGetPath      = "/identity/v2/workspace/get"
	TrustedListPath       = "/identity/v2/trusted-account/list"
	TrustedSecretDataPath = "/identity/v2/trusted-account/get-secret-data"
)

// Account is what inventory needs of a trusted account: the secret a
// collector collects with. Its secret_id is the account's
// trusted_secret_id, its service account the account itself.
type Account struct {
	TrustedAccountID string `json:"trusted_account_id"`
	Name             string `json:"name"`
	Provider         string `json:"provider"`
	ResourceGroup    string `json:"resource_group"`
	DomainID         string `json:"domain_id"`
	WorkspaceID      string `json:"workspace_id"`
	SecretSchemaID   string `json:"secret_schema_id"`
	TrustedSecretID  string `json:"trusted_secret_id"`
}

// Identity calls identity.
type Identity struct{ Client *call.Client }

// Workspace checks that a workspace of the caller's domain exists, on the
// caller's behalf (404 otherwise).
func (i Identity) Workspace(ctx context.Context, p *auth.Principal, workspaceID string) error {
	var w struct {
		WorkspaceID string `json:"workspace_id"`
		DomainID    string `json:"domain_id"`
	}
	if err := i.Client.Call(ctx, WorkspaceGetPath, map[string]string{"workspace_id": workspaceID}, &w); err != nil {
		return err
	}
	if w.WorkspaceID != workspaceID || w.DomainID != p.DomainID {
		return errs.NotFound("workspace_id", workspaceID)
	}
	return nil
}

// maxAccounts bounds the trusted accounts one collect reads.
const maxAccounts = 1000

// Accounts lists the trusted accounts of a provider in a domain, with the
// service credential (a schedule has no caller; the caller's tenancy is
// applied by the collector's scope, see Secrets).
func (i Identity) Accounts(ctx context.Context, domainID, provider string) ([]Account, error) {
	var l struct {
		Results []Account `json:"results"`
	}
	req := map[string]any{"domain_id": domainID, "provider": provider,
		"query": map[string]any{"page": map[string]any{"limit": maxAccounts}}}
	if err := i.Client.CallAsService(ctx, TrustedListPath, req, &l); err != nil {
		return nil, err
	}
	out := l.Results[:0]
	for _, a := range l.Results {
		if a.DomainID == domainID && a.Provider == provider { // identity filtered; kept true whatever it answers
			out = append(out, a)
		}
	}
	return out, nil
}

// SecretData is a trusted account's secret data, read with the service
// credential through identity's SYSTEM-only operation. It is passed to the
// plugin and never stored, logged or answered.
func (i Identity) SecretData(ctx context.Context, domainID, trustedAccountID string) (map[string]any, error) {
	var d struct {
		Data map[string]any `json:"data"`
	}
	if err := i.Client.CallAsService(ctx, TrustedSecretDataPath, map[string]string{"trusted_account_id": trustedAccountID, "domain_id": domainID}, &d); err != nil {
		return nil, err
	}
	if d.Data == nil {
		d.Data = map[string]any{}
	}
	return d.Data, nil
}

// Secrets picks the accounts a collector collects with
// (semantics.md 7, Collector.collect step 2): those in the collector's
// scope (a WORKSPACE collector: its workspace and the domain-wide
// accounts; a DOMAIN collector: all), narrowed by secretID when given and
// by an ENABLED secret filter (secrets, service_accounts and schemas as
// in, their exclude_ lists as not in). The order is identity's.
func Secrets(accounts []Account, c *Collector, secretID string) []Account {
	f := c.SecretFilter
	var out []Account
	for _, a := range accounts {
		if a.DomainID != c.DomainID || a.TrustedSecretID == "" {
			continue
		}
		if c.ResourceGroup == GroupWorkspace && a.WorkspaceID != c.WorkspaceID && a.WorkspaceID != Global {
			continue
		}
		if secretID != "" && a.TrustedSecretID != secretID {
			continue
		}
		if f.State == Enabled {
			if !in(f.Secrets, a.TrustedSecretID) || !in(f.ServiceAccounts, a.TrustedAccountID) || !in(f.Schemas, a.SecretSchemaID) {
				continue
			}
			if slices.Contains(f.ExcludeSecrets, a.TrustedSecretID) || slices.Contains(f.ExcludeServiceAccounts, a.TrustedAccountID) ||
				slices.Contains(f.ExcludeSchemas, a.SecretSchemaID) {
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

// in is an `in` filter that an empty list leaves open.
func in(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }

// TaskWorkspace is where a task's resources go: the account's workspace,
// or for a domain-wide account the collector's (which is "*" for a
// DOMAIN collector).
func TaskWorkspace(a Account, c *Collector) string {
	if a.WorkspaceID != "" && a.WorkspaceID != Global {
		return a.WorkspaceID
	}
	return c.WorkspaceID
}
