// Package plugin holds the repository service's plugin operations:
// register, update, deregister, enable and disable in the local
// repository; get, list and get_versions over the local repository and
// then the remote ones; the versions of a local plugin come from its
// image registry.
//
// A plugin registered by a service (a SYSTEM token) is global (domain_id
// "*", seen by every domain, written only by a service); one registered
// by a domain admin belongs to that domain. plugin_id is unique in the repository, as the
// plugin endpoints of the configuration are keyed by it. This package
// never calls a plugin.
package plugin

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/jsonschema"
	"github.com/nubes-io/nubes/pkg/outward"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/repository/internal/registry"
	"github.com/nubes-io/nubes/services/repository/internal/repository"
)

// Collection holds the local repository's plugins, _id = plugin_id.
const Collection = "repository_plugins"

// Global is the domain_id of a plugin every domain sees.
const Global = repository.Global

// Registry types.
const (
	PublicHub       = "PUBLIC_HUB"
	PrivateRegistry = "PRIVATE_REGISTRY"
)

// Plugin is a plugin, stored and sent in the same shape.
type Plugin struct {
	ID             string         `bson:"_id" json:"-"`
	PluginID       string         `bson:"plugin_id" json:"plugin_id"`
	Name           string         `bson:"name" json:"name"`
	State          string         `bson:"state" json:"state"`
	ResourceType   string         `bson:"resource_type" json:"resource_type"`
	Image          string         `bson:"image" json:"image"`
	Provider       string         `bson:"provider" json:"provider"`
	RegistryType   string         `bson:"registry_type" json:"registry_type"`
	RegistryURL    string         `bson:"registry_url" json:"registry_url"`
	RegistryConfig RegistryConfig `bson:"registry_config" json:"registry_config"`
	// RegistrySealed is registry_config as given, sealed (registry_config
	// keeps it with its secrets masked). Absent on a record stored before
	// sealing, until Routes seals it.
	RegistrySealed *seal.Sealed    `bson:"registry_sealed,omitempty" json:"-"`
	Capability     freeform.Map    `bson:"capability" json:"capability"`
	Template       repository.Doc  `bson:"template" json:"template"`
	Labels         freeform.List   `bson:"labels" json:"labels"`
	Tags           freeform.Flat   `bson:"tags" json:"tags"`
	DomainID       string          `bson:"domain_id" json:"domain_id"`
	RepositoryInfo repository.Info `bson:"repository_info" json:"repository_info"`
	CreatedAt      wire.Time       `bson:"created_at" json:"created_at"`
	UpdatedAt      wire.Time       `bson:"updated_at" json:"updated_at"`
}

var pluginResource = query.Resource{
	KeywordFields: []string{"plugin_id", "name", "image", "provider"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"plugin_id", "name", "state", "resource_type", "image", "provider", "registry_type", "repository_info"},
	Fields:        query.FieldsOf[Plugin](),
	// registry_config holds the registry credentials (sealed in
	// registry_sealed, masked in registry_config).
	Secret:  []string{"registry_config", "registry_sealed"},
	Maps:    freeform.FieldsOf[Plugin](),
	Tenancy: repository.Tenancy,
}

var (
	writers   = repository.Writers
	versioned = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
	readers   = repository.Readers
)

// pluginIDPattern is what plugin_id may hold (upstream's image-name rule).
var pluginIDPattern = regexp.MustCompile(`^[A-Za-z0-9-]+$`)

