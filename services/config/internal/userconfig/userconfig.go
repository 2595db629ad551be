// Package userconfig holds the user-config resource (/config/v1 and v2
// user-config): named records of free-form data that one user keeps for
// itself (the console's last workspace, recents, favourites, read
// notices, nav rail, custom columns, bookmarks). A record is its owner's
// alone: every other caller, the domain's admin included, gets 404 and
// lists nothing. The name is unique per user and domain.
package userconfig

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

// UserConfig is a stored user config; the JSON form is UserConfigInfo.
type UserConfig struct {
	ID        string        `bson:"_id" json:"-"`
	Name      string        `bson:"name" json:"name"`
	Data      freeform.Map  `bson:"data" json:"data"`
	Tags      freeform.Flat `bson:"tags" json:"tags"`
	UserID    string        `bson:"user_id" json:"user_id"`
	DomainID  string        `bson:"domain_id" json:"domain_id"`
	CreatedAt wire.Time     `bson:"created_at" json:"created_at"`
	UpdatedAt wire.Time     `bson:"updated_at" json:"updated_at"`
	Revision  int64         `bson:"revision" json:"-"`
}

// Rev implements core.Record.
func (u *UserConfig) Rev() int64 { return u.Revision }

// SetRev implements core.Record.
func (u *UserConfig) SetRev(n int64) { u.Revision = n }

// changed is old with data and tags replaced where given.
func changed(old *UserConfig, data, tags map[string]any) *UserConfig {
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

// Any signed-in caller keeps configs of its own (upstream role_types USER).
var users = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)

var resource = query.Resource{
	KeywordFields: []string{"name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"name", "user_id"},
	Fields:        query.FieldsOf[UserConfig](),
	Maps:          freeform.FieldsOf[UserConfig](),
	// A user config is its owner's alone, whatever the role.
	Tenancy: tenancy.Fields{Domain: "domain_id", Owner: "user_id"},
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
		Query  *query.Query `json:"query"`
		Name   string       `json:"name"`
		UserID string       `json:"user_id"`
	}
	statReq struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

type configs struct {
	c      *mongo.Collection
	limits core.Limits
}

// Routes creates the indexes and returns the operations, on the v1 and
// v2 paths (the same operation: the console calls v2, cfctl v1).
func Routes(ctx context.Context, db *mongo.Database, limits core.Limits) ([]api.Route, error) {
	cs := configs{c: db.Collection(core.UserConfigs), limits: limits.OrDefault()}
	if err := store.EnsureIndexes(ctx, cs.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "user_id", Value: 1}, {Key: "name", Value: 1}}, Unique: true},
	); err != nil {
		return nil, err
	}
	var out []api.Route
	for _, v := range []string{"v1", "v2"} {
		p := "/config/" + v + "/user-config/"
		out = append(out,
			api.Op[writeReq, UserConfig]{Path: p + "create", Access: users, Summary: "Create a config of the caller's own; a taken name is 409.", Handle: cs.create},
			api.Op[writeReq, UserConfig]{Path: p + "update", Access: users, Summary: "Replace a config's data or tags.", Handle: cs.update},
			api.Op[writeReq, UserConfig]{Path: p + "set", Access: users, Summary: "Create or replace a config (one upsert).", Handle: cs.set},
			api.Op[nameReq, api.Empty]{Path: p + "delete", Access: users, Summary: "Delete a config.", Handle: cs.delete},
			api.Op[nameReq, UserConfig]{Path: p + "get", Access: users, Summary: "Get a config by name.", Handle: cs.get},
			api.Op[listReq, api.List[UserConfig]]{Path: p + "list", Access: users, Summary: "List the caller's configs (filters on data.<key> too).", Handle: cs.list},
			api.Op[statReq, map[string]any]{Path: p + "stat", Access: users, Summary: "Statistics over the caller's configs.", Handle: cs.stat},
		)
	}
	return out, nil
}

// check checks the name and bounds the free-form fields (on every write
// request; create and set also need data).
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

// own is the caller's tenancy for a user config (403 for a caller no
// user config is for: a workspace role without a workspace).
func own(p *auth.Principal) (tenancy.Record, error) {
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return tenancy.Record{}, err
	}
	rec := rule.Stamp()
	if rec.Owner == "" {
		return rec, errs.Forbidden()
	}
	return rec, nil
}

