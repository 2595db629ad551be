// Package jobtask holds the inventory job task operations: a task is the
// collection with one secret inside a job, moved by the workers (package
// worker).
//
// It writes no task status: only collect and the workers do.
package jobtask

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
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// Task is the JobTaskInfo sent.
type Task = core.JobTask

var resource = query.Resource{
	KeywordFields: []string{"job_task_id", "job_id", "secret_id", "service_account_id", "status"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"job_task_id", "status", "job_id", "secret_id", "created_count", "updated_count", "failure_count"},
	Fields:        query.FieldsOf[Task](),
	Tenancy:       tenancy.InProject,
	Maps:          freeform.FieldsOf[Task](),
}

type (
	taskRequest struct {
		JobTaskID string `json:"job_task_id" v:"required,max=64"`
	}
	taskQuery struct {
		Query            *query.Query `json:"query"`
		JobTaskID        string       `json:"job_task_id"`
		Status           string       `json:"status" v:"enum=PENDING|CANCELED|IN_PROGRESS|SUCCESS|FAILURE"`
		Provider         string       `json:"provider"`
		WorkspaceID      string       `json:"workspace_id"`
		ProjectID        string       `json:"project_id"`
		ServiceAccountID string       `json:"service_account_id"`
		JobID            string       `json:"job_id"`
		SecretID         string       `json:"secret_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Service serves the job task operations.
type Service struct{ c *mongo.Collection }

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database) (*Service, error) {
	s := &Service{c: db.Collection(core.JobTasksCollection)}
	return s, store.EnsureIndexes(ctx, s.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "job_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "collector_id", Value: 1}}},
	)
}

// Routes are the operations.
func (s *Service) Routes() []api.Route {
	const base = "/inventory/v1/job-task/"
	return []api.Route{
		api.Op[taskRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete a job task.", Handle: s.delete},
		api.Op[taskRequest, Task]{Path: base + "get", Access: core.Readers, Summary: "Get a job task.", Handle: s.get},
		api.Op[taskQuery, api.List[Task]]{Path: base + "list", Access: core.Readers, Summary: "List the job tasks the caller may see.", Handle: s.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the job tasks the caller may see.", Handle: s.stat},
	}
}

func (s *Service) load(ctx context.Context, p *auth.Principal, id string) (*Task, error) {
	return store.GetFor[Task](ctx, s.c, resource, p, "job_task_id", id)
}

func (s *Service) delete(ctx context.Context, p *auth.Principal, r *taskRequest) (*api.Empty, error) {
	doc, err := store.GetToChange[Task](ctx, s.c, resource, p, "job_task_id", r.JobTaskID)
	if err != nil {
		return nil, err
	}
	res, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: doc.ID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("job_task_id", doc.ID)
	}
	return &api.Empty{}, nil
}

func (s *Service) get(ctx context.Context, p *auth.Principal, r *taskRequest) (*Task, error) {
	return s.load(ctx, p, r.JobTaskID)
}

func (s *Service) list(ctx context.Context, p *auth.Principal, r *taskQuery) (*api.List[Task], error) {
	q := query.With(r.Query, query.Params("job_task_id", r.JobTaskID, "status", r.Status, "provider", r.Provider,
		"workspace_id", r.WorkspaceID, "project_id", r.ProjectID, "service_account_id", r.ServiceAccountID, "job_id", r.JobID,
		"secret_id", r.SecretID)...)
	return store.SearchFor[Task](ctx, s.c, q, resource, p)
}

func (s *Service) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, s.c, p, resource, r.Query)
	return &res, err
}
