// Package core holds what the cost-analysis service's parts share: the
// collections, the stored documents (data sources, rules, jobs, tasks,
// costs, exchange rates), who may call, the caller's tenancy (domain and
// workspace), the repository client and the locks that serialise changes
// FerretDB would otherwise interleave.
//
// It holds no operation of its own and never imports echo or nats.
package core

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/trusted"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Collections owned by the cost-analysis service.
const (
	DataSourcesCollection   = "cost_data_sources"
	RulesCollection         = "cost_data_source_rules"
	JobsCollection          = "cost_jobs"
	TasksCollection         = "cost_job_tasks"
	CostsCollection         = "cost_costs"
	ExchangeRatesCollection = "cost_exchange_rates"
	// LocksCollection holds the leases of the sync schedule's fires
	// (pkg/schedule): one fire of an hour across replicas.
	LocksCollection = "cost_locks"
	// DirectoriesCollection holds, per job (_id = job_id), the projects
	// the rules of its data source match costs to, read when it started.
	DirectoriesCollection = "cost_job_directories"
	// OutboxCollection holds the task messages until JetStream has them.
	OutboxCollection = "cost_outbox"
	// DeadLettersCollection keeps the messages its consumers gave up on
	// (events.DeadRecords).
	DeadLettersCollection = "cost_dead_letters"
)

// Global is the workspace_id of a record that belongs to the whole
// domain, as upstream stores it.
const Global = tenancy.All

// States, resource groups and rule types.
const (
	Enabled   = "ENABLED"
	Disabled  = "DISABLED"
	Domain    = "DOMAIN"
	Workspace = "WORKSPACE"
	Managed   = "MANAGED"
	Custom    = "CUSTOM"
)

// Secret types of a data source: its own secret data (MANUAL) or its
// provider's trusted accounts in identity (USE_SERVICE_ACCOUNT_SECRET).
const (
	Manual                  = "MANUAL"
	UseServiceAccountSecret = "USE_SERVICE_ACCOUNT_SECRET"
)

// Job and task statuses (semantics.md section 5).
const (
	InProgress = "IN_PROGRESS"
	Pending    = "PENDING"
	Success    = "SUCCESS"
	Failure    = "FAILURE"
	Timeout    = "TIMEOUT"
	Canceled   = "CANCELED"
)

// PluginKind is the kind of plugin a data source runs on.
var PluginKind = pluginref.Kind{ResourceType: "cost_analysis.DataSource", Name: "cost data source"}

var (
	// Readers may read data sources, rules, jobs, costs and exchange
	// rates of their domain (workspace callers: their workspace and the
	// domain's global records).
	Readers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
	// Writers may change data sources, rules and jobs: a workspace owner
	// only those of its workspace.
	Writers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner)
	// Admins may change the domain's exchange rates.
	Admins = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)
)

// DataSourceTenancy is where a data source's tenancy lives, and that of
// its jobs and tasks.
var DataSourceTenancy = tenancy.InWorkspace

// DataSourceResource is the tenancy of the data source records
// themselves: deregistered mark first (store.Teardown), so one whose
// deregister has begun is reached by no read and no change.
var DataSourceResource = query.Resource{Tenancy: DataSourceTenancy.WithMarks()}

// Placement decides the workspace_id of a new record from its
// resource_group and the workspace_id asked for: DOMAIN is "*" and needs
// a domain admin; WORKSPACE is the caller's workspace for a workspace
// caller, and the given one for a domain admin (required then).
func Placement(p *auth.Principal, resourceGroup, workspaceID string) (string, error) {
	switch resourceGroup {
	case Domain:
		if !tenancy.DomainWide(p) {
			return "", errs.Forbidden()
		}
		return Global, nil
	case Workspace:
		if !tenancy.DomainWide(p) {
			if workspaceID != "" && workspaceID != p.WorkspaceID {
				return "", errs.Forbidden()
			}
			return p.WorkspaceID, nil
		}
		if workspaceID == "" || workspaceID == Global {
			return "", errs.Required("workspace_id")
		}
		return workspaceID, nil
	}
	return "", errs.Invalid("resource_group", "must be one of DOMAIN, WORKSPACE")
}

