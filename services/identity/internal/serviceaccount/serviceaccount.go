// Package serviceaccount serves general service accounts
// (/identity/v2/service-account/): a provider account of one project,
// added by a workspace or made by a trusted account's sync, whose keys are
// a PROJECT secret of the secret service (`<service_account_id>-secret`),
// never stored in identity. Its data is checked against the provider's
// SERVICE_ACCOUNT schema and its keys against the SECRET (or, attached to
// a trusted account, TRUSTING_SECRET) schema named, as upstream.
package serviceaccount

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/analyze"
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
	"github.com/nubes-io/nubes/services/identity/internal/schema"
)

// The secret service's operations identity calls on the caller's behalf.
const (
	SecretCreatePath = "/secret/v1/secret/create"
	SecretUpdatePath = "/secret/v1/secret/update"
	// SecretUpdateDataPath replaces a synced account's keys in place.
	SecretUpdateDataPath = "/secret/v1/secret/update-data"
	SecretDeletePath     = "/secret/v1/secret/delete"
	SecretListPath       = "/secret/v1/secret/list"
	SecretStatPath       = "/secret/v1/secret/stat"
)

// IDPrefix is the kind of service account ids: the console tells a
// trusted account (ta-) from a general one by it.
const IDPrefix = "sa"

// Resource is the service accounts' query declaration: a workspace
// member reaches only its projects' accounts.
var Resource = query.Resource{
	KeywordFields: []string{"service_account_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"service_account_id", "name", "provider", "state", "project_id"},
	Fields:        query.FieldsOf[core.ServiceAccount](),
	Maps:          freeform.FieldsOf[core.ServiceAccount](),
	// The keys are the secret service's; a query naming them is refused.
	Secret:  []string{"secret_data"},
	Tenancy: tenancy.InProject,
}

// Upstream: writes by the workspace's roles (a domain admin enters the
// workspace), update-secret-data also by a domain admin; reads by all.
var (
	// A domain admin acts in any workspace of its domain, as upstream's
	// DOMAIN_ADMIN; the console's accounts pages never answer it 403.
	writers = auth.Roles(auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
	readers = core.Readers
)

// projects are what a service account's project is read as: a member
// reaches its own.
var projects = query.Resource{Tenancy: tenancy.InProject}

// trustedAccounts are read for an attached account: the workspace's and
// the domain's (workspace "*").
var trustedAccounts = query.Resource{Tenancy: tenancy.InWorkspace}

// trusted is what is read of a trusted account.
type trusted struct {
	TrustedAccountID string `bson:"trusted_account_id"`
	Provider         string `bson:"provider"`
	TrustedSecretID  string `bson:"trusted_secret_id"`
	WorkspaceID      string `bson:"workspace_id"`
	Schedule         struct {
		State string `bson:"state"`
	} `bson:"schedule"`
}

type (
	createReq struct {
		Provider            string         `json:"provider" v:"required,max=40"`
		Name                string         `json:"name" v:"required,max=255"`
		Data                map[string]any `json:"data"`
		SecretSchemaID      string         `json:"secret_schema_id" v:"max=40"`
		SecretData          map[string]any `json:"secret_data"`
		Tags                freeform.Flat  `json:"tags"`
		ServiceAccountMgrID string         `json:"service_account_mgr_id" v:"max=255"`
		TrustedAccountID    string         `json:"trusted_account_id" v:"max=64"`
		ProjectID           string         `json:"project_id" v:"required,max=64"`
	}
	updateReq struct {
		ServiceAccountID    string         `json:"service_account_id" v:"required,max=64"`
		Name                string         `json:"name" v:"max=255"`
		Data                map[string]any `json:"data"`
		Tags                freeform.Flat  `json:"tags"`
		ServiceAccountMgrID *string        `json:"service_account_mgr_id" v:"max=255"`
		ProjectID           string         `json:"project_id" v:"max=64"`
	}
	updateSecretReq struct {
		ServiceAccountID string         `json:"service_account_id" v:"required,max=64"`
		SecretSchemaID   string         `json:"secret_schema_id" v:"required,max=40"`
		SecretData       map[string]any `json:"secret_data" v:"required"`
		TrustedAccountID string         `json:"trusted_account_id" v:"max=64"`
	}
	accountReq struct {
		ServiceAccountID string `json:"service_account_id" v:"required,max=64"`
	}
	listReq struct {
		Query            *query.Query `json:"query"`
		ServiceAccountID string       `json:"service_account_id"`
		Name             string       `json:"name"`
		State            string       `json:"state" v:"enum=PENDING|ACTIVE|INACTIVE|DELETED"`
		Provider         string       `json:"provider"`
		SecretSchemaID   string       `json:"secret_schema_id"`
		SecretID         string       `json:"secret_id"`
		TrustedAccountID string       `json:"trusted_account_id"`
		ProjectID        string       `json:"project_id"`
		WorkspaceID      string       `json:"workspace_id"`
		HasSecret        *bool        `json:"has_secret"`
	}
	analyzeReq struct {
		Query *analyze.Query `json:"query" v:"required"`
	}
)

// Validate refuses keys the store cannot hold (secret_data is never
// stored here).
func (r *createReq) Validate() error {
	return freeform.CheckAll("data", r.Data, "tags", r.Tags)
}

// Validate refuses keys the store cannot hold.
func (r *updateReq) Validate() error { return freeform.CheckAll("data", r.Data, "tags", r.Tags) }

// Service is the service-account operations.
type Service struct {
	*core.Deps
	c       *mongo.Collection
	schemas *schema.Service
	ixMu    sync.Mutex
	ixDone  bool
}

// New returns the service accounts of d.
func New(d *core.Deps) *Service {
	return &Service{Deps: d, c: d.DB.Collection(core.ServiceAccountsCollection), schemas: schema.New(d)}
}

// Routes are the service-account operations.
func Routes(d *core.Deps) []api.Route { return New(d).routes() }

func (s *Service) routes() []api.Route {
	const p = "/identity/v2/service-account/"
	return []api.Route{
		api.Op[createReq, core.ServiceAccount]{Path: p + "create", Access: writers, Summary: "Create a general service account in a project; its keys become a PROJECT secret of the secret service.", Handle: s.create},
		api.Op[updateReq, core.ServiceAccount]{Path: p + "update", Access: writers, Summary: "Change a service account (any subset of name, data, tags, manager, project).", Handle: s.update},
		api.Op[updateSecretReq, core.ServiceAccount]{Path: p + "update-secret-data", Access: writers, Summary: "Replace a service account's keys (a new secret).", Handle: s.updateSecret},
		api.Op[accountReq, core.ServiceAccount]{Path: p + "delete-secret-data", Access: writers, Summary: "Delete a service account's keys.", Handle: s.deleteSecret},
		api.Op[accountReq, api.Empty]{Path: p + "delete", Access: writers, Summary: "Delete a service account and its secrets.", Handle: s.delete},
		api.Op[accountReq, core.ServiceAccount]{Path: p + "get", Access: readers, Summary: "Get a service account.", Handle: s.get},
		api.Op[listReq, api.List[core.ServiceAccount]]{Path: p + "list", Access: readers, Summary: "List service accounts.", Handle: s.list},
		api.Op[core.StatRequest, map[string]any]{Path: p + "stat", Access: readers, Summary: "Statistics over service accounts.", Handle: s.stat},
		api.Op[analyzeReq, map[string]any]{Path: p + "analyze", Access: readers, Summary: "Analyze service accounts.", Handle: s.analyze},
	}
}

// EnsureIndexes declares the accounts' indexes once per process (a
// failure is tried again by the next create): the name is unique in its
// project (upstream: with domain, workspace and project), which the
// unique index decides atomically.
func (s *Service) EnsureIndexes(ctx context.Context) error {
	s.ixMu.Lock()
	defer s.ixMu.Unlock()
	if s.ixDone {
		return nil
	}
	err := store.EnsureIndexes(ctx, s.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "name", Value: 1}}, Unique: true},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "trusted_account_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "provider", Value: 1}}},
	)
	s.ixDone = err == nil
	return err
}

