package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/devinfra"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/pkg/wire"
	costanalysis "github.com/nubes-io/nubes/services/cost-analysis"
)

// What the cost bench seeds and streams: 2,000 data source rules over 20
// data sources (a tenth in another domain) for rule-get and rule-list;
// then a sync of one data source whose fake plugin streams costRows rows
// (costTasks tasks, chunks of costChunk rows) through the JetStream work
// queue, beside the raw driver inserting the same rows in the same chunks
// with as many writers.
const (
	costRules    = 2000
	costSources  = 20
	costRows     = 100000
	costTasks    = 4
	costChunk    = 1000
	costPluginID = "plugin-bench-cost"
)

// measureCost runs the cost-analysis service on its own server (with an
// embedded NATS and a fake gRPC plugin) and measures rule-get, rule-list
// and cost-sync.
func (b *bench) measureCost(ctx context.Context, db, raw *mongo.Database) ([]result, *throughput, error) {
	want := func(name string) bool { return len(b.cfg.ops) == 0 || slices.Contains(b.cfg.ops, name) }
	if !want("rule-get") && !want("rule-list") && !want("cost-sync") {
		return nil, nil, nil
	}
	log := slog.New(slog.DiscardHandler)
	if b.cfg.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	fp, err := fakeplugin.New(fakeplugin.Options{})
	if err != nil {
		return nil, nil, err
	}
	defer fp.Stop()
	plugins, err := plugin.New(map[string]string{costPluginID: fp.Endpoint}, plugin.Options{Log: log})
	if err != nil {
		return nil, nil, err
	}
	defer plugins.Close()
	dir, err := os.MkdirTemp("", "nubes-bench-nats-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	nats, err := devinfra.StartNATS(dir, "127.0.0.1", 0)
	if err != nil {
		return nil, nil, err
	}
	defer nats.Stop()
	bus, err := events.Connect(ctx, nats.URL, "bench-cost", log)
	if err != nil {
		return nil, nil, err
	}
	defer bus.Close()
	cfg := costanalysis.DefaultConfig(benchKeys)
	cfg.Jobs.Timeout = time.Hour
	cfg.Workers.Concurrency = costTasks
	svc, err := costanalysis.Build(ctx, app.Deps{DB: db, Log: log, Plugins: plugins, Events: bus, Services: call.NewServices(nil, "", nil)}, cfg)
	if err != nil {
		return nil, nil, err
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopWorkers(); wg.Wait() }()
	for _, w := range svc.Workers {
		wg.Go(func() { _ = w(wctx) })
	}
	signer, err := auth.GenerateSigner()
	if err != nil {
		return nil, nil, err
	}
	verifier, err := auth.NewVerifier(auth.JWKSOf(signer))
	if err != nil {
		return nil, nil, err
	}
	token, err := signer.Issue(auth.Principal{DomainID: benchDomain, UserID: "bench-admin", Role: auth.DomainAdmin}, 24*time.Hour)
	if err != nil {
		return nil, nil, err
	}
	srv, err := server.New(server.Options{Name: costanalysis.Name, Auth: verifier, Logger: log}, svc.Routes...)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	post := func(ctx context.Context, path string, body, out any) error {
		buf, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(buf))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := b.http.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d %s", path, resp.StatusCode, truncate(data, 160))
		}
		if out != nil {
			return json.Unmarshal(data, out)
		}
		return nil
	}

	ids, sources, err := seedCostRules(ctx, db)
	if err != nil {
		return nil, nil, fmt.Errorf("seed rules: %w", err)
	}
	rules := raw.Collection("cost_data_source_rules")
	pick := func(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }
	listFilter := bson.D{{Key: "domain_id", Value: benchDomain}}
	ops := []operation{
		{name: "rule-get", goal: 0.85,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return post(ctx, "/cost-analysis/v1/data-source-rule/get", map[string]string{"data_source_rule_id": pick(r, ids)}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				var d bson.M
				return rules.FindOne(ctx, bson.D{{Key: "_id", Value: pick(r, ids)}}).Decode(&d)
			}},
		{name: "rule-list", goal: 0.8, scans: true,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return post(ctx, "/cost-analysis/v1/data-source-rule/list", map[string]any{"query": map[string]any{"page": map[string]int{"start": 1, "limit": 20}}}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				if _, err := rules.CountDocuments(ctx, listFilter); err != nil {
					return err
				}
				cur, err := rules.Find(ctx, listFilter, options.Find().SetLimit(20).SetSort(bson.D{{Key: "data_source_id", Value: 1},
					{Key: "rule_type", Value: 1}, {Key: "order", Value: 1}, {Key: "_id", Value: 1}}))
				if err != nil {
					return err
				}
				var rows []bson.M
				return cur.All(ctx, &rows)
			}},
	}
	var out []result
	for _, op := range ops {
		if !want(op.name) {
			out = append(out, result{op: op, skipped: "not asked for (-ops)"})
			continue
		}
		res, err := b.measureOp(ctx, op)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, res)
	}
	if !want("cost-sync") {
		return out, nil, nil
	}
	cr, err := b.measureSync(ctx, db, raw, fp, sources[0], post)
	if err != nil {
		return nil, nil, err
	}
	return out, cr, nil
}