// PluginInfo is a data source's plugin.
type PluginInfo struct {
	pluginref.Info `bson:",inline"`
	SecretID       string `bson:"secret_id,omitempty" json:"secret_id,omitempty"`
	SchemaID       string `bson:"schema_id,omitempty" json:"schema_id,omitempty"`
}

// Schedule is when a data source syncs by itself.
type Schedule struct {
	State string `bson:"state" json:"state"`
	Hours []int  `bson:"hours" json:"hours"`
}

// DataSource is a data source as stored and sent (DataSourceInfo). A
// MANUAL data source's secret data is sealed in Sealed (bound to its id
// and domain) and never sent; a USE_SERVICE_ACCOUNT_SECRET one has none:
// it syncs with the trusted accounts of its provider that SecretFilter
// lets through.
type DataSource struct {
	ID                     string         `bson:"_id" json:"-"`
	DataSourceID           string         `bson:"data_source_id" json:"data_source_id"`
	Name                   string         `bson:"name" json:"name"`
	State                  string         `bson:"state" json:"state"`
	DataSourceType         string         `bson:"data_source_type" json:"data_source_type"`
	Provider               string         `bson:"provider" json:"provider"`
	SecretType             string         `bson:"secret_type" json:"secret_type"`
	SecretFilter           trusted.Filter `bson:"secret_filter" json:"secret_filter"`
	PluginInfo             PluginInfo     `bson:"plugin_info" json:"plugin_info"`
	Sealed                 *seal.Sealed   `bson:"sealed,omitempty" json:"-"`
	Schedule               Schedule       `bson:"schedule" json:"schedule"`
	Tags                   freeform.Flat  `bson:"tags" json:"tags"`
	CostTagKeys            []string       `bson:"cost_tag_keys" json:"cost_tag_keys"`
	CostAdditionalInfoKeys []string       `bson:"cost_additional_info_keys" json:"cost_additional_info_keys"`
	CostDataKeys           []string       `bson:"cost_data_keys" json:"cost_data_keys"`
	Permissions            Permissions    `bson:"permissions" json:"permissions"`
	ResourceGroup          string         `bson:"resource_group" json:"resource_group"`
	WorkspaceID            string         `bson:"workspace_id" json:"workspace_id"`
	DomainID               string         `bson:"domain_id" json:"domain_id"`
	CreatedAt              wire.Time      `bson:"created_at" json:"created_at"`
	LastSynchronizedAt     *wire.Time     `bson:"last_synchronized_at" json:"last_synchronized_at"`
	// Deleting marks a data source whose deregister has begun: it and its
	// costs are left out of every read, it no longer syncs, and a
	// deregister finds it to finish the work.
	Deleting bool `bson:"deleting,omitempty" json:"-"`
	// RuleOrder lists the data source's rules of each type in order
	// (datasourcerule/order.go); RuleOrderVersion counts its changes.
	RuleOrder        map[string][]string `bson:"rule_order,omitempty" json:"-"`
	RuleOrderVersion int64               `bson:"rule_order_version,omitempty" json:"-"`
}

// Permissions are upstream's DataSource.permissions: Deny names the cost
// keys that workspace callers do not read (data.<key>, tags.<key>,
// additional_info.<key>, or a whole family: data, tags, additional_info).
type Permissions struct {
	Deny []string `bson:"deny" json:"deny"`
}

// MarshalJSON answers deny as a list, [] for a record stored without it.
func (p Permissions) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Deny []string `json:"deny"`
	}{wire.List(p.Deny)})
}

// DenyFamilies are the cost fields a deny entry may name, whole or by key.
var DenyFamilies = []string{"data", "tags", "additional_info"}