type (
	registerPlugin struct {
		Name         string `json:"name" v:"required,max=255"`
		ResourceType string `json:"resource_type" v:"max=255"`
		// ServiceType is what payloads send for resource_type.
		ServiceType    string         `json:"service_type" v:"max=255"`
		Image          string         `json:"image" v:"required,max=40"`
		PluginID       string         `json:"plugin_id" v:"max=40"`
		Provider       string         `json:"provider" v:"max=255"`
		RegistryType   string         `json:"registry_type" v:"enum=PUBLIC_HUB|PRIVATE_REGISTRY"`
		RegistryURL    string         `json:"registry_url" v:"max=255"`
		RegistryConfig map[string]any `json:"registry_config"`
		Capability     freeform.Map   `json:"capability"`
		Template       map[string]any `json:"template"`
		Labels         freeform.List  `json:"labels" v:"max=100"`
		Tags           freeform.Flat  `json:"tags"`
	}
	updatePlugin struct {
		PluginID   string        `json:"plugin_id" v:"required"`
		Name       string        `json:"name" v:"max=255"`
		Capability freeform.Map  `json:"capability"`
		Labels     freeform.List `json:"labels" v:"max=100"`
		Tags       freeform.Flat `json:"tags"`
	}
	pluginRequest struct {
		PluginID string `json:"plugin_id" v:"required"`
	}
	repositoryPluginRequest struct {
		PluginID     string `json:"plugin_id" v:"required"`
		RepositoryID string `json:"repository_id"`
	}
	pluginQuery struct {
		Query        *query.Query `json:"query"`
		RepositoryID string       `json:"repository_id"`
		PluginID     string       `json:"plugin_id"`
		Name         string       `json:"name"`
		State        string       `json:"state" v:"enum=ENABLED|DISABLED"`
		ResourceType string       `json:"resource_type"`
		ServiceType  string       `json:"service_type"`
		Provider     string       `json:"provider"`
		RegistryType string       `json:"registry_type" v:"enum=PUBLIC_HUB|PRIVATE_REGISTRY"`
		DomainID     string       `json:"domain_id"`
	}
	// Versions is VersionsInfo: the image's tags, newest first.
	Versions struct {
		Version    []string `json:"version"` // deprecated copy of results
		Results    []string `json:"results"`
		TotalCount int      `json:"total_count"`
	}
)

// Validate applies the register rules that span fields.
func (r *registerPlugin) Validate() error {
	rt, err := resourceType(r.ResourceType, r.ServiceType)
	if err != nil {
		return err
	}
	if rt == "" {
		return errs.Required("resource_type")
	}
	r.ResourceType, r.ServiceType = rt, ""
	if r.PluginID == "" {
		r.PluginID = ImageName(r.Image)
		if !pluginIDPattern.MatchString(r.PluginID) {
			return errs.Invalid("image", fmt.Sprintf("the image name %q (the plugin_id) may hold only letters, digits and hyphens", r.PluginID))
		}
	} else if !pluginIDPattern.MatchString(r.PluginID) {
		return errs.Invalid("plugin_id", "may hold only letters, digits and hyphens")
	}
	if r.RegistryType == "" {
		r.RegistryType = PublicHub
	}
	switch {
	case r.RegistryType == PublicHub && r.RegistryURL != "":
		return errs.Invalid("registry_url", "PUBLIC_HUB images come from the configured public hub; give registry_type PRIVATE_REGISTRY with a registry_url")
	case r.RegistryType != PublicHub && r.RegistryURL == "":
		return errs.Required("registry_url")
	case r.RegistryURL != "":
		if _, err := registry.BaseURL(r.RegistryURL); err != nil {
			return errs.Invalid("registry_url", err.Error())
		}
	}
	for _, k := range []string{"username", "password", "token"} {
		if v, ok := r.RegistryConfig[k]; ok {
			if _, isString := v.(string); !isString {
				return errs.InvalidType("registry_config."+k, "string")
			}
		}
	}
	if err := checkTemplate(r.Template); err != nil {
		return err
	}
	return checkFreeForm(r.RegistryConfig, r.Capability, r.Labels, r.Tags)
}

// Validate checks the free-form members.
func (r *updatePlugin) Validate() error { return checkFreeForm(nil, r.Capability, r.Labels, r.Tags) }

// Validate maps service_type onto resource_type.
func (r *pluginQuery) Validate() error {
	rt, err := resourceType(r.ResourceType, r.ServiceType)
	r.ResourceType, r.ServiceType = rt, ""
	return err
}

func resourceType(rt, st string) (string, error) {
	if rt != "" && st != "" && rt != st {
		return "", errs.Invalid("service_type", "differs from resource_type (service_type is its other name)")
	}
	if rt == "" {
		return st, nil
	}
	return rt, nil
}

func checkFreeForm(registryConfig, capability map[string]any, labels []any, tags map[string]any) error {
	for _, f := range []struct {
		name string
		v    any
	}{{"registry_config", registryConfig}, {"capability", capability}} {
		if err := freeform.Check(f.name, f.v); err != nil {
			return err
		}
	}
	if err := repository.CheckLabelsTags(labels, tags); err != nil {
		return err
	}
	if s, ok := capability["supported_schema"]; ok {
		list, isList := s.([]any)
		if !isList {
			return errs.InvalidType("capability.supported_schema", "list of strings")
		}
		for _, x := range list {
			if _, isString := x.(string); !isString {
				return errs.InvalidType("capability.supported_schema", "list of strings")
			}
		}
	}
	return nil
}

