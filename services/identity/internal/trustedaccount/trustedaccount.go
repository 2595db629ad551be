package trustedaccount

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/provider"
	"github.com/nubes-io/nubes/services/identity/internal/schema"
)

// Trusted accounts and trusted service accounts (identity v2).
//
// A trusted account holds a provider's credentials (secret_data) that
// workspaces may use. secret_data is encrypted with the service's Cipher
// (AES-256-GCM, versioned keys) and kept in its own collection,
// identity_trusted_secrets, keyed by trusted_secret_id, with associated
// data binding it to its secret id, its trusted account and its domain.
// No operation returns it, and list, stat and their filters run over the
// trusted account documents, which never hold it, so no query can read
// or probe it.
//
// Who may do what (semantics.md 4.4, TrustedAccount):
//   - write (create, update, update-secret-data, delete, sync):
//     DOMAIN_ADMIN (and SYSTEM) in the domain, WORKSPACE_OWNER in its
//     workspace; read: those plus WORKSPACE_MEMBER.
//   - resource_group DOMAIN: workspace_id "*", only a domain-wide caller
//     creates one; workspace callers read it but do not change it (403).
//     WORKSPACE: the workspace of a workspace-scoped token, else the
//     request's workspace_id, a workspace of the caller's domain.
//   - Workspace callers see their workspace's records and the DOMAIN ones;
//     anything else is 404.
//
// sync records an identity job (IN_PROGRESS) and publishes a job event on
// nubes.job.identity through the outbox; a worker of any replica runs it
// (sync.go). A later sync of the same account cancels the earlier
// job that is still IN_PROGRESS (as inventory's collect does).
//
// Trusted service accounts are served at
// /identity/v2/trusted-service-account/<op> (the spec lists them under the
// trusted-account prefix, which would make two resources share six paths).
// Their requests carry domain_id, which must be the caller's (SYSTEM may
// name any domain); another domain answers 404.

// JobSubject is the subject of identity's job events.
const JobSubject = "nubes.job.identity"

// Job states of identity jobs (semantics.md 5).
const (
	JobInProgress = "IN_PROGRESS"
	JobCanceled   = "CANCELED"
	JobFailure    = "FAILURE"
)

var (
	trustedWriters = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner)
	trustedReaders = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
)

// Scheduled is when a trusted account syncs.
type Scheduled struct {
	State string `bson:"state" json:"state" v:"enum=ENABLED|DISABLED"`
	Hours []int  `bson:"hours" json:"hours" v:"max=24" doc:"hours of the day (UTC), 0 to 23"`
}

// TrustedAccount is a provider account whose credentials workspaces may
// use. Its secret data lives elsewhere (trustedSecret).
type TrustedAccount struct {
	ID               string        `bson:"_id" json:"-"`
	TrustedAccountID string        `bson:"trusted_account_id" json:"trusted_account_id"`
	Name             string        `bson:"name" json:"name"`
	Data             freeform.Map  `bson:"data" json:"data"`
	Provider         string        `bson:"provider" json:"provider"`
	Schedule         Scheduled     `bson:"schedule" json:"schedule"`
	SyncOptions      freeform.Map  `bson:"sync_options" json:"sync_options"`
	PluginOptions    freeform.Map  `bson:"plugin_options" json:"plugin_options"`
	Tags             freeform.Flat `bson:"tags" json:"tags"`
	ResourceGroup    string        `bson:"resource_group" json:"resource_group"`
	DomainID         string        `bson:"domain_id" json:"domain_id"`
	WorkspaceID      string        `bson:"workspace_id" json:"workspace_id"`
	SecretSchemaID   string        `bson:"secret_schema_id" json:"secret_schema_id"`
	TrustedSecretID  string        `bson:"trusted_secret_id" json:"trusted_secret_id"`
	CreatedAt        wire.Time     `bson:"created_at" json:"created_at"`
}