// CheckDeny refuses a deny entry outside DenyFamilies, or naming an empty
// key: what no cost read could leave out.
func CheckDeny(deny []string) error {
	for _, d := range deny {
		family, key, keyed := strings.Cut(d, ".")
		if !slices.Contains(DenyFamilies, family) || (keyed && key == "") || len(d) > 255 {
			return errs.Invalid("permissions.deny", fmt.Sprintf("%q is not data, tags or additional_info, or one of their keys (data.<key>, ...)", d))
		}
	}
	return nil
}

// AD binds a data source's sealed secret data to its record.
func AD(dataSourceID, domainID string) []byte {
	return seal.AD(DataSourcesCollection, dataSourceID, domainID)
}

// Condition is one condition of a rule.
type Condition struct {
	Key      string `bson:"key" json:"key" v:"required,max=255"`
	Value    string `bson:"value" json:"value" v:"max=1024"`
	Operator string `bson:"operator" json:"operator" v:"required,enum=eq|contain|not|not_contain"`
}

// MatchRule maps a cost to a project or a service account: the cost's
// value at Source must equal the target's field Target.
type MatchRule struct {
	Source        string `bson:"source" json:"source" v:"required,max=255"`
	Target        string `bson:"target" json:"target" v:"required,max=255"`
	AllWorkspaces bool   `bson:"all_workspaces" json:"all_workspaces"`
}

// Actions are what a rule does to the costs it matches.
type Actions struct {
	ChangeProject       string        `bson:"change_project,omitempty" json:"change_project,omitempty" v:"max=255"`
	MatchProject        *MatchRule    `bson:"match_project,omitempty" json:"match_project,omitempty"`
	MatchServiceAccount *MatchRule    `bson:"match_service_account,omitempty" json:"match_service_account,omitempty"`
	AddAdditionalInfo   freeform.Flat `bson:"add_additional_info,omitempty" json:"add_additional_info,omitempty"`
}

// RuleOptions: stop_processing ends the rules for a cost the rule matched.
type RuleOptions struct {
	StopProcessing bool `bson:"stop_processing" json:"stop_processing"`
}

// Rule is a data source rule as stored and sent (DataSourceRuleInfo).
type Rule struct {
	ID               string        `bson:"_id" json:"-"`
	DataSourceRuleID string        `bson:"data_source_rule_id" json:"data_source_rule_id"`
	Name             string        `bson:"name" json:"name"`
	RuleType         string        `bson:"rule_type" json:"rule_type"`
	Order            int           `bson:"order" json:"order"`
	Conditions       []Condition   `bson:"conditions" json:"conditions"`
	ConditionsPolicy string        `bson:"conditions_policy" json:"conditions_policy"`
	Actions          Actions       `bson:"actions" json:"actions"`
	Options          RuleOptions   `bson:"options" json:"options"`
	Tags             freeform.Flat `bson:"tags" json:"tags"`
	IsDefault        bool          `bson:"is_default" json:"is_default"`
	ResourceGroup    string        `bson:"resource_group" json:"resource_group"`
	WorkspaceID      string        `bson:"workspace_id" json:"workspace_id"`
	DomainID         string        `bson:"domain_id" json:"domain_id"`
	DataSourceID     string        `bson:"data_source_id" json:"data_source_id"`
	CreatedAt        wire.Time     `bson:"created_at" json:"created_at"`
	// OrderVersion is the RuleOrderVersion that Order was written from.
	OrderVersion int64 `bson:"order_version,omitempty" json:"-"`
}

// Changed is a window whose old costs a sync replaces.
type Changed struct {
	Start  string `bson:"start" json:"start"`
	End    string `bson:"end" json:"end"`
	Filter Object `bson:"filter" json:"filter"`
}

// SyncedAccount is an account a sync reached.
type SyncedAccount struct {
	AccountID string `bson:"account_id" json:"account_id"`
}

