// Package cloudservicetype holds the cloud service type operations of
// the inventory service. A type's key is <provider>.<group>.<name>,
// unique in its workspace: the key is claimed in core.KeysCollection by
// the insert of its _id, which is atomic on MongoDB and FerretDB alike.
// name, provider and group never change. A collect run upserts the types
// its plugin reports through Find and Create (package collectrun).
//
// It knows nothing of plugins or jobs.
package cloudservicetype

import (
	"context"
	"errors"
	"time"

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
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// Type is the CloudServiceTypeInfo sent.
type Type = core.CloudServiceType

var resource = query.Resource{
	KeywordFields: []string{"cloud_service_type_id", "name", "group", "provider", "cloud_service_type_key"},
	DefaultSort:   []query.SortKey{{Key: "provider"}, {Key: "group"}, {Key: "name"}},
	MinimalFields: []string{"cloud_service_type_id", "name", "provider", "group", "cloud_service_type_key", "workspace_id"},
	Fields:        query.FieldsOf[Type](),
	Tenancy:       tenancy.InWorkspace,
	Maps:          freeform.FieldsOf[Type](),
}

type (
	createType struct {
		Name         string        `json:"name" v:"required,max=255"`
		Provider     string        `json:"provider" v:"required,max=255"`
		Group        string        `json:"group" v:"required,max=255"`
		ServiceCode  string        `json:"service_code" v:"max=255"`
		IsPrimary    bool          `json:"is_primary"`
		IsMajor      bool          `json:"is_major"`
		ResourceType string        `json:"resource_type" v:"max=255"`
		Metadata     freeform.Map  `json:"metadata"`
		Labels       freeform.List `json:"labels" v:"max=100"`
		Tags         freeform.Flat `json:"tags"`
	}
	updateType struct {
		CloudServiceTypeID string        `json:"cloud_service_type_id" v:"required,max=64"`
		ServiceCode        *string       `json:"service_code" v:"max=255"`
		IsPrimary          *bool         `json:"is_primary"`
		IsMajor            *bool         `json:"is_major"`
		ResourceType       string        `json:"resource_type" v:"max=255"`
		Metadata           freeform.Map  `json:"metadata"`
		Labels             freeform.List `json:"labels" v:"max=100"`
		Tags               freeform.Flat `json:"tags"`
		// Name, Provider and Group are declared to refuse a change with a
		// clear message (the same value echoed back is accepted).
		Name     string `json:"name" v:"max=255"`
		Provider string `json:"provider" v:"max=255"`
		Group    string `json:"group" v:"max=255"`
	}
	typeRequest struct {
		CloudServiceTypeID string `json:"cloud_service_type_id" v:"required,max=64"`
	}
	typeQuery struct {
		Query               *query.Query `json:"query"`
		CloudServiceTypeID  string       `json:"cloud_service_type_id"`
		Name                string       `json:"name"`
		Provider            string       `json:"provider"`
		Group               string       `json:"group"`
		CloudServiceTypeKey string       `json:"cloud_service_type_key"`
		ServiceCode         string       `json:"service_code"`
		IsPrimary           *bool        `json:"is_primary"`
		IsMajor             *bool        `json:"is_major"`
		ResourceType        string       `json:"resource_type"`
		WorkspaceID         string       `json:"workspace_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
		// DomainID is required by the spec's request; the scope is always
		// the caller's own domain.
		DomainID string `json:"domain_id" v:"max=64"`
	}
)

// Validate checks the objects' keys and the parts of the key.
func (r *createType) Validate() error {
	for k, v := range map[string]string{"name": r.Name, "provider": r.Provider, "group": r.Group} {
		if err := keyPart(k, v); err != nil {
			return err
		}
	}
	return core.CheckAllKeys("metadata", r.Metadata, "tags", r.Tags, "labels", r.Labels)
}

// Validate checks the objects' keys.
func (r *updateType) Validate() error {
	return core.CheckAllKeys("metadata", r.Metadata, "tags", r.Tags, "labels", r.Labels)
}

// keyPart refuses a dot in a part of <provider>.<group>.<name>: the key
// could not be split back.
func keyPart(field, v string) error {
	for _, c := range v {
		if c == '.' {
			return errs.Invalid(field, "must not hold a dot (it separates the parts of cloud_service_type_key)")
		}
	}
	return nil
}

// Service serves the cloud service type operations.
type Service struct {
	c    *mongo.Collection
	keys *mongo.Collection
}

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database) (*Service, error) {
	s := &Service{c: db.Collection(core.CloudServiceTypesCollection), keys: db.Collection(core.KeysCollection)}
	return s, store.EnsureIndexes(ctx, s.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "cloud_service_type_key", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "provider", Value: 1}, {Key: "group", Value: 1}}},
	)
}

// Routes are the operations.
func (s *Service) Routes() []api.Route {
	const base = "/inventory/v1/cloud-service-type/"
	return []api.Route{
		api.Op[createType, Type]{Path: base + "create", Access: core.Writers, Summary: "Create a cloud service type; its key <provider>.<group>.<name> is unique in its workspace.", Handle: s.create},
		api.Op[updateType, Type]{Path: base + "update", Access: core.Writers, Summary: "Change a cloud service type; name, provider and group never change.", Handle: s.update},
		api.Op[typeRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete a cloud service type.", Handle: s.delete},
		api.Op[typeRequest, Type]{Path: base + "get", Access: core.Readers, Summary: "Get a cloud service type.", Handle: s.get},
		api.Op[typeQuery, api.List[Type]]{Path: base + "list", Access: core.Readers, Summary: "List the cloud service types the caller may see.", Handle: s.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the cloud service types the caller may see.", Handle: s.stat},
	}
}

// Fields are what a create or a plugin sets on a type.
type Fields struct {
	Name, Provider, Group, ServiceCode, ResourceType string
	IsPrimary, IsMajor                               bool
	Metadata                                         freeform.Map
	Tags                                             freeform.Flat
	Labels                                           freeform.List
	UpdatedBy                                        string
}

// Key is <provider>.<group>.<name>.
func Key(provider, group, name string) string { return provider + "." + group + "." + name }

// Create stores a new type in domain and workspace, claiming its key
// first: a key already claimed is 409 ERROR_SAVE_UNIQUE_VALUES.
func Create(ctx context.Context, c, keys *mongo.Collection, domainID, workspaceID string, f Fields) (*Type, error) {
	key := Key(f.Provider, f.Group, f.Name)
	id := wire.NewID("cloud-svc-type")
	claim := core.Key{ID: core.TypeKey(domainID, workspaceID, key), Target: id, At: time.Now().UTC()}
	if _, err := keys.InsertOne(ctx, claim); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.New(errs.SaveUniqueValues, "A cloud service type with this key exists in the workspace. (cloud_service_type_key = %s)", key)
		}
		return nil, store.Wrap(err)
	}
	if f.ResourceType == "" {
		f.ResourceType = core.TypeCloudService
	}
	if f.UpdatedBy == "" {
		f.UpdatedBy = "manual"
	}
	now := wire.T(wire.Now())
	doc := &Type{ID: id, CloudServiceTypeID: id, Name: f.Name, Provider: f.Provider, Group: f.Group, CloudServiceTypeKey: key,
		RefCloudServiceType: domainID + "." + workspaceID + "." + key, ServiceCode: f.ServiceCode, IsPrimary: f.IsPrimary,
		IsMajor: f.IsMajor, ResourceType: f.ResourceType, Metadata: wire.Object(f.Metadata), Tags: wire.Object(f.Tags),
		Labels: wire.List(f.Labels), UpdatedBy: f.UpdatedBy, DomainID: domainID, WorkspaceID: workspaceID, CreatedAt: now, UpdatedAt: now}
	if _, err := c.InsertOne(ctx, doc); err != nil {
		_, _ = keys.DeleteOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: claim.ID}})
		return nil, store.Wrap(err)
	}
	return doc, nil
}

// Find returns the type holding a key in a workspace, nil when none does.
// A claim whose type is gone (a create that died halfway) is freed.
func Find(ctx context.Context, c, keys *mongo.Collection, domainID, workspaceID, key string) (*Type, error) {
	var k core.Key
	err := keys.FindOne(ctx, bson.D{{Key: "_id", Value: core.TypeKey(domainID, workspaceID, key)}}).Decode(&k)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	t, err := store.Get[Type](ctx, c, "cloud_service_type_id", k.Target)
	if err != nil {
		gone := errs.Is(err, errs.NotFoundCode)
		if gone && time.Since(k.At) > core.StaleKey {
			_, _ = keys.DeleteOne(ctx, bson.D{{Key: "_id", Value: k.ID}})
			return nil, nil
		}
		if gone {
			return nil, errs.Down("The cloud service type "+key, errors.New("being created"))
		}
		return nil, err
	}
	return t, nil
}

func (s *Service) create(ctx context.Context, p *auth.Principal, r *createType) (*Type, error) {
	// A workspace caller makes its workspace's type; a domain-wide one a
	// type of the whole domain.
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return nil, err
	}
	at := rule.Stamp()
	if at.Workspace == "" {
		at.Workspace = core.Global
	}
	if err := rule.Admits(at); err != nil {
		return nil, err
	}
	return Create(ctx, s.c, s.keys, at.Domain, at.Workspace, Fields{Name: r.Name, Provider: r.Provider, Group: r.Group, ServiceCode: r.ServiceCode,
		ResourceType: r.ResourceType, IsPrimary: r.IsPrimary, IsMajor: r.IsMajor, Metadata: r.Metadata, Tags: r.Tags, Labels: r.Labels})
}

func (s *Service) load(ctx context.Context, p *auth.Principal, id string) (*Type, error) {
	return store.GetFor[Type](ctx, s.c, resource, p, "cloud_service_type_id", id)
}

func (s *Service) writable(ctx context.Context, p *auth.Principal, id string) (*Type, error) {
	return store.GetToChange[Type](ctx, s.c, resource, p, "cloud_service_type_id", id)
}

func (s *Service) update(ctx context.Context, p *auth.Principal, r *updateType) (*Type, error) {
	doc, err := s.writable(ctx, p, r.CloudServiceTypeID)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct{ key, asked, have string }{{"name", r.Name, doc.Name}, {"provider", r.Provider, doc.Provider}, {"group", r.Group, doc.Group}} {
		if f.asked != "" && f.asked != f.have {
			return nil, errs.Invalid(f.key, "name, provider and group of a cloud service type cannot be changed")
		}
	}
	set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}, {Key: "updated_by", Value: "manual"}}
	add := func(k string, v any) { set = append(set, bson.E{Key: k, Value: v}) }
	if r.ServiceCode != nil {
		add("service_code", *r.ServiceCode)
	}
	if r.IsPrimary != nil {
		add("is_primary", *r.IsPrimary)
	}
	if r.IsMajor != nil {
		add("is_major", *r.IsMajor)
	}
	if r.ResourceType != "" {
		add("resource_type", r.ResourceType)
	}
	if r.Metadata != nil {
		add("metadata", r.Metadata)
	}
	if r.Labels != nil {
		add("labels", r.Labels)
	}
	if r.Tags != nil {
		add("tags", r.Tags)
	}
	return store.SetByID[Type](ctx, s.c, "cloud_service_type_id", doc.ID, set)
}

func (s *Service) delete(ctx context.Context, p *auth.Principal, r *typeRequest) (*api.Empty, error) {
	doc, err := s.writable(ctx, p, r.CloudServiceTypeID)
	if err != nil {
		return nil, err
	}
	res, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: doc.ID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("cloud_service_type_id", doc.ID)
	}
	// The key is free again, if it is still this type's (read, then
	// deleted by _id alone: FerretDB scans for any other condition).
	keyID := core.TypeKey(doc.DomainID, doc.WorkspaceID, doc.CloudServiceTypeKey)
	var k core.Key
	if err := s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: keyID}}).Decode(&k); err == nil && k.Target == doc.ID {
		if _, err := s.keys.DeleteOne(ctx, bson.D{{Key: "_id", Value: keyID}}); err != nil {
			return nil, store.Wrap(err)
		}
	} else if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

func (s *Service) get(ctx context.Context, p *auth.Principal, r *typeRequest) (*Type, error) {
	return s.load(ctx, p, r.CloudServiceTypeID)
}

func (s *Service) list(ctx context.Context, p *auth.Principal, r *typeQuery) (*api.List[Type], error) {
	q := query.With(r.Query, query.Params("cloud_service_type_id", r.CloudServiceTypeID, "name", r.Name, "provider", r.Provider,
		"group", r.Group, "cloud_service_type_key", r.CloudServiceTypeKey, "service_code", r.ServiceCode, "is_primary", r.IsPrimary,
		"is_major", r.IsMajor, "resource_type", r.ResourceType, "workspace_id", r.WorkspaceID)...)
	return store.SearchFor[Type](ctx, s.c, q, resource, p)
}

func (s *Service) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, s.c, p, resource, r.Query)
	return &res, err
}