// trustedSecret is the sealed secret_data of one trusted account.
type trustedSecret struct {
	ID               string      `bson:"_id"` // trusted_secret_id
	TrustedAccountID string      `bson:"trusted_account_id"`
	DomainID         string      `bson:"domain_id"`
	SecretSchemaID   string      `bson:"secret_schema_id"`
	Sealed           core.Sealed `bson:"sealed"`
	CreatedAt        wire.Time   `bson:"created_at"`
	UpdatedAt        wire.Time   `bson:"updated_at"`
}

// IdentityJob is the JobInfo of trusted-account sync.
type IdentityJob struct {
	ID               string    `bson:"_id" json:"-"`
	JobID            string    `bson:"job_id" json:"job_id"`
	Status           string    `bson:"status" json:"status"`
	TrustedAccountID string    `bson:"trusted_account_id" json:"trusted_account_id"`
	Provider         string    `bson:"provider" json:"provider"`
	ResourceGroup    string    `bson:"resource_group" json:"resource_group"`
	WorkspaceID      string    `bson:"workspace_id" json:"workspace_id"`
	DomainID         string    `bson:"domain_id" json:"domain_id"`
	TotalTasks       int       `bson:"total_tasks" json:"total_tasks"`
	RemainedTasks    int       `bson:"remained_tasks" json:"remained_tasks"`
	SuccessTasks     int       `bson:"success_tasks" json:"success_tasks"`
	FailureTasks     int       `bson:"failure_tasks" json:"failure_tasks"`
	ErrorCode        string    `bson:"error_code" json:"error_code"`
	ErrorMessage     string    `bson:"error_message" json:"error_message"`
	CreatedBy        string    `bson:"created_by" json:"created_by"`
	CreatedAt        wire.Time `bson:"created_at" json:"created_at"`
	UpdatedAt        wire.Time `bson:"updated_at" json:"updated_at"`
	FinishedAt       wire.Time `bson:"finished_at" json:"finished_at"`
}

// TrustedSyncEvent is the payload of a sync job event (JobSubject,
// Nats-Msg-Id = job_id). It only ever gains fields.
type TrustedSyncEvent struct {
	Kind             string `json:"kind"` // "identity.trusted_account.sync"
	JobID            string `json:"job_id"`
	TrustedAccountID string `json:"trusted_account_id"`
	Provider         string `json:"provider"`
	ResourceGroup    string `json:"resource_group"`
	WorkspaceID      string `json:"workspace_id"`
	DomainID         string `json:"domain_id"`
	CreatedAt        string `json:"created_at"`
}

type createTrustedAccount struct {
	Name           string         `json:"name" v:"required,max=255"`
	Data           map[string]any `json:"data" v:"required"`
	Provider       string         `json:"provider" v:"required,max=64"`
	SecretSchemaID string         `json:"secret_schema_id" v:"required,max=128"`
	SecretData     map[string]any `json:"secret_data" v:"required"`
	ResourceGroup  string         `json:"resource_group" v:"required,enum=DOMAIN|WORKSPACE"`
	Schedule       *Scheduled     `json:"schedule"`
	SyncOptions    map[string]any `json:"sync_options"`
	PluginOptions  map[string]any `json:"plugin_options"`
	Tags           freeform.Flat  `json:"tags"`
	WorkspaceID    string         `json:"workspace_id" v:"max=64"`
}

type updateTrustedAccount struct {
	TrustedAccountID string `json:"trusted_account_id" v:"required,max=64"`
	// Every field is optional (upstream exclude_unset): the console's
	// rename sends the name alone.
	Tags          freeform.Flat  `json:"tags"`
	Name          string         `json:"name" v:"max=255"`
	Data          map[string]any `json:"data"`
	Schedule      *Scheduled     `json:"schedule"`
	SyncOptions   map[string]any `json:"sync_options"`
	PluginOptions map[string]any `json:"plugin_options"`
}

type updateTrustedSecret struct {
	TrustedAccountID string         `json:"trusted_account_id" v:"required,max=64"`
	SecretSchemaID   string         `json:"secret_schema_id" v:"required,max=128"`
	SecretData       map[string]any `json:"secret_data" v:"required"`
}

type trustedAccountRequest struct {
	TrustedAccountID string `json:"trusted_account_id" v:"required,max=64"`
}