// Job is a cost job as stored and sent (JobInfo).
type Job struct {
	ID             string          `bson:"_id" json:"-"`
	JobID          string          `bson:"job_id" json:"job_id"`
	Status         string          `bson:"status" json:"status"`
	Options        Object          `bson:"options" json:"options"`
	ErrorCode      string          `bson:"error_code" json:"error_code"`
	ErrorMessage   string          `bson:"error_message" json:"error_message"`
	TotalTasks     int             `bson:"total_tasks" json:"total_tasks"`
	RemainedTasks  int             `bson:"remained_tasks" json:"remained_tasks"`
	Changed        []Changed       `bson:"changed" json:"changed"`
	SyncedAccounts []SyncedAccount `bson:"synced_accounts" json:"synced_accounts"`
	ResourceGroup  string          `bson:"resource_group" json:"resource_group"`
	DomainID       string          `bson:"domain_id" json:"domain_id"`
	WorkspaceID    string          `bson:"workspace_id" json:"workspace_id"`
	DataSourceID   string          `bson:"data_source_id" json:"data_source_id"`
	// SecretType is the data source's when the job started: a failed task
	// of a USE_SERVICE_ACCOUNT_SECRET job does not fail the job.
	SecretType string `bson:"secret_type,omitempty" json:"-"`
	// TaskIDs are the job's tasks, so they are read by _id.
	TaskIDs []string `bson:"task_ids" json:"-"`
	// Pending marks a job whose rows cost reads must still account for:
	// from its creation until its rows are settled. While it is not
	// SUCCESS its rows are left out; once SUCCESS, the rows of other jobs
	// of its data source in its Swap windows are left out, until they are
	// deleted. The status write that makes it SUCCESS (with Swap) is the
	// one write that swaps the windows for every reader.
	Pending bool      `bson:"pending,omitempty" json:"-"`
	Swap    []Changed `bson:"swap,omitempty" json:"-"`
	// FailureNotice marks a FAILURE job whose notice is not recorded yet
	// (job.change sends it after the write; the sweep, one a crash cut).
	FailureNotice bool       `bson:"failure_notice,omitempty" json:"-"`
	CreatedAt     wire.Time  `bson:"created_at" json:"created_at"`
	UpdatedAt     wire.Time  `bson:"updated_at" json:"updated_at"`
	FinishedAt    *wire.Time `bson:"finished_at" json:"finished_at"`
}

// Finished reports whether a job status is final.
func Finished(status string) bool {
	return slices.Contains([]string{Success, Failure, Timeout, Canceled}, status)
}

// Task is one task of a cost job (a Job.get_tasks entry).
type Task struct {
	ID           string   `bson:"_id" json:"-"`
	JobTaskID    string   `bson:"job_task_id" json:"job_task_id"`
	Status       string   `bson:"status" json:"status"`
	Options      Object   `bson:"options" json:"options"`
	Changed      *Changed `bson:"changed,omitempty" json:"changed,omitempty"`
	CreatedCount int      `bson:"created_count" json:"created_count"`
	ErrorCode    string   `bson:"error_code" json:"error_code"`
	ErrorMessage string   `bson:"error_message" json:"error_message"`
	// Attempt is the delivery that owns the task now: an older delivery
	// still running stops at its next chunk.
	Attempt int `bson:"attempt" json:"attempt"`
	// The keys seen in the task's costs, merged into the data source's
	// cost_*_keys when the job succeeds.
	TagKeys            []string `bson:"tag_keys,omitempty" json:"-"`
	AdditionalInfoKeys []string `bson:"additional_info_keys,omitempty" json:"-"`
	DataKeys           []string `bson:"data_keys,omitempty" json:"-"`
	// TrustedAccountID is the trusted account a USE_SERVICE_ACCOUNT_SECRET
	// task syncs with (its secret data is read from identity at each run,
	// never kept), AccountWorkspaceID that account's workspace ("*" for a
	// domain-wide one): its costs are stamped with them.
	TrustedAccountID   string     `bson:"trusted_account_id,omitempty" json:"-"`
	AccountWorkspaceID string     `bson:"account_workspace_id,omitempty" json:"-"`
	JobID              string     `bson:"job_id" json:"job_id"`
	DataSourceID       string     `bson:"data_source_id" json:"data_source_id"`
	DomainID           string     `bson:"domain_id" json:"domain_id"`
	WorkspaceID        string     `bson:"workspace_id" json:"workspace_id"`
	CreatedAt          wire.Time  `bson:"created_at" json:"created_at"`
	StartedAt          *wire.Time `bson:"started_at" json:"started_at"`
	FinishedAt         *wire.Time `bson:"finished_at" json:"finished_at"`
}