// secrets is the secret service's client: its URL is read at each call,
// as the devstack fills service_urls after identity is built.
func (s *Service) secrets() *call.Client {
	return call.NewClient("secret", s.Cfg.ServiceURLs["secret"], "", nil)
}

// project loads the project a caller puts an account in (404 otherwise).
func (s *Service) project(ctx context.Context, p *auth.Principal, id string) (*core.Project, error) {
	return store.GetFor[core.Project](ctx, s.Projects, projects, p, "project_id", id)
}

// secretType decides the kind of keys: attached to a trusted account the
// caller sees, TRUSTING_SECRET (the trusted account's keys are the base);
// else SECRET, and the trusted account is dropped (upstream).
func (s *Service) secretType(ctx context.Context, p *auth.Principal, trustedID string, secretData map[string]any, provider string) (string, *trusted, error) {
	if trustedID == "" || len(secretData) == 0 {
		return schema.Secret, nil, nil
	}
	t, err := store.GetFor[trusted](ctx, s.Trusted, trustedAccounts, p, "trusted_account_id", trustedID)
	if err != nil {
		return "", nil, err
	}
	if t.Provider != provider {
		return "", nil, errs.Invalid("trusted_account_id", "the trusted account is of another provider")
	}
	return schema.TrustingSecret, t, nil
}

