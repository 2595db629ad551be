// Package schema serves the account schemas (/identity/v2/schema/): the
// JSON schemas of a provider's service and trusted accounts' data and of
// their credentials, which the console renders as forms and identity
// checks accounts against. The schemas identity ships are present in
// every domain (package managed) and refused to change (403); a domain
// admin adds the domain's own.
package schema

import (
	"context"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/jsonschema"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/managed"
)

// Collection holds the schemas of every domain, _id = Key(domain, schema_id).
const Collection = "identity_schemas"

// Key is a schema's _id: the schema_id is unique in its domain.
func Key(domainID, schemaID string) string { return domainID + "/" + schemaID }

// Schema types.
const (
	ServiceAccount = "SERVICE_ACCOUNT"
	TrustedAccount = "TRUSTED_ACCOUNT"
	Secret         = "SECRET"
	TrustingSecret = "TRUSTING_SECRET"
)

// Schema is the SchemaInfo.
type Schema struct {
	ID             string        `bson:"_id" json:"-"`
	SchemaID       string        `bson:"schema_id" json:"schema_id"`
	Name           string        `bson:"name" json:"name"`
	Version        string        `bson:"version" json:"version"`
	SchemaType     string        `bson:"schema_type" json:"schema_type"`
	Schema         freeform.Map  `bson:"schema" json:"schema"`
	Provider       string        `bson:"provider" json:"provider"`
	RelatedSchemas []string      `bson:"related_schemas" json:"related_schemas"`
	Options        freeform.Map  `bson:"options" json:"options"`
	Tags           freeform.Flat `bson:"tags" json:"tags"`
	IsManaged      bool          `bson:"is_managed" json:"is_managed"`
	DomainID       string        `bson:"domain_id" json:"domain_id"`
	CreatedAt      wire.Time     `bson:"created_at" json:"created_at"`
	UpdatedAt      wire.Time     `bson:"updated_at" json:"updated_at"`
}

var resource = query.Resource{
	KeywordFields: []string{"schema_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"schema_id", "name", "schema_type", "provider"},
	Fields:        query.FieldsOf[Schema](),
	Maps:          freeform.FieldsOf[Schema](),
	Tenancy:       tenancy.InDomain,
}

var writers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)

type (
	createReq struct {
		SchemaID       string         `json:"schema_id" v:"required,max=40"`
		Name           string         `json:"name" v:"required,max=40"`
		SchemaType     string         `json:"schema_type" v:"required,enum=SERVICE_ACCOUNT|TRUSTED_ACCOUNT|SECRET|TRUSTING_SECRET"`
		Schema         map[string]any `json:"schema" v:"required"`
		Provider       string         `json:"provider" v:"required,max=40"`
		RelatedSchemas []string       `json:"related_schemas" v:"max=100"`
		Options        map[string]any `json:"options"`
		Tags           freeform.Flat  `json:"tags"`
	}
	updateReq struct {
		SchemaID       string         `json:"schema_id" v:"required,max=40"`
		Name           string         `json:"name" v:"max=40"`
		Schema         map[string]any `json:"schema"`
		RelatedSchemas []string       `json:"related_schemas" v:"max=100"`
		Options        map[string]any `json:"options"`
		Tags           freeform.Flat  `json:"tags"`
	}
	schemaReq struct {
		SchemaID string `json:"schema_id" v:"required,max=40"`
	}
	listReq struct {
		Query           *query.Query `json:"query"`
		SchemaID        string       `json:"schema_id"`
		Name            string       `json:"name"`
		SchemaType      string       `json:"schema_type" v:"enum=SERVICE_ACCOUNT|TRUSTED_ACCOUNT|SECRET|TRUSTING_SECRET"`
		Provider        string       `json:"provider"`
		RelatedSchemaID string       `json:"related_schema_id"`
		IsManaged       *bool        `json:"is_managed"`
	}
)

// Validate refuses a schema that is not a JSON schema and keys the store
// cannot hold.
func (r *createReq) Validate() error {
	if _, err := jsonschema.Compile(r.Schema); err != nil {
		return err
	}
	return freeform.CheckAll("schema", r.Schema, "options", r.Options, "tags", r.Tags)
}

// Validate refuses a schema that is not a JSON schema and keys the store
// cannot hold.
func (r *updateReq) Validate() error {
	if r.Schema != nil {
		if _, err := jsonschema.Compile(r.Schema); err != nil {
			return err
		}
	}
	return freeform.CheckAll("schema", r.Schema, "options", r.Options, "tags", r.Tags)
}

