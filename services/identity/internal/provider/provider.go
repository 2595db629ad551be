// Package provider serves cloud providers (/identity/v2/provider/): the
// names, colours, icons and options the console shows for every account
// and resource. The providers identity ships (aws, azure, google_cloud,
// kubernetes) are present in every domain (package managed) and refused
// to change (403); a domain admin adds the domain's own.
package provider

import (
	"context"
	"regexp"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/managed"
)

// Collection holds the providers of every domain, _id = Key(domain, provider).
const Collection = "identity_providers"

// Key is a provider's _id: the provider is unique in its domain.
func Key(domainID, provider string) string { return domainID + "/" + provider }

// Provider is the ProviderInfo.
type Provider struct {
	ID         string        `bson:"_id" json:"-"`
	Provider   string        `bson:"provider" json:"provider"`
	Name       string        `bson:"name" json:"name"`
	Alias      string        `bson:"alias" json:"alias"`
	Color      string        `bson:"color" json:"color"`
	Icon       string        `bson:"icon" json:"icon"`
	Order      int           `bson:"order" json:"order"`
	Options    freeform.Map  `bson:"options" json:"options"`
	PluginInfo freeform.Map  `bson:"plugin_info" json:"plugin_info"`
	Tags       freeform.Flat `bson:"tags" json:"tags"`
	IsManaged  bool          `bson:"is_managed" json:"is_managed"`
	DomainID   string        `bson:"domain_id" json:"domain_id"`
	CreatedAt  wire.Time     `bson:"created_at" json:"created_at"`
	UpdatedAt  wire.Time     `bson:"updated_at" json:"updated_at"`
	Version    string        `bson:"version" json:"-"` // of a managed record
}

var resource = query.Resource{
	KeywordFields: []string{"provider", "name"},
	DefaultSort:   []query.SortKey{{Key: "order"}, {Key: "name"}},
	MinimalFields: []string{"provider", "name", "order"},
	Fields:        query.FieldsOf[Provider](),
	Maps:          freeform.FieldsOf[Provider](),
	Tenancy:       tenancy.InDomain,
}

var (
	writers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)
	readers = core.Readers
	color   = regexp.MustCompile(`^#[0-9A-Fa-f]{6}$`)
)

type (
	createReq struct {
		Provider   string         `json:"provider" v:"required,max=40"`
		Name       string         `json:"name" v:"required,max=40"`
		Alias      string         `json:"alias" v:"max=40"`
		Color      string         `json:"color" v:"max=7"`
		Icon       string         `json:"icon" v:"max=1024"`
		Order      *int           `json:"order"`
		Options    map[string]any `json:"options"`
		PluginInfo map[string]any `json:"plugin_info"`
		Tags       freeform.Flat  `json:"tags"`
	}
	updateReq struct {
		Provider string         `json:"provider" v:"required,max=40"`
		Name     string         `json:"name" v:"max=40"`
		Alias    *string        `json:"alias" v:"max=40"`
		Color    string         `json:"color" v:"max=7"`
		Icon     *string        `json:"icon" v:"max=1024"`
		Order    *int           `json:"order"`
		Options  map[string]any `json:"options"`
		Tags     freeform.Flat  `json:"tags"`
	}
	providerReq struct {
		Provider string `json:"provider" v:"required,max=40"`
	}
	listReq struct {
		Query     *query.Query `json:"query"`
		Provider  string       `json:"provider"`
		Name      string       `json:"name"`
		Alias     string       `json:"alias"`
		IsManaged *bool        `json:"is_managed"`
	}
)

func checkColor(c string) error {
	if c != "" && !color.MatchString(c) {
		return errs.Invalid("color", "a colour is #RRGGBB")
	}
	return nil
}

func checkOrder(o *int) error {
	if o != nil && *o < 1 {
		return errs.Invalid("order", "order is 1 or more")
	}
	return nil
}

// checkOptions is upstream's rule: auto sync runs on the trusted account
// of a provider that has an account collector plugin.
func checkOptions(options, pluginInfo map[string]any) error {
	if b, _ := options["support_auto_sync"].(bool); !b {
		return nil
	}
	if t, _ := options["support_trusted_account"].(bool); !t {
		return errs.Invalid("options.support_trusted_account", "support_auto_sync needs support_trusted_account")
	}
	if len(pluginInfo) == 0 {
		return errs.Invalid("plugin_info", "support_auto_sync needs plugin_info")
	}
	return nil
}

// Validate checks the fields across each other.
func (r *createReq) Validate() error {
	if err := checkColor(r.Color); err != nil {
		return err
	}
	if err := checkOrder(r.Order); err != nil {
		return err
	}
	if err := checkOptions(r.Options, r.PluginInfo); err != nil {
		return err
	}
	return freeform.CheckAll("options", r.Options, "plugin_info", r.PluginInfo, "tags", r.Tags)
}

// Validate checks the fields across each other.
func (r *updateReq) Validate() error {
	if err := checkColor(r.Color); err != nil {
		return err
	}
	if err := checkOrder(r.Order); err != nil {
		return err
	}
	return freeform.CheckAll("options", r.Options, "tags", r.Tags)
}

// Service is the provider operations over identity's core.
type Service struct {
	c       *mongo.Collection
	catalog *managed.Catalog
}

