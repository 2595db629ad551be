// Package cost serves the cost rows the jobs stored, read-only: Nubes'
// addition under /cost-analysis/v1/cost (get, list, stat, analyze),
// confined to the caller's domain, and for a workspace caller to the
// costs mapped to its workspace.
//
// The rows of a task that has not finished (PENDING, IN_PROGRESS) are
// left out: a worker stores them chunk by chunk and keeps them only if
// the task succeeds, so a reader sees a task's rows all at once or not at
// all. The rows are not rewritten when the task ends; each read leaves out
// the rows of the domain's unfinished tasks by id (few: the tasks of the
// running jobs).
//
// It must not write costs (package worker does) nor tasks.
package cost

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/analyze"
	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/model"
)

// Cost is the CostInfo sent.
type Cost = model.Cost

var resource = query.Resource{
	KeywordFields: []string{"cost_id", "product", "resource", "usage_type"},
	DefaultSort:   []query.SortKey{{Key: "billed_date", Desc: true}},
	MinimalFields: []string{"cost_id", "cost", "provider", "product", "billed_date", "project_id", "data_source_id"},
	Fields:        query.FieldsOf[Cost](),
}

type (
	costRequest struct {
		CostID string `json:"cost_id" v:"required,max=128"`
	}
	costQuery struct {
		Query          *query.Query `json:"query"`
		CostID         string       `json:"cost_id"`
		Provider       string       `json:"provider"`
		RegionCode     string       `json:"region_code"`
		Product        string       `json:"product"`
		UsageType      string       `json:"usage_type"`
		BilledDate     string       `json:"billed_date"`
		BilledMonth    string       `json:"billed_month"`
		ProjectID      string       `json:"project_id"`
		WorkspaceID    string       `json:"workspace_id"`
		DataSourceID   string       `json:"data_source_id"`
		JobID          string       `json:"job_id"`
		JobTaskID      string       `json:"job_task_id"`
		ServiceAccount string       `json:"service_account_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
	analyzeQuery struct {
		Query *analyze.TimeSeriesQuery `json:"query" v:"required"`
	}
)

// Costs serves the cost reads.
type Costs struct{ c, tasks *mongo.Collection }

// New serves the costs of db.
func New(db *mongo.Database) *Costs {
	return &Costs{c: db.Collection(model.CostsCollection), tasks: db.Collection(model.TasksCollection)}
}

// Resource is the list and stat description of costs.
func Resource() query.Resource { return resource }

// Routes are the operations.
func (cs *Costs) Routes() []api.Route {
	const base = "/cost-analysis/v1/cost/"
	return []api.Route{
		api.Op[costRequest, Cost]{Path: base + "get", Access: model.Readers, Summary: "Get a cost row.", Handle: cs.get},
		api.Op[costQuery, api.List[Cost]]{Path: base + "list", Access: model.Readers, Summary: "List the cost rows the caller may see.", Handle: cs.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: model.Readers, Summary: "Statistics over the cost rows the caller may see.", Handle: cs.stat},
		api.Op[analyzeQuery, map[string]any]{Path: base + "analyze", Access: model.Readers, Summary: "Analyze the cost rows the caller may see (TimeSeriesAnalyzeQuery over billed_date, billed_month or billed_year by granularity).", Handle: cs.analyze},
	}
}

func (cs *Costs) get(ctx context.Context, p *auth.Principal, r *costRequest) (*Cost, error) {
	c, err := store.GetIf(ctx, cs.c, "cost_id", r.CostID, func(c *Cost) bool {
		return c.DomainID == p.DomainID && (model.DomainWide(p) || p.WorkspaceID == "" || c.WorkspaceID == p.WorkspaceID)
	})
	if err != nil || c.JobTaskID == "" {
		return c, err
	}
	// The task is read after the row: if it has finished now, the row
	// is one it kept.
	t, err := store.Get[model.Task](ctx, cs.tasks, "job_task_id", c.JobTaskID)
	if e, ok := errs.As(err); ok && e.Code == errs.NotFoundCode {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	if unfinished(t.Status) {
		return nil, errs.NotFound("cost_id", r.CostID)
	}
	return c, nil
}

func (cs *Costs) list(ctx context.Context, p *auth.Principal, r *costQuery) (*api.List[Cost], error) {
	q := query.With(r.Query, query.Params("cost_id", r.CostID, "provider", r.Provider, "region_code", r.RegionCode,
		"product", r.Product, "usage_type", r.UsageType, "billed_date", r.BilledDate, "billed_month", r.BilledMonth,
		"project_id", r.ProjectID, "workspace_id", r.WorkspaceID, "data_source_id", r.DataSourceID, "job_id", r.JobID,
		"job_task_id", r.JobTaskID, "service_account_id", r.ServiceAccount)...)
	return finishedOnly(ctx, cs, p, func(scope bson.D) (*api.List[Cost], error) {
		return store.Search[Cost](ctx, cs.c, q, resource, scope)
	})
}

func (cs *Costs) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	return finishedOnly(ctx, cs, p, func(scope bson.D) (*map[string]any, error) {
		// stat.Run appends a projection to the query: each attempt runs
		// on a copy.
		q := *r.Query
		q.Aggregate = slices.Clone(q.Aggregate)
		res, err := stat.Run(ctx, cs.c, scope, resource, &q)
		return &res, err
	})
}

func unfinished(status string) bool { return status == model.Pending || status == model.InProgress }

// unfinishedTasks are the ids of a domain's tasks that have not finished.
// One equality query per status: FerretDB runs a flat filter's plain
// equalities in its backend, not an $in.
func (cs *Costs) unfinishedTasks(ctx context.Context, domainID string) ([]string, error) {
	var ids []string
	for _, status := range []string{model.Pending, model.InProgress} {
		cur, err := cs.tasks.Find(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "status", Value: status}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			return nil, store.Wrap(err)
		}
		var docs []struct {
			ID string `bson:"_id"`
		}
		if err := cur.All(ctx, &docs); err != nil {
			return nil, store.Wrap(err)
		}
		for _, d := range docs {
			ids = append(ids, d.ID)
		}
	}
	return ids, nil
}

// finishedOnly runs read in the caller's scope without the rows of the
// domain's unfinished tasks. A task created after their ids were read
// could store rows before read ran: the ids are read again after it, and
// when a new one is among them read runs again without its rows too
// (a few times at most; tasks are created a job at a time).
func finishedOnly[T any](ctx context.Context, cs *Costs, p *auth.Principal, read func(scope bson.D) (T, error)) (T, error) {
	var zero T
	hidden, err := cs.unfinishedTasks(ctx, p.DomainID)
	if err != nil {
		return zero, err
	}
	for attempt := 0; ; attempt++ {
		scope := model.StrictScope(p)
		if len(hidden) > 0 {
			// Under $nor, not as a job_task_id condition: with the caller's
			// own job_task_id filter the key would repeat, and query.Filter
			// would make an $and of it, which FerretDB scans in Go.
			scope = append(scope, bson.E{Key: "$nor", Value: bson.A{bson.D{{Key: "job_task_id", Value: bson.D{{Key: "$in", Value: hidden}}}}}})
		}
		out, err := read(scope)
		if err != nil || attempt == 3 {
			return out, err
		}
		now, err := cs.unfinishedTasks(ctx, p.DomainID)
		if err != nil {
			return zero, err
		}
		added := false
		for _, id := range now {
			if !slices.Contains(hidden, id) {
				hidden, added = append(hidden, id), true
			}
		}
		if !added {
			return out, nil
		}
	}
}

// dateFields are the stored date field a granularity groups by.
var dateFields = map[string]analyze.DateField{
	"":        {Key: "billed_date", Format: "%Y-%m-%d"},
	"DAILY":   {Key: "billed_date", Format: "%Y-%m-%d"},
	"MONTHLY": {Key: "billed_month", Format: "%Y-%m"},
	"YEARLY":  {Key: "billed_year", Format: "%Y"},
}

func (cs *Costs) analyze(ctx context.Context, p *auth.Principal, r *analyzeQuery) (*map[string]any, error) {
	df, ok := dateFields[r.Query.Granularity]
	if !ok {
		df = dateFields[""] // the engine names the bad granularity
	}
	return finishedOnly(ctx, cs, p, func(scope bson.D) (*map[string]any, error) {
		res, err := analyze.RunTimeSeries(ctx, cs.c, scope, resource, r.Query, df)
		return &res, err
	})
}
