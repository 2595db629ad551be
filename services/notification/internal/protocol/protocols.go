// Package protocol holds the protocol operations of the notification
// service: a protocol is an instance of a repository plugin of
// resource_type notification.Protocol, initialised (Protocol.init) on
// create and on update_plugin, with its secret data sealed at rest. Each
// domain also has one built-in INTERNAL protocol, created on its first
// read and read-only but for enable and disable.
//
// It must not read other services' data except through their APIs
// (repository for plugins and versions).
package protocol

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"

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
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/notification/internal/core"
)

// Protocol is the ProtocolInfo sent.
type Protocol = core.Protocol

var resource = query.Resource{
	KeywordFields: []string{"protocol_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"protocol_id", "name", "state", "protocol_type", "resource_type"},
	Fields:        query.Without(query.FieldsOf[Protocol](), "usage"),
	Maps:          freeform.FieldsOf[Protocol](),
	Secret:        []string{"sealed"},
	// Protocols belong to the whole domain, and are deleted mark first
	// (store.Teardown).
	Tenancy: tenancy.InDomain.WithMarks(),
}

type (
	pluginRequest struct {
		pluginref.Request
		SecretData map[string]any `json:"secret_data"`
		// Schema names the form of secret_data, one of the plugin's
		// capability.supported_schema (upstream requires it with
		// secret_data).
		Schema string `json:"schema" v:"max=255"`
		// SecretID is listed in the spec's PluginRequest; Nubes keeps
		// no domain secrets to point at, so it is refused (see Validate).
		SecretID    string `json:"secret_id"`
		UpgradeMode string `json:"upgrade_mode" v:"enum=AUTO|MANUAL"`
	}
	// createProtocol is the spec's CreateProtocolRequest: resource_type
	// is not in it (no client sends it), so it is an unknown field.
	createProtocol struct {
		Name       string         `json:"name" v:"required,max=255"`
		PluginInfo *pluginRequest `json:"plugin_info" v:"required"`
		Tags       freeform.Flat  `json:"tags"`
	}
	updateProtocol struct {
		ProtocolID string        `json:"protocol_id" v:"required"`
		Name       string        `json:"name" v:"max=255"`
		Tags       freeform.Flat `json:"tags"`
		DomainID   string        `json:"domain_id"` // upstream's; must be the caller's
	}
	updatePlugin struct {
		ProtocolID string `json:"protocol_id" v:"required"`
		// No upgrade_mode: upstream's protocol update_plugin has none.
		pluginref.Update
		// DomainID is required by the spec; the tenant comes from the
		// token, so another domain's id is 404.
		DomainID string `json:"domain_id" v:"required,max=64"`
	}
	protocolRequest struct {
		ProtocolID string `json:"protocol_id" v:"required"`
		DomainID   string `json:"domain_id"`
	}
	protocolQuery struct {
		Query        *query.Query `json:"query"`
		ProtocolID   string       `json:"protocol_id"`
		Name         string       `json:"name"`
		State        string       `json:"state" v:"enum=ENABLED|DISABLED"`
		ProtocolType string       `json:"protocol_type" v:"enum=INTERNAL|EXTERNAL"`
		ResourceType string       `json:"resource_type" v:"enum=identity.Project|identity.User"`
		DomainID     string       `json:"domain_id"`
	}
	statQuery struct {
		Query    *stat.Query `json:"query" v:"required"`
		DomainID string      `json:"domain_id"`
	}
)

// Validate: a MANUAL plugin names its version; secret data comes with the
// schema of its form; credentials are given as data, never by reference.
func (r *createProtocol) Validate() error {
	pi := r.PluginInfo
	if err := pi.Check(pi.UpgradeMode); err != nil {
		return err
	}
	switch {
	case pi.SecretID != "":
		return errs.Invalid("plugin_info.secret_id", "give the credentials as plugin_info.secret_data; the service seals them with the protocol")
	case pi.SecretData != nil && pi.Schema == "":
		return errs.Required("plugin_info.schema")
	case pi.SecretData == nil && pi.Schema != "":
		return errs.Invalid("plugin_info.schema", "names the form of plugin_info.secret_data, which is not given")
	}
	return nil
}

// checkDomain: a domain_id in a request must be the caller's (the tenant
// comes from the token); another domain's id is 404, as its records are.
func checkDomain(p *auth.Principal, domainID string) error {
	if domainID != "" && domainID != p.DomainID {
		return errs.NotFound("domain_id", domainID)
	}
	return nil
}

// Protocols serves the protocol operations.
type Protocols struct {
	c        *mongo.Collection
	counters core.Counters
	repo     pluginref.Repository
	plugins  *plugin.Client
	keys     *seal.Keyring
	log      *slog.Logger
	// internal remembers the domains whose built-in protocol exists.
	internal sync.Map
}

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database, repo pluginref.Repository, plugins *plugin.Client, keys *seal.Keyring, log *slog.Logger) (*Protocols, error) {
	ps := &Protocols{c: db.Collection(core.ProtocolsCollection), counters: core.Counters{C: db.Collection(core.UsageCollection)},
		repo: repo, plugins: plugins, keys: keys, log: log}
	return ps, store.EnsureIndexes(ctx, ps.c,
		// A name is unique in its domain (upstream: unique_with domain_id).
		store.Index{Keys: bson.D{{Key: "name", Value: 1}, {Key: "domain_id", Value: 1}}, Unique: true},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "plugin_info.plugin_id", Value: 1}}},
	)
}

