package core

import (
	"context"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/trusted"
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

// WorkspaceGetPath is identity's workspace/get.
const WorkspaceGetPath = "/identity/v2/workspace/get"

// Identity calls identity: the trusted accounts a collector collects with
// and their secret data through the kit's client (pkg/trusted: Accounts,
// SecretData, with the service credential), workspaces on the caller's
// behalf.
type Identity struct{ trusted.Identity }

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

// Owner is a collector's tenancy, for picking its trusted accounts
// (trusted.Select): a DOMAIN collector uses every account of its domain, a
// WORKSPACE collector those of its workspace and the domain-wide ones.
func Owner(c *Collector) trusted.Owner {
	return trusted.Owner{DomainID: c.DomainID, ResourceGroup: c.ResourceGroup, WorkspaceID: c.WorkspaceID}
}