type trustedSecretDataRequest struct {
	TrustedAccountID string `json:"trusted_account_id" v:"required,max=64"`
	DomainID         string `json:"domain_id" v:"required,max=64"`
}

type trustedAccountQuery struct {
	Query *query.Query `json:"query"`
	// DomainID: a SYSTEM caller (a service's worker or schedule) names
	// the domain it lists for; anyone else may name only their own.
	DomainID         string `json:"domain_id" v:"max=64"`
	TrustedAccountID string `json:"trusted_account_id"`
	Name             string `json:"name"`
	Provider         string `json:"provider"`
	WorkspaceID      string `json:"workspace_id"`
	SecretSchemaID   string `json:"secret_schema_id"`
	TrustedSecretID  string `json:"trusted_secret_id"`
}

var trustedResource = query.Resource{
	KeywordFields: []string{"trusted_account_id", "name", "provider"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"trusted_account_id", "name", "provider", "resource_group", "workspace_id"},
	Fields:        query.FieldsOf[TrustedAccount](),
	Maps:          freeform.FieldsOf[TrustedAccount](),
	// The keys are never in the record; a query naming them is refused
	// (400) rather than answered empty.
	Secret: []string{"secret_data"},
	// DOMAIN records have workspace_id "*": workspace callers read
	// them and change none. The sealed secret data is a child of its
	// account, reached only through it.
	Tenancy: tenancy.InWorkspace,
}

func (s *service) routes() []api.Route {
	const ta = "/identity/v2/trusted-account/"
	return []api.Route{
		api.Op[createTrustedAccount, TrustedAccount]{Path: ta + "create", Access: trustedWriters, Summary: "Create a trusted account; secret_data is stored encrypted and never returned.", Handle: s.createTrusted},
		api.Op[updateTrustedAccount, TrustedAccount]{Path: ta + "update", Access: trustedWriters, Summary: "Change a trusted account: any subset of its fields (tags, when sent, are replaced).", Handle: s.updateTrusted},
		api.Op[updateTrustedSecret, TrustedAccount]{Path: ta + "update-secret-data", Access: trustedWriters, Summary: "Replace a trusted account's secret data (encrypted again).", Handle: s.updateTrustedSecret},
		api.Op[trustedAccountRequest, api.Empty]{Path: ta + "delete", Access: trustedWriters, Summary: "Delete a trusted account and its secret data.", Handle: s.deleteTrusted},
		api.Op[trustedAccountRequest, IdentityJob]{Path: ta + "sync", Access: trustedWriters, Summary: "Start a sync job of a trusted account: a worker calls the provider's account collector plugin and places each account it reports as a managed general service account (with its project, groups and workspace).", Handle: s.syncTrusted},
		api.Op[trustedAccountRequest, TrustedAccount]{Path: ta + "get", Access: trustedReaders, Summary: "Get a trusted account (never its secret data).", Handle: s.getTrusted},
		api.Op[trustedSecretDataRequest, TrustedSecretData]{Path: ta + "get-secret-data", Access: auth.Service(), Summary: "Read a trusted account's secret data (services only: a SYSTEM token, never a person's SYSTEM_ADMIN grant).", Handle: s.getTrustedSecretData},
		api.Op[trustedAccountQuery, api.List[TrustedAccount]]{Path: ta + "list", Access: trustedReaders, Summary: "List trusted accounts.", Handle: s.listTrusted},
		api.Op[core.StatRequest, map[string]any]{Path: ta + "stat", Access: trustedReaders, Summary: "Statistics over trusted accounts.", Handle: s.statTrusted},
	}
}

// checkSchedule validates hours (0 to 23), drops repeats and sorts them.
func checkSchedule(sc *Scheduled) (Scheduled, error) {
	if sc == nil {
		return Scheduled{State: core.Disabled, Hours: []int{}}, nil
	}
	out := Scheduled{State: sc.State, Hours: []int{}}
	if out.State == "" {
		out.State = core.Disabled
	}
	for _, h := range sc.Hours {
		if h < 0 || h > 23 {
			return Scheduled{}, errs.Invalid("schedule.hours", "hours are 0 to 23")
		}
		if !slices.Contains(out.Hours, h) {
			out.Hours = append(out.Hours, h)
		}
	}
	slices.Sort(out.Hours)
	return out, nil
}