// Service is the schema operations and the checks of accounts.
type Service struct {
	c       *mongo.Collection
	catalog *managed.Catalog
}

// New returns the schemas of d.
func New(d *core.Deps) *Service {
	c := d.DB.Collection(Collection)
	return &Service{c: c, catalog: &managed.Catalog{Coll: c, Records: records}}
}

// Routes are the schema operations.
func Routes(d *core.Deps) []api.Route { return New(d).routes() }

func (s *Service) routes() []api.Route {
	const p = "/identity/v2/schema/"
	return []api.Route{
		api.Op[createReq, Schema]{Path: p + "create", Access: writers, Summary: "Create a schema of the domain.", Handle: s.create},
		api.Op[updateReq, Schema]{Path: p + "update", Access: writers, Summary: "Change a schema of the domain (a managed one is 403).", Handle: s.update},
		api.Op[schemaReq, api.Empty]{Path: p + "delete", Access: writers, Summary: "Delete a schema of the domain (a managed one is 403).", Handle: s.delete},
		api.Op[schemaReq, Schema]{Path: p + "get", Access: core.Readers, Summary: "Get a schema.", Handle: s.get},
		api.Op[listReq, api.List[Schema]]{Path: p + "list", Access: core.Readers, Summary: "List the schemas: the managed ones and the domain's own.", Handle: s.list},
		api.Op[core.StatRequest, map[string]any]{Path: p + "stat", Access: core.Readers, Summary: "Statistics over the schemas.", Handle: s.stat},
	}
}

// Get is the schema of the caller's domain with that id (managed ones
// included), or 404.
func (s *Service) Get(ctx context.Context, p *auth.Principal, schemaID string) (*Schema, error) {
	if err := s.catalog.Sync(ctx, p.DomainID); err != nil {
		return nil, err
	}
	sc, err := store.GetFor[Schema](ctx, s.c, resource, p, "schema_id", Key(p.DomainID, schemaID))
	if errs.Is(err, errs.NotFoundCode) {
		return nil, errs.NotFound("schema_id", schemaID)
	}
	return sc, err
}

// CheckData validates an account's data against the first schema (by
// name) of the provider and type, as upstream: a mismatch is 400
// ERROR_INVALID_PARAMETER naming the place, a provider without such a
// schema 400 ERROR_SCHEMA_IS_NOT_DEFINED.
func (s *Service) CheckData(ctx context.Context, p *auth.Principal, provider, schemaType string, data map[string]any) error {
	if err := s.catalog.Sync(ctx, p.DomainID); err != nil {
		return err
	}
	scope, err := store.Scope(p, resource)
	if err != nil {
		return err
	}
	filter := append(scope, bson.E{Key: "provider", Value: provider}, bson.E{Key: "schema_type", Value: schemaType})
	var sc Schema
	err = s.c.FindOne(ctx, filter, options.FindOne().SetSort(bson.D{{Key: "name", Value: 1}})).Decode(&sc)
	if err == mongo.ErrNoDocuments {
		return errs.New(errs.SchemaNotDefined, "Schema is not defined. (provider = %s, schema_type = %s)", provider, schemaType)
	}
	if err != nil {
		return store.Wrap(err)
	}
	return validate(&sc, "data", data)
}

// CheckSecret validates keys against the schema schemaID of one of the
// types (SECRET, TRUSTING_SECRET): none of that id and type is 400
// ERROR_SCHEMA_ID_IS_NOT_DEFINED; a mismatch names the place in
// secret_data but never the value.
func (s *Service) CheckSecret(ctx context.Context, p *auth.Principal, schemaID, schemaType string, secretData map[string]any) (*Schema, error) {
	sc, err := s.Get(ctx, p, schemaID)
	if errs.Is(err, errs.NotFoundCode) || (err == nil && sc.SchemaType != schemaType) {
		return nil, errs.New(errs.SchemaIDNotDefined, "Schema is not defined. (schema_id = %s, schema_type = %s)", schemaID, schemaType)
	}
	if err != nil {
		return nil, err
	}
	return sc, validate(sc, "secret_data", secretData)
}