// New returns the providers of d.
func New(d *core.Deps) *Service {
	c := d.DB.Collection(Collection)
	return &Service{c: c, catalog: &managed.Catalog{Coll: c, Records: records}}
}

// Routes are the provider operations.
func Routes(d *core.Deps) []api.Route { return New(d).routes() }

func (s *Service) routes() []api.Route {
	const p = "/identity/v2/provider/"
	return []api.Route{
		api.Op[createReq, Provider]{Path: p + "create", Access: writers, Summary: "Create a provider of the domain.", Handle: s.create},
		api.Op[updateReq, Provider]{Path: p + "update", Access: writers, Summary: "Change a provider of the domain (a managed one is 403).", Handle: s.update},
		api.Op[providerReq, api.Empty]{Path: p + "delete", Access: writers, Summary: "Delete a provider of the domain (a managed one is 403).", Handle: s.delete},
		api.Op[providerReq, Provider]{Path: p + "get", Access: readers, Summary: "Get a provider.", Handle: s.get},
		api.Op[listReq, api.List[Provider]]{Path: p + "list", Access: readers, Summary: "List the providers: the managed ones and the domain's own.", Handle: s.list},
		api.Op[core.StatRequest, map[string]any]{Path: p + "stat", Access: readers, Summary: "Statistics over the providers.", Handle: s.stat},
	}
}

// Get is the provider of the domain named provider (managed ones
// included), or 404.
func (s *Service) Get(ctx context.Context, p *auth.Principal, provider string) (*Provider, error) {
	if err := s.catalog.Sync(ctx, p.DomainID); err != nil {
		return nil, err
	}
	pr, err := store.GetFor[Provider](ctx, s.c, resource, p, "provider", Key(p.DomainID, provider))
	if errs.Is(err, errs.NotFoundCode) {
		return nil, errs.NotFound("provider", provider)
	}
	return pr, err
}

func (s *Service) create(ctx context.Context, p *auth.Principal, r *createReq) (*Provider, error) {
	if err := s.catalog.Sync(ctx, p.DomainID); err != nil {
		return nil, err
	}
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return nil, err
	}
	domain := rule.Stamp().Domain
	order := 10
	if r.Order != nil {
		order = *r.Order
	}
	now := wire.T(wire.Now())
	pr := &Provider{ID: Key(domain, r.Provider), Provider: r.Provider, Name: r.Name, Alias: r.Alias, Color: r.Color, Icon: r.Icon,
		Order: order, Options: wire.Object(r.Options), PluginInfo: wire.Object(r.PluginInfo), Tags: wire.Object(r.Tags),
		DomainID: domain, CreatedAt: now, UpdatedAt: now}
	if _, err := s.c.InsertOne(ctx, pr); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.Duplicate("provider", r.Provider)
		}
		return nil, store.Wrap(err)
	}
	return pr, nil
}

// own loads a provider the caller may change: a managed one is 403.
func (s *Service) own(ctx context.Context, p *auth.Principal, provider string) (*Provider, error) {
	pr, err := s.Get(ctx, p, provider)
	if err != nil {
		return nil, err
	}
	if pr.IsManaged {
		return nil, errs.New(errs.PermissionDenied, "A managed provider cannot be changed. (provider = %s)", provider)
	}
	return store.GetToChange[Provider](ctx, s.c, resource, p, "provider", pr.ID)
}

func (s *Service) update(ctx context.Context, p *auth.Principal, r *updateReq) (*Provider, error) {
	pr, err := s.own(ctx, p, r.Provider)
	if err != nil {
		return nil, err
	}
	if r.Options != nil {
		if err := checkOptions(r.Options, pr.PluginInfo); err != nil {
			return nil, err
		}
	}
	set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Color != "" {
		set = append(set, bson.E{Key: "color", Value: r.Color})
	}
	if r.Alias != nil {
		set = append(set, bson.E{Key: "alias", Value: *r.Alias})
	}
	if r.Icon != nil {
		set = append(set, bson.E{Key: "icon", Value: *r.Icon})
	}
	if r.Order != nil {
		set = append(set, bson.E{Key: "order", Value: *r.Order})
	}
	if r.Options != nil {
		set = append(set, bson.E{Key: "options", Value: freeform.Map(r.Options)})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	return store.SetByID[Provider](ctx, s.c, "provider", pr.ID, set)
}

func (s *Service) delete(ctx context.Context, p *auth.Principal, r *providerReq) (*api.Empty, error) {
	pr, err := s.own(ctx, p, r.Provider)
	if err != nil {
		return nil, err
	}
	if _, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: pr.ID}, {Key: "is_managed", Value: false}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *Service) get(ctx context.Context, p *auth.Principal, r *providerReq) (*Provider, error) {
	return s.Get(ctx, p, r.Provider)
}

func (s *Service) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[Provider], error) {
	if err := s.catalog.Sync(ctx, p.DomainID); err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("provider", r.Provider, "name", r.Name, "alias", r.Alias, "is_managed", r.IsManaged)...)
	return store.SearchFor[Provider](ctx, s.c, q, resource, p)
}

func (s *Service) stat(ctx context.Context, p *auth.Principal, r *core.StatRequest) (*map[string]any, error) {
	if err := s.catalog.Sync(ctx, p.DomainID); err != nil {
		return nil, err
	}
	return core.StatFor(ctx, s.c, p, resource, r.Query)
}
