package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/wire"
)

// The dashboard service's collection and what the bench seeds in it: one
// store size, since a domain holds dashboards by the thousand, not more.
const (
	dashboardsCollection = "dashboard_project_dashboards"
	dashboardCount       = 2000
)

var benchProjects = []string{"project-bench00001", "project-bench00002", "project-bench00003", "project-bench00004", "project-bench00005"}

// dashboardDoc is a project dashboard exactly as the dashboard service
// stores it.
type dashboardDoc struct {
	ID                 string         `bson:"_id"`
	ProjectDashboardID string         `bson:"project_dashboard_id"`
	ProjectID          string         `bson:"project_id"`
	Name               string         `bson:"name"`
	Viewers            string         `bson:"viewers"`
	Version            int32          `bson:"version"`
	Layouts            []any          `bson:"layouts"`
	Variables          map[string]any `bson:"variables"`
	Settings           map[string]any `bson:"settings"`
	VariablesSchema    map[string]any `bson:"variables_schema"`
	Labels             []any          `bson:"labels"`
	Tags               map[string]any `bson:"tags"`
	UserID             string         `bson:"user_id"`
	DomainID           string         `bson:"domain_id"`
	WorkspaceID        string         `bson:"workspace_id"`
	CreatedAt          time.Time      `bson:"created_at"`
	UpdatedAt          time.Time      `bson:"updated_at"`
}

func newDashboard(r *rand.Rand, domain string, n int) dashboardDoc {
	id := wire.NewID("project-dash")
	viewers, owner := "PUBLIC", ""
	if r.IntN(4) == 0 { // a quarter private, of 20 users; the bench caller owns some
		viewers, owner = "PRIVATE", fmt.Sprintf("user-%02d", r.IntN(20))
		if r.IntN(20) == 0 {
			owner = "bench-admin"
		}
	}
	widgets := make([]any, 4+r.IntN(8))
	for i := range widgets {
		widgets[i] = bson.M{"widget_id": wire.NewID("widget"), "name": words[r.IntN(len(words))], "size": "md"}
	}
	at := time.Now().UTC().Add(-time.Duration(r.Int64N(int64(365 * 24 * time.Hour)))).Truncate(time.Millisecond)
	return dashboardDoc{
		ID: id, ProjectDashboardID: id, ProjectID: benchProjects[r.IntN(len(benchProjects))],
		Name: fmt.Sprintf("%s %s %d", words[r.IntN(len(words))], words[r.IntN(len(words))], n), Viewers: viewers,
		Version: 1 + r.Int32N(10), Layouts: []any{bson.M{"name": "main", "widgets": widgets}},
		Variables: map[string]any{"region": "eu", "period": "1M"}, Settings: map[string]any{"refresh": "5m"},
		VariablesSchema: map[string]any{"properties": bson.M{"region": bson.M{"type": "string"}}}, Labels: []any{"bench"},
		Tags: map[string]any{}, UserID: owner, DomainID: domain, WorkspaceID: "workspace-bench", CreatedAt: at, UpdatedAt: at,
	}
}

// seedDashboards stores dashboardCount dashboards (a tenth in another
// domain) and returns those the bench caller may read.
func (b *bench) seedDashboards(ctx context.Context, c *mongo.Collection) ([]string, error) {
	progress("seeding %d dashboards", dashboardCount)
	r := rand.New(rand.NewPCG(5, 6))
	var visible []string
	for done := 0; done < dashboardCount; {
		docs := make([]any, min(seedBatch, dashboardCount-done))
		for i := range docs {
			domain := benchDomain
			if r.IntN(10) == 0 {
				domain = otherDomain
			}
			d := newDashboard(r, domain, done+i)
			if domain == benchDomain && (d.Viewers == "PUBLIC" || d.UserID == "bench-admin") {
				visible = append(visible, d.ID)
			}
			docs[i] = d
		}
		if _, err := c.InsertMany(ctx, docs); err != nil {
			return nil, err
		}
		done += len(docs)
	}
	return visible, nil
}