// checkManager: a manager is a user bound to a role in the workspace.
func (s *Service) checkManager(ctx context.Context, domainID, workspaceID, userID string) error {
	if userID == "" {
		return nil
	}
	b, err := s.Binding(ctx, domainID, userID, workspaceID)
	if err != nil {
		return err
	}
	if b == nil {
		return errs.NotFound("service_account_mgr_id", userID)
	}
	return nil
}

// addManager lists the manager on a PRIVATE project (one atomic $addToSet).
func (s *Service) addManager(ctx context.Context, pr *core.Project, userID string) error {
	if userID == "" || pr.ProjectType != "PRIVATE" {
		return nil
	}
	_, err := s.Projects.UpdateOne(ctx, bson.D{{Key: "_id", Value: pr.ID}}, bson.D{{Key: "$addToSet", Value: bson.D{{Key: "users", Value: userID}}}})
	return store.Wrap(err)
}

// createdSecret is what is read of the secret service's SecretInfo.
type createdSecret struct {
	SecretID string `json:"secret_id"`
}

// storeSecret creates the account's PROJECT secret with the caller's
// credential (the secret service copies project and workspace from the
// account it reads back) and answers its id.
func (s *Service) storeSecret(ctx context.Context, a *core.ServiceAccount, schemaID string, data map[string]any, t *trusted) (string, error) {
	body := map[string]any{"name": a.ServiceAccountID + "-secret", "data": data, "schema_id": schemaID,
		"service_account_id": a.ServiceAccountID, "resource_group": "PROJECT"}
	if t != nil {
		body["trusted_secret_id"] = t.TrustedSecretID
	}
	var out createdSecret
	if err := s.secrets().Call(ctx, SecretCreatePath, body, &out); err != nil {
		return "", err
	}
	return out.SecretID, nil
}

// dropSecrets deletes every secret of the account (upstream: list by
// service_account_id, delete each).
func (s *Service) dropSecrets(ctx context.Context, a *core.ServiceAccount) error {
	var out struct {
		Results []createdSecret `json:"results"`
	}
	if err := s.secrets().Call(ctx, SecretListPath, map[string]any{"service_account_id": a.ServiceAccountID}, &out); err != nil {
		return err
	}
	for _, sec := range out.Results {
		err := s.secrets().Call(ctx, SecretDeletePath, map[string]any{"secret_id": sec.SecretID}, nil)
		if err != nil && !errs.Is(err, errs.NotFoundCode) {
			return err
		}
	}
	return nil
}

func (s *Service) create(ctx context.Context, p *auth.Principal, r *createReq) (*core.ServiceAccount, error) {
	if err := s.EnsureIndexes(ctx); err != nil {
		return nil, err
	}
	if err := s.schemas.CheckData(ctx, p, r.Provider, schema.ServiceAccount, r.Data); err != nil {
		return nil, err
	}
	pr, err := s.project(ctx, p, r.ProjectID)
	if err != nil {
		return nil, err
	}
	rule, err := tenancy.For(p, Resource.Tenancy)
	if err != nil {
		return nil, err
	}
	if err := rule.Admits(tenancy.Record{Domain: pr.DomainID, Workspace: pr.WorkspaceID, Project: pr.ProjectID}); err != nil {
		return nil, err
	}
	kind, t, err := s.secretType(ctx, p, r.TrustedAccountID, r.SecretData, r.Provider)
	if err != nil {
		return nil, err
	}
	if err := s.checkManager(ctx, pr.DomainID, pr.WorkspaceID, r.ServiceAccountMgrID); err != nil {
		return nil, err
	}
	if len(r.SecretData) > 0 {
		if r.SecretSchemaID == "" {
			return nil, errs.Required("secret_schema_id")
		}
		if _, err := s.schemas.CheckSecret(ctx, p, r.SecretSchemaID, kind, r.SecretData); err != nil {
			return nil, err
		}
	}
	id := wire.NewID(IDPrefix)
	a := &core.ServiceAccount{ID: id, ServiceAccountID: id, Name: r.Name, State: core.AccountActive, Data: wire.Object(r.Data),
		Provider: r.Provider, Tags: wire.Object(r.Tags), ServiceAccountMgrID: r.ServiceAccountMgrID, ProjectID: pr.ProjectID,
		WorkspaceID: pr.WorkspaceID, DomainID: pr.DomainID, CreatedAt: wire.T(wire.Now())}
	if _, err := s.c.InsertOne(ctx, a); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.Duplicate("name", r.Name)
		}
		return nil, store.Wrap(err)
	}
	if err := s.addManager(ctx, pr, r.ServiceAccountMgrID); err != nil {
		return nil, s.undo(ctx, a, err)
	}
	if len(r.SecretData) == 0 { // {} means no secret (the console sends it)
		return a, nil
	}
	secretID, err := s.storeSecret(ctx, a, r.SecretSchemaID, r.SecretData, t)
	if err != nil {
		return nil, s.undo(ctx, a, err)
	}
	set := bson.D{{Key: "secret_id", Value: secretID}, {Key: "secret_schema_id", Value: r.SecretSchemaID}}
	if t != nil {
		set = append(set, bson.E{Key: "trusted_account_id", Value: t.TrustedAccountID})
	}
	return store.SetByID[core.ServiceAccount](ctx, s.c, "service_account_id", id, set)
}