// visibleTrusted loads a trusted account the caller may see; with write
// it must also be one the caller may change.
func (s *service) visibleTrusted(ctx context.Context, p *auth.Principal, id string, write bool) (*TrustedAccount, error) {
	if write {
		return store.GetToChange[TrustedAccount](ctx, s.Trusted, trustedResource, p, "trusted_account_id", id)
	}
	return store.GetFor[TrustedAccount](ctx, s.Trusted, trustedResource, p, "trusted_account_id", id)
}

func (s *service) sealTrusted(secretID, accountID, domainID string, data map[string]any) (core.Sealed, error) {
	return s.Cfg.Cipher.SealJSON(data, []byte(core.TrustedSecretAAD(secretID, accountID, domainID)))
}

// checkSyncable is upstream's check of a provider whose account syncs: it
// exists in the domain, and has an account collector (plugin_info) and
// trusted accounts where it syncs.
func (s *service) checkSyncable(ctx context.Context, p *auth.Principal, name string) error {
	pr, err := s.providers.Get(ctx, p, name)
	if err != nil {
		return err
	}
	trusted, _ := pr.Options["support_trusted_account"].(bool)
	if auto, _ := pr.Options["support_auto_sync"].(bool); auto && !trusted {
		return errs.Invalid("provider.options", "the provider does not sync trusted accounts")
	}
	if len(pr.PluginInfo) == 0 {
		return errs.Invalid("provider.plugin_info", "the provider has no account collector plugin")
	}
	return nil
}

// syncing reports whether a request sets how the account syncs.
func syncing(sc *Scheduled, syncOptions, pluginOptions map[string]any) bool {
	return sc != nil || len(syncOptions) > 0 || len(pluginOptions) > 0
}

func (s *service) createTrusted(ctx context.Context, p *auth.Principal, r *createTrustedAccount) (*TrustedAccount, error) {
	if len(r.SecretData) == 0 {
		return nil, errs.Required("secret_data")
	}
	if err := freeform.CheckAll("data", r.Data, "secret_data", r.SecretData, "sync_options", r.SyncOptions,
		"plugin_options", r.PluginOptions, "tags", r.Tags); err != nil {
		return nil, err
	}
	sched, err := checkSchedule(r.Schedule)
	if err != nil {
		return nil, err
	}
	ws, err := s.Placement(ctx, p, r.ResourceGroup, r.WorkspaceID)
	if err != nil {
		return nil, err
	}
	// Upstream's order: the provider (when the account syncs), the data
	// against the provider's TRUSTED_ACCOUNT schema, the keys against the
	// named SECRET schema; nothing is stored before all three pass.
	if syncing(r.Schedule, r.SyncOptions, r.PluginOptions) {
		if err := s.checkSyncable(ctx, p, r.Provider); err != nil {
			return nil, err
		}
	}
	if err := s.schemas.CheckData(ctx, p, r.Provider, schema.TrustedAccount, r.Data); err != nil {
		return nil, err
	}
	if _, err := s.schemas.CheckSecret(ctx, p, r.SecretSchemaID, schema.Secret, r.SecretData); err != nil {
		return nil, err
	}
	domainID := p.DomainID
	id, secretID := wire.NewID("ta"), wire.NewID("trusted-secret")
	sealed, err := s.sealTrusted(secretID, id, domainID, r.SecretData)
	if err != nil {
		return nil, err
	}
	now := wire.T(wire.Now())
	sec := &trustedSecret{ID: secretID, TrustedAccountID: id, DomainID: domainID, SecretSchemaID: r.SecretSchemaID,
		Sealed: sealed, CreatedAt: now, UpdatedAt: now}
	// The secret first: an account never points at a missing secret. If
	// the account insert fails, the orphan secret is removed (and would
	// be unreachable and undecryptable for any other record anyway).
	if _, err := s.DB.Collection(core.TrustedSecretsCollection).InsertOne(ctx, sec); err != nil {
		return nil, store.Wrap(err)
	}
	t := &TrustedAccount{ID: id, TrustedAccountID: id, Name: r.Name, Data: r.Data, Provider: r.Provider, Schedule: sched,
		SyncOptions: wire.Object(r.SyncOptions), PluginOptions: wire.Object(r.PluginOptions), Tags: wire.Object(r.Tags),
		ResourceGroup: r.ResourceGroup, DomainID: domainID, WorkspaceID: ws, SecretSchemaID: r.SecretSchemaID,
		TrustedSecretID: secretID, CreatedAt: now}
	if _, err := s.Trusted.InsertOne(ctx, t); err != nil {
		_, _ = s.DB.Collection(core.TrustedSecretsCollection).DeleteOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: secretID}})
		return nil, store.Wrap(err)
	}
	return t, nil
}