// dashboardOperations: get and list of the dashboard service beside the
// driver doing the same queries.
func (b *bench) dashboardOperations(raw *mongo.Collection, ids []string) []operation {
	pick := func(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }
	// What query.Compile makes of the list request: the caller's scope
	// (domain; public or its own private dashboards), then project_id.
	listFilter := func(project string) bson.D {
		return bson.D{{Key: "domain_id", Value: benchDomain}, {Key: "$or", Value: bson.A{
			bson.D{{Key: "viewers", Value: "PUBLIC"}},
			bson.D{{Key: "viewers", Value: "PRIVATE"}, {Key: "user_id", Value: "bench-admin"}},
		}}, {Key: "project_id", Value: bson.D{{Key: "$eq", Value: project}}}}
	}
	return []operation{
		{
			name: "dashboard-get", goal: 0.6,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return b.call(ctx, "/dashboard/v1/project-dashboard/get", map[string]string{"domain_id": benchDomain, "project_dashboard_id": pick(r, ids)}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				var d dashboardDoc
				return raw.FindOne(ctx, bson.D{{Key: "_id", Value: pick(r, ids)}}).Decode(&d)
			},
		},
		{
			name: "dashboard-list", goal: 0.8, scans: true,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return b.call(ctx, "/dashboard/v1/project-dashboard/list", map[string]any{"domain_id": benchDomain,
					"project_id": pick(r, benchProjects), "query": map[string]any{"page": map[string]int{"start": 1, "limit": 20}}}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				f := listFilter(pick(r, benchProjects))
				if _, err := raw.CountDocuments(ctx, f); err != nil {
					return err
				}
				cur, err := raw.Find(ctx, f, options.Find().SetSort(bson.D{{Key: "name", Value: 1}, {Key: "_id", Value: 1}}).SetSkip(0).SetLimit(20))
				if err != nil {
					return err
				}
				var rows []dashboardDoc
				return cur.All(ctx, &rows)
			},
		},
	}
}

// measureDashboards seeds the dashboards and measures their operations
// (those named by -ops, or all); nil when -ops names none of them.
func (b *bench) measureDashboards(ctx context.Context, setup, raw *mongo.Collection) ([]result, error) {
	ops := b.dashboardOperations(raw, nil)
	if len(b.cfg.ops) > 0 && !slices.ContainsFunc(ops, func(o operation) bool { return slices.Contains(b.cfg.ops, o.name) }) {
		return nil, nil
	}
	ids, err := b.seedDashboards(ctx, setup)
	if err != nil {
		return nil, fmt.Errorf("seed dashboards: %w", err)
	}
	var out []result
	for _, op := range b.dashboardOperations(raw, ids) {
		if len(b.cfg.ops) > 0 && !slices.Contains(b.cfg.ops, op.name) {
			out = append(out, result{op: op, skipped: "not asked for (-ops)"})
			continue
		}
		res, err := b.measureOp(ctx, op)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// printDashboardTable is printTable's table for the dashboards.
func (b *bench) printDashboardTable(w io.Writer, rs []result) {
	fmt.Fprintf(w, "\n%d project dashboards in the store (%d projects), %s per side, mongo pool %d\n",
		dashboardCount, len(benchProjects), b.cfg.duration, b.cfg.pool)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tside\tcallers\tops/s\tp50 ms\tp99 ms\tops\terrors\tratio\tgoal\t")
	for _, r := range rs {
		if r.skipped != "" {
			fmt.Fprintf(tw, "%s\tboth\t\t\t\t\t\t\t\tskipped: %s\t\n", r.op.name, r.skipped)
			continue
		}
		verdict := "met"
		if len(r.raw.lat) == 0 || r.ratio() < r.op.goal || r.nubes.errors > 0 {
			verdict = "MISSED"
		}
		for i, side := range []phase{r.nubes, r.raw} {
			name, ratio, goal := "nubes", fmt.Sprintf("%.3f", r.ratio()), fmt.Sprintf(">= %.1f %s", r.op.goal, verdict)
			if i == 1 {
				name, ratio, goal = "raw", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.2f\t%.2f\t%d\t%d\t%s\t%s\t\n", r.op.name, name, r.op.callers(b.cfg),
				side.opsPerSec(), side.percentile(.5), side.percentile(.99), len(side.lat), side.errors, ratio, goal)
		}
	}
	tw.Flush()
}