// checkTemplate compiles each JSON Schema a template carries
// (template.<key>.schema, such as template.options.schema).
func checkTemplate(t map[string]any) error {
	for k, v := range t {
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}
		if s, has := m["schema"]; has {
			if _, err := jsonschema.Compile(s); err != nil {
				e, _ := errs.As(err)
				return errs.New(e.Code, "template.%s.schema: %s", k, e.Message)
			}
		}
	}
	return nil
}

// ImageName is the plugin_id an image gives: its last path segment,
// without a tag or a digest.
func ImageName(image string) string {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	name, _, _ = strings.Cut(name, ":")
	return name
}

// Config configures the plugin operations.
type Config struct {
	// PublicHubURL is the registry of PUBLIC_HUB plugins.
	PublicHubURL string
	// Registry reads image tags.
	Registry *registry.Client
	// Keys seal registry_config (required).
	Keys *seal.Keyring
}

type plugins struct {
	c        *mongo.Collection
	repos    *repository.Repos
	registry *registry.Client
	hub      string
	keys     *seal.Keyring
}

// SealedAD binds a plugin's sealed registry_config to its record: copied
// onto another plugin or domain, it does not open.
func SealedAD(pluginID, domainID string) []byte {
	return seal.AD(Collection, "registry_config", pluginID, domainID)
}

// ResealTarget is the sealed field of plugins, for key rotation.
func ResealTarget(db *mongo.Database) seal.Target {
	return seal.Target{Coll: db.Collection(Collection), Field: seal.Field{Path: "registry_sealed", AD: func(doc bson.Raw) ([]byte, error) {
		id, _ := doc.Lookup("_id").StringValueOK()
		domain, _ := doc.Lookup("domain_id").StringValueOK()
		if id == "" || domain == "" {
			return nil, fmt.Errorf("plugin %q lacks its id or domain", id)
		}
		return SealedAD(id, domain), nil
	}}}
}

// sealConfig seals rc for the plugin and returns what is stored beside it:
// the masked copy.
func (ps *plugins) sealConfig(pluginID, domainID string, rc map[string]any) (RegistryConfig, *seal.Sealed, error) {
	s, err := ps.keys.SealJSON(rc, SealedAD(pluginID, domainID))
	if err != nil {
		return nil, nil, err
	}
	masked, _ := mask(rc).(map[string]any)
	return RegistryConfig(masked), &s, nil
}

// credentials opens a plugin's registry_config (a record stored before
// sealing has it in clear until Routes seals it).
func (ps *plugins) credentials(doc *Plugin) (map[string]any, error) {
	if doc.RegistrySealed == nil {
		return doc.RegistryConfig, nil
	}
	var rc map[string]any
	if err := ps.keys.OpenJSON(*doc.RegistrySealed, SealedAD(doc.ID, doc.DomainID), &rc); err != nil {
		return nil, err
	}
	return rc, nil
}

// sealOld seals the registry_config of records stored before sealing. A
// record is replaced only if it still holds the plaintext read (a
// concurrent write wins).
func (ps *plugins) sealOld(ctx context.Context) error {
	cur, err := ps.c.Find(ctx, bson.D{{Key: "registry_sealed", Value: bson.D{{Key: "$exists", Value: false}}}})
	if err != nil {
		return store.Wrap(err)
	}
	var old []Plugin
	if err := cur.All(ctx, &old); err != nil {
		return store.Wrap(err)
	}
	for _, doc := range old {
		rc := map[string]any(wire.Object(doc.RegistryConfig))
		masked, sealed, err := ps.sealConfig(doc.ID, doc.DomainID, rc)
		if err != nil {
			return err
		}
		_, err = ps.c.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: doc.ID}, {Key: "registry_sealed", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "registry_config", Value: masked}, {Key: "registry_sealed", Value: sealed}}}})
		if err != nil {
			return store.Wrap(err)
		}
	}
	return nil
}

