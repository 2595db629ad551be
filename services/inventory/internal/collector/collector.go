// Package collector holds the collector operations of the inventory
// service: a collector is an instance of a repository plugin of
// resource_type inventory.Collector, initialised on create and on
// update_plugin, and collect turns it into a job with one task per
// secret, queued for the workers (package worker) through an outbox.
//
// It must not read other services' data except through their APIs
// (identity for workspaces and trusted accounts, repository for plugins),
// and never keeps, logs or answers secret data.
package collector

import (
	"context"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/trusted"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// Collector is the CollectorInfo sent.
type Collector = core.Collector

var resource = query.Resource{
	KeywordFields: []string{"collector_id", "name", "provider"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"collector_id", "name", "provider", "plugin_info", "resource_group", "workspace_id"},
	Fields:        query.FieldsOf[Collector](),
	Tenancy:       tenancy.InWorkspace.WithMarks(), // deleted mark first (store.Teardown)
	Maps:          freeform.FieldsOf[Collector](),
}

type (
	pluginInfo struct {
		pluginref.Request
		UpgradeMode string `json:"upgrade_mode" v:"enum=AUTO|MANUAL|NONE"`
	}
	createCollector struct {
		Name          string          `json:"name" v:"required,max=255"`
		PluginInfo    *pluginInfo     `json:"plugin_info" v:"required"`
		ResourceGroup string          `json:"resource_group" v:"required,enum=DOMAIN|WORKSPACE"`
		Schedule      *core.Schedule  `json:"schedule"`
		Provider      string          `json:"provider" v:"max=255"`
		SecretFilter  *trusted.Filter `json:"secret_filter"`
		Tags          freeform.Flat   `json:"tags"`
		WorkspaceID   string          `json:"workspace_id" v:"max=64"`
	}
	updateCollector struct {
		CollectorID  string          `json:"collector_id" v:"required,max=64"`
		Name         string          `json:"name" v:"max=255"`
		Schedule     *core.Schedule  `json:"schedule"`
		SecretFilter *trusted.Filter `json:"secret_filter"`
		Tags         freeform.Flat   `json:"tags"`
		// PluginInfo is what clients echo back; plugin changes go through
		// update_plugin, so it is accepted and not applied.
		PluginInfo map[string]any `json:"plugin_info"`
	}
	updatePlugin struct {
		CollectorID string `json:"collector_id" v:"required,max=64"`
		pluginref.Update
		UpgradeMode string `json:"upgrade_mode" v:"enum=AUTO|MANUAL|NONE"`
	}
	verifyPlugin struct {
		CollectorID string `json:"collector_id" v:"required,max=64"`
		SecretID    string `json:"secret_id" v:"max=64"`
	}
	collectorRequest struct {
		CollectorID string `json:"collector_id" v:"required,max=64"`
	}
	collectRequest struct {
		CollectorID string `json:"collector_id" v:"required,max=64"`
		SecretID    string `json:"secret_id" v:"max=64"`
	}
	collectorQuery struct {
		Query             *query.Query `json:"query"`
		CollectorID       string       `json:"collector_id"`
		Name              string       `json:"name"`
		Provider          string       `json:"provider"`
		SecretFilterState string       `json:"secret_filter_state" v:"enum=ENABLED|DISABLED"`
		ScheduleState     string       `json:"schedule_state" v:"enum=ENABLED|DISABLED"`
		WorkspaceID       string       `json:"workspace_id"`
		PluginID          string       `json:"plugin_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Validate: a MANUAL plugin names its version; free-form objects hold
// keys the store can keep.
func (r *createCollector) Validate() error {
	if err := r.PluginInfo.Check(r.PluginInfo.UpgradeMode); err != nil {
		return err
	}
	return core.CheckAllKeys("plugin_info.options", r.PluginInfo.Options, "tags", r.Tags)
}

// Validate checks the tags' keys.
func (r *updateCollector) Validate() error { return core.CheckKeys("tags", r.Tags) }

// Validate checks the options' keys.
func (r *updatePlugin) Validate() error { return core.CheckKeys("options", r.Options) }

// Service serves the collector operations.
type Service struct {
	c        *mongo.Collection
	jobs     *mongo.Collection
	tasks    *mongo.Collection
	repo     pluginref.Repository
	identity core.Identity
	plugins  *plugin.Client
	outbox   *events.Outbox
	log      *slog.Logger
}

// New creates the collection's indexes. outbox queues the tasks of
// collect (nil: collect answers 503).
func New(ctx context.Context, db *mongo.Database, repo pluginref.Repository, identity core.Identity, plugins *plugin.Client,
	outbox *events.Outbox, log *slog.Logger) (*Service, error) {
	s := &Service{c: db.Collection(core.CollectorsCollection), jobs: db.Collection(core.JobsCollection),
		tasks: db.Collection(core.JobTasksCollection), repo: repo, identity: identity, plugins: plugins, outbox: outbox, log: log}
	return s, store.EnsureIndexes(ctx, s.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "schedule.state", Value: 1}, {Key: "schedule.hours", Value: 1}}},
	)
}

// Routes are the operations.
func (s *Service) Routes() []api.Route {
	const base = "/inventory/v1/collector/"
	return []api.Route{
		api.Op[createCollector, Collector]{Path: base + "create", Access: core.Writers, Summary: "Create a collector from an inventory.Collector plugin (initialised; its metadata kept).", Handle: s.create},
		api.Op[updateCollector, Collector]{Path: base + "update", Access: core.Writers, Summary: "Change a collector's name, schedule, secret filter or tags.", Handle: s.update},
		api.Op[updatePlugin, Collector]{Path: base + "update-plugin", Access: core.Writers, Summary: "Change the plugin's version, options or upgrade mode and initialise it again.", Handle: s.updatePlugin},
		api.Op[verifyPlugin, api.Empty]{Path: base + "verify-plugin", Access: core.Writers, Summary: "Ask the plugin to verify the collector's options with the secret data of its first secret.", Handle: s.verifyPlugin},
		api.Op[collectorRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete a collector with its jobs and job tasks; collected resources stay.", Handle: s.delete},
		api.Op[collectorRequest, Collector]{Path: base + "get", Access: core.Readers, Summary: "Get a collector.", Handle: s.get},
		api.Op[collectorQuery, api.List[Collector]]{Path: base + "list", Access: core.Readers, Summary: "List the collectors the caller may see.", Handle: s.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the collectors the caller may see.", Handle: s.stat},
		api.Op[collectRequest, core.Job]{Path: base + "collect", Access: core.Readers, Summary: "Collect now: one job, one task per secret (trusted account) of the collector's provider in its scope.", Handle: s.collect},
	}
}

func (s *Service) target(info core.PluginInfo) plugin.Collector {
	return plugin.Collector{Target: s.plugins.Plugin(info.PluginID, info.Version)}
}

func (s *Service) init(ctx context.Context, info core.PluginInfo) (map[string]any, error) {
	return s.target(info).Init(ctx, info.Options)
}

// placement is the workspace_id of a new collector: "*" for DOMAIN; for
// WORKSPACE the caller's workspace, or for a domain-wide caller a
// workspace of the domain named in the request.
func (s *Service) placement(ctx context.Context, p *auth.Principal, group, workspaceID string) (string, error) {
	switch {
	case group == core.GroupDomain && !tenancy.DomainWide(p):
		return "", errs.Forbidden()
	case group == core.GroupDomain && workspaceID != "" && workspaceID != core.Global:
		return "", errs.Invalid("workspace_id", "a DOMAIN collector belongs to no workspace")
	case group == core.GroupDomain:
		return core.Global, nil
	case p.WorkspaceID != "":
		if workspaceID != "" && workspaceID != p.WorkspaceID {
			return "", errs.NotFound("workspace_id", workspaceID)
		}
		return p.WorkspaceID, nil
	case workspaceID == "" || workspaceID == core.Global:
		return "", errs.Required("workspace_id")
	}
	if err := s.identity.Workspace(ctx, p, workspaceID); err != nil {
		return "", err
	}
	return workspaceID, nil
}

// provider resolves a collector's provider: the request's, else the
// plugin's; it must be one the plugin supports when the plugin says.
func provider(asked string, rp *pluginref.Plugin) (string, error) {
	supported := core.SupportedProviders(rp)
	pr := asked
	if pr == "" {
		pr = rp.Provider
	}
	if pr == "" && len(supported) > 0 {
		pr = supported[0]
	}
	if pr == "" {
		return "", errs.Required("provider")
	}
	if len(supported) > 0 {
		ok := false
		for _, s := range supported {
			ok = ok || s == pr
		}
		if !ok {
			return "", errs.Invalid("provider", "the plugin does not support provider "+pr)
		}
	}
	return pr, nil
}

func (s *Service) create(ctx context.Context, p *auth.Principal, r *createCollector) (*Collector, error) {
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return nil, err
	}
	sched, err := core.CheckSchedule(r.Schedule)
	if err != nil {
		return nil, err
	}
	ws, err := s.placement(ctx, p, r.ResourceGroup, r.WorkspaceID)
	if err != nil {
		return nil, err
	}
	at := tenancy.Record{Domain: rule.Stamp().Domain, Workspace: ws}
	if err := rule.Admits(at); err != nil {
		return nil, err
	}
	rp, err := s.repo.Get(ctx, r.PluginInfo.PluginID)
	if err != nil {
		return nil, err
	}
	pr, err := provider(r.Provider, rp)
	if err != nil {
		return nil, err
	}
	info, err := s.repo.New(ctx, rp.PluginID, r.PluginInfo.Ask(r.PluginInfo.UpgradeMode), "plugin_info.version", s.init)
	if err != nil {
		return nil, err
	}
	filter := trusted.Filter{}
	if r.SecretFilter != nil {
		filter = *r.SecretFilter
	}
	id := wire.NewID("collector")
	doc := &Collector{ID: id, CollectorID: id, Name: r.Name, Provider: pr, Capability: wire.Object(rp.Capability),
		SecretFilter: filter.Normalized(), PluginInfo: info, Schedule: sched, Tags: wire.Object(r.Tags),
		ResourceGroup: r.ResourceGroup, DomainID: at.Domain, WorkspaceID: ws, CreatedAt: wire.T(wire.Now())}
	if _, err := s.c.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

// Load returns a collector the caller may see (404 otherwise).
func (s *Service) Load(ctx context.Context, p *auth.Principal, id string) (*Collector, error) {
	return store.GetFor[Collector](ctx, s.c, resource, p, "collector_id", id)
}

// records is the collector's teardown (store.Teardown): its delete mark
// first, every change of it a compare-and-set that refuses a marked one,
// and its jobs created as its children (Live).
func (s *Service) records() store.Teardown[Collector] {
	return store.Teardown[Collector]{Records: s.c, Resource: resource, Key: "collector_id",
		Children: func(ctx context.Context, doc *Collector) error {
			for _, c := range []*mongo.Collection{s.tasks, s.jobs} {
				if err := store.DeleteChildren(ctx, c, bson.D{{Key: "domain_id", Value: doc.DomainID}, {Key: "collector_id", Value: doc.ID}}); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// writable loads a collector the caller may change.
func (s *Service) writable(ctx context.Context, p *auth.Principal, id string) (*Collector, error) {
	return store.GetToChange[Collector](ctx, s.c, resource, p, "collector_id", id)
}

func (s *Service) update(ctx context.Context, p *auth.Principal, r *updateCollector) (*Collector, error) {
	var sched *core.Schedule
	if r.Schedule != nil {
		sc, err := core.CheckSchedule(r.Schedule)
		if err != nil {
			return nil, err
		}
		sched = &sc
	}
	return s.records().Change(ctx, p, r.CollectorID, func(_ context.Context, doc *Collector) error {
		if r.Name != "" {
			doc.Name = r.Name
		}
		if r.Tags != nil {
			doc.Tags = r.Tags
		}
		if sched != nil {
			doc.Schedule = *sched
		}
		if r.SecretFilter != nil {
			doc.SecretFilter = r.SecretFilter.Normalized()
		}
		return nil
	})
}

// updatePlugin changes version, options (replaced whole) and upgrade
// mode, and keeps the metadata of a new init with them.
func (s *Service) updatePlugin(ctx context.Context, p *auth.Principal, r *updatePlugin) (*Collector, error) {
	return s.records().Change(ctx, p, r.CollectorID, func(ctx context.Context, doc *Collector) error {
		info, err := s.repo.Change(ctx, doc.PluginInfo, r.Ask(r.UpgradeMode), s.init)
		if err != nil {
			return err
		}
		doc.PluginInfo = info
		return nil
	})
}

// verifyPlugin calls Collector.verify with the secret data of the
// collector's first secret (or of secret_id, one of its secrets).
func (s *Service) verifyPlugin(ctx context.Context, p *auth.Principal, r *verifyPlugin) (*api.Empty, error) {
	doc, err := s.writable(ctx, p, r.CollectorID)
	if err != nil {
		return nil, err
	}
	secrets, err := s.secrets(ctx, doc, r.SecretID)
	if err != nil {
		return nil, err
	}
	if len(secrets) == 0 {
		key, val := "provider", doc.Provider
		if r.SecretID != "" {
			key, val = "secret_id", r.SecretID
		}
		return nil, errs.New(errs.NotFoundCode, "The collector has no secret to verify with. (%s = %s)", key, val)
	}
	data, err := s.identity.SecretData(ctx, doc.DomainID, secrets[0].TrustedAccountID)
	if err != nil {
		return nil, err
	}
	if err := s.target(doc.PluginInfo).Verify(ctx, doc.PluginInfo.Options, data); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

// secrets are the trusted accounts the collector collects with.
func (s *Service) secrets(ctx context.Context, c *Collector, secretID string) ([]trusted.Account, error) {
	accounts, err := s.identity.Accounts(ctx, c.DomainID, c.Provider)
	if err != nil {
		return nil, err
	}
	return trusted.Select(accounts, core.Owner(c), c.SecretFilter, secretID), nil
}

// delete tears the collector down mark first (store.Teardown): from the
// mark on it is left out of every read, refuses every change and no
// longer collects or fires its schedule; then its job tasks and jobs go
// (upstream deletes those with it; the cloud services it collected stay,
// as upstream keeps them), and the collector last. A delete that fails
// half-way is finished by a retry. Workers drop messages of a job that
// no longer exists.
func (s *Service) delete(ctx context.Context, p *auth.Principal, r *collectorRequest) (*api.Empty, error) {
	_, err := s.records().Delete(ctx, p, r.CollectorID)
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *Service) get(ctx context.Context, p *auth.Principal, r *collectorRequest) (*Collector, error) {
	return s.Load(ctx, p, r.CollectorID)
}

func (s *Service) list(ctx context.Context, p *auth.Principal, r *collectorQuery) (*api.List[Collector], error) {
	q := query.With(r.Query, query.Params("collector_id", r.CollectorID, "name", r.Name, "provider", r.Provider,
		"secret_filter.state", r.SecretFilterState, "schedule.state", r.ScheduleState, "workspace_id", r.WorkspaceID,
		"plugin_info.plugin_id", r.PluginID)...)
	return store.SearchFor[Collector](ctx, s.c, q, resource, p)
}

func (s *Service) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, s.c, p, resource, r.Query)
	return &res, err
}