// undo removes an account whose create failed after its insert.
func (s *Service) undo(ctx context.Context, a *core.ServiceAccount, cause error) error {
	_, _ = s.c.DeleteOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: a.ID}})
	return cause
}

// own loads an account the caller may change; a synced account whose
// trusted account syncs on a schedule is the sync's (upstream).
func (s *Service) own(ctx context.Context, p *auth.Principal, id string) (*core.ServiceAccount, error) {
	a, err := store.GetToChange[core.ServiceAccount](ctx, s.c, Resource, p, "service_account_id", id)
	if err != nil {
		return nil, err
	}
	if a.IsManaged && a.TrustedAccountID != "" {
		var t trusted
		err := s.Trusted.FindOne(ctx, bson.D{{Key: "_id", Value: a.TrustedAccountID}}).Decode(&t)
		if err == nil && t.Schedule.State == core.Enabled {
			return nil, errs.New(errs.ManagedAccount, "A synced service account cannot be changed while its trusted account syncs. (service_account_id = %s)", id)
		}
	}
	return a, nil
}

func (s *Service) update(ctx context.Context, p *auth.Principal, r *updateReq) (*core.ServiceAccount, error) {
	a, err := s.own(ctx, p, r.ServiceAccountID)
	if err != nil {
		return nil, err
	}
	set := bson.D{}
	if r.Data != nil {
		if err := s.schemas.CheckData(ctx, p, a.Provider, schema.ServiceAccount, r.Data); err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "data", Value: freeform.Map(r.Data)})
	}
	pr, err := s.project(ctx, p, a.ProjectID)
	if r.ProjectID != "" && r.ProjectID != a.ProjectID {
		pr, err = s.project(ctx, p, r.ProjectID)
		if err == nil && pr.WorkspaceID != a.WorkspaceID {
			err = errs.NotFound("project_id", r.ProjectID)
		}
		if err == nil {
			set = append(set, bson.E{Key: "project_id", Value: pr.ProjectID})
		}
	}
	if err != nil {
		return nil, err
	}
	if r.ServiceAccountMgrID != nil {
		if err := s.checkManager(ctx, a.DomainID, a.WorkspaceID, *r.ServiceAccountMgrID); err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "service_account_mgr_id", Value: *r.ServiceAccountMgrID})
	}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	if len(set) == 0 {
		return a, nil
	}
	if r.ServiceAccountMgrID != nil {
		if err := s.addManager(ctx, pr, *r.ServiceAccountMgrID); err != nil {
			return nil, err
		}
	}
	out, err := store.SetByID[core.ServiceAccount](ctx, s.c, "service_account_id", a.ID, set)
	if mongo.IsDuplicateKeyError(err) {
		return nil, errs.Duplicate("name", r.Name)
	}
	if err != nil {
		return nil, err
	}
	// A moved account moves its secret (upstream: Secret.update project_id).
	if out.ProjectID != a.ProjectID && out.SecretID != "" {
		if err := s.secrets().Call(ctx, SecretUpdatePath, map[string]any{"secret_id": out.SecretID, "project_id": out.ProjectID}, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Service) updateSecret(ctx context.Context, p *auth.Principal, r *updateSecretReq) (*core.ServiceAccount, error) {
	a, err := s.own(ctx, p, r.ServiceAccountID)
	if err != nil {
		return nil, err
	}
	if len(r.SecretData) == 0 {
		return nil, errs.Required("secret_data")
	}
	kind, t, err := s.secretType(ctx, p, r.TrustedAccountID, r.SecretData, a.Provider)
	if err != nil {
		return nil, err
	}
	if _, err := s.schemas.CheckSecret(ctx, p, r.SecretSchemaID, kind, r.SecretData); err != nil {
		return nil, err
	}
	// Upstream replaces the secret: the old one goes, a new one comes.
	if err := s.dropSecrets(ctx, a); err != nil {
		return nil, err
	}
	secretID, err := s.storeSecret(ctx, a, r.SecretSchemaID, r.SecretData, t)
	if err != nil {
		return nil, err
	}
	trustedID := ""
	if t != nil {
		trustedID = t.TrustedAccountID
	}
	return store.SetByID[core.ServiceAccount](ctx, s.c, "service_account_id", a.ID, bson.D{{Key: "secret_id", Value: secretID},
		{Key: "secret_schema_id", Value: r.SecretSchemaID}, {Key: "trusted_account_id", Value: trustedID}})
}

func (s *Service) deleteSecret(ctx context.Context, p *auth.Principal, r *accountReq) (*core.ServiceAccount, error) {
	a, err := s.own(ctx, p, r.ServiceAccountID)
	if err != nil {
		return nil, err
	}
	if err := s.dropSecrets(ctx, a); err != nil {
		return nil, err
	}
	return store.SetByID[core.ServiceAccount](ctx, s.c, "service_account_id", a.ID, bson.D{{Key: "secret_id", Value: ""},
		{Key: "secret_schema_id", Value: ""}, {Key: "trusted_account_id", Value: ""}})
}

func (s *Service) delete(ctx context.Context, p *auth.Principal, r *accountReq) (*api.Empty, error) {
	a, err := s.own(ctx, p, r.ServiceAccountID)
	if err != nil {
		return nil, err
	}
	// The secrets first: an account is never gone while its keys remain.
	if err := s.dropSecrets(ctx, a); err != nil {
		return nil, err
	}
	if _, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: a.ID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *Service) get(ctx context.Context, p *auth.Principal, r *accountReq) (*core.ServiceAccount, error) {
	return store.GetFor[core.ServiceAccount](ctx, s.c, Resource, p, "service_account_id", r.ServiceAccountID)
}

func (s *Service) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[core.ServiceAccount], error) {
	q := query.With(r.Query, query.Params("service_account_id", r.ServiceAccountID, "name", r.Name, "state", r.State, "provider", r.Provider,
		"secret_schema_id", r.SecretSchemaID, "secret_id", r.SecretID, "trusted_account_id", r.TrustedAccountID, "project_id", r.ProjectID,
		"workspace_id", r.WorkspaceID)...)
	if r.HasSecret != nil {
		ids, err := s.withSecret(ctx)
		if err != nil {
			return nil, err
		}
		op := "in"
		if !*r.HasSecret {
			op = "not_in" // Nubes: false lists those without (upstream ignores false)
		}
		q = query.With(q, query.Condition{Key: "service_account_id", Operator: op, Value: ids})
	}
	return store.SearchFor[core.ServiceAccount](ctx, s.c, q, Resource, p)
}

