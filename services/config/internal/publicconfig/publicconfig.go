// Package publicconfig holds the public-config resource (/config/v2
// public-config): named records of a domain that anyone may read before
// signing in (the console's `console:override-service-setting` and
// `console:ext-menu`), so get and list take no credential and name the
// domain in the body. Only the domain's admins write them. The name is
// unique per domain.
package publicconfig

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/config/internal/core"
)

// PublicConfig is a stored public config; the JSON form is PublicConfigInfo.
type PublicConfig struct {
	ID        string        `bson:"_id" json:"-"`
	Name      string        `bson:"name" json:"name"`
	Data      freeform.Map  `bson:"data" json:"data"`
	Tags      freeform.Flat `bson:"tags" json:"tags"`
	DomainID  string        `bson:"domain_id" json:"domain_id"`
	CreatedAt wire.Time     `bson:"created_at" json:"created_at"`
	UpdatedAt wire.Time     `bson:"updated_at" json:"updated_at"`
	Revision  int64         `bson:"revision" json:"-"`
}

// Rev implements core.Record.
func (d *PublicConfig) Rev() int64 { return d.Revision }

// SetRev implements core.Record.
func (d *PublicConfig) SetRev(n int64) { d.Revision = n }

// changed is old with data and tags replaced where given.
func changed(old *PublicConfig, data, tags map[string]any) *PublicConfig {
	doc := *old
	if data != nil {
		doc.Data = data
	}
	if tags != nil {
		doc.Tags = tags
	}
	doc.UpdatedAt = wire.T(wire.Now())
	return &doc
}

var (
	admins = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)
	anyone = auth.Public()
)

var resource = query.Resource{
	KeywordFields: []string{"name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"name"},
	Fields:        query.FieldsOf[PublicConfig](),
	Maps:          freeform.FieldsOf[PublicConfig](),
	Tenancy:       tenancy.InDomain,
}

type (
	writeReq struct {
		Name string         `json:"name" v:"required,max=255"`
		Data map[string]any `json:"data"`
		Tags map[string]any `json:"tags"`
	}
	nameReq struct {
		Name string `json:"name" v:"required,max=255"`
	}
	// Reads name the domain: the caller may have no token yet.
	publicGetReq struct {
		Name     string `json:"name" v:"required,max=255"`
		DomainID string `json:"domain_id" v:"required,max=64"`
	}
	publicListReq struct {
		Query    *query.Query `json:"query"`
		Name     string       `json:"name"`
		DomainID string       `json:"domain_id" v:"required,max=64"`
	}
	statReq struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

type configs struct {
	c      *mongo.Collection
	limits core.Limits
}

// Routes creates the indexes and returns the operations.
func Routes(ctx context.Context, db *mongo.Database, limits core.Limits) ([]api.Route, error) {
	cs := configs{c: db.Collection(core.PublicConfigs), limits: limits.OrDefault()}
	if err := store.EnsureIndexes(ctx, cs.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}, Unique: true},
	); err != nil {
		return nil, err
	}
	p := "/config/v2/public-config/"
	return []api.Route{
		api.Op[writeReq, PublicConfig]{Path: p + "create", Access: admins, Summary: "Create a public config of the domain; a taken name is 409.", Handle: cs.create},
		api.Op[writeReq, PublicConfig]{Path: p + "update", Access: admins, Summary: "Replace a public config's data or tags.", Handle: cs.update},
		api.Op[writeReq, PublicConfig]{Path: p + "set", Access: admins, Summary: "Create or replace a public config (one upsert).", Handle: cs.set},
		api.Op[nameReq, api.Empty]{Path: p + "delete", Access: admins, Summary: "Delete a public config.", Handle: cs.delete},
		api.Op[publicGetReq, PublicConfig]{Path: p + "get", Access: anyone, Summary: "Get a public config of the named domain; no credential needed.", Handle: cs.get},
		api.Op[publicListReq, api.List[PublicConfig]]{Path: p + "list", Access: anyone, Summary: "List the public configs of the named domain; no credential needed.", Handle: cs.list},
		api.Op[statReq, map[string]any]{Path: p + "stat", Access: admins, Summary: "Statistics over the domain's public configs.", Handle: cs.stat},
	}, nil
}

