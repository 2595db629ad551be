// Package domainconfig holds the domain-config resource (/config/v1 and
// v2 domain-config): named records of free-form data of one domain (the
// console's `settings`: display name, admin e-mail, timezone, logo,
// unified cost currency; `anomaly_detection_configuration`). Domain
// admins only, reads included, as upstream (authorization.scope DOMAIN).
// The name is unique per domain.
package domainconfig

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

// DomainConfig is a stored domain config; the JSON form is DomainConfigInfo.
type DomainConfig struct {
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
func (d *DomainConfig) Rev() int64 { return d.Revision }

// SetRev implements core.Record.
func (d *DomainConfig) SetRev(n int64) { d.Revision = n }

// changed is old with data and tags replaced where given.
func changed(old *DomainConfig, data, tags map[string]any) *DomainConfig {
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

var admins = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)

var resource = query.Resource{
	KeywordFields: []string{"name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"name"},
	Fields:        query.FieldsOf[DomainConfig](),
	Maps:          freeform.FieldsOf[DomainConfig](),
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
	listReq struct {
		Query *query.Query `json:"query"`
		Name  string       `json:"name"`
	}
	statReq struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

type configs struct {
	c      *mongo.Collection
	limits core.Limits
}

// Routes creates the indexes and returns the operations on the v1 paths
// (the console's `settings` store) and the v2 paths (its anomaly page).
func Routes(ctx context.Context, db *mongo.Database, limits core.Limits) ([]api.Route, error) {
	cs := configs{c: db.Collection(core.DomainConfigs), limits: limits.OrDefault()}
	if err := store.EnsureIndexes(ctx, cs.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}, Unique: true},
	); err != nil {
		return nil, err
	}
	var out []api.Route
	for _, v := range []string{"v1", "v2"} {
		p := "/config/" + v + "/domain-config/"
		out = append(out,
			api.Op[writeReq, DomainConfig]{Path: p + "create", Access: admins, Summary: "Create a config of the domain; a taken name is 409.", Handle: cs.create},
			api.Op[writeReq, DomainConfig]{Path: p + "update", Access: admins, Summary: "Replace a domain config's data or tags.", Handle: cs.update},
			api.Op[writeReq, DomainConfig]{Path: p + "set", Access: admins, Summary: "Create or replace a domain config (one upsert).", Handle: cs.set},
			api.Op[nameReq, api.Empty]{Path: p + "delete", Access: admins, Summary: "Delete a domain config.", Handle: cs.delete},
			api.Op[nameReq, DomainConfig]{Path: p + "get", Access: admins, Summary: "Get a domain config by name.", Handle: cs.get},
			api.Op[listReq, api.List[DomainConfig]]{Path: p + "list", Access: admins, Summary: "List the domain's configs.", Handle: cs.list},
			api.Op[statReq, map[string]any]{Path: p + "stat", Access: admins, Summary: "Statistics over the domain's configs.", Handle: cs.stat},
		)
	}
	return out, nil
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

func idOf(p *auth.Principal, name string) string { return core.Key(p.DomainID, name) }

func (cs configs) create(ctx context.Context, p *auth.Principal, r *writeReq) (*DomainConfig, error) {
	if err := cs.check(r, true); err != nil {
		return nil, err
	}
	now := wire.T(wire.Now())
	doc := &DomainConfig{ID: idOf(p, r.Name), Name: r.Name, Data: r.Data, Tags: wire.Object(r.Tags), DomainID: p.DomainID, CreatedAt: now, UpdatedAt: now, Revision: 1}
	if err := core.Insert(ctx, cs.c, doc); err != nil {
		return nil, err
	}
	return doc, nil
}

func (cs configs) update(ctx context.Context, p *auth.Principal, r *writeReq) (*DomainConfig, error) {
	if err := cs.check(r, false); err != nil {
		return nil, err
	}
	if _, err := cs.get(ctx, p, &nameReq{Name: r.Name}); err != nil {
		return nil, err
	}
	return core.Write(ctx, cs.c, idOf(p, r.Name), r.Name, false, func(old *DomainConfig) (*DomainConfig, error) { return changed(old, r.Data, r.Tags), nil })
}

func (cs configs) set(ctx context.Context, p *auth.Principal, r *writeReq) (*DomainConfig, error) {
	if err := cs.check(r, true); err != nil {
		return nil, err
	}
	return core.Write(ctx, cs.c, idOf(p, r.Name), r.Name, true, func(old *DomainConfig) (*DomainConfig, error) {
		if old != nil {
			return changed(old, r.Data, r.Tags), nil
		}
		now := wire.T(wire.Now())
		return &DomainConfig{ID: idOf(p, r.Name), Name: r.Name, Data: r.Data, Tags: wire.Object(r.Tags), DomainID: p.DomainID, CreatedAt: now, UpdatedAt: now}, nil
	})
}

func (cs configs) delete(ctx context.Context, p *auth.Principal, r *nameReq) (*api.Empty, error) {
	if _, err := cs.get(ctx, p, r); err != nil {
		return nil, err
	}
	return &api.Empty{}, core.Delete(ctx, cs.c, idOf(p, r.Name), r.Name)
}

func (cs configs) get(ctx context.Context, p *auth.Principal, r *nameReq) (*DomainConfig, error) {
	doc, err := store.GetFor[DomainConfig](ctx, cs.c, resource, p, "name", idOf(p, r.Name))
	if errs.Is(err, errs.NotFoundCode) {
		return nil, errs.NotFound("name", r.Name)
	}
	return doc, err
}

func (cs configs) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[DomainConfig], error) {
	return store.SearchFor[DomainConfig](ctx, cs.c, query.With(r.Query, query.Params("name", r.Name)...), resource, p)
}

func (cs configs) stat(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, cs.c, p, resource, r.Query)
	return &res, err
}