// Cost is one cost row as stored and sent: what the plugin streamed,
// changed by the rules, stamped with its job, task, data source and
// tenancy.
type Cost struct {
	ID               string        `bson:"_id" json:"-"`
	CostID           string        `bson:"cost_id" json:"cost_id"`
	Cost             float64       `bson:"cost" json:"cost"`
	UsageQuantity    float64       `bson:"usage_quantity" json:"usage_quantity"`
	UsageUnit        string        `bson:"usage_unit" json:"usage_unit"`
	Provider         string        `bson:"provider" json:"provider"`
	RegionCode       string        `bson:"region_code" json:"region_code"`
	Product          string        `bson:"product" json:"product"`
	UsageType        string        `bson:"usage_type" json:"usage_type"`
	Resource         string        `bson:"resource" json:"resource"`
	Tags             freeform.Flat `bson:"tags" json:"tags"`
	AdditionalInfo   freeform.Flat `bson:"additional_info" json:"additional_info"`
	Data             Object        `bson:"data" json:"data"`
	Currency         string        `bson:"currency" json:"currency"`
	BilledDate       string        `bson:"billed_date" json:"billed_date"`
	BilledMonth      string        `bson:"billed_month" json:"billed_month"`
	BilledYear       string        `bson:"billed_year" json:"billed_year"`
	ProjectID        string        `bson:"project_id" json:"project_id"`
	ServiceAccountID string        `bson:"service_account_id" json:"service_account_id"`
	DataSourceID     string        `bson:"data_source_id" json:"data_source_id"`
	JobID            string        `bson:"job_id" json:"job_id"`
	JobTaskID        string        `bson:"job_task_id" json:"job_task_id"`
	WorkspaceID      string        `bson:"workspace_id" json:"workspace_id"`
	DomainID         string        `bson:"domain_id" json:"domain_id"`
	CreatedAt        wire.Time     `bson:"created_at" json:"created_at"`
	// TrustedAccountID is the trusted account a USE_SERVICE_ACCOUNT_SECRET
	// task synced the row with. The account's changed windows select its
	// rows by it: service_account_id is the rules' to change
	// (match_service_account). Neither sent nor queryable.
	TrustedAccountID string `bson:"trusted_account_id,omitempty" json:"-"`
}

// LoadDataSource returns a data source the caller may see (404 otherwise,
// and for one being deregistered).
func LoadDataSource(ctx context.Context, db *mongo.Database, p *auth.Principal, id string) (*DataSource, error) {
	return store.GetFor[DataSource](ctx, db.Collection(DataSourcesCollection), DataSourceResource, p, "data_source_id", id)
}

// ChangeDataSource returns a data source the caller may change: 404 for
// one it does not see (or being deregistered), 403 for the domain's
// (workspace "*") unless it is a domain admin. Its rules are changed under
// the same rule: the rules of a DOMAIN data source re-route the whole
// domain's costs.
func ChangeDataSource(ctx context.Context, db *mongo.Database, p *auth.Principal, id string) (*DataSource, error) {
	return store.GetToChange[DataSource](ctx, db.Collection(DataSourcesCollection), DataSourceResource, p, "data_source_id", id)
}
