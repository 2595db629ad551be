// Package cloudservice serves the collected resources read-only
// (/inventory/v1/cloud-service/list, get, stat): Nubes' addition to the
// spec, so what collectors gather can be read. Only the workers (package
// worker) write cloud services.
package cloudservice

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// CloudService is the CloudServiceInfo sent.
type CloudService = core.CloudService

var resource = query.Resource{
	KeywordFields: []string{"cloud_service_id", "name", "cloud_service_type", "cloud_service_group", "provider", "account", "region_code"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"cloud_service_id", "name", "state", "provider", "cloud_service_group", "cloud_service_type", "region_code", "account"},
	Fields:        query.FieldsOf[CloudService](),
	Tenancy:       tenancy.InProject,
	Maps:          freeform.FieldsOf[CloudService](),
}

type (
	request struct {
		CloudServiceID string `json:"cloud_service_id" v:"required,max=64"`
	}
	listQuery struct {
		Query             *query.Query `json:"query"`
		CloudServiceID    string       `json:"cloud_service_id"`
		Name              string       `json:"name"`
		State             string       `json:"state" v:"enum=ACTIVE|DISCONNECTED"`
		Account           string       `json:"account"`
		InstanceType      string       `json:"instance_type"`
		CloudServiceType  string       `json:"cloud_service_type"`
		CloudServiceGroup string       `json:"cloud_service_group"`
		Provider          string       `json:"provider"`
		RegionCode        string       `json:"region_code"`
		ProjectID         string       `json:"project_id"`
		WorkspaceID       string       `json:"workspace_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Service serves the cloud service reads.
type Service struct{ c *mongo.Collection }

// New creates the collection's indexes (the workers' match and garbage
// collection read it too).
func New(ctx context.Context, db *mongo.Database) (*Service, error) {
	s := &Service{c: db.Collection(core.CloudServicesCollection)}
	return s, store.EnsureIndexes(ctx, s.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "provider", Value: 1}, {Key: "cloud_service_group", Value: 1}, {Key: "cloud_service_type", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "collection_info.collector_id", Value: 1}, {Key: "collection_info.secret_id", Value: 1}}},
	)
}

// Routes are the operations.
func (s *Service) Routes() []api.Route {
	const base = "/inventory/v1/cloud-service/"
	return []api.Route{
		api.Op[request, CloudService]{Path: base + "get", Access: core.Readers, Summary: "Get a collected cloud service (Nubes' addition).", Handle: s.get},
		api.Op[listQuery, api.List[CloudService]]{Path: base + "list", Access: core.Readers, Summary: "List the collected cloud services the caller may see (Nubes' addition).", Handle: s.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the collected cloud services the caller may see (Nubes' addition).", Handle: s.stat},
	}
}

func (s *Service) get(ctx context.Context, p *auth.Principal, r *request) (*CloudService, error) {
	return store.GetFor[CloudService](ctx, s.c, resource, p, "cloud_service_id", r.CloudServiceID)
}

func (s *Service) list(ctx context.Context, p *auth.Principal, r *listQuery) (*api.List[CloudService], error) {
	q := query.With(r.Query, query.Params("cloud_service_id", r.CloudServiceID, "name", r.Name, "state", r.State, "account", r.Account,
		"instance_type", r.InstanceType, "cloud_service_type", r.CloudServiceType, "cloud_service_group", r.CloudServiceGroup,
		"provider", r.Provider, "region_code", r.RegionCode, "project_id", r.ProjectID, "workspace_id", r.WorkspaceID)...)
	return store.SearchFor[CloudService](ctx, s.c, q, resource, p)
}

func (s *Service) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, s.c, p, resource, r.Query)
	return &res, err
}
