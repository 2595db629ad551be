package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
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
	return visible, seedDocs(ctx, c, pluginCount, func(n int) (any, error) {
		domain := benchDomain
		switch r.IntN(10) {
		case 0:
			domain = otherDomain
		case 1:
			domain = "*"
		}
		id := fmt.Sprintf("plugin-%s-%05d", words[r.IntN(len(words))], n)
		at := pastYear(r)
		if domain != otherDomain {
			visible = append(visible, id)
		}
		return pluginDoc{ID: id, PluginID: id, Name: fmt.Sprintf("%s %s %d", words[r.IntN(len(words))], words[r.IntN(len(words))], n),
			State: "ENABLED", ResourceType: kinds[r.IntN(len(kinds))], Image: "cloudforet/" + id, Provider: providers[r.IntN(len(providers))],
			RegistryType: "PUBLIC_HUB", RegistryURL: "https://registry-1.docker.io", RegistryConfig: map[string]any{},
			Capability: map[string]any{"supported_schema": []any{"aws_access_key"}}, Template: `{"options":{"schema":{"type":"object"}}}`,
			Labels: []any{"bench"}, Tags: map[string]any{"icon": "https://example.com/icon.svg", "description": "bench plugin"},
			DomainID: domain, RepositoryInfo: info, CreatedAt: at, UpdatedAt: at}, nil
	})
}

// repositoryOperations: plugin get and list beside the driver doing the
// same queries.
func (b *bench) repositoryOperations(raw *mongo.Collection, ids []string) []operation {
	// What the list compiles to: the caller's domain and the global plugins.
	listFilter := func(*rand.Rand) bson.D {
		return bson.D{{Key: "domain_id", Value: bson.D{{Key: "$in", Value: bson.A{benchDomain, "*"}}}}}
	}
	return []operation{
		{
			name: "plugin-get", goal: 0.85,
			nubes: b.post("/repository/v1/plugin/get", func(r *rand.Rand) any { return map[string]string{"plugin_id": pickID(r, ids)} }),
			raw:   rawGet[pluginDoc](raw, ids),
		},
		{
			name: "plugin-list", goal: 0.8, scans: true,
			// The console's picker: every repository, any provider.
			nubes: b.post("/repository/v1/plugin/list", func(*rand.Rand) any { return pageOf("repository_id", "", "provider", nil) }),
			raw:   rawList[pluginDoc](raw, listFilter, bson.E{Key: "name", Value: 1}),
		},
	}
}

// measureRepository seeds the plugins and measures their operations (those
// named by -ops, or all); nil when -ops names none of them.
func (b *bench) measureRepository(ctx context.Context, setup, raw *mongo.Collection) ([]result, error) {
	return b.measureGroup(ctx, "plugins", func(ctx context.Context) ([]string, error) { return b.seedPlugins(ctx, setup) },
		func(ids []string) []operation { return b.repositoryOperations(raw, ids) })
}

// printRepositoryTable is printTable's table for the plugins.
func (b *bench) printRepositoryTable(w io.Writer, rs []result) {
	b.printGroup(w, fmt.Sprintf("%d plugins in the store", pluginCount), rs)
}
