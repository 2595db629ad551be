// Package schema holds the repository service's schema operations
// (spec part 3, 1.x): JSON Schemas (credential forms and the like) kept
// in the local repository, named by `name` within a domain. A schema must
// be a valid JSON Schema (pkg/jsonschema); it is stored as its JSON text,
// since JSON Schemas hold keys ($ref, dotted names) MongoDB refuses.
//
// Decoding, validation and authorization come from pkg; this package
// holds only the schema rules.
package schema

import (
	"context"
	"encoding/json"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/jsonschema"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/repository/internal/repository"
)

// Collection holds the schemas, _id = domain_id/name.
const Collection = "repository_schemas"

// AllProjects is the project_id of a domain-wide schema, and in a list
// the value that asks for the schemas of every project.
const AllProjects = "*"

// Schema is a schema, stored and sent in the same shape.
type Schema struct {
	ID             string          `bson:"_id" json:"-"`
	Name           string          `bson:"name" json:"name"`
	ServiceType    string          `bson:"service_type" json:"service_type"`
	SchemaID       string          `bson:"schema_id" json:"schema_id"`
	Schema         repository.Doc  `bson:"schema" json:"schema"`
	Labels         freeform.List   `bson:"labels" json:"labels"`
	Tags           freeform.Flat   `bson:"tags" json:"tags"`
	RepositoryInfo repository.Info `bson:"repository_info" json:"repository_info"`
	ProjectID      string          `bson:"project_id" json:"project_id"`
	DomainID       string          `bson:"domain_id" json:"domain_id"`
	CreatedAt      wire.Time       `bson:"created_at" json:"created_at"`
	UpdatedAt      wire.Time       `bson:"updated_at" json:"updated_at"`

	only []string // get's `only`: the members to send
}

// MarshalJSON sends the schema, or only the members asked for.
func (s Schema) MarshalJSON() ([]byte, error) {
	type plain Schema
	b, err := json.Marshal(plain(s))
	if err != nil {
		return nil, err
	}
	return repository.Trim(b, s.only)
}

var schemaResource = query.Resource{
	KeywordFields: []string{"name", "service_type", "schema_id"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"name", "service_type", "schema_id", "project_id"},
	Fields:        query.FieldsOf[Schema](),
	Maps:          freeform.FieldsOf[Schema](),
	Tenancy:       repository.Tenancy,
}

var writers, readers = repository.Writers, repository.Readers

type (
	createSchema struct {
		Name        string         `json:"name" v:"required,max=255"`
		ServiceType string         `json:"service_type" v:"required,max=255"`
		SchemaID    string         `json:"schema_id" v:"required,max=255"`
		Schema      map[string]any `json:"schema" v:"required"`
		DomainID    string         `json:"domain_id" v:"required,max=64"`
		Labels      freeform.List  `json:"labels" v:"max=100"`
		Tags        freeform.Flat  `json:"tags"`
		ProjectID   string         `json:"project_id" v:"max=64"`
	}
	updateSchema struct {
		Name     string         `json:"name" v:"required"`
		DomainID string         `json:"domain_id" v:"required,max=64"`
		Schema   map[string]any `json:"schema"`
		Labels   freeform.List  `json:"labels" v:"max=100"`
		Tags     freeform.Flat  `json:"tags"`
	}
	schemaRequest struct {
		Name     string `json:"name" v:"required"`
		DomainID string `json:"domain_id" v:"required,max=64"`
		SchemaID string `json:"schema_id"`
	}
	getSchema struct {
		Name         string   `json:"name" v:"required"`
		DomainID     string   `json:"domain_id" v:"required,max=64"`
		RepositoryID string   `json:"repository_id"`
		Only         []string `json:"only"`
		SchemaID     string   `json:"schema_id"`
	}
	schemaQuery struct {
		Query        *query.Query `json:"query"`
		ProjectID    string       `json:"project_id" v:"required"`
		RepositoryID string       `json:"repository_id" v:"required"`
		DomainID     string       `json:"domain_id" v:"required,max=64"`
		Name         string       `json:"name"`
		ServiceType  string       `json:"service_type"`
		SchemaID     string       `json:"schema_id"`
		// State is accepted as the spec lists it; schemas have no state,
		// so it is not a condition.
		State string `json:"state" v:"enum=ENABLED|DISABLED"`
	}
	schemaStat struct {
		Query        *stat.Query `json:"query" v:"required"`
		RepositoryID string      `json:"repository_id" v:"required"`
		DomainID     string      `json:"domain_id" v:"required,max=64"`
	}
)

// Validate compiles the schema and checks the free-form members.
func (r *createSchema) Validate() error { return check(r.Schema, r.Labels, r.Tags) }

// Validate compiles a new schema and checks the free-form members.
func (r *updateSchema) Validate() error { return check(r.Schema, r.Labels, r.Tags) }

// Validate checks `only`.
func (r *getSchema) Validate() error { return repository.CheckOnly(r.Only, schemaResource.Fields) }

func check(schema map[string]any, labels []any, tags map[string]any) error {
	if schema != nil {
		if _, err := jsonschema.Compile(schema); err != nil {
			return err
		}
	}
	return repository.CheckLabelsTags(labels, tags)
}

type schemas struct {
	c     *mongo.Collection
	repos *repository.Repos
}