func (s *service) updateTrusted(ctx context.Context, p *auth.Principal, r *updateTrustedAccount) (*TrustedAccount, error) {
	t, err := s.visibleTrusted(ctx, p, r.TrustedAccountID, true)
	if err != nil {
		return nil, err
	}
	if err := freeform.CheckAll("tags", r.Tags, "data", r.Data, "sync_options", r.SyncOptions, "plugin_options", r.PluginOptions); err != nil {
		return nil, err
	}
	if r.Data != nil {
		if err := s.schemas.CheckData(ctx, p, t.Provider, schema.TrustedAccount, r.Data); err != nil {
			return nil, err
		}
	}
	if syncing(r.Schedule, r.SyncOptions, r.PluginOptions) {
		if err := s.checkSyncable(ctx, p, t.Provider); err != nil {
			return nil, err
		}
	}
	set := bson.D{}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	for k, v := range map[string]map[string]any{"data": r.Data, "sync_options": r.SyncOptions, "plugin_options": r.PluginOptions} {
		if v != nil {
			set = append(set, bson.E{Key: k, Value: freeform.Map(v)})
		}
	}
	if r.Schedule != nil {
		sched, err := checkSchedule(r.Schedule)
		if err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "schedule", Value: sched})
	}
	if len(set) == 0 {
		return t, nil
	}
	return store.SetByID[TrustedAccount](ctx, s.Trusted, "trusted_account_id", t.ID, set)
}

func (s *service) updateTrustedSecret(ctx context.Context, p *auth.Principal, r *updateTrustedSecret) (*TrustedAccount, error) {
	t, err := s.visibleTrusted(ctx, p, r.TrustedAccountID, true)
	if err != nil {
		return nil, err
	}
	if len(r.SecretData) == 0 {
		return nil, errs.Required("secret_data")
	}
	if err := freeform.Check("secret_data", r.SecretData); err != nil {
		return nil, err
	}
	if _, err := s.schemas.CheckSecret(ctx, p, r.SecretSchemaID, schema.Secret, r.SecretData); err != nil {
		return nil, err
	}
	sealed, err := s.sealTrusted(t.TrustedSecretID, t.TrustedAccountID, t.DomainID, r.SecretData)
	if err != nil {
		return nil, err
	}
	now := wire.T(wire.Now())
	_, err = s.DB.Collection(core.TrustedSecretsCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: t.TrustedSecretID}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "sealed", Value: sealed}, {Key: "secret_schema_id", Value: r.SecretSchemaID}, {Key: "updated_at", Value: now}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "trusted_account_id", Value: t.TrustedAccountID}, {Key: "domain_id", Value: t.DomainID}, {Key: "created_at", Value: now}}},
		}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return nil, store.Wrap(err)
	}
	return store.SetByID[TrustedAccount](ctx, s.Trusted, "trusted_account_id", t.ID, bson.D{{Key: "secret_schema_id", Value: r.SecretSchemaID}})
}

