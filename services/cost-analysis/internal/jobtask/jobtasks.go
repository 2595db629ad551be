// Package jobtask serves the tasks of cost jobs, read-only, as upstream's
// JobTask API (/cost-analysis/v1/job-task: get, list, stat), scoped as
// jobs are: the caller's domain, and for a workspace caller its
// workspace's tasks and those of the domain's data sources ("*").
//
// A task answers what JobTaskInfo holds (Info), never the worker's
// bookkeeping (the delivery attempt, the cost keys seen, the changed
// window). Its options are the plugin's task_options from Job.get_tasks
// as stored (what the plugin needs to find the costs: account ids, dates);
// the service never puts secret data there (the worker reads the secret
// data again for each run: the data source's sealed one, or its trusted
// account's from identity).
//
// It must not change tasks (package job and package worker do).
package jobtask

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
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// Info is the JobTaskInfo sent: the fields of a stored core.Task that
// upstream's JobTaskInfo has. Only these may be filtered, sorted or
// aggregated on.
type Info struct {
	ID           string      `bson:"_id" json:"-"`
	JobTaskID    string      `bson:"job_task_id" json:"job_task_id"`
	Status       string      `bson:"status" json:"status"`
	Options      core.Object `bson:"options" json:"options"`
	CreatedCount int         `bson:"created_count" json:"created_count"`
	ErrorCode    string      `bson:"error_code" json:"error_code"`
	ErrorMessage string      `bson:"error_message" json:"error_message"`
	JobID        string      `bson:"job_id" json:"job_id"`
	DataSourceID string      `bson:"data_source_id" json:"data_source_id"`
	DomainID     string      `bson:"domain_id" json:"domain_id"`
	WorkspaceID  string      `bson:"workspace_id" json:"workspace_id"`
	CreatedAt    wire.Time   `bson:"created_at" json:"created_at"`
	StartedAt    *wire.Time  `bson:"started_at" json:"started_at"`
	FinishedAt   *wire.Time  `bson:"finished_at" json:"finished_at"`
}

var resource = query.Resource{
	KeywordFields: []string{"job_task_id", "job_id", "data_source_id"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"job_task_id", "status", "created_count", "job_id", "data_source_id", "created_at", "started_at", "finished_at"},
	Fields:        query.FieldsOf[Info](),
	Tenancy:       core.DataSourceTenancy,
	Maps:          freeform.FieldsOf[Info](),
}

type (
	taskRequest struct {
		JobTaskID string `json:"job_task_id" v:"required,max=64"`
	}
	taskQuery struct {
		Query        *query.Query `json:"query"`
		JobTaskID    string       `json:"job_task_id"`
		Status       string       `json:"status" v:"enum=PENDING|IN_PROGRESS|SUCCESS|FAILURE|TIMEOUT|CANCELED"`
		JobID        string       `json:"job_id"`
		DataSourceID string       `json:"data_source_id"`
		WorkspaceID  string       `json:"workspace_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Tasks serves the job-task reads.
type Tasks struct{ c *mongo.Collection }

// New serves the tasks of db, creating the indexes of their reads: a
// domain's tasks newest first (list), and a domain's tasks by status.
func New(ctx context.Context, db *mongo.Database) (*Tasks, error) {
	ts := &Tasks{c: db.Collection(core.TasksCollection)}
	return ts, store.EnsureIndexes(ctx, ts.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "status", Value: 1}}},
	)
}

// Routes are the operations.
func (ts *Tasks) Routes() []api.Route {
	const base = "/cost-analysis/v1/job-task/"
	return []api.Route{
		api.Op[taskRequest, Info]{Path: base + "get", Access: core.Readers, Summary: "Get a task of a cost job.", Handle: ts.get},
		api.Op[taskQuery, api.List[Info]]{Path: base + "list", Access: core.Readers, Summary: "List the tasks of cost jobs the caller may see.", Handle: ts.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the tasks of cost jobs the caller may see.", Handle: ts.stat},
	}
}

func (ts *Tasks) get(ctx context.Context, p *auth.Principal, r *taskRequest) (*Info, error) {
	return store.GetFor[Info](ctx, ts.c, resource, p, "job_task_id", r.JobTaskID)
}

func (ts *Tasks) list(ctx context.Context, p *auth.Principal, r *taskQuery) (*api.List[Info], error) {
	q := query.With(r.Query, query.Params("job_task_id", r.JobTaskID, "status", r.Status, "job_id", r.JobID,
		"data_source_id", r.DataSourceID, "workspace_id", r.WorkspaceID)...)
	return store.SearchFor[Info](ctx, ts.c, q, resource, p)
}

func (ts *Tasks) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, ts.c, p, resource, r.Query)
	return &res, err
}
