// Package webhook holds the webhook operations of the monitoring
// service: a webhook is an instance of a repository plugin of
// resource_type monitoring.Webhook, initialised on create and on
// update_plugin, with a secret access key embedded in its public ingest
// URL (served by package ingest).
//
// It must not read other services' data except through their APIs
// (identity for projects, repository for plugins).
package webhook

import (
	"context"
	"log/slog"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// Webhook is the WebhookInfo sent.
type Webhook = core.Webhook

var resource = query.Resource{
	KeywordFields: []string{"webhook_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"webhook_id", "name", "state", "plugin_info", "project_id"},
	// requests are kept apart (core.Counters): not a field a query reads.
	Fields: query.Without(query.FieldsOf[Webhook](), "requests"),
	Maps:   freeform.FieldsOf[Webhook](),
	// access_key lets its holder post events through the webhook, and
	// webhook_url holds it.
	Secret:  []string{"access_key", "webhook_url"},
	Tenancy: tenancy.InProject.WithMarks(), // deleted mark first (store.Teardown)
}

type (
	pluginInfo struct {
		pluginref.Request
		UpgradeMode string `json:"upgrade_mode" v:"enum=AUTO|MANUAL|NONE"`
	}
	createWebhook struct {
		Name       string        `json:"name" v:"required,max=255"`
		PluginInfo *pluginInfo   `json:"plugin_info" v:"required"`
		ProjectID  string        `json:"project_id" v:"required,max=255"`
		Tags       freeform.Flat `json:"tags"`
	}
	updateWebhook struct {
		WebhookID string        `json:"webhook_id" v:"required"`
		Name      string        `json:"name" v:"max=255"`
		Tags      freeform.Flat `json:"tags"`
	}
	updatePlugin struct {
		WebhookID string `json:"webhook_id" v:"required"`
		pluginref.Update
		UpgradeMode string `json:"upgrade_mode" v:"enum=AUTO|MANUAL|NONE"`
	}
	webhookRequest struct {
		WebhookID string `json:"webhook_id" v:"required"`
	}
	webhookQuery struct {
		Query       *query.Query `json:"query"`
		WebhookID   string       `json:"webhook_id"`
		Name        string       `json:"name"`
		State       string       `json:"state" v:"enum=ENABLED|DISABLED"`
		AccessKey   string       `json:"access_key"`
		WorkspaceID string       `json:"workspace_id"`
		ProjectID   string       `json:"project_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Validate: a MANUAL plugin names its version.
func (r *createWebhook) Validate() error { return r.PluginInfo.Check(r.PluginInfo.UpgradeMode) }

// Webhooks serves the webhook operations.
type Webhooks struct {
	c        *mongo.Collection
	kept     *mongo.Collection // bodies kept for a retry (package ingest)
	counters *core.Counters
	projects core.Projects
	repo     pluginref.Repository
	plugins  *plugin.Client
	baseURL  string
	keys     *seal.Keyring // makes access keys that prove themselves; nil: random ones
	log      *slog.Logger
}

// New creates the collection's indexes. baseURL is the public base URL
// of webhook_url.
func New(ctx context.Context, db *mongo.Database, counters *core.Counters, projects core.Projects, repo pluginref.Repository,
	plugins *plugin.Client, baseURL string, keys *seal.Keyring, log *slog.Logger) (*Webhooks, error) {
	ws := &Webhooks{c: db.Collection(core.WebhooksCollection), kept: db.Collection(core.PendingCollection),
		counters: counters, projects: projects, repo: repo, plugins: plugins, baseURL: strings.TrimRight(baseURL, "/"), keys: keys, log: log}
	return ws, store.EnsureIndexes(ctx, ws.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "project_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}}},
	)
}

// Routes are the operations.
func (ws *Webhooks) Routes() []api.Route {
	const base = "/monitoring/v1/webhook/"
	return []api.Route{
		api.Op[createWebhook, Webhook]{Path: base + "create", Access: core.Writers, Summary: "Create a webhook from a monitoring.Webhook plugin; answers its access_key and webhook_url.", Handle: ws.create},
		api.Op[updateWebhook, Webhook]{Path: base + "update", Access: core.Writers, Summary: "Change a webhook's name or tags.", Handle: ws.update},
		api.Op[updatePlugin, Webhook]{Path: base + "update-plugin", Access: core.Writers, Summary: "Change the plugin's version, options or upgrade mode and initialise it again.", Handle: ws.updatePlugin},
		api.Op[webhookRequest, api.Empty]{Path: base + "verify-plugin", Access: core.Writers, Summary: "Ask the plugin to verify the webhook's options.", Handle: ws.verifyPlugin},
		api.Op[webhookRequest, Webhook]{Path: base + "enable", Access: core.Writers, Summary: "Enable the webhook: its URL takes events.", Handle: ws.enable},
		api.Op[webhookRequest, Webhook]{Path: base + "disable", Access: core.Writers, Summary: "Disable the webhook: its URL refuses events (403).", Handle: ws.disable},
		api.Op[webhookRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete the webhook: its URL answers 404; its events stay.", Handle: ws.delete},
		api.Op[webhookRequest, Webhook]{Path: base + "get", Access: core.Readers, Summary: "Get a webhook.", Handle: ws.get},
		api.Op[webhookQuery, api.List[Webhook]]{Path: base + "list", Access: core.Readers, Summary: "List the webhooks the caller may see.", Handle: ws.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the webhooks the caller may see.", Handle: ws.stat},
	}
}

func (ws *Webhooks) target(info core.PluginInfo) plugin.Webhook {
	return plugin.Webhook{Target: ws.plugins.Plugin(info.PluginID, info.Version)}
}

func (ws *Webhooks) init(ctx context.Context, info core.PluginInfo) (map[string]any, error) {
	return ws.target(info).Init(ctx, info.Options)
}

func (ws *Webhooks) create(ctx context.Context, p *auth.Principal, r *createWebhook) (*Webhook, error) {
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return nil, err
	}
	pr, err := ws.projects.Get(ctx, p, r.ProjectID)
	if err != nil {
		return nil, err
	}
	if err := rule.Admits(tenancy.Record{Domain: p.DomainID, Workspace: pr.WorkspaceID, Project: pr.ProjectID}); err != nil {
		return nil, err
	}
	rp, err := ws.repo.Get(ctx, r.PluginInfo.PluginID)
	if err != nil {
		return nil, err
	}
	info, err := ws.repo.New(ctx, rp.PluginID, r.PluginInfo.Ask(r.PluginInfo.UpgradeMode), "plugin_info.version", ws.init)
	if err != nil {
		return nil, err
	}
	id := wire.NewID("webhook")
	key, err := core.NewAccessKey(ws.keys, id)
	if err != nil {
		return nil, err
	}
	doc := &Webhook{ID: id, WebhookID: id, Name: r.Name, State: core.Enabled, AccessKey: key, WebhookURL: ws.baseURL + core.IngestPath(id, key),
		Capability: wire.Object(rp.Capability), PluginInfo: info, Tags: wire.Object(r.Tags), DomainID: p.DomainID,
		WorkspaceID: pr.WorkspaceID, ProjectID: pr.ProjectID, CreatedAt: wire.T(wire.Now())}
	if _, err := ws.c.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

// load returns a webhook the caller may see.
func (ws *Webhooks) load(ctx context.Context, p *auth.Principal, id string) (*Webhook, error) {
	return store.GetFor[Webhook](ctx, ws.c, resource, p, "webhook_id", id)
}

// writable returns a webhook the caller may change.
func (ws *Webhooks) writable(ctx context.Context, p *auth.Principal, id string) (*Webhook, error) {
	return store.GetToChange[Webhook](ctx, ws.c, resource, p, "webhook_id", id)
}

// out fills in what is not stored with the webhook: its counters, and
// its URL under the base URL configured now.
func (ws *Webhooks) out(ctx context.Context, docs ...*Webhook) error {
	ids := make([]string, 0, len(docs))
	for _, d := range docs {
		ids = append(ids, d.WebhookID)
	}
	counts, err := ws.counters.Read(ctx, ids)
	if err != nil {
		return err
	}
	for _, d := range docs {
		d.Requests = counts[d.WebhookID]
		if d.AccessKey != "" && d.WebhookID != "" {
			d.WebhookURL = ws.baseURL + core.IngestPath(d.WebhookID, d.AccessKey)
		}
	}
	return nil
}

// records is the webhook's teardown: its delete, mark first, and every
// change of it by store.Change, which refuses a marked record
// (store.Teardown).
func (ws *Webhooks) records() store.Teardown[Webhook] {
	return store.Teardown[Webhook]{Records: ws.c, Resource: resource, Key: "webhook_id",
		Children: func(ctx context.Context, doc *Webhook) error {
			if err := store.DeleteChildren(ctx, ws.kept, bson.D{{Key: "webhook_id", Value: doc.ID}}); err != nil {
				return err
			}
			return ws.counters.Forget(ctx, doc.ID)
		},
	}
}

func (ws *Webhooks) set(ctx context.Context, p *auth.Principal, id string, edit func(doc *Webhook) error) (*Webhook, error) {
	doc, err := ws.records().Change(ctx, p, id, func(_ context.Context, doc *Webhook) error { return edit(doc) })
	if err != nil {
		return nil, err
	}
	return doc, ws.out(ctx, doc)
}

func (ws *Webhooks) update(ctx context.Context, p *auth.Principal, r *updateWebhook) (*Webhook, error) {
	return ws.set(ctx, p, r.WebhookID, func(doc *Webhook) error {
		if r.Name != "" {
			doc.Name = r.Name
		}
		if r.Tags != nil {
			doc.Tags = r.Tags
		}
		return nil
	})
}

// updatePlugin changes version, options (replaced whole) and upgrade
// mode, and keeps the metadata of a new init with them.
func (ws *Webhooks) updatePlugin(ctx context.Context, p *auth.Principal, r *updatePlugin) (*Webhook, error) {
	return ws.set(ctx, p, r.WebhookID, func(doc *Webhook) error {
		info, err := ws.repo.Change(ctx, doc.PluginInfo, r.Ask(r.UpgradeMode), ws.init)
		if err != nil {
			return err
		}
		doc.PluginInfo = info
		return nil
	})
}

func (ws *Webhooks) verifyPlugin(ctx context.Context, p *auth.Principal, r *webhookRequest) (*api.Empty, error) {
	doc, err := ws.writable(ctx, p, r.WebhookID)
	if err != nil {
		return nil, err
	}
	if err := ws.target(doc.PluginInfo).Verify(ctx, doc.PluginInfo.Options); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (ws *Webhooks) state(state string) func(ctx context.Context, p *auth.Principal, r *webhookRequest) (*Webhook, error) {
	return func(ctx context.Context, p *auth.Principal, r *webhookRequest) (*Webhook, error) {
		return ws.set(ctx, p, r.WebhookID, func(doc *Webhook) error {
			doc.State = state
			return nil
		})
	}
}

func (ws *Webhooks) enable(ctx context.Context, p *auth.Principal, r *webhookRequest) (*Webhook, error) {
	return ws.state(core.Enabled)(ctx, p, r)
}

func (ws *Webhooks) disable(ctx context.Context, p *auth.Principal, r *webhookRequest) (*Webhook, error) {
	return ws.state(core.Disabled)(ctx, p, r)
}

// delete tears the webhook down mark first (store.Teardown): from the
// mark on its URL answers 404 and it is out of every read; then the
// bodies kept for a retry and its counters go, and the webhook last. A
// delete cut short is finished by a retry. Its events stay, as upstream
// keeps them.
func (ws *Webhooks) delete(ctx context.Context, p *auth.Principal, r *webhookRequest) (*api.Empty, error) {
	_, err := ws.records().Delete(ctx, p, r.WebhookID)
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (ws *Webhooks) get(ctx context.Context, p *auth.Principal, r *webhookRequest) (*Webhook, error) {
	doc, err := ws.load(ctx, p, r.WebhookID)
	if err != nil {
		return nil, err
	}
	return doc, ws.out(ctx, doc)
}

func (ws *Webhooks) list(ctx context.Context, p *auth.Principal, r *webhookQuery) (*api.List[Webhook], error) {
	q := query.With(r.Query, query.Params("webhook_id", r.WebhookID, "name", r.Name, "state", r.State, "access_key", r.AccessKey,
		"workspace_id", r.WorkspaceID, "project_id", r.ProjectID)...)
	// requests may be asked for in only (the console does) although no
	// query reads them: they are added after the store's answer.
	only := q.Only
	q.Only = query.Without(q.Only, "requests")
	withRequests := len(q.Only) < len(only)
	if withRequests {
		// The counters are found by webhook id, read even if not asked for.
		q.Only = append(q.Only, "webhook_id")
	}
	l, err := store.SearchFor[Webhook](ctx, ws.c, q, resource, p)
	if err != nil {
		return nil, err
	}
	if withRequests {
		l.Fields = only
	}
	docs := make([]*Webhook, len(l.Results))
	for i := range l.Results {
		docs[i] = &l.Results[i]
	}
	return l, ws.out(ctx, docs...)
}

func (ws *Webhooks) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, ws.c, p, resource, r.Query)
	return &res, err
}