// seedCostRules stores the data sources and their rules; it returns the
// bench domain's rule ids and data source ids.
func seedCostRules(ctx context.Context, db *mongo.Database) ([]string, []string, error) {
	progress("seeding %d cost data sources and %d rules", costSources, costRules)
	r := rand.New(rand.NewPCG(21, 22))
	var sources, domains []string
	for i := range costSources {
		domain := benchDomain
		if i%10 == 9 {
			domain = otherDomain
		}
		id := wire.NewID("ds")
		sources, domains = append(sources, id), append(domains, domain)
		if _, err := db.Collection("cost_data_sources").InsertOne(ctx, bson.D{
			{Key: "_id", Value: id}, {Key: "data_source_id", Value: id}, {Key: "name", Value: fmt.Sprintf("bench %d", i)},
			{Key: "state", Value: "ENABLED"}, {Key: "data_source_type", Value: "EXTERNAL"}, {Key: "provider", Value: "aws"},
			{Key: "secret_type", Value: "MANUAL"}, {Key: "plugin_info", Value: bson.D{{Key: "plugin_id", Value: costPluginID},
				{Key: "version", Value: ""}, {Key: "options", Value: bson.D{}}, {Key: "metadata", Value: bson.D{{Key: "currency", Value: "USD"}}},
				{Key: "upgrade_mode", Value: "AUTO"}}},
			{Key: "schedule", Value: bson.D{{Key: "state", Value: "DISABLED"}, {Key: "hours", Value: bson.A{}}}},
			{Key: "tags", Value: bson.D{}}, {Key: "cost_tag_keys", Value: bson.A{}}, {Key: "cost_additional_info_keys", Value: bson.A{}},
			{Key: "cost_data_keys", Value: bson.A{}}, {Key: "resource_group", Value: "DOMAIN"}, {Key: "workspace_id", Value: "*"},
			{Key: "domain_id", Value: domain}, {Key: "created_at", Value: time.Now().UTC()}, {Key: "last_synchronized_at", Value: nil},
		}); err != nil {
			return nil, nil, err
		}
	}
	var visible []string
	docs := make([]any, 0, costRules)
	orders := map[string]int{}
	for i := range costRules {
		s := i % costSources
		orders[sources[s]]++
		id := wire.NewID("rule")
		if domains[s] == benchDomain {
			visible = append(visible, id)
		}
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "data_source_rule_id", Value: id},
			{Key: "name", Value: fmt.Sprintf("%s %d", words[r.IntN(len(words))], i)}, {Key: "rule_type", Value: "CUSTOM"},
			{Key: "order", Value: orders[sources[s]]}, {Key: "conditions", Value: bson.A{bson.D{{Key: "key", Value: "provider"},
				{Key: "value", Value: "aws"}, {Key: "operator", Value: "eq"}}}}, {Key: "conditions_policy", Value: "ALL"},
			{Key: "actions", Value: bson.D{{Key: "add_additional_info", Value: bson.D{{Key: "rule", Value: i}}}}},
			{Key: "options", Value: bson.D{{Key: "stop_processing", Value: false}}}, {Key: "tags", Value: bson.D{}},
			{Key: "is_default", Value: true}, {Key: "resource_group", Value: "DOMAIN"}, {Key: "workspace_id", Value: "*"},
			{Key: "domain_id", Value: domains[s]}, {Key: "data_source_id", Value: sources[s]}, {Key: "created_at", Value: time.Now().UTC()}})
	}
	for len(docs) > 0 {
		n := min(seedBatch, len(docs))
		if _, err := db.Collection("cost_data_source_rules").InsertMany(ctx, docs[:n]); err != nil {
			return nil, nil, err
		}
		docs = docs[n:]
	}
	return visible, sources[:1], nil
}

