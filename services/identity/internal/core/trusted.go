package core

import (
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

// TrustedSecretsCollection holds the sealed secret_data of trusted
// accounts, one document per trusted_secret_id.
const TrustedSecretsCollection = "identity_trusted_secrets"

// AllWorkspaces is the workspace_id of domain-wide records.
const AllWorkspaces = tenancy.All

// TrustedSecretAAD binds a sealed secret to its record: a ciphertext
// copied to another secret, account or domain does not open.
func TrustedSecretAAD(secretID, accountID, domainID string) string {
	return "identity/trusted-secret\x00" + secretID + "\x00" + accountID + "\x00" + domainID
}

// TrustedServiceAccount is a provider account known to a domain or a
// workspace.
type TrustedServiceAccount struct {
	ID                      string        `bson:"_id" json:"-"`
	TrustedServiceAccountID string        `bson:"trusted_service_account_id" json:"trusted_service_account_id"`
	Name                    string        `bson:"name" json:"name"`
	Data                    freeform.Map  `bson:"data" json:"data"`
	Provider                string        `bson:"provider" json:"provider"`
	Tags                    freeform.Flat `bson:"tags" json:"tags"`
	Scope                   string        `bson:"scope" json:"scope"`
	DomainID                string        `bson:"domain_id" json:"domain_id"`
	WorkspaceID             string        `bson:"workspace_id" json:"workspace_id"`
	CreatedAt               wire.Time     `bson:"created_at" json:"created_at"`
	// TrustedAccountID and ResourceID are set on the accounts a sync
	// reported: the trusted account that found it and the plugin's id of
	// it, by which the next sync finds it again.
	TrustedAccountID string `bson:"trusted_account_id,omitempty" json:"-"`
	ResourceID       string `bson:"resource_id,omitempty" json:"-"`
}