// Routes creates the schema indexes and returns the schema operations.
func Routes(ctx context.Context, db *mongo.Database, repos *repository.Repos) ([]api.Route, error) {
	ss := schemas{c: db.Collection(Collection), repos: repos}
	if err := store.EnsureIndexes(ctx, ss.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}, Unique: true},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "service_type", Value: 1}}},
	); err != nil {
		return nil, err
	}
	return []api.Route{
		api.Op[createSchema, Schema]{Path: "/repository/v1/schema/create", Access: writers, Summary: "Create a schema (a valid JSON Schema) in the local repository.", Handle: ss.create},
		api.Op[updateSchema, Schema]{Path: "/repository/v1/schema/update", Access: writers, Summary: "Change a schema's JSON Schema, labels or tags.", Handle: ss.update},
		api.Op[schemaRequest, api.Empty]{Path: "/repository/v1/schema/delete", Access: writers, Summary: "Delete a schema.", Handle: ss.delete},
		api.Op[getSchema, Schema]{Path: "/repository/v1/schema/get", Access: readers, Summary: "Get a schema by name.", Handle: ss.get},
		api.Op[schemaQuery, api.List[Schema]]{Path: "/repository/v1/schema/list", Access: readers, Summary: "List the domain's schemas of a project (or of every project with project_id \"*\").", Handle: ss.list},
		api.Op[schemaStat, map[string]any]{Path: "/repository/v1/schema/stat", Access: readers, Summary: "Statistics over the domain's schemas of a repository.", Handle: ss.stat},
	}, nil
}

func (ss schemas) create(ctx context.Context, p *auth.Principal, r *createSchema) (*Schema, error) {
	if err := repository.Admits(p, schemaResource, r.DomainID); err != nil {
		return nil, err
	}
	project := r.ProjectID
	if project == "" {
		project = AllProjects
	}
	now := wire.T(wire.Now())
	doc := &Schema{ID: repository.Key(r.DomainID, r.Name), Name: r.Name, ServiceType: r.ServiceType, SchemaID: r.SchemaID,
		Schema: repository.Doc(r.Schema), Labels: wire.List(r.Labels), Tags: wire.Object(r.Tags),
		RepositoryInfo: ss.repos.Local(), ProjectID: project, DomainID: r.DomainID, CreatedAt: now, UpdatedAt: now}
	if _, err := ss.c.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.Duplicate("name", r.Name)
		}
		return nil, store.Wrap(err)
	}
	return doc, nil
}

func (ss schemas) update(ctx context.Context, p *auth.Principal, r *updateSchema) (*Schema, error) {
	if _, err := repository.ToChange[Schema](ctx, ss.c, schemaResource, p, r.DomainID, "name", r.Name); err != nil {
		return nil, err
	}
	set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}}
	if r.Schema != nil {
		set = append(set, bson.E{Key: "schema", Value: repository.Doc(r.Schema)})
	}
	if r.Labels != nil {
		set = append(set, bson.E{Key: "labels", Value: r.Labels})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	out, err := store.SetByID[Schema](ctx, ss.c, "name", repository.Key(r.DomainID, r.Name), set)
	if err != nil {
		return nil, repository.NotFound(err, "name", r.Name)
	}
	return out, nil
}

func (ss schemas) delete(ctx context.Context, p *auth.Principal, r *schemaRequest) (*api.Empty, error) {
	cur, err := repository.ToChange[Schema](ctx, ss.c, schemaResource, p, r.DomainID, "name", r.Name)
	if err != nil {
		return nil, err
	}
	if r.SchemaID != "" && cur.SchemaID != r.SchemaID {
		return nil, errs.NotFound("name", r.Name)
	}
	filter := bson.D{{Key: "_id", Value: cur.ID}}
	if r.SchemaID != "" {
		filter = append(filter, bson.E{Key: "schema_id", Value: r.SchemaID})
	}
	res, err := ss.c.DeleteOne(ctx, filter)
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("name", r.Name)
	}
	return &api.Empty{}, nil
}

func (ss schemas) get(ctx context.Context, p *auth.Principal, r *getSchema) (*Schema, error) {
	actor, err := ss.repos.LocalActing(ctx, p, r.DomainID, r.RepositoryID)
	if err != nil {
		return nil, err
	}
	out, err := repository.Get[Schema](ctx, ss.c, schemaResource, actor, r.DomainID, "name", r.Name)
	if err != nil {
		return nil, err
	}
	if r.SchemaID != "" && out.SchemaID != r.SchemaID {
		return nil, errs.NotFound("name", r.Name)
	}
	out.only = r.Only
	return out, nil
}

func (ss schemas) list(ctx context.Context, p *auth.Principal, r *schemaQuery) (*api.List[Schema], error) {
	actor, err := ss.repos.LocalActing(ctx, p, r.DomainID, r.RepositoryID)
	if err != nil {
		return nil, err
	}
	conds := query.Params("name", r.Name, "service_type", r.ServiceType, "schema_id", r.SchemaID)
	if r.ProjectID != AllProjects {
		// A project sees its own schemas and the domain-wide ones.
		conds = append(conds, query.Condition{Key: "project_id", Value: []any{r.ProjectID, AllProjects}, Operator: "in"})
	}
	return store.SearchFor[Schema](ctx, ss.c, query.With(r.Query, conds...), schemaResource, actor)
}

func (ss schemas) stat(ctx context.Context, p *auth.Principal, r *schemaStat) (*map[string]any, error) {
	actor, err := ss.repos.LocalActing(ctx, p, r.DomainID, r.RepositoryID)
	if err != nil {
		return nil, err
	}
	res, err := stat.RunFor(ctx, ss.c, actor, schemaResource, r.Query)
	return &res, err
}