// Routes are the operations.
func (ps *Protocols) Routes() []api.Route {
	const base = "/notification/v1/protocol/"
	return []api.Route{
		api.Op[createProtocol, Protocol]{Path: base + "create", Access: core.Writers, Summary: "Create a protocol from a notification.Protocol plugin of the repository; the plugin is initialised.", Handle: ps.create},
		api.Op[updateProtocol, Protocol]{Path: base + "update", Access: core.Writers, Summary: "Change a protocol's name or tags (tags replaced whole).", Handle: ps.update},
		api.Op[updatePlugin, Protocol]{Path: base + "update-plugin", Access: core.Writers, Summary: "Change the plugin's version or options and initialise it again.", Handle: ps.updatePlugin},
		api.Op[protocolRequest, Protocol]{Path: base + "enable", Access: core.Writers, Summary: "Enable the protocol: notifications are dispatched.", Handle: ps.enable},
		api.Op[protocolRequest, Protocol]{Path: base + "disable", Access: core.Writers, Summary: "Disable the protocol: notifications are skipped.", Handle: ps.disable},
		api.Op[protocolRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete the protocol and its sealed secret data.", Handle: ps.delete},
		api.Op[protocolRequest, Protocol]{Path: base + "get", Access: core.Readers, Summary: "Get a protocol.", Handle: ps.get},
		api.Op[protocolQuery, api.List[Protocol]]{Path: base + "list", Access: core.Readers, Summary: "List the domain's protocols.", Handle: ps.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the domain's protocols.", Handle: ps.stat},
	}
}

func (ps *Protocols) init(ctx context.Context, info pluginref.Info) (map[string]any, error) {
	return plugin.Protocol{Target: ps.plugins.Plugin(info.PluginID, info.Version)}.Init(ctx, info.Options)
}

func (ps *Protocols) create(ctx context.Context, p *auth.Principal, r *createProtocol) (*Protocol, error) {
	// A taken name is refused before the plugin is called; the unique
	// index still decides between concurrent creates.
	if err := ps.nameFree(ctx, p.DomainID, r.Name, ""); err != nil {
		return nil, err
	}
	rp, err := core.Plugin(ctx, ps.repo, r.PluginInfo.PluginID)
	if err != nil {
		return nil, err
	}
	if rp.State == core.Disabled {
		return nil, errs.Invalid("plugin_info.plugin_id", "plugin "+rp.PluginID+" is DISABLED in the repository")
	}
	supported, ok := core.SupportedSchema(rp)
	if !ok {
		return nil, errs.New(errs.WrongPluginSettings, "The plugin settings is incorrect. (key = capability.supported_schema, plugin_id = %s)", rp.PluginID)
	}
	if r.PluginInfo.Schema != "" && !slices.Contains(supported, r.PluginInfo.Schema) {
		return nil, errs.Invalid("plugin_info.schema", "not one of the plugin's capability.supported_schema")
	}
	info, err := ps.repo.New(ctx, rp.PluginID, r.PluginInfo.Ask(r.PluginInfo.UpgradeMode), "plugin_info.version", ps.init)
	if err != nil {
		return nil, err
	}
	id := wire.NewID("protocol")
	doc := &Protocol{ID: id, ProtocolID: id, Name: r.Name, State: core.Enabled, ProtocolType: core.External,
		ResourceType: "identity.Project", Capability: map[string]any{"supported_schema": supported}, PluginInfo: core.PluginInfo{Info: info},
		Tags: wire.Object(r.Tags), DomainID: p.DomainID, CreatedAt: wire.T(wire.Now())}
	if r.PluginInfo.SecretData != nil {
		sealed, err := ps.keys.SealJSON(r.PluginInfo.SecretData, core.AD(id, p.DomainID))
		if err != nil {
			return nil, err
		}
		doc.Sealed = &sealed
		doc.PluginInfo.SecretID = wire.NewID("secret")
		doc.PluginInfo.Schema = r.PluginInfo.Schema
	}
	if _, err := ps.c.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

// nameFree answers 409 when another protocol of the domain has the name.
func (ps *Protocols) nameFree(ctx context.Context, domainID, name, self string) error {
	var other struct {
		ID string `bson:"_id"`
	}
	err := ps.c.FindOne(ctx, bson.D{{Key: "name", Value: name}, {Key: "domain_id", Value: domainID}}).Decode(&other)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments) || err == nil && other.ID == self:
		return nil
	case err != nil:
		return store.Wrap(err)
	}
	return errs.New(errs.SaveUniqueValues, "Tried to save duplicate unique values. (name = %s)", name)
}

// ensureInternal creates the domain's built-in INTERNAL protocol unless it
// exists (or its name is taken by a protocol of the domain, as upstream).
func (ps *Protocols) ensureInternal(ctx context.Context, domainID string) error {
	if _, done := ps.internal.Load(domainID); done {
		return nil
	}
	_, err := ps.c.InsertOne(ctx, core.InternalProtocol(domainID))
	if err = store.Wrap(err); err != nil {
		if !errs.Is(err, errs.SaveUniqueValues) {
			return err
		}
	}
	ps.internal.Store(domainID, struct{}{})
	return nil
}

// load returns a protocol of the caller's domain (404 otherwise).
func (ps *Protocols) load(ctx context.Context, p *auth.Principal, id string) (*Protocol, error) {
	return store.GetFor[Protocol](ctx, ps.c, resource, p, "protocol_id", id)
}

// external refuses to change the built-in INTERNAL protocol.
func external(doc *Protocol) error {
	if doc.ProtocolType == core.Internal {
		return errs.New(errs.NotAllowedUpdateProtocolType, "The built-in INTERNAL protocol cannot be changed or deleted. (protocol_id = %s)", doc.ProtocolID)
	}
	return nil
}

// out fills in the usage counters.
func (ps *Protocols) out(ctx context.Context, docs ...*Protocol) error {
	ids := make([]string, 0, len(docs))
	for _, d := range docs {
		ids = append(ids, d.ProtocolID)
	}
	counts, err := ps.counters.Read(ctx, ids)
	if err != nil {
		return err
	}
	for _, d := range docs {
		d.Usage = counts[d.ProtocolID]
	}
	return nil
}

// records is the protocol's teardown (store.Teardown): its delete mark
// first, and every change of it a compare-and-set that refuses a marked
// one.
func (ps *Protocols) records() store.Teardown[Protocol] {
	return store.Teardown[Protocol]{Records: ps.c, Resource: resource, Key: "protocol_id",
		Check: external,
		Children: func(ctx context.Context, doc *Protocol) error {
			// A channel created between the check and the mark (its
			// create read the protocol unmarked): refused as upstream
			// does; the protocol stays marked, and a retry once the
			// channel is gone finishes the delete.
			if err := ps.unused(ctx, doc); err != nil {
				return err
			}
			return ps.counters.Forget(ctx, doc.ID)
		},
	}
}

// unused refuses a protocol a project or user channel uses, as upstream
// does (its channels would dispatch to nothing).
func (ps *Protocols) unused(ctx context.Context, doc *Protocol) error {
	for _, coll := range []string{core.ProjectChannelsCollection, core.UserChannelsCollection} {
		n, err := ps.c.Database().Collection(coll).CountDocuments(ctx, bson.D{{Key: "domain_id", Value: doc.DomainID}, {Key: "protocol_id", Value: doc.ID}})
		if err != nil {
			return store.Wrap(err)
		}
		if n > 0 {
			return errs.New(errs.ExistResource, "The protocol is used by %d channel(s); delete them first. (protocol_id = %s)", n, doc.ID)
		}
	}
	return nil
}

func (ps *Protocols) set(ctx context.Context, p *auth.Principal, id string, edit func(doc *Protocol) error) (*Protocol, error) {
	doc, err := ps.records().Change(ctx, p, id, func(_ context.Context, doc *Protocol) error { return edit(doc) })
	if err != nil {
		return nil, err
	}
	return doc, ps.out(ctx, doc)
}

func (ps *Protocols) update(ctx context.Context, p *auth.Principal, r *updateProtocol) (*Protocol, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	return ps.set(ctx, p, r.ProtocolID, func(doc *Protocol) error {
		if err := external(doc); err != nil {
			return err
		}
		if r.Name != "" && r.Name != doc.Name {
			if err := ps.nameFree(ctx, doc.DomainID, r.Name, doc.ID); err != nil {
				return err
			}
			doc.Name = r.Name
		}
		if r.Tags != nil {
			doc.Tags = r.Tags
		}
		return nil
	})
}

// updatePlugin sets a version the repository knows (or, in AUTO mode
// without one, the newest), replaces the options when given, and keeps the
// metadata of a new init.
func (ps *Protocols) updatePlugin(ctx context.Context, p *auth.Principal, r *updatePlugin) (*Protocol, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	return ps.set(ctx, p, r.ProtocolID, func(doc *Protocol) error {
		if err := external(doc); err != nil {
			return err
		}
		info, err := ps.repo.Change(ctx, doc.PluginInfo.Info, r.Ask(""), ps.init)
		if err != nil {
			return err
		}
		doc.PluginInfo.Info = info
		return nil
	})
}

func (ps *Protocols) state(state string) func(ctx context.Context, p *auth.Principal, r *protocolRequest) (*Protocol, error) {
	return func(ctx context.Context, p *auth.Principal, r *protocolRequest) (*Protocol, error) {
		if err := checkDomain(p, r.DomainID); err != nil {
			return nil, err
		}
		return ps.set(ctx, p, r.ProtocolID, func(doc *Protocol) error {
			doc.State = state
			return nil
		})
	}
}

func (ps *Protocols) enable(ctx context.Context, p *auth.Principal, r *protocolRequest) (*Protocol, error) {
	return ps.state(core.Enabled)(ctx, p, r)
}

func (ps *Protocols) disable(ctx context.Context, p *auth.Principal, r *protocolRequest) (*Protocol, error) {
	return ps.state(core.Disabled)(ctx, p, r)
}

// delete tears the protocol down mark first (store.Teardown): refused
// while a channel uses it (upstream); from the mark on it is out of every
// read, takes no channel and dispatches nothing; then its usage counters
// go, and the protocol last, its sealed secret data with it. A delete
// cut short is finished by a retry.
func (ps *Protocols) delete(ctx context.Context, p *auth.Principal, r *protocolRequest) (*api.Empty, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	td := ps.records()
	td.Check = func(doc *Protocol) error {
		if err := external(doc); err != nil {
			return err
		}
		return ps.unused(ctx, doc) // before the mark: a refused delete leaves it as it was
	}
	if _, err := td.Delete(ctx, p, r.ProtocolID); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (ps *Protocols) get(ctx context.Context, p *auth.Principal, r *protocolRequest) (*Protocol, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	if err := ps.ensureInternal(ctx, p.DomainID); err != nil {
		return nil, err
	}
	doc, err := ps.load(ctx, p, r.ProtocolID)
	if err != nil {
		return nil, err
	}
	return doc, ps.out(ctx, doc)
}

func (ps *Protocols) list(ctx context.Context, p *auth.Principal, r *protocolQuery) (*api.List[Protocol], error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	if err := ps.ensureInternal(ctx, p.DomainID); err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("protocol_id", r.ProtocolID, "name", r.Name, "state", r.State,
		"protocol_type", r.ProtocolType, "resource_type", r.ResourceType)...)
	l, err := store.SearchFor[Protocol](ctx, ps.c, q, resource, p)
	if err != nil {
		return nil, err
	}
	docs := make([]*Protocol, len(l.Results))
	for i := range l.Results {
		docs[i] = &l.Results[i]
	}
	return l, ps.out(ctx, docs...)
}

func (ps *Protocols) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	if err := ps.ensureInternal(ctx, p.DomainID); err != nil {
		return nil, err
	}
	res, err := stat.RunFor(ctx, ps.c, p, resource, r.Query)
	return &res, err
}
