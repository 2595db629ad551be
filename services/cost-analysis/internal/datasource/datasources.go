// Package datasource holds the data sources of the cost-analysis service:
// Nubes' addition (the spec names data_source_id but lists no operation),
// with upstream's names and shapes under /cost-analysis/v1/data-source. A
// data source is an instance of a repository plugin of resource_type
// cost_analysis.DataSource, initialised on register and on update_plugin
// (its metadata's data_source_rules become its MANAGED rules). A MANUAL
// data source has its own secret data, sealed at rest; a
// USE_SERVICE_ACCOUNT_SECRET one syncs with identity's trusted accounts of
// its provider (narrowed by its secret_filter), whose secret data is read
// from identity when needed and never kept. sync starts a cost job.
//
// It must not read other services' data except through their APIs
// (repository for plugins and versions, identity for trusted accounts).
package datasource

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/trusted"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/datasourcerule"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/job"
)

// DataSource is the DataSourceInfo sent.
type DataSource = core.DataSource

var resource = query.Resource{
	KeywordFields: []string{"data_source_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"data_source_id", "name", "state", "data_source_type", "provider", "workspace_id"},
	Fields:        query.FieldsOf[DataSource](),
	Secret:        []string{"sealed"},
	Tenancy:       core.DataSourceResource.Tenancy,
	Maps:          freeform.FieldsOf[DataSource](),
}

type (
	pluginRequest struct {
		pluginref.Request
		SecretData  map[string]any `json:"secret_data"`
		SchemaID    string         `json:"schema_id" v:"max=255"`
		UpgradeMode string         `json:"upgrade_mode" v:"enum=AUTO|MANUAL"`
	}
	schedule struct {
		State string `json:"state" v:"enum=ENABLED|DISABLED"`
		Hours []int  `json:"hours" v:"max=24"`
	}
	register struct {
		Name           string          `json:"name" v:"required,max=255"`
		DataSourceType string          `json:"data_source_type" v:"enum=EXTERNAL"`
		Provider       string          `json:"provider" v:"max=255"`
		SecretType     string          `json:"secret_type" v:"enum=MANUAL|USE_SERVICE_ACCOUNT_SECRET"`
		SecretFilter   *trusted.Filter `json:"secret_filter"`
		PluginInfo     *pluginRequest  `json:"plugin_info" v:"required"`
		Schedule       *schedule       `json:"schedule"`
		Tags           freeform.Flat   `json:"tags"`
		ResourceGroup  string          `json:"resource_group" v:"required,enum=DOMAIN|WORKSPACE"`
		WorkspaceID    string          `json:"workspace_id" v:"max=64"`
	}
	update struct {
		DataSourceID string          `json:"data_source_id" v:"required,max=64"`
		Name         string          `json:"name" v:"max=255"`
		SecretFilter *trusted.Filter `json:"secret_filter"`
		Schedule     *schedule       `json:"schedule"`
		Tags         freeform.Flat   `json:"tags"`
	}
	updatePlugin struct {
		DataSourceID string `json:"data_source_id" v:"required,max=64"`
		pluginref.Update
		UpgradeMode string `json:"upgrade_mode" v:"enum=AUTO|MANUAL"`
	}
	dsRequest struct {
		DataSourceID string `json:"data_source_id" v:"required,max=64"`
	}
	permissions struct {
		Deny []string `json:"deny" v:"max=1000"`
	}
	updatePermissions struct {
		DataSourceID string       `json:"data_source_id" v:"required,max=64"`
		Permissions  *permissions `json:"permissions" v:"required"`
	}
	syncRequest struct {
		DataSourceID   string `json:"data_source_id" v:"required,max=64"`
		Start          string `json:"start" v:"max=7"`
		NoPreloadCache bool   `json:"no_preload_cache"`
	}
	dsQuery struct {
		Query          *query.Query `json:"query"`
		DataSourceID   string       `json:"data_source_id"`
		Name           string       `json:"name"`
		State          string       `json:"state" v:"enum=ENABLED|DISABLED"`
		DataSourceType string       `json:"data_source_type"`
		Provider       string       `json:"provider"`
		WorkspaceID    string       `json:"workspace_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Validate: every deny entry names a cost key family or one of its keys.
func (r *updatePermissions) Validate() error { return core.CheckDeny(r.Permissions.Deny) }

// Validate: hours of the day, each once.
func (s *schedule) Validate() error {
	seen := map[int]bool{}
	for _, h := range s.Hours {
		if h < 0 || h > 23 || seen[h] {
			return errs.Invalid("schedule.hours", "hours of the day (0 to 23), each once")
		}
		seen[h] = true
	}
	return nil
}

// Validate: a MANUAL plugin names its version. A data source that uses
// its provider's trusted accounts (USE_SERVICE_ACCOUNT_SECRET) names the
// provider (upstream) and brings no secret data of its own; only such a
// data source takes a secret_filter.
func (r *register) Validate() error {
	if err := r.PluginInfo.Check(r.PluginInfo.UpgradeMode); err != nil {
		return err
	}
	if r.SecretType != core.UseServiceAccountSecret {
		if r.SecretFilter != nil {
			return errs.Invalid("secret_filter", "only a USE_SERVICE_ACCOUNT_SECRET data source selects trusted accounts")
		}
		return nil
	}
	if len(r.PluginInfo.SecretData) > 0 {
		return errs.Invalid("plugin_info.secret_data", "a USE_SERVICE_ACCOUNT_SECRET data source syncs with its trusted accounts' secret data")
	}
	if r.Provider == "" {
		return errs.Required("provider")
	}
	return nil
}

var month = regexp.MustCompile(`^\d{4}-(0[1-9]|1[0-2])$`)

// Validate: start is a month, YYYY-MM.
func (r *syncRequest) Validate() error {
	if r.Start != "" && !month.MatchString(r.Start) {
		return errs.Invalid("start", "a month, YYYY-MM")
	}
	return nil
}

// DataSources serves the data source operations.
type DataSources struct {
	db      *mongo.Database
	c       *mongo.Collection
	repo    pluginref.Repository
	plugins *plugin.Client
	keys    *seal.Keyring
	rules   *datasourcerule.Rules
	jobs    *job.Jobs
	log     *slog.Logger
}

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database, repo pluginref.Repository, plugins *plugin.Client, keys *seal.Keyring,
	rules *datasourcerule.Rules, jobs *job.Jobs, log *slog.Logger) (*DataSources, error) {
	ds := &DataSources{db: db, c: db.Collection(core.DataSourcesCollection), repo: repo, plugins: plugins, keys: keys,
		rules: rules, jobs: jobs, log: log}
	return ds, store.EnsureIndexes(ctx, ds.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "name", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "plugin_info.plugin_id", Value: 1}}},
	)
}

// Routes are the operations.
func (ds *DataSources) Routes() []api.Route {
	const base = "/cost-analysis/v1/data-source/"
	return []api.Route{
		api.Op[register, DataSource]{Path: base + "register", Access: core.Writers, Summary: "Register a data source from a cost_analysis.DataSource plugin; the plugin is initialised and its MANAGED rules created.", Handle: ds.register},
		api.Op[update, DataSource]{Path: base + "update", Access: core.Writers, Summary: "Change a data source's name, secret filter (USE_SERVICE_ACCOUNT_SECRET only), schedule or tags.", Handle: ds.update},
		api.Op[updatePermissions, DataSource]{Path: base + "update-permissions", Access: core.Writers, Summary: "Replace the data source's permissions: deny names the cost keys (data.<key>, tags.<key>, additional_info.<key>, or a whole family) that workspace callers do not read.", Handle: ds.updatePermissions},
		api.Op[updatePlugin, DataSource]{Path: base + "update-plugin", Access: core.Writers, Summary: "Change the plugin's version or options and initialise it again; the MANAGED rules follow its metadata.", Handle: ds.updatePlugin},
		api.Op[dsRequest, api.Empty]{Path: base + "verify-plugin", Access: core.Writers, Summary: "Ask the plugin to verify the data source's options and secret data (DataSource.verify); a USE_SERVICE_ACCOUNT_SECRET data source verifies with the first trusted account it syncs with.", Handle: ds.verifyPlugin},
		api.Op[dsRequest, DataSource]{Path: base + "enable", Access: core.Writers, Summary: "Enable the data source: it syncs.", Handle: ds.enable},
		api.Op[dsRequest, DataSource]{Path: base + "disable", Access: core.Writers, Summary: "Disable the data source: sync is refused.", Handle: ds.disable},
		api.Op[dsRequest, api.Empty]{Path: base + "deregister", Access: core.Writers, Summary: "Deregister the data source with its rules, jobs and costs.", Handle: ds.deregister},
		api.Op[dsRequest, DataSource]{Path: base + "get", Access: core.Readers, Summary: "Get a data source.", Handle: ds.get},
		api.Op[dsQuery, api.List[DataSource]]{Path: base + "list", Access: core.Readers, Summary: "List the data sources the caller may see.", Handle: ds.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the data sources the caller may see.", Handle: ds.stat},
		api.Op[syncRequest, job.Job]{Path: base + "sync", Access: core.Writers, Summary: "Sync the data source's costs (from start, YYYY-MM, when given): answers the cost job.", Handle: ds.sync},
	}
}

func (ds *DataSources) target(info core.PluginInfo) plugin.CostDataSource {
	return plugin.CostDataSource{Target: ds.plugins.Plugin(info.PluginID, info.Version)}
}

// init initialises the plugin for the domain's data source.
func (ds *DataSources) init(domainID string) pluginref.Init {
	return func(ctx context.Context, info pluginref.Info) (map[string]any, error) {
		return plugin.CostDataSource{Target: ds.plugins.Plugin(info.PluginID, info.Version)}.Init(ctx, info.Options, domainID)
	}
}

// managedSpecs reads the MANAGED rules of a plugin's metadata; an entry
// that is not a valid rule is skipped (and logged).
func (ds *DataSources) managedSpecs(md map[string]any) []datasourcerule.ManagedSpec {
	// Through JSON: metadata read back from the store holds bson.A, not []any.
	b, _ := json.Marshal(md["data_source_rules"])
	var raw []json.RawMessage
	_ = json.Unmarshal(b, &raw)
	var out []datasourcerule.ManagedSpec
	for i, r := range raw {
		var s struct {
			Name             string           `json:"name"`
			Conditions       []core.Condition `json:"conditions"`
			ConditionsPolicy string           `json:"conditions_policy"`
			Actions          core.Actions     `json:"actions"`
			Options          core.RuleOptions `json:"options"`
			Tags             freeform.Flat    `json:"tags"`
		}
		if err := json.Unmarshal(r, &s); err != nil || !slices.Contains([]string{"ALL", "ANY", "ALWAYS"}, s.ConditionsPolicy) {
			ds.log.Warn("a MANAGED rule of the plugin's metadata skipped", "index", i)
			continue
		}
		out = append(out, datasourcerule.ManagedSpec{Name: s.Name, Conditions: s.Conditions, ConditionsPolicy: s.ConditionsPolicy,
			Actions: s.Actions, Options: s.Options, Tags: s.Tags})
	}
	return out
}

func (ds *DataSources) register(ctx context.Context, p *auth.Principal, r *register) (*DataSource, error) {
	ws, err := core.Placement(p, r.ResourceGroup, r.WorkspaceID)
	if err != nil {
		return nil, err
	}
	rp, err := ds.repo.Get(ctx, r.PluginInfo.PluginID)
	if err != nil {
		return nil, err
	}
	pi, err := ds.repo.New(ctx, rp.PluginID, r.PluginInfo.Ask(r.PluginInfo.UpgradeMode), "version", ds.init(p.DomainID))
	if err != nil {
		return nil, err
	}
	info := core.PluginInfo{Info: pi, SchemaID: r.PluginInfo.SchemaID}
	secretType, filter := core.Manual, trusted.Filter{}
	if r.SecretType == core.UseServiceAccountSecret {
		secretType = core.UseServiceAccountSecret
		if r.SecretFilter != nil {
			filter = *r.SecretFilter
		}
	}
	if secretType == core.Manual && r.PluginInfo.SecretData != nil {
		if err := ds.target(info).Verify(ctx, info.Options, r.PluginInfo.SecretData, "", p.DomainID); err != nil {
			return nil, err
		}
	}
	id := wire.NewID("ds")
	provider := r.Provider
	if provider == "" {
		provider, _ = info.Metadata["provider"].(string)
	}
	if provider == "" {
		provider = rp.Provider
	}
	sched := core.Schedule{State: core.Disabled, Hours: []int{}}
	if r.Schedule != nil {
		sched = core.Schedule{State: r.Schedule.State, Hours: wire.List(r.Schedule.Hours)}
		if sched.State == "" {
			sched.State = core.Enabled
		}
	}
	doc := &DataSource{ID: id, DataSourceID: id, Name: r.Name, State: core.Enabled, DataSourceType: "EXTERNAL", Provider: provider,
		SecretType: secretType, SecretFilter: filter.Normalized(), PluginInfo: info, Schedule: sched, Tags: wire.Object(r.Tags), CostTagKeys: []string{},
		CostAdditionalInfoKeys: []string{}, CostDataKeys: []string{}, Permissions: core.Permissions{Deny: []string{}}, ResourceGroup: r.ResourceGroup, WorkspaceID: ws,
		DomainID: p.DomainID, CreatedAt: wire.T(wire.Now())}
	if secretType == core.Manual && r.PluginInfo.SecretData != nil {
		sealed, err := ds.keys.SealJSON(r.PluginInfo.SecretData, core.AD(id, p.DomainID))
		if err != nil {
			return nil, err
		}
		doc.Sealed = &sealed
		doc.PluginInfo.SecretID = wire.NewID("secret")
	}
	if _, err := ds.c.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	if err := ds.rules.ReplaceManaged(ctx, doc, ds.managedSpecs(info.Metadata)); err != nil {
		// No half-registered data source: its rules and record go.
		_ = ds.rules.DeleteAll(context.WithoutCancel(ctx), id)
		_, _ = ds.c.DeleteOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: id}})
		return nil, err
	}
	return doc, nil
}

// load returns a data source the caller may see (404 otherwise).
func (ds *DataSources) load(ctx context.Context, p *auth.Principal, id string) (*DataSource, error) {
	return core.LoadDataSource(ctx, ds.db, p, id)
}

// change loads a data source the caller may change and writes the fields
// set returns if nobody wrote it since (store.Change: a compare-and-set
// on its version, set run again on a lost race); one marked for
// deregister meanwhile changes no more (404).
func (ds *DataSources) change(ctx context.Context, p *auth.Principal, id string, set func(doc *DataSource) (bson.D, error)) (*DataSource, error) {
	if _, err := core.ChangeDataSource(ctx, ds.db, p, id); err != nil {
		return nil, err
	}
	return store.Change(ctx, ds.c, "data_source_id", id, set)
}

func (ds *DataSources) update(ctx context.Context, p *auth.Principal, r *update) (*DataSource, error) {
	return ds.change(ctx, p, r.DataSourceID, func(doc *DataSource) (bson.D, error) {
		set := bson.D{}
		if r.Name != "" {
			set = append(set, bson.E{Key: "name", Value: r.Name})
		}
		if r.SecretFilter != nil {
			if doc.SecretType != core.UseServiceAccountSecret {
				return nil, errs.Invalid("secret_filter", "only a USE_SERVICE_ACCOUNT_SECRET data source selects trusted accounts")
			}
			set = append(set, bson.E{Key: "secret_filter", Value: r.SecretFilter.Normalized()})
		}
		if r.Schedule != nil {
			s := core.Schedule{State: r.Schedule.State, Hours: wire.List(r.Schedule.Hours)}
			if s.State == "" {
				s.State = doc.Schedule.State
			}
			set = append(set, bson.E{Key: "schedule", Value: s})
		}
		if r.Tags != nil {
			set = append(set, bson.E{Key: "tags", Value: r.Tags})
		}
		return set, nil
	})
}

// updatePermissions replaces the permissions (upstream replaces the whole
// dict); a repeated deny entry is kept once.
func (ds *DataSources) updatePermissions(ctx context.Context, p *auth.Principal, r *updatePermissions) (*DataSource, error) {
	deny := []string{}
	for _, d := range r.Permissions.Deny {
		if !slices.Contains(deny, d) {
			deny = append(deny, d)
		}
	}
	return ds.change(ctx, p, r.DataSourceID, func(*DataSource) (bson.D, error) {
		return bson.D{{Key: "permissions", Value: core.Permissions{Deny: deny}}}, nil
	})
}

// updatePlugin sets a version the repository knows (or, in AUTO mode
// without one, the newest), replaces the options when given, initialises
// the plugin again and makes its metadata's rules the MANAGED rules.
func (ds *DataSources) updatePlugin(ctx context.Context, p *auth.Principal, r *updatePlugin) (*DataSource, error) {
	doc, err := ds.change(ctx, p, r.DataSourceID, func(doc *DataSource) (bson.D, error) {
		info := doc.PluginInfo
		var err error
		info.Info, err = ds.repo.Change(ctx, info.Info, r.Ask(r.UpgradeMode),
			ds.init(doc.DomainID))
		if err != nil {
			return nil, err
		}
		return bson.D{{Key: "plugin_info", Value: info}}, nil
	})
	if err != nil {
		return nil, err
	}
	return doc, ds.rules.ReplaceManaged(ctx, doc, ds.managedSpecs(doc.PluginInfo.Metadata))
}

func (ds *DataSources) verifyPlugin(ctx context.Context, p *auth.Principal, r *dsRequest) (*api.Empty, error) {
	doc, err := core.ChangeDataSource(ctx, ds.db, p, r.DataSourceID)
	if err != nil {
		return nil, err
	}
	secret, err := ds.jobs.VerifySecret(ctx, doc)
	if err != nil {
		return nil, err
	}
	if err := ds.target(doc.PluginInfo).Verify(ctx, job.PluginOptions(doc), secret, "", doc.DomainID); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (ds *DataSources) state(state string) func(ctx context.Context, p *auth.Principal, r *dsRequest) (*DataSource, error) {
	return func(ctx context.Context, p *auth.Principal, r *dsRequest) (*DataSource, error) {
		return ds.change(ctx, p, r.DataSourceID, func(doc *DataSource) (bson.D, error) {
			if doc.State == state {
				return nil, nil
			}
			return bson.D{{Key: "state", Value: state}}, nil
		})
	}
}

func (ds *DataSources) enable(ctx context.Context, p *auth.Principal, r *dsRequest) (*DataSource, error) {
	return ds.state(core.Enabled)(ctx, p, r)
}

func (ds *DataSources) disable(ctx context.Context, p *auth.Principal, r *dsRequest) (*DataSource, error) {
	return ds.state(core.Disabled)(ctx, p, r)
}

// deregister tears the data source down mark first (store.Teardown):
// from the mark on it and its costs are left out of every read, and it
// no longer syncs; then its jobs (running ones cancelled), tasks, costs
// and rules are deleted, and its record last. A deregister that fails
// half-way leaves the mark: a retry finds the marked data source and
// finishes the work.
func (ds *DataSources) deregister(ctx context.Context, p *auth.Principal, r *dsRequest) (*api.Empty, error) {
	_, err := store.Teardown[DataSource]{Records: ds.c, Resource: resource, Key: "data_source_id",
		Children: func(ctx context.Context, doc *DataSource) error {
			if err := ds.jobs.Forget(ctx, doc.ID); err != nil {
				return err
			}
			return ds.rules.DeleteAll(ctx, doc.ID)
		},
	}.Delete(ctx, p, r.DataSourceID)
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

// Reads of data sources leave out, for a workspace caller, the values
// the plugin's MANAGED rules (metadata data_source_rules) give the cost
// keys the data source denies, as rule reads do.
func (ds *DataSources) get(ctx context.Context, p *auth.Principal, r *dsRequest) (*DataSource, error) {
	doc, err := ds.load(ctx, p, r.DataSourceID)
	if err != nil || tenancy.DomainWide(p) {
		return doc, err
	}
	core.RedactMetadata(doc.PluginInfo.Metadata, doc.Permissions.Deny)
	return doc, nil
}

func (ds *DataSources) list(ctx context.Context, p *auth.Principal, r *dsQuery) (*api.List[DataSource], error) {
	d, err := core.DeniedFor(ctx, ds.db, p)
	if err != nil {
		return nil, err
	}
	if err := r.Query.Paths(d.Refuse(core.MetadataRulesPath)); err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("data_source_id", r.DataSourceID, "name", r.Name, "state", r.State,
		"data_source_type", r.DataSourceType, "provider", r.Provider, "workspace_id", r.WorkspaceID)...)
	l, err := store.SearchFor[DataSource](ctx, ds.c, q, resource, p)
	if err != nil || d == nil {
		return l, err
	}
	for i := range l.Results {
		// By id: a list that leaves permissions out is held to them too.
		core.RedactMetadata(l.Results[i].PluginInfo.Metadata, d.Of(cmp.Or(l.Results[i].ID, l.Results[i].DataSourceID)))
	}
	return l, nil
}

func (ds *DataSources) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	d, err := core.DeniedFor(ctx, ds.db, p)
	if err != nil {
		return nil, err
	}
	if _, err := r.Query.Paths(d.Refuse(core.MetadataRulesPath)); err != nil {
		return nil, err
	}
	res := resource
	if d.Hides() {
		res.Secret = append(slices.Clone(resource.Secret), core.MetadataRulesPath)
	}
	out, err := stat.RunFor(ctx, ds.c, p, res, r.Query)
	return &out, err
}

func (ds *DataSources) sync(ctx context.Context, p *auth.Principal, r *syncRequest) (*job.Job, error) {
	doc, err := core.ChangeDataSource(ctx, ds.db, p, r.DataSourceID)
	if err != nil {
		return nil, err
	}
	return ds.jobs.Start(ctx, doc, r.Start)
}
