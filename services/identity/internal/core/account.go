package core

import (
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/wire"
)

// ServiceAccountsCollection holds the general service accounts (issue
// 36), _id = service_account_id: the accounts a workspace adds by hand and
// those a trusted account's sync makes.
const ServiceAccountsCollection = "identity_service_accounts"

// ServiceAccount is a general service account, the ServiceAccountInfo.
// Its keys are a PROJECT secret of the secret service (secret_id), never
// here.
type ServiceAccount struct {
	ID                  string        `bson:"_id" json:"-"`
	ServiceAccountID    string        `bson:"service_account_id" json:"service_account_id"`
	Name                string        `bson:"name" json:"name"`
	State               string        `bson:"state" json:"state"`
	Data                freeform.Map  `bson:"data" json:"data"`
	Provider            string        `bson:"provider" json:"provider"`
	Tags                freeform.Flat `bson:"tags" json:"tags"`
	ReferenceID         string        `bson:"reference_id" json:"reference_id"`
	IsManaged           bool          `bson:"is_managed" json:"is_managed"`
	ServiceAccountMgrID string        `bson:"service_account_mgr_id" json:"service_account_mgr_id"`
	SecretSchemaID      string        `bson:"secret_schema_id" json:"secret_schema_id"`
	SecretID            string        `bson:"secret_id" json:"secret_id"`
	TrustedAccountID    string        `bson:"trusted_account_id" json:"trusted_account_id"`
	ProjectID           string        `bson:"project_id" json:"project_id"`
	WorkspaceID         string        `bson:"workspace_id" json:"workspace_id"`
	DomainID            string        `bson:"domain_id" json:"domain_id"`
	CreatedAt           wire.Time     `bson:"created_at" json:"created_at"`
	LastSyncedAt        wire.Time     `bson:"last_synced_at" json:"last_synced_at"`
}

// Service account states (create sets ACTIVE).
const (
	AccountActive = "ACTIVE"
)
