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
)

// The repository service's plugin collection and what the bench seeds in
// it: plugins of the bench domain, a tenth of another domain and a tenth
// global (domain_id "*", which every domain sees).
const (
	pluginsCollection = "repository_plugins"
	pluginCount       = 2000
)

// pluginDoc is a plugin as the repository service stores it.
type pluginDoc struct {
	ID             string            `bson:"_id"`
	PluginID       string            `bson:"plugin_id"`
	Name           string            `bson:"name"`
	State          string            `bson:"state"`
	ResourceType   string            `bson:"resource_type"`
	Image          string            `bson:"image"`
	Provider       string            `bson:"provider"`
	RegistryType   string            `bson:"registry_type"`
	RegistryURL    string            `bson:"registry_url"`
	RegistryConfig map[string]any    `bson:"registry_config"`
	Capability     map[string]any    `bson:"capability"`
	Template       string            `bson:"template"` // its JSON text, as the service keeps it
	Labels         []any             `bson:"labels"`
	Tags           map[string]any    `bson:"tags"`
	DomainID       string            `bson:"domain_id"`
	RepositoryInfo map[string]string `bson:"repository_info"`
	CreatedAt      time.Time         `bson:"created_at"`
	UpdatedAt      time.Time         `bson:"updated_at"`
}

// seedPlugins stores pluginCount plugins and returns the ids the bench
// caller sees.
func (b *bench) seedPlugins(ctx context.Context, c *mongo.Collection) ([]string, error) {
	progress("seeding %d plugins", pluginCount)
	// Plugins carry the local repository the service made at its start.
	var repo struct {
		ID   string `bson:"repository_id"`
		Name string `bson:"name"`
		Type string `bson:"repository_type"`
	}
	if err := c.Database().Collection("repository_repositories").FindOne(ctx, bson.D{{Key: "_id", Value: "local"}}).Decode(&repo); err != nil {
		return nil, fmt.Errorf("the local repository: %w", err)
	}
	info := map[string]string{"repository_id": repo.ID, "name": repo.Name, "repository_type": repo.Type}
	r := rand.New(rand.NewPCG(9, 10))
	var visible []string
	kinds := []string{"inventory.Collector", "monitoring.Webhook", "cost_analysis.DataSource", "notification.Protocol"}
	providers := []string{"aws", "google_cloud", "azure", ""}
	for done := 0; done < pluginCount; {
		docs := make([]any, min(seedBatch, pluginCount-done))
		for i := range docs {
			n := done + i
			domain := benchDomain
			switch r.IntN(10) {
			case 0:
				domain = otherDomain
			case 1:
				domain = "*"
			}
			id := fmt.Sprintf("plugin-%s-%05d", words[r.IntN(len(words))], n)
			at := time.Now().UTC().Add(-time.Duration(r.Int64N(int64(365 * 24 * time.Hour)))).Truncate(time.Millisecond)
			docs[i] = pluginDoc{ID: id, PluginID: id, Name: fmt.Sprintf("%s %s %d", words[r.IntN(len(words))], words[r.IntN(len(words))], n),
				State: "ENABLED", ResourceType: kinds[r.IntN(len(kinds))], Image: "cloudforet/" + id, Provider: providers[r.IntN(len(providers))],
				RegistryType: "PUBLIC_HUB", RegistryURL: "https://registry-1.docker.io", RegistryConfig: map[string]any{},
				Capability: map[string]any{"supported_schema": []any{"aws_access_key"}}, Template: `{"options":{"schema":{"type":"object"}}}`,
				Labels: []any{"bench"}, Tags: map[string]any{"icon": "https://example.com/icon.svg", "description": "bench plugin"},
				DomainID: domain, RepositoryInfo: info, CreatedAt: at, UpdatedAt: at}
			if domain != otherDomain {
				visible = append(visible, id)
			}
		}
		if _, err := c.InsertMany(ctx, docs); err != nil {
			return nil, err
		}
		done += len(docs)
	}
	return visible, nil
}

// repositoryOperations: plugin get and list beside the driver doing the
// same queries.
func (b *bench) repositoryOperations(raw *mongo.Collection, ids []string) []operation {
	pick := func(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }
	// What the list compiles to: the caller's domain and the global plugins.
	listFilter := bson.D{{Key: "domain_id", Value: bson.D{{Key: "$in", Value: bson.A{benchDomain, "*"}}}}}
	return []operation{
		{
			name: "plugin-get", goal: 0.6,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return b.call(ctx, "/repository/v1/plugin/get", map[string]string{"plugin_id": pick(r, ids)}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				var d pluginDoc
				return raw.FindOne(ctx, bson.D{{Key: "_id", Value: pick(r, ids)}}).Decode(&d)
			},
		},
		{
			name: "plugin-list", goal: 0.8, scans: true,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				// The console's picker: every repository, any provider.
				return b.call(ctx, "/repository/v1/plugin/list", map[string]any{"repository_id": "", "provider": nil,
					"query": map[string]any{"page": map[string]int{"start": 1, "limit": 20}}}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				if _, err := raw.CountDocuments(ctx, listFilter); err != nil {
					return err
				}
				cur, err := raw.Find(ctx, listFilter, options.Find().SetSort(bson.D{{Key: "name", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(20))
				if err != nil {
					return err
				}
				var rows []pluginDoc
				return cur.All(ctx, &rows)
			},
		},
	}
}

// measureRepository seeds the plugins and measures their operations (those
// named by -ops, or all); nil when -ops names none of them.
func (b *bench) measureRepository(ctx context.Context, setup, raw *mongo.Collection) ([]result, error) {
	ops := b.repositoryOperations(raw, nil)
	if len(b.cfg.ops) > 0 && !slices.ContainsFunc(ops, func(o operation) bool { return slices.Contains(b.cfg.ops, o.name) }) {
		return nil, nil
	}
	ids, err := b.seedPlugins(ctx, setup)
	if err != nil {
		return nil, fmt.Errorf("seed plugins: %w", err)
	}
	var out []result
	for _, op := range b.repositoryOperations(raw, ids) {
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

// printRepositoryTable is printTable's table for the plugins.
func (b *bench) printRepositoryTable(w io.Writer, rs []result) {
	fmt.Fprintf(w, "\n%d plugins in the store, %s per side, mongo pool %d\n", pluginCount, b.cfg.duration, b.cfg.pool)
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