// Routes creates the plugin indexes and returns the plugin operations.
func Routes(ctx context.Context, db *mongo.Database, repos *repository.Repos, cfg Config) ([]api.Route, error) {
	if cfg.Registry == nil {
		cfg.Registry = registry.New(outward.Allow{}, 0)
	}
	hub, err := registry.BaseURL(cfg.PublicHubURL)
	if err != nil {
		return nil, fmt.Errorf("public_hub_url %q: %v", cfg.PublicHubURL, err)
	}
	if cfg.Keys == nil {
		return nil, fmt.Errorf("repository: no encryption keys (encryption_keys) to seal registry credentials")
	}
	ps := &plugins{c: db.Collection(Collection), repos: repos, registry: cfg.Registry, hub: hub, keys: cfg.Keys}
	if err := store.EnsureIndexes(ctx, ps.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "resource_type", Value: 1}, {Key: "provider", Value: 1}}},
	); err != nil {
		return nil, err
	}
	if err := ps.sealOld(ctx); err != nil {
		return nil, fmt.Errorf("seal the registry_config of plugins stored before sealing: %w", err)
	}
	return []api.Route{
		api.Op[registerPlugin, Plugin]{Path: "/repository/v1/plugin/register", Access: writers, Summary: "Register a plugin in the local repository.", Handle: ps.register},
		api.Op[updatePlugin, Plugin]{Path: "/repository/v1/plugin/update", Access: writers, Summary: "Change a local plugin's name, capability, labels or tags.", Handle: ps.update},
		api.Op[pluginRequest, api.Empty]{Path: "/repository/v1/plugin/deregister", Access: writers, Summary: "Delete a local plugin.", Handle: ps.deregister},
		api.Op[pluginRequest, Plugin]{Path: "/repository/v1/plugin/enable", Access: writers, Summary: "Enable a local plugin.", Handle: ps.enable},
		api.Op[pluginRequest, Plugin]{Path: "/repository/v1/plugin/disable", Access: writers, Summary: "Disable a local plugin.", Handle: ps.disable},
		api.Op[repositoryPluginRequest, Versions]{Path: "/repository/v1/plugin/get-versions", Access: versioned, Summary: "The plugin image's tags from its registry, newest first.", Handle: ps.versions},
		api.Op[repositoryPluginRequest, Plugin]{Path: "/repository/v1/plugin/get", Access: readers, Summary: "Get a plugin from the local repository, then the remote ones.", Handle: ps.get},
		api.Op[pluginQuery, api.List[Plugin]]{Path: "/repository/v1/plugin/list", Access: readers, Summary: "List plugins of one repository, or of every repository in order.", Handle: ps.list},
	}, nil
}

func (ps *plugins) register(ctx context.Context, p *auth.Principal, r *registerPlugin) (*Plugin, error) {
	owner := p.DomainID
	if p.IsService() {
		owner = Global // only a service registers for the whole platform
	}
	url := r.RegistryURL
	if r.RegistryType == PublicHub {
		url = ps.hub
	}
	now := wire.T(wire.Now())
	masked, sealed, err := ps.sealConfig(r.PluginID, owner, wire.Object(r.RegistryConfig))
	if err != nil {
		return nil, err
	}
	doc := &Plugin{
		ID: r.PluginID, PluginID: r.PluginID, Name: r.Name, State: "ENABLED", ResourceType: r.ResourceType,
		Image: r.Image, Provider: r.Provider, RegistryType: r.RegistryType, RegistryURL: url,
		RegistryConfig: masked, RegistrySealed: sealed, Capability: wire.Object(r.Capability), Template: repository.Doc(wire.Object(r.Template)),
		Labels: wire.List(r.Labels), Tags: wire.Object(r.Tags), DomainID: owner, RepositoryInfo: ps.repos.Local(),
		CreatedAt: now, UpdatedAt: now,
	}
	if _, err := ps.c.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.Duplicate("plugin_id", r.PluginID)
		}
		return nil, store.Wrap(err)
	}
	return doc, nil
}

// visible loads a local plugin the caller may see: its domain's or a
// global one (the tenancy rule). Others are 404.
func (ps *plugins) visible(ctx context.Context, p *auth.Principal, id string) (*Plugin, error) {
	return store.GetFor[Plugin](ctx, ps.c, pluginResource, p, "plugin_id", id)
}

