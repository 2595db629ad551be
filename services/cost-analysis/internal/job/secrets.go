package job

import (
	"context"
	"maps"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/trusted"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// secret is one secret a sync asks the plugin for tasks with: the data
// source's own (account nil) or a trusted account's. data lives in memory
// only, for the plugin call.
type secret struct {
	account *trusted.Account
	data    map[string]any
}

// WindowAccountKey is the filter key of a trusted account's changed
// windows: the cost field that keeps the account a row was synced with
// (core.Cost.TrustedAccountID). Not service_account_id, which the rules
// may change (match_service_account): the window would then miss the
// account's old rows and a sync would store them twice.
const WindowAccountKey = "trusted_account_id"

// window is a changed window of what this secret brings: a trusted
// account's replaces the costs of that account only, so an account whose
// task fails, or that the data source no longer syncs with, keeps its
// costs.
func (s secret) window(c core.Changed) core.Changed {
	if s.account == nil {
		return c
	}
	f := maps.Clone(c.Filter)
	if f == nil {
		f = core.Object{}
	}
	f[WindowAccountKey] = s.account.TrustedAccountID
	c.Filter = f
	return c
}

// Owner is a data source's tenancy, for picking its trusted accounts: a
// DOMAIN data source uses every account of its domain, a WORKSPACE one
// those of its workspace and the domain-wide ones.
func Owner(ds *core.DataSource) trusted.Owner {
	return trusted.Owner{DomainID: ds.DomainID, ResourceGroup: ds.ResourceGroup, WorkspaceID: ds.WorkspaceID}
}

// Accounts are the trusted accounts a USE_SERVICE_ACCOUNT_SECRET data
// source syncs with: its provider's, in its scope, through its secret
// filter (listed by identity with the service credential).
func (js *Jobs) Accounts(ctx context.Context, ds *core.DataSource) ([]trusted.Account, error) {
	all, err := js.trusted.Accounts(ctx, ds.DomainID, ds.Provider)
	if err != nil {
		return nil, err
	}
	return trusted.Select(all, Owner(ds), ds.SecretFilter, ""), nil
}

// secrets are the secrets a sync of ds asks for tasks with. An account
// deleted between the listing and the read of its secret data is left out.
func (js *Jobs) secrets(ctx context.Context, ds *core.DataSource) ([]secret, error) {
	if ds.SecretType != core.UseServiceAccountSecret {
		data, err := OpenSecret(js.keys, ds)
		if err != nil {
			return nil, err
		}
		return []secret{{data: data}}, nil
	}
	accounts, err := js.Accounts(ctx, ds)
	if err != nil {
		return nil, err
	}
	out := make([]secret, 0, len(accounts))
	for i := range accounts {
		a := &accounts[i]
		data, err := js.trusted.SecretData(ctx, ds.DomainID, a.TrustedAccountID)
		if errs.Is(err, errs.NotFoundCode) {
			js.log.Info("trusted account gone before the sync read it", "data_source_id", ds.DataSourceID, "trusted_account_id", a.TrustedAccountID)
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, secret{account: a, data: data})
	}
	return out, nil
}

// TaskSecret is the secret data a task runs with, read again at each run
// and never kept: the data source's own, or its trusted account's from
// identity.
func (js *Jobs) TaskSecret(ctx context.Context, ds *core.DataSource, task *core.Task) (map[string]any, error) {
	if task.TrustedAccountID == "" {
		return OpenSecret(js.keys, ds)
	}
	return js.trusted.SecretData(ctx, ds.DomainID, task.TrustedAccountID)
}

// VerifySecret is the secret data verify_plugin checks: the data source's
// own, or that of the first trusted account it syncs with (404 when it has
// none), as inventory verifies a collector.
func (js *Jobs) VerifySecret(ctx context.Context, ds *core.DataSource) (map[string]any, error) {
	if ds.SecretType != core.UseServiceAccountSecret {
		return OpenSecret(js.keys, ds)
	}
	accounts, err := js.Accounts(ctx, ds)
	if err != nil {
		return nil, err
	}
	if len(accounts) == 0 {
		return nil, errs.New(errs.NotFoundCode, "The data source has no trusted account to verify with. (provider = %s)", ds.Provider)
	}
	return js.trusted.SecretData(ctx, ds.DomainID, accounts[0].TrustedAccountID)
}