// secretPage is how many account ids one secret/stat call answers.
const secretPage = 5000

// withSecret are the ids of the accounts the secret service holds a
// secret of, as the caller sees them (upstream: Secret.stat distinct
// service_account_id): one call for up to secretPage accounts, whatever
// the size of the list's page.
func (s *Service) withSecret(ctx context.Context) ([]string, error) {
	ids := []string{}
	for start := 1; ; start += secretPage {
		var out struct {
			Results    []string `json:"results"`
			TotalCount int      `json:"total_count"`
		}
		err := s.secrets().Call(ctx, SecretStatPath, map[string]any{"query": map[string]any{"distinct": "service_account_id",
			"filter": []any{map[string]any{"k": "service_account_id", "v": "", "o": "not"}}, "page": map[string]any{"start": start, "limit": secretPage}}}, &out)
		if err != nil {
			return nil, err
		}
		ids = append(ids, out.Results...)
		if len(out.Results) < secretPage || len(ids) >= out.TotalCount {
			return ids, nil
		}
	}
}

func (s *Service) stat(ctx context.Context, p *auth.Principal, r *core.StatRequest) (*map[string]any, error) {
	return core.StatFor(ctx, s.c, p, Resource, r.Query)
}

func (s *Service) analyze(ctx context.Context, p *auth.Principal, r *analyzeReq) (*map[string]any, error) {
	res, err := analyze.RunFor(ctx, s.c, p, Resource, r.Query)
	return &res, err
}