// writable loads a local plugin the caller may change (the tenancy rule:
// a global one is a service's, 403). A plugin only a remote repository
// has is refused with 403.
func (ps *plugins) writable(ctx context.Context, p *auth.Principal, id string) (*Plugin, error) {
	doc, err := store.GetToChange[Plugin](ctx, ps.c, pluginResource, p, "plugin_id", id)
	if errs.Is(err, errs.NotFoundCode) {
		if rm := ps.remoteHolding(ctx, id); rm != nil {
			return nil, errs.New(errs.RemoteRepository, "The plugin %s belongs to the remote repository %s: only plugins of the local repository can be changed.", id, rm.Name)
		}
	}
	return doc, err
}

// remoteHolding is the first remote repository that has the plugin, if
// any (a remote that cannot be asked is passed over).
func (ps *plugins) remoteHolding(ctx context.Context, id string) *repository.RemoteRepo {
	for _, rm := range ps.repos.Remotes() {
		if _, err := ps.remoteGet(ctx, rm, id); err == nil {
			return rm
		}
	}
	return nil
}

func (ps *plugins) update(ctx context.Context, p *auth.Principal, r *updatePlugin) (*Plugin, error) {
	if _, err := ps.writable(ctx, p, r.PluginID); err != nil {
		return nil, err
	}
	set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Capability != nil {
		set = append(set, bson.E{Key: "capability", Value: r.Capability})
	}
	if r.Labels != nil {
		set = append(set, bson.E{Key: "labels", Value: r.Labels})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	return store.SetByID[Plugin](ctx, ps.c, "plugin_id", r.PluginID, set)
}

func (ps *plugins) setState(ctx context.Context, p *auth.Principal, id, state string) (*Plugin, error) {
	if _, err := ps.writable(ctx, p, id); err != nil {
		return nil, err
	}
	return store.SetByID[Plugin](ctx, ps.c, "plugin_id", id, bson.D{{Key: "state", Value: state}, {Key: "updated_at", Value: wire.T(wire.Now())}})
}

func (ps *plugins) enable(ctx context.Context, p *auth.Principal, r *pluginRequest) (*Plugin, error) {
	return ps.setState(ctx, p, r.PluginID, "ENABLED")
}

func (ps *plugins) disable(ctx context.Context, p *auth.Principal, r *pluginRequest) (*Plugin, error) {
	return ps.setState(ctx, p, r.PluginID, "DISABLED")
}

func (ps *plugins) deregister(ctx context.Context, p *auth.Principal, r *pluginRequest) (*api.Empty, error) {
	if _, err := ps.writable(ctx, p, r.PluginID); err != nil {
		return nil, err
	}
	res, err := ps.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: r.PluginID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("plugin_id", r.PluginID)
	}
	return &api.Empty{}, nil
}

// walk asks the repositories in order (one when repositoryID names it)
// until one knows the plugin: a 404 passes to the next, any other answer
// ends the walk. When none knows it and a remote could not be asked, that
// failure is the answer rather than a possibly wrong 404.
func walk[T any](ctx context.Context, repos *repository.Repos, repositoryID, pluginID string,
	local func() (*T, error), remote func(*repository.RemoteRepo) (*T, error)) (*T, error) {
	if repositoryID != "" {
		rm, err := repos.Resolve(ctx, repositoryID)
		if err != nil {
			return nil, err
		}
		if rm == nil {
			return local()
		}
		return remote(rm)
	}
	out, err := local()
	if !errs.Is(err, errs.NotFoundCode) {
		return out, err
	}
	var down error
	for _, rm := range repos.Remotes() {
		out, err := remote(rm)
		switch {
		case err == nil:
			return out, nil
		case errs.Is(err, errs.NotFoundCode):
		case errs.Is(err, errs.Unavailable):
			repos.Log().Warn("remote repository passed over", "remote", rm.Name, "error", err)
			down = err
		default:
			return nil, err
		}
	}
	if down != nil {
		return nil, down
	}
	return nil, errs.NotFound("plugin_id", pluginID)
}

func (ps *plugins) get(ctx context.Context, p *auth.Principal, r *repositoryPluginRequest) (*Plugin, error) {
	return walk(ctx, ps.repos, r.RepositoryID, r.PluginID,
		func() (*Plugin, error) { return ps.visible(ctx, p, r.PluginID) },
		func(rm *repository.RemoteRepo) (*Plugin, error) { return ps.remoteGet(ctx, rm, r.PluginID) })
}

