// Package job holds the inventory job operations: a job is one act of
// collecting with a collector, made by collect (package collector) and
// moved by the workers (package worker). Deleting a job deletes its
// tasks; workers drop the queued messages of a job that is gone.
//
// It writes no job status: only collect and the workers do.
package job

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/analyze"
	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// Job is the JobInfo sent.
type Job = core.Job

// Resource is what a job query may read.
var Resource = query.Resource{
	KeywordFields: []string{"job_id", "collector_id", "plugin_id", "status"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"job_id", "status", "total_tasks", "remained_tasks", "collector_id", "created_at", "finished_at"},
	Fields:        query.FieldsOf[Job](),
	Tenancy:       tenancy.InWorkspace,
	Maps:          freeform.FieldsOf[Job](),
}

type (
	jobRequest struct {
		JobID string `json:"job_id" v:"required,max=64"`
	}
	jobQuery struct {
		Query       *query.Query `json:"query"`
		JobID       string       `json:"job_id"`
		Status      string       `json:"status" v:"enum=CANCELED|IN_PROGRESS|FAILURE|SUCCESS|TIMEOUT|ERROR"`
		WorkspaceID string       `json:"workspace_id"`
		CollectorID string       `json:"collector_id"`
		PluginID    string       `json:"plugin_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
	analyzeQuery struct {
		Query *analyze.Query `json:"query" v:"required"`
	}
)

// Service serves the job operations.
type Service struct {
	c     *mongo.Collection
	tasks *mongo.Collection
}

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database) (*Service, error) {
	s := &Service{c: db.Collection(core.JobsCollection), tasks: db.Collection(core.JobTasksCollection)}
	return s, store.EnsureIndexes(ctx, s.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "collector_id", Value: 1}, {Key: "status", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "status", Value: 1}, {Key: "created_at", Value: 1}}},
	)
}

// Routes are the operations.
func (s *Service) Routes() []api.Route {
	const base = "/inventory/v1/job/"
	return []api.Route{
		api.Op[jobRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete a job and its tasks.", Handle: s.delete},
		api.Op[jobRequest, Job]{Path: base + "get", Access: core.Readers, Summary: "Get a job.", Handle: s.get},
		api.Op[jobQuery, api.List[Job]]{Path: base + "list", Access: core.Readers, Summary: "List the jobs the caller may see.", Handle: s.list},
		api.Op[analyzeQuery, map[string]any]{Path: base + "analyze", Access: core.Readers, Summary: "Analyze the jobs the caller may see (group_by, fields, select, sort, page, field_group).", Handle: s.analyze},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the jobs the caller may see.", Handle: s.stat},
	}
}

func (s *Service) load(ctx context.Context, p *auth.Principal, id string) (*Job, error) {
	return store.GetFor[Job](ctx, s.c, Resource, p, "job_id", id)
}

func (s *Service) delete(ctx context.Context, p *auth.Principal, r *jobRequest) (*api.Empty, error) {
	doc, err := store.GetToChange[Job](ctx, s.c, Resource, p, "job_id", r.JobID)
	if err != nil {
		return nil, err
	}
	res, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: doc.ID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("job_id", doc.ID)
	}
	if len(doc.TaskIDs) > 0 {
		if _, err := s.tasks.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: doc.TaskIDs}}}}); err != nil {
			return nil, store.Wrap(err)
		}
	}
	return &api.Empty{}, nil
}

func (s *Service) get(ctx context.Context, p *auth.Principal, r *jobRequest) (*Job, error) {
	return s.load(ctx, p, r.JobID)
}

func (s *Service) list(ctx context.Context, p *auth.Principal, r *jobQuery) (*api.List[Job], error) {
	q := query.With(r.Query, query.Params("job_id", r.JobID, "status", r.Status, "workspace_id", r.WorkspaceID,
		"collector_id", r.CollectorID, "plugin_id", r.PluginID)...)
	return store.SearchFor[Job](ctx, s.c, q, Resource, p)
}

func (s *Service) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, s.c, p, Resource, r.Query)
	return &res, err
}

func (s *Service) analyze(ctx context.Context, p *auth.Principal, r *analyzeQuery) (*map[string]any, error) {
	res, err := analyze.RunFor(ctx, s.c, p, Resource, r.Query)
	return &res, err
}