// measureSync times a sync of costRows rows from the sync call to the
// job's SUCCESS, then the raw driver inserting the same rows, as the
// workers store them (costTasks writers, chunks of costChunk).
func (b *bench) measureSync(ctx context.Context, db, raw *mongo.Database, fp *fakeplugin.Server, dsID string,
	post func(context.Context, string, any, any) error) (*throughput, error) {
	perTask := costRows / costTasks
	chunks := make([]map[string]any, 0, perTask/costChunk)
	for c := 0; c < perTask/costChunk; c++ {
		rows := make([]any, costChunk)
		for i := range rows {
			rows[i] = map[string]any{"cost": 0.25, "usage_quantity": 1.0, "usage_unit": "Hrs", "provider": "aws", "region_code": "us-east-1",
				"product": "Amazon EC2", "usage_type": "BoxUsage", "resource": fmt.Sprintf("i-%d-%d", c, i),
				"tags": map[string]any{"env": "prod"}, "additional_info": map[string]any{"Account ID": "111"},
				"billed_date": fmt.Sprintf("2024-01-%02d", i%28+1)}
		}
		chunks = append(chunks, map[string]any{"results": rows})
	}
	tasks := make([]any, costTasks)
	for i := range tasks {
		tasks[i] = map[string]any{"task_options": map[string]any{"part": i}}
	}
	fp.Script("spaceone.api.cost_analysis.plugin.Job/get_tasks", fakeplugin.Reply{Result: map[string]any{"tasks": tasks}})
	fp.Script("spaceone.api.cost_analysis.plugin.Cost/get_data", fakeplugin.Reply{Stream: chunks})
	res := &throughput{name: "cost-sync", unit: "rows", callers: costTasks, items: perTask * costTasks}
	b.settle()
	progress("cost: sync of %d rows", res.items)
	stop, err := b.startProfile("cost-sync", "nubes")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var job struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	if err := post(ctx, "/cost-analysis/v1/data-source/sync", map[string]string{"data_source_id": dsID}, &job); err != nil {
		return nil, err
	}
	// A poll the busy store does not answer in time is tried again: the
	// sync is measured, not the poll.
	var pollErr error
	for polls := 0; job.Status == "IN_PROGRESS"; polls++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Since(start) > 30*time.Minute {
			return nil, fmt.Errorf("sync of %d rows not finished in 30 min (last poll error: %v)", res.items, pollErr)
		}
		time.Sleep(100 * time.Millisecond)
		if err := post(ctx, "/cost-analysis/v1/job/get", map[string]string{"job_id": job.JobID}, &job); err != nil {
			pollErr = err
			job.Status = "IN_PROGRESS"
		}
	}
	res.nubes = time.Since(start)
	stop()
	// The check scans every row (no index serves it on the embedded
	// store): it gets its own deadline, not the store timeout of the
	// measured calls, so a loaded machine does not fail the run after
	// the sync was measured.
	cctx, ccancel := context.WithTimeout(ctx, 15*time.Minute)
	stored, err := db.Collection("cost_costs").CountDocuments(cctx, bson.D{{Key: "job_id", Value: job.JobID}})
	ccancel()
	if err != nil {
		return nil, err
	}
	if job.Status != "SUCCESS" || stored != int64(res.items) {
		res.err = fmt.Sprintf("job %s %s with %d rows stored, want %d", job.JobID, job.Status, stored, res.items)
	}
	// The raw side: the same documents, as the workers build them.
	b.settle()
	progress("cost: raw insert of %d rows", res.items)
	costs := raw.Collection("bench_raw_costs")
	defer func() { _ = costs.Drop(context.WithoutCancel(ctx)) }()
	if stop, err = b.startProfile("cost-sync", "raw"); err != nil {
		return nil, err
	}
	start = time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, costTasks)
	for t := range costTasks {
		wg.Go(func() {
			for c, ch := range chunks {
				rows := ch["results"].([]any)
				docs := make([]any, len(rows))
				for i, row := range rows {
					m := row.(map[string]any)
					id := fmt.Sprintf("cost-raw%d-%d", t, c*costChunk+i)
					docs[i] = bson.D{{Key: "_id", Value: id}, {Key: "cost_id", Value: id}, {Key: "cost", Value: m["cost"]},
						{Key: "usage_quantity", Value: m["usage_quantity"]}, {Key: "usage_unit", Value: m["usage_unit"]},
						{Key: "provider", Value: m["provider"]}, {Key: "region_code", Value: m["region_code"]}, {Key: "product", Value: m["product"]},
						{Key: "usage_type", Value: m["usage_type"]}, {Key: "resource", Value: m["resource"]}, {Key: "tags", Value: m["tags"]},
						{Key: "additional_info", Value: m["additional_info"]}, {Key: "data", Value: bson.D{}}, {Key: "currency", Value: "USD"},
						{Key: "billed_date", Value: m["billed_date"]}, {Key: "billed_month", Value: "2024-01"}, {Key: "billed_year", Value: "2024"},
						{Key: "project_id", Value: ""}, {Key: "service_account_id", Value: ""}, {Key: "data_source_id", Value: dsID},
						{Key: "job_id", Value: "job-raw"}, {Key: "job_task_id", Value: "job-task-raw"}, {Key: "workspace_id", Value: "*"},
						{Key: "domain_id", Value: benchDomain}, {Key: "created_at", Value: time.Now().UTC()}}
				}
				if _, err := costs.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	res.raw = time.Since(start)
	stop()
	for err := range errc {
		return nil, errors.Join(errors.New("raw insert"), err)
	}
	return res, nil
}