// remoteGet asks one remote repository for a plugin of its own.
func (ps *plugins) remoteGet(ctx context.Context, rm *repository.RemoteRepo, id string) (*Plugin, error) {
	info, err := rm.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out Plugin
	if err := rm.Call(ctx, "/repository/v1/plugin/get", map[string]any{"plugin_id": id, "repository_id": info.RepositoryID}, &out); err != nil {
		return nil, err
	}
	out.RepositoryInfo = info
	return &out, nil
}

func (ps *plugins) versions(ctx context.Context, p *auth.Principal, r *repositoryPluginRequest) (*Versions, error) {
	return walk(ctx, ps.repos, r.RepositoryID, r.PluginID,
		func() (*Versions, error) {
			doc, err := ps.visible(ctx, p, r.PluginID)
			if err != nil {
				return nil, err
			}
			return ps.localVersions(ctx, doc)
		},
		func(rm *repository.RemoteRepo) (*Versions, error) {
			info, err := rm.Info(ctx)
			if err != nil {
				return nil, err
			}
			var out Versions
			err = rm.Call(ctx, "/repository/v1/plugin/get-versions", map[string]any{"plugin_id": r.PluginID, "repository_id": info.RepositoryID}, &out)
			if err != nil {
				return nil, err
			}
			out.Results = wire.List(out.Results)
			return &Versions{Version: out.Results, Results: out.Results, TotalCount: len(out.Results)}, nil
		})
}

// localVersions reads the image's tags from its registry.
func (ps *plugins) localVersions(ctx context.Context, doc *Plugin) (*Versions, error) {
	base := ps.hub
	if doc.RegistryType != PublicHub {
		var err error
		if base, err = registry.BaseURL(doc.RegistryURL); err != nil {
			return nil, errs.New(errs.RegistryUnavailable, "The plugin's registry_url %q is unusable: %s.", doc.RegistryURL, err.Error())
		}
	}
	rc, err := ps.credentials(doc)
	if err != nil {
		return nil, err // a key missing from the ring: a 500, logged
	}
	cred := registry.Credentials{}
	cred.Username, _ = rc["username"].(string)
	cred.Password, _ = rc["password"].(string)
	cred.Token, _ = rc["token"].(string)
	tags, err := ps.registry.Tags(ctx, base, doc.Image, cred)
	if err != nil {
		return nil, err
	}
	tags = wire.List(tags)
	return &Versions{Version: tags, Results: tags, TotalCount: len(tags)}, nil
}

// RegistryConfig is a plugin's registry_config. Its secrets (passwords,
// tokens) are stored for the registry calls but never sent back.
type RegistryConfig map[string]any

// MarshalBSONValue stores the (masked) config with its keys as written
// (pkg/freeform): a registry's settings may be named with dots.
func (rc RegistryConfig) MarshalBSONValue() (byte, []byte, error) {
	return freeform.Map(rc).MarshalBSONValue()
}

// UnmarshalBSONValue reads the stored config back with its keys as written.
func (rc *RegistryConfig) UnmarshalBSONValue(typ byte, data []byte) error {
	var m freeform.Map
	err := m.UnmarshalBSONValue(typ, data)
	*rc = RegistryConfig(m)
	return err
}

// Masked is the value sent instead of a secret of registry_config.
const Masked = "********"

// MarshalJSON masks the secrets, at any depth.
func (rc RegistryConfig) MarshalJSON() ([]byte, error) {
	return jsonMarshal(mask(map[string]any(rc)))
}

// mask copies v with every value under a secret-looking key (password,
// token, secret, in any case, at any depth, inside lists too) replaced by
// Masked.
func mask(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if isSecretKey(k) {
				out[k] = Masked
			} else {
				out[k] = mask(x)
			}
		}
		return out
	case bson.M:
		return mask(map[string]any(t))
	case bson.D:
		out := make(map[string]any, len(t))
		for _, e := range t {
			out[e.Key] = e.Value
		}
		return mask(out)
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = mask(x)
		}
		return out
	case bson.A:
		return mask([]any(t))
	}
	return v
}

func isSecretKey(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "password") || strings.Contains(k, "token") || strings.Contains(k, "secret") ||
		strings.Contains(k, "auth") || strings.Contains(k, "credential") || strings.Contains(k, "key")
}