func (s *service) deleteTrusted(ctx context.Context, p *auth.Principal, r *trustedAccountRequest) (*api.Empty, error) {
	t, err := s.visibleTrusted(ctx, p, r.TrustedAccountID, true)
	if err != nil {
		return nil, err
	}
	if err := s.unreferenced(ctx, t); err != nil {
		return nil, err
	}
	if _, err := s.Trusted.DeleteOne(ctx, bson.D{{Key: "_id", Value: t.ID}}); err != nil {
		return nil, store.Wrap(err)
	}
	if _, err := s.DB.Collection(core.TrustedSecretsCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: t.TrustedSecretID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

// SecretListPath is the secret service's list, asked whether a secret
// still refers to a trusted secret.
const SecretListPath = "/secret/v1/secret/list"

// unreferenced refuses to delete a trusted account whose trusted secret a
// secret of the secret service still names (upstream's secret service
// refuses the trusted secret's delete: ERROR_EXIST_RELATED_SECRET), asked
// on the caller's behalf. Without a secret service configured there is
// none to ask.
func (s *service) unreferenced(ctx context.Context, t *TrustedAccount) error {
	url := s.Cfg.ServiceURLs["secret"]
	if url == "" || t.TrustedSecretID == "" {
		return nil
	}
	var out struct {
		TotalCount int `json:"total_count"`
	}
	err := call.NewClient("secret", url, "", nil).Call(ctx, SecretListPath, map[string]any{"trusted_secret_id": t.TrustedSecretID,
		"query": map[string]any{"count_only": true}}, &out)
	if err != nil {
		return err
	}
	if out.TotalCount > 0 {
		return errs.New(errs.ExistRelatedSecret, "A secret still refers to the trusted secret. (trusted_secret_id = %s)", t.TrustedSecretID)
	}
	return nil
}

func (s *service) syncTrusted(ctx context.Context, p *auth.Principal, r *trustedAccountRequest) (*IdentityJob, error) {
	t, err := s.visibleTrusted(ctx, p, r.TrustedAccountID, true)
	if err != nil {
		return nil, err
	}
	if err := s.checkSyncable(ctx, p, t.Provider); err != nil {
		return nil, err
	}
	return s.startSync(ctx, t, p.UserID)
}

// startSync records a sync job of t and its event (the worker runs it).
func (s *service) startSync(ctx context.Context, t *TrustedAccount, createdBy string) (*IdentityJob, error) {
	now := wire.T(wire.Now())
	// The newest sync supersedes an earlier one still running.
	if _, err := s.Jobs.UpdateMany(ctx, bson.D{{Key: "domain_id", Value: t.DomainID}, {Key: "trusted_account_id", Value: t.TrustedAccountID}, {Key: "status", Value: JobInProgress}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: JobCanceled}, {Key: "updated_at", Value: now}, {Key: "finished_at", Value: now}}}}); err != nil {
		return nil, store.Wrap(err)
	}
	id := wire.NewID("job")
	j := &IdentityJob{ID: id, JobID: id, Status: JobInProgress, TrustedAccountID: t.TrustedAccountID, Provider: t.Provider,
		ResourceGroup: t.ResourceGroup, WorkspaceID: t.WorkspaceID, DomainID: t.DomainID, CreatedBy: createdBy,
		TotalTasks: 1, RemainedTasks: 1, CreatedAt: now, UpdatedAt: now}
	if _, err := s.Jobs.InsertOne(ctx, j); err != nil {
		return nil, store.Wrap(err)
	}
	ev := TrustedSyncEvent{Kind: "identity.trusted_account.sync", JobID: id, TrustedAccountID: t.TrustedAccountID, Provider: t.Provider,
		ResourceGroup: t.ResourceGroup, WorkspaceID: t.WorkspaceID, DomainID: t.DomainID, CreatedAt: wire.FormatTime(now.Time)}
	if err := s.Outbox.Add(ctx, JobSubject, id, ev); err != nil {
		// Without its event the job would never run: record why it failed.
		fail := bson.D{{Key: "status", Value: JobFailure}, {Key: "error_code", Value: errs.Unavailable},
			{Key: "error_message", Value: "the job event could not be recorded"}, {Key: "finished_at", Value: now}}
		_, _ = s.Jobs.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: fail}})
		return nil, store.Wrap(err)
	}
	return j, nil
}

