package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

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
	at := pastYear(r)
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
	return visible, seedDocs(ctx, c, dashboardCount, func(n int) (any, error) {
		domain := benchDomain
		if r.IntN(10) == 0 {
			domain = otherDomain
		}
		d := newDashboard(r, domain, n)
		if domain == benchDomain && (d.Viewers == "PUBLIC" || d.UserID == "bench-admin") {
			visible = append(visible, d.ID)
		}
		return d, nil
	})
}

// dashboardOperations: get and list of the dashboard service beside the
// driver doing the same queries.
func (b *bench) dashboardOperations(raw *mongo.Collection, ids []string) []operation {
	// What query.Compile makes of the list request: the caller's scope
	// (domain; public or its own private dashboards), then project_id.
	listFilter := func(r *rand.Rand) bson.D {
		return bson.D{{Key: "domain_id", Value: benchDomain}, {Key: "$or", Value: bson.A{
			bson.D{{Key: "viewers", Value: "PUBLIC"}},
			bson.D{{Key: "viewers", Value: "PRIVATE"}, {Key: "user_id", Value: "bench-admin"}},
		}}, {Key: "project_id", Value: bson.D{{Key: "$eq", Value: pickID(r, benchProjects)}}}}
	}
	return []operation{
		{
			name: "dashboard-get", goal: 0.85,
			nubes: b.post("/dashboard/v1/project-dashboard/get", func(r *rand.Rand) any {
				return map[string]string{"domain_id": benchDomain, "project_dashboard_id": pickID(r, ids)}
			}),
			raw: rawGet[dashboardDoc](raw, ids),
		},
		{
			name: "dashboard-list", goal: 0.8, scans: true,
			nubes: b.post("/dashboard/v1/project-dashboard/list", func(r *rand.Rand) any {
				return pageOf("domain_id", benchDomain, "project_id", pickID(r, benchProjects))
			}),
			raw: rawList[dashboardDoc](raw, listFilter, bson.E{Key: "name", Value: 1}),
		},
	}
}

// measureDashboards seeds the dashboards and measures their operations
// (those named by -ops, or all); nil when -ops names none of them.
func (b *bench) measureDashboards(ctx context.Context, setup, raw *mongo.Collection) ([]result, error) {
	return b.measureGroup(ctx, "dashboards", func(ctx context.Context) ([]string, error) { return b.seedDashboards(ctx, setup) },
		func(ids []string) []operation { return b.dashboardOperations(raw, ids) })
}

// printDashboardTable is printTable's table for the dashboards.
func (b *bench) printDashboardTable(w io.Writer, rs []result) {
	b.printGroup(w, fmt.Sprintf("%d project dashboards in the store (%d projects)", dashboardCount, len(benchProjects)), rs)
}