// validate keeps only the failing place of a validation error: a reason
// may quote the value, and secret data must never reach a message.
func validate(sc *Schema, field string, data map[string]any) error {
	compiled, err := jsonschema.Compile(map[string]any(sc.Schema))
	if err != nil {
		return errs.Invalid("schema_id", "the schema "+sc.SchemaID+" is not a valid JSON Schema")
	}
	if data == nil {
		data = map[string]any{}
	}
	if err := compiled.ValidateAt(field, data); err != nil {
		key := field
		if e, ok := errs.As(err); ok {
			if k := placeOf(e.Message); k != "" {
				key = k
			}
		}
		return errs.Invalid(key, "does not fit the schema "+sc.SchemaID)
	}
	return nil
}

// placeOf is the key of an ERROR_INVALID_PARAMETER message.
func placeOf(msg string) string {
	rest, ok := strings.CutPrefix(msg, "Invalid parameter. (key = ")
	if !ok {
		return ""
	}
	key, _, ok := strings.Cut(rest, ", reason = ")
	if !ok {
		return ""
	}
	return key
}

func (s *Service) create(ctx context.Context, p *auth.Principal, r *createReq) (*Schema, error) {
	if err := s.catalog.Sync(ctx, p.DomainID); err != nil {
		return nil, err
	}
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return nil, err
	}
	domain := rule.Stamp().Domain
	now := wire.T(wire.Now())
	sc := &Schema{ID: Key(domain, r.SchemaID), SchemaID: r.SchemaID, Name: r.Name, Version: "", SchemaType: r.SchemaType,
		Schema: wire.Object(r.Schema), Provider: r.Provider, RelatedSchemas: wire.List(r.RelatedSchemas), Options: wire.Object(r.Options),
		Tags: wire.Object(r.Tags), DomainID: domain, CreatedAt: now, UpdatedAt: now}
	if _, err := s.c.InsertOne(ctx, sc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.Duplicate("schema_id", r.SchemaID)
		}
		return nil, store.Wrap(err)
	}
	return sc, nil
}

// own loads a schema the caller may change: a managed one is 403.
func (s *Service) own(ctx context.Context, p *auth.Principal, schemaID string) (*Schema, error) {
	sc, err := s.Get(ctx, p, schemaID)
	if err != nil {
		return nil, err
	}
	if sc.IsManaged {
		return nil, errs.New(errs.PermissionDenied, "A managed schema cannot be changed. (schema_id = %s)", schemaID)
	}
	return store.GetToChange[Schema](ctx, s.c, resource, p, "schema_id", sc.ID)
}

func (s *Service) update(ctx context.Context, p *auth.Principal, r *updateReq) (*Schema, error) {
	sc, err := s.own(ctx, p, r.SchemaID)
	if err != nil {
		return nil, err
	}
	set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Schema != nil {
		set = append(set, bson.E{Key: "schema", Value: freeform.Map(r.Schema)})
	}
	if r.RelatedSchemas != nil {
		set = append(set, bson.E{Key: "related_schemas", Value: r.RelatedSchemas})
	}
	if r.Options != nil {
		set = append(set, bson.E{Key: "options", Value: freeform.Map(r.Options)})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	return store.SetByID[Schema](ctx, s.c, "schema_id", sc.ID, set)
}

func (s *Service) delete(ctx context.Context, p *auth.Principal, r *schemaReq) (*api.Empty, error) {
	sc, err := s.own(ctx, p, r.SchemaID)
	if err != nil {
		return nil, err
	}
	if _, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: sc.ID}, {Key: "is_managed", Value: false}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *Service) get(ctx context.Context, p *auth.Principal, r *schemaReq) (*Schema, error) {
	return s.Get(ctx, p, r.SchemaID)
}

func (s *Service) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[Schema], error) {
	if err := s.catalog.Sync(ctx, p.DomainID); err != nil {
		return nil, err
	}
	// related_schema_id eq on a list field matches membership.
	q := query.With(r.Query, query.Params("schema_id", r.SchemaID, "name", r.Name, "schema_type", r.SchemaType, "provider", r.Provider,
		"related_schemas", r.RelatedSchemaID, "is_managed", r.IsManaged)...)
	return store.SearchFor[Schema](ctx, s.c, q, resource, p)
}

func (s *Service) stat(ctx context.Context, p *auth.Principal, r *core.StatRequest) (*map[string]any, error) {
	if err := s.catalog.Sync(ctx, p.DomainID); err != nil {
		return nil, err
	}
	return core.StatFor(ctx, s.c, p, resource, r.Query)
}
