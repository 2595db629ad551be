// Package cost serves the cost rows the jobs stored, read-only: Nubes'
// addition under /cost-analysis/v1/cost (get, list, stat, analyze),
// confined to the caller's domain, and for a workspace caller to the
// costs mapped to its workspace.
//
// A job's rows show only once the job succeeded, all at once, and the
// rows it replaces (its changed windows) stop showing at that same moment;
// the rows of a data source being deregistered show no more. The rows are
// not rewritten for it: each read leaves out what the domain's marks say
// (package rows, the one room of that rule; few: the jobs not yet
// settled, the data sources being deleted).
//
// It must not write costs (package rows does, for the worker and the
// jobs) nor tasks.
package cost

import (
	"context"
	"slices"

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
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/rows"
)

// Cost is the CostInfo sent.
type Cost = core.Cost

var resource = query.Resource{
	KeywordFields: []string{"cost_id", "product", "resource", "usage_type"},
	DefaultSort:   []query.SortKey{{Key: "billed_date", Desc: true}},
	MinimalFields: []string{"cost_id", "cost", "provider", "product", "billed_date", "project_id", "data_source_id"},
	Fields:        query.FieldsOf[Cost](),
	// Rows of a DOMAIN data source that no rule mapped to a workspace
	// ("*") are the domain's alone.
	Tenancy: tenancy.Fields{Domain: "domain_id", Workspace: "workspace_id", Project: "project_id", PrivateAll: true},
	Maps:    freeform.FieldsOf[Cost](),
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
		DataSourceID   string       `json:"data_source_id" v:"max=64"`
		JobID          string       `json:"job_id"`
		JobTaskID      string       `json:"job_task_id"`
		ServiceAccount string       `json:"service_account_id"`
	}
	statQuery struct {
		Query        *stat.Query `json:"query" v:"required"`
		DataSourceID string      `json:"data_source_id" v:"max=64"`
	}
	analyzeQuery struct {
		Query        *analyze.TimeSeriesQuery `json:"query" v:"required"`
		DataSourceID string                   `json:"data_source_id" v:"max=64"`
	}
)

// Costs serves the cost reads.
type Costs struct {
	db   *mongo.Database
	c    *mongo.Collection
	rows *rows.Rows
}

// New serves the costs of db.
func New(db *mongo.Database) *Costs {
	return &Costs{db: db, c: db.Collection(core.CostsCollection), rows: rows.New(db)}
}

// Resource is the list and stat description of costs.
func Resource() query.Resource { return resource }

// Routes are the operations.
func (cs *Costs) Routes() []api.Route {
	const base = "/cost-analysis/v1/cost/"
	return []api.Route{
		api.Op[costRequest, Cost]{Path: base + "get", Access: core.Readers, Summary: "Get a cost row.", Handle: cs.get},
		api.Op[costQuery, api.List[Cost]]{Path: base + "list", Access: core.Readers, Summary: "List the cost rows the caller may see.", Handle: cs.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the cost rows the caller may see.", Handle: cs.stat},
		api.Op[analyzeQuery, map[string]any]{Path: base + "analyze", Access: core.Readers, Summary: "Analyze the cost rows the caller may see (TimeSeriesAnalyzeQuery over billed_date, billed_month or billed_year by granularity).", Handle: cs.analyze},
	}
}

// get reads the row between two reads of the marks (rows.Visible) and
// applies them in Go: FerretDB scans the whole collection for _id plus
// any other condition.
func (cs *Costs) get(ctx context.Context, p *auth.Principal, r *costRequest) (*Cost, error) {
	return rows.Visible(ctx, cs.rows, p.DomainID, func(m *rows.Marks) (*Cost, error) {
		c, err := store.GetFor[Cost](ctx, cs.c, resource, p, "cost_id", r.CostID)
		if err != nil {
			return nil, err
		}
		raw, err := bson.Marshal(c)
		if err != nil {
			return nil, err
		}
		var doc bson.M
		if err := bson.Unmarshal(raw, &doc); err != nil {
			return nil, err
		}
		if m.Hides(doc) {
			return nil, errs.NotFound("cost_id", r.CostID)
		}
		deny, err := cs.denied(ctx, p, c.DataSourceID)
		if err != nil {
			return nil, err
		}
		leaveOut(c, deny)
		return c, nil
	})
}

func (cs *Costs) list(ctx context.Context, p *auth.Principal, r *costQuery) (*api.List[Cost], error) {
	var filter []query.Condition
	if r.Query != nil {
		filter = r.Query.Filter
	}
	dsID, deny, err := cs.source(ctx, p, r.DataSourceID, filter)
	if err != nil {
		return nil, err
	}
	if err := r.Query.Paths(refuse(deny)); err != nil {
		return nil, err
	}
	r.DataSourceID = dsID
	q := query.With(r.Query, query.Params("cost_id", r.CostID, "provider", r.Provider, "region_code", r.RegionCode,
		"product", r.Product, "usage_type", r.UsageType, "billed_date", r.BilledDate, "billed_month", r.BilledMonth,
		"project_id", r.ProjectID, "workspace_id", r.WorkspaceID, "data_source_id", r.DataSourceID, "job_id", r.JobID,
		"job_task_id", r.JobTaskID, "service_account_id", r.ServiceAccount)...)
	own, err := store.Scope(p, resource)
	if err != nil {
		return nil, err
	}
	res := denying(deny)
	return rows.Visible(ctx, cs.rows, p.DomainID, func(m *rows.Marks) (*api.List[Cost], error) {
		l, err := store.Search[Cost](ctx, cs.c, q, res, m.Scoped(slices.Clone(own)))
		if err == nil {
			for i := range l.Results {
				leaveOut(&l.Results[i], deny)
			}
		}
		return l, err
	})
}

func (cs *Costs) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	dsID, deny, err := cs.source(ctx, p, r.DataSourceID, r.Query.Filter)
	if err != nil {
		return nil, err
	}
	if _, err := r.Query.Paths(refuse(deny)); err != nil {
		return nil, err
	}
	res := denying(deny)
	own, err := store.Scope(p, resource)
	if err != nil {
		return nil, err
	}
	own = append(own, bson.E{Key: "data_source_id", Value: dsID})
	return rows.Visible(ctx, cs.rows, p.DomainID, func(m *rows.Marks) (*map[string]any, error) {
		scope := m.Scoped(slices.Clone(own))
		// stat.Run appends a projection to the query: each attempt runs
		// on a copy.
		q := *r.Query
		q.Aggregate = slices.Clone(q.Aggregate)
		out, err := stat.Run(ctx, cs.c, scope, res, &q)
		return &out, err
	})
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
	dsID, deny, err := cs.source(ctx, p, r.DataSourceID, r.Query.Filter)
	if err != nil {
		return nil, err
	}
	if err := r.Query.Paths(refuse(deny)); err != nil {
		return nil, err
	}
	res := denying(deny)
	own, err := store.Scope(p, resource)
	if err != nil {
		return nil, err
	}
	// The data source as a condition of the scope: the query stays as the
	// caller wrote it (its filter is checked and escaped on each attempt).
	own = append(own, bson.E{Key: "data_source_id", Value: dsID})
	return rows.Visible(ctx, cs.rows, p.DomainID, func(m *rows.Marks) (*map[string]any, error) {
		scope := m.Scoped(slices.Clone(own))
		out, err := analyze.RunTimeSeries(ctx, cs.c, scope, res, r.Query, df)
		return &out, err
	})
}