func idOf(rec tenancy.Record, name string) string { return core.Key(rec.Domain, rec.Owner, name) }

// underLimit refuses a new record past the user's bound. The count and
// the insert are two operations: callers racing at the bound may pass it
// by as many as race, which keeps the bound a bound.
func (cs configs) underLimit(ctx context.Context, rec tenancy.Record) error {
	n, err := cs.c.CountDocuments(ctx, bson.D{{Key: "domain_id", Value: rec.Domain}, {Key: "user_id", Value: rec.Owner}})
	if err != nil {
		return store.Wrap(err)
	}
	if n >= int64(cs.limits.MaxUserConfigs) {
		return errs.Invalid("name", "the user keeps the most configs allowed; delete some first")
	}
	return nil
}

func (cs configs) create(ctx context.Context, p *auth.Principal, r *writeReq) (*UserConfig, error) {
	if err := cs.check(r, true); err != nil {
		return nil, err
	}
	rec, err := own(p)
	if err != nil {
		return nil, err
	}
	if err := cs.underLimit(ctx, rec); err != nil {
		return nil, err
	}
	doc := fresh(rec, r)
	doc.Revision = 1
	if err := core.Insert(ctx, cs.c, doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// fresh is the new record of r for the caller rec.
func fresh(rec tenancy.Record, r *writeReq) *UserConfig {
	now := wire.T(wire.Now())
	return &UserConfig{ID: idOf(rec, r.Name), Name: r.Name, Data: r.Data, Tags: wire.Object(r.Tags),
		UserID: rec.Owner, DomainID: rec.Domain, CreatedAt: now, UpdatedAt: now}
}

func (cs configs) update(ctx context.Context, p *auth.Principal, r *writeReq) (*UserConfig, error) {
	if err := cs.check(r, false); err != nil {
		return nil, err
	}
	rec, err := own(p)
	if err != nil {
		return nil, err
	}
	id := idOf(rec, r.Name)
	if _, err := store.GetToChange[UserConfig](ctx, cs.c, resource, p, "name", id); err != nil {
		return nil, named(err, r.Name)
	}
	return core.Write(ctx, cs.c, id, r.Name, false, func(old *UserConfig) (*UserConfig, error) {
		return changed(old, r.Data, r.Tags), nil
	})
}

// set creates the record or replaces its data (and its tags when given);
// only a new record counts against the user's bound.
func (cs configs) set(ctx context.Context, p *auth.Principal, r *writeReq) (*UserConfig, error) {
	if err := cs.check(r, true); err != nil {
		return nil, err
	}
	rec, err := own(p)
	if err != nil {
		return nil, err
	}
	return core.Write(ctx, cs.c, idOf(rec, r.Name), r.Name, true, func(old *UserConfig) (*UserConfig, error) {
		if old != nil {
			return changed(old, r.Data, r.Tags), nil
		}
		if err := cs.underLimit(ctx, rec); err != nil {
			return nil, err
		}
		return fresh(rec, r), nil
	})
}

func (cs configs) delete(ctx context.Context, p *auth.Principal, r *nameReq) (*api.Empty, error) {
	rec, err := own(p)
	if err != nil {
		return nil, err
	}
	id := idOf(rec, r.Name)
	if _, err := store.GetToChange[UserConfig](ctx, cs.c, resource, p, "name", id); err != nil {
		return nil, named(err, r.Name)
	}
	return &api.Empty{}, core.Delete(ctx, cs.c, id, r.Name)
}

func (cs configs) get(ctx context.Context, p *auth.Principal, r *nameReq) (*UserConfig, error) {
	rec, err := own(p)
	if err != nil {
		return nil, err
	}
	doc, err := store.GetFor[UserConfig](ctx, cs.c, resource, p, "name", idOf(rec, r.Name))
	return doc, named(err, r.Name)
}

func (cs configs) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[UserConfig], error) {
	q := query.With(r.Query, query.Params("name", r.Name, "user_id", r.UserID)...)
	return store.SearchFor[UserConfig](ctx, cs.c, q, resource, p)
}

func (cs configs) stat(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, cs.c, p, resource, r.Query)
	return &res, err
}

// named is a 404 that names the record by its name, not by its key.
func named(err error, name string) error {
	if errs.Is(err, errs.NotFoundCode) {
		return errs.NotFound("name", name)
	}
	return err
}