func (cs configs) check(r *writeReq, needData bool) error {
	if err := core.CheckName(r.Name); err != nil {
		return err
	}
	if needData && r.Data == nil {
		return errs.Required("data")
	}
	if err := core.CheckData("data", r.Data, cs.limits.MaxDataBytes); err != nil {
		return err
	}
	return core.CheckData("tags", r.Tags, cs.limits.MaxDataBytes)
}

func idOf(domainID, name string) string { return core.Key(domainID, name) }

func (cs configs) create(ctx context.Context, p *auth.Principal, r *writeReq) (*PublicConfig, error) {
	if err := cs.check(r, true); err != nil {
		return nil, err
	}
	now := wire.T(wire.Now())
	doc := &PublicConfig{ID: idOf(p.DomainID, r.Name), Name: r.Name, Data: r.Data, Tags: wire.Object(r.Tags), DomainID: p.DomainID, CreatedAt: now, UpdatedAt: now, Revision: 1}
	if err := core.Insert(ctx, cs.c, doc); err != nil {
		return nil, err
	}
	return doc, nil
}

func (cs configs) own(ctx context.Context, p *auth.Principal, name string) error {
	_, err := store.GetToChange[PublicConfig](ctx, cs.c, resource, p, "name", idOf(p.DomainID, name))
	if errs.Is(err, errs.NotFoundCode) {
		return errs.NotFound("name", name)
	}
	return err
}

func (cs configs) update(ctx context.Context, p *auth.Principal, r *writeReq) (*PublicConfig, error) {
	if err := cs.check(r, false); err != nil {
		return nil, err
	}
	if err := cs.own(ctx, p, r.Name); err != nil {
		return nil, err
	}
	return core.Write(ctx, cs.c, idOf(p.DomainID, r.Name), r.Name, false, func(old *PublicConfig) (*PublicConfig, error) { return changed(old, r.Data, r.Tags), nil })
}

func (cs configs) set(ctx context.Context, p *auth.Principal, r *writeReq) (*PublicConfig, error) {
	if err := cs.check(r, true); err != nil {
		return nil, err
	}
	return core.Write(ctx, cs.c, idOf(p.DomainID, r.Name), r.Name, true, func(old *PublicConfig) (*PublicConfig, error) {
		if old != nil {
			return changed(old, r.Data, r.Tags), nil
		}
		now := wire.T(wire.Now())
		return &PublicConfig{ID: idOf(p.DomainID, r.Name), Name: r.Name, Data: r.Data, Tags: wire.Object(r.Tags), DomainID: p.DomainID, CreatedAt: now, UpdatedAt: now}, nil
	})
}

func (cs configs) delete(ctx context.Context, p *auth.Principal, r *nameReq) (*api.Empty, error) {
	if err := cs.own(ctx, p, r.Name); err != nil {
		return nil, err
	}
	return &api.Empty{}, core.Delete(ctx, cs.c, idOf(p.DomainID, r.Name), r.Name)
}

// get reads by the key of the named domain and name; the stored domain
// is checked again, so a key can only ever answer its own domain.
func (cs configs) get(ctx context.Context, _ *auth.Principal, r *publicGetReq) (*PublicConfig, error) {
	doc, err := store.Get[PublicConfig](ctx, cs.c, "name", idOf(r.DomainID, r.Name))
	if err != nil || doc.DomainID != r.DomainID || doc.Name != r.Name {
		if err == nil || errs.Is(err, errs.NotFoundCode) {
			return nil, errs.NotFound("name", r.Name)
		}
		return nil, err
	}
	return doc, nil
}

// list is confined to the named domain: with no credential, the body's
// domain_id is the only scope there is (that is what public means here).
func (cs configs) list(ctx context.Context, _ *auth.Principal, r *publicListReq) (*api.List[PublicConfig], error) {
	q := query.With(r.Query, query.Params("name", r.Name)...)
	return store.Search[PublicConfig](ctx, cs.c, q, resource, bson.D{{Key: "domain_id", Value: r.DomainID}})
}

func (cs configs) stat(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, cs.c, p, resource, r.Query)
	return &res, err
}
