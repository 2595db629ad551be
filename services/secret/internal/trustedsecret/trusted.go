// Package trustedsecret holds the trusted-secret resource
// (/secret/v1/trusted-secret): the metadata of identity's trusted
// accounts' secrets, read through identity, never their data.
package trustedsecret

import (
	"context"
	"strings"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
)

// Trusted secrets are the credentials of identity's trusted accounts.
// Identity keeps them (sealed, in a collection no query reads) and the
// account that names each; the secret service answers their metadata
// (upstream's TrustedSecretInfo, which the console's trusted-account page
// reads) by asking identity's trusted-account/list on the caller's behalf,
// so identity's tenancy decides what the caller sees, and the data never
// leaves identity (its get-secret-data is for services only).

// TrustedAccountListPath is identity's operation that answers the accounts.
const TrustedAccountListPath = "/identity/v2/trusted-account/list"

var trustedReaders = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)

// TrustedSecret is the TrustedSecretInfo: metadata only, no data.
type TrustedSecret struct {
	TrustedSecretID  string        `json:"trusted_secret_id"`
	Name             string        `json:"name"`
	SchemaID         string        `json:"schema_id"`
	Provider         string        `json:"provider"`
	Tags             freeform.Flat `json:"tags"`
	ResourceGroup    string        `json:"resource_group"`
	TrustedAccountID string        `json:"trusted_account_id"`
	WorkspaceID      string        `json:"workspace_id"`
	DomainID         string        `json:"domain_id"`
	CreatedAt        string        `json:"created_at"`
}

// trustedAccount is what is read of identity's TrustedAccountInfo.
type trustedAccount struct {
	TrustedAccountID string        `json:"trusted_account_id"`
	Name             string        `json:"name"`
	Provider         string        `json:"provider"`
	Tags             freeform.Flat `json:"tags"`
	ResourceGroup    string        `json:"resource_group"`
	DomainID         string        `json:"domain_id"`
	WorkspaceID      string        `json:"workspace_id"`
	SecretSchemaID   string        `json:"secret_schema_id"`
	TrustedSecretID  string        `json:"trusted_secret_id"`
	CreatedAt        string        `json:"created_at"`
}

// accountList is identity's list answer.
type accountList struct {
	Results    []trustedAccount `json:"results"`
	TotalCount int64            `json:"total_count"`
}

func (a trustedAccount) secret() TrustedSecret {
	return TrustedSecret{TrustedSecretID: a.TrustedSecretID, Name: a.Name, SchemaID: a.SecretSchemaID, Provider: a.Provider,
		Tags: a.Tags, ResourceGroup: a.ResourceGroup, TrustedAccountID: a.TrustedAccountID, WorkspaceID: a.WorkspaceID,
		DomainID: a.DomainID, CreatedAt: a.CreatedAt}
}

type (
	trustedSecretReq struct {
		TrustedSecretID string `json:"trusted_secret_id" v:"required,max=64"`
	}
	trustedSecretQuery struct {
		Query            *query.Query `json:"query"`
		TrustedSecretID  string       `json:"trusted_secret_id" v:"max=64"`
		Name             string       `json:"name" v:"max=255"`
		SchemaID         string       `json:"schema_id" v:"max=255"`
		Provider         string       `json:"provider" v:"max=255"`
		TrustedAccountID string       `json:"trusted_account_id" v:"max=64"`
		WorkspaceID      string       `json:"workspace_id" v:"max=64"`
	}
)

// TrustedSecrets serves trusted-secret get and list from identity.
type TrustedSecrets struct{ identity *call.Client }

// Routes are the trusted-secret operations.
func Routes(identity *call.Client) []api.Route {
	t := &TrustedSecrets{identity: identity}
	const p = "/secret/v1/trusted-secret/"
	return []api.Route{
		api.Op[trustedSecretReq, TrustedSecret]{Path: p + "get", Access: trustedReaders, Summary: "Get the metadata of a trusted account's secret (never its data), as identity shows the account to the caller.", Handle: t.get},
		api.Op[trustedSecretQuery, api.List[TrustedSecret]]{Path: p + "list", Access: trustedReaders, Summary: "List the metadata of the trusted accounts' secrets the caller may see (never their data).", Handle: t.list},
	}
}

// secretPaths are a trusted secret's secret fields.
var secretPaths = []string{"data", "secret_data", "sealed", "encrypt_options"}

// secretToAccount maps a TrustedSecretInfo path to the account's field.
func secretToAccount(_ string, p *string) error {
	if *p == "schema_id" || strings.HasPrefix(*p, "schema_id.") {
		*p = "secret_schema_id" + strings.TrimPrefix(*p, "schema_id")
	}
	return nil
}

func (t *TrustedSecrets) get(ctx context.Context, _ *auth.Principal, r *trustedSecretReq) (*TrustedSecret, error) {
	var out accountList
	if err := t.identity.Call(ctx, TrustedAccountListPath, map[string]any{"trusted_secret_id": r.TrustedSecretID}, &out); err != nil {
		return nil, err
	}
	for _, a := range out.Results {
		if a.TrustedSecretID == r.TrustedSecretID {
			s := a.secret()
			return &s, nil
		}
	}
	return nil, errs.NotFound("trusted_secret_id", r.TrustedSecretID)
}

func (t *TrustedSecrets) list(ctx context.Context, _ *auth.Principal, r *trustedSecretQuery) (*api.List[TrustedSecret], error) {
	req := map[string]any{}
	for k, v := range map[string]string{"trusted_secret_id": r.TrustedSecretID, "name": r.Name, "secret_schema_id": r.SchemaID,
		"provider": r.Provider, "trusted_account_id": r.TrustedAccountID, "workspace_id": r.WorkspaceID} {
		if v != "" {
			req[k] = v
		}
	}
	var only []string
	if r.Query != nil {
		// The secret's data is a trusted secret's "data" (never identity's
		// account data of that name): a query naming it is refused here,
		// before identity is asked.
		if err := r.Query.Paths(query.NoSecret(secretPaths)); err != nil {
			return nil, err
		}
		q := *r.Query
		only = q.Only
		q.Filter, q.FilterOr = cloneConds(q.Filter), cloneConds(q.FilterOr)
		q.Sort, q.Only = append(query.Sort(nil), q.Sort...), append([]string(nil), q.Only...)
		_ = q.Paths(secretToAccount) // never fails
		req["query"] = &q
	}
	var got accountList
	if err := t.identity.Call(ctx, TrustedAccountListPath, req, &got); err != nil {
		return nil, err
	}
	out := &api.List[TrustedSecret]{Results: make([]TrustedSecret, 0, len(got.Results)), TotalCount: got.TotalCount}
	for _, a := range got.Results {
		out.Results = append(out.Results, a.secret())
	}
	if len(only) > 0 {
		out.Fields = only // identity answered those fields (and its sort keys) only
	}
	return out, nil
}

func cloneConds(c []query.Condition) []query.Condition { return append([]query.Condition(nil), c...) }