func (s *service) getTrusted(ctx context.Context, p *auth.Principal, r *trustedAccountRequest) (*TrustedAccount, error) {
	return s.visibleTrusted(ctx, p, r.TrustedAccountID, false)
}

func (s *service) listTrusted(ctx context.Context, p *auth.Principal, r *trustedAccountQuery) (*api.List[TrustedAccount], error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("trusted_account_id", r.TrustedAccountID, "name", r.Name, "provider", r.Provider,
		"workspace_id", r.WorkspaceID, "secret_schema_id", r.SecretSchemaID, "trusted_secret_id", r.TrustedSecretID)...)
	return store.SearchFor[TrustedAccount](ctx, s.Trusted, q, trustedResource, caller)
}

// TrustedSecretData is a trusted account's secret data, answered to
// SYSTEM callers only.
type TrustedSecretData struct {
	TrustedAccountID string         `json:"trusted_account_id"`
	TrustedSecretID  string         `json:"trusted_secret_id"`
	SecretSchemaID   string         `json:"secret_schema_id"`
	Provider         string         `json:"provider"`
	DomainID         string         `json:"domain_id"`
	WorkspaceID      string         `json:"workspace_id"`
	Data             map[string]any `json:"data"`
}

// getTrustedSecretData unseals a trusted account's secret data for a
// service of the suite (inventory collecting with it, identity's own
// sync). Each read is logged, without the data.
func (s *service) getTrustedSecretData(ctx context.Context, p *auth.Principal, r *trustedSecretDataRequest) (*TrustedSecretData, error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	t, err := store.GetFor[TrustedAccount](ctx, s.Trusted, trustedResource, caller, "trusted_account_id", r.TrustedAccountID)
	if err != nil {
		return nil, err
	}
	data, err := s.trustedSecretData(ctx, t)
	if err != nil {
		return nil, err
	}
	// The service's logger, not slog.Default: the read is the service's to
	// record, where its log lines go (and where a test of secrets in the
	// logs looks).
	s.Log.InfoContext(ctx, "trusted secret data read", "trusted_account_id", t.TrustedAccountID, "domain_id", t.DomainID,
		"caller_domain_id", p.DomainID, "caller_user_id", p.UserID)
	return &TrustedSecretData{TrustedAccountID: t.TrustedAccountID, TrustedSecretID: t.TrustedSecretID, SecretSchemaID: t.SecretSchemaID,
		Provider: t.Provider, DomainID: t.DomainID, WorkspaceID: t.WorkspaceID, Data: wire.Object(data)}, nil
}

// trustedSecretData unseals the secret data of a trusted account.
func (s *service) trustedSecretData(ctx context.Context, t *TrustedAccount) (map[string]any, error) {
	var sec trustedSecret
	err := s.DB.Collection(core.TrustedSecretsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: t.TrustedSecretID}}).Decode(&sec)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errs.NotFound("trusted_secret_id", t.TrustedSecretID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	var data map[string]any
	if err := s.Cfg.Cipher.OpenJSON(sec.Sealed, []byte(core.TrustedSecretAAD(sec.ID, t.TrustedAccountID, t.DomainID)), &data); err != nil {
		// A withdrawn key or an altered record: the operator's to fix; the
		// cause names the key id, never the data.
		return nil, fmt.Errorf("trusted secret %s: %w", sec.ID, err)
	}
	return data, nil
}

func (s *service) statTrusted(ctx context.Context, p *auth.Principal, r *core.StatRequest) (*map[string]any, error) {
	return core.StatFor(ctx, s.Trusted, p, trustedResource, r.Query)
}

type service struct {
	*core.Deps
	schemas   *schema.Service
	providers *provider.Service
}

func newService(d *core.Deps) *service {
	return &service{Deps: d, schemas: schema.New(d), providers: provider.New(d)}
}

// Routes are the operations of trusted accounts.
func Routes(d *core.Deps) []api.Route { return newService(d).routes() }
