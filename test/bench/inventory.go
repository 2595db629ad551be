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
	"github.com/nubes-io/nubes/services/inventory"
)

// What the inventory bench seeds and streams: invCollectors collectors (a
// tenth in another domain) for collector-get and collector-list; then a
// collect of one collector whose fake plugin streams invResources cloud
// services (invSubTasks sub-tasks of one secret) through the JetStream
// workers, beside the raw driver upserting the same documents by _id in
// the same batches with as many writers.
const (
	invCollectors  = 2000
	invResources   = 100000
	invSubTasks    = 4
	invBatch       = 200
	invPluginID    = "plugin-bench-collector"
	invCollections = "inventory_collectors"
)

// measureInventory runs the inventory service on its own server (with an
// embedded NATS, a fake gRPC collector and a fake identity answering the
// trusted accounts) and measures collector-get, collector-list and
// collect.
func (b *bench) measureInventory(ctx context.Context, db, raw *mongo.Database) ([]result, *throughput, error) {
	want := func(name string) bool { return len(b.cfg.ops) == 0 || slices.Contains(b.cfg.ops, name) }
	if !want("collector-get") && !want("collector-list") && !want("collect") {
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
	plugins, err := plugin.New(map[string]string{invPluginID: fp.Endpoint}, plugin.Options{Log: log})
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
	bus, err := events.Connect(ctx, nats.URL, "bench-inventory", log)
	if err != nil {
		return nil, nil, err
	}
	defer bus.Close()
	identityURL, stopIdentity, err := fakeIdentity()
	if err != nil {
		return nil, nil, err
	}
	defer stopIdentity()
	cfg := inventory.DefaultConfig()
	cfg.Workers = invSubTasks
	cfg.Batch = invBatch
	svc, err := inventory.Build(ctx, app.Deps{DB: db, Log: log, Plugins: plugins, Events: bus,
		Services: call.NewServices(map[string]string{"identity": identityURL}, "bench-service-token", nil)}, cfg)
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
	srv, err := server.New(server.Options{Name: inventory.Name, Auth: verifier, Logger: log}, svc.Routes...)
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

	ids, err := seedCollectors(ctx, db)
	if err != nil {
		return nil, nil, fmt.Errorf("seed collectors: %w", err)
	}
	collectors := raw.Collection(invCollections)
	pick := func(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }
	listFilter := bson.D{{Key: "domain_id", Value: benchDomain}} // inventory's scope of a domain admin
	ops := []operation{
		{name: "collector-get", goal: 0.85,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return post(ctx, "/inventory/v1/collector/get", map[string]string{"collector_id": pick(r, ids)}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				var d bson.M
				return collectors.FindOne(ctx, bson.D{{Key: "_id", Value: pick(r, ids)}}).Decode(&d)
			}},
		{name: "collector-list", goal: 0.8, scans: true,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return post(ctx, "/inventory/v1/collector/list", map[string]any{"query": map[string]any{"page": map[string]int{"start": 1, "limit": 20}}}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				if _, err := collectors.CountDocuments(ctx, listFilter); err != nil {
					return err
				}
				cur, err := collectors.Find(ctx, listFilter, options.Find().SetLimit(20).SetSort(bson.D{{Key: "name", Value: 1}, {Key: "_id", Value: 1}}))
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
	if !want("collect") {
		return out, nil, nil
	}
	ir, err := b.measureCollect(ctx, db, raw, fp, ids[0], post)
	if err != nil {
		return nil, nil, err
	}
	return out, ir, nil
}

// fakeIdentity answers what the measured services ask identity: one
// trusted account of the bench domain (aws) and its secret data
// (collect), and every project or workspace as live, echoing the ids
// asked (the monitoring ingest's check of its webhook's project).
func fakeIdentity() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	account := map[string]any{"trusted_account_id": "ta-bench", "name": "bench", "provider": "aws", "resource_group": "DOMAIN",
		"domain_id": benchDomain, "workspace_id": "*", "secret_schema_id": "aws-access-key", "trusted_secret_id": "trusted-secret-bench"}
	mux := http.NewServeMux()
	mux.HandleFunc("/identity/v2/trusted-account/list", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"results": []any{account}, "total_count": 1})
	})
	mux.HandleFunc("/identity/v2/trusted-account/get-secret-data", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"trusted_account_id": "ta-bench", "domain_id": benchDomain, "data": map[string]any{"key": "bench"}})
	})
	echo := func(w http.ResponseWriter, r *http.Request) {
		var asked map[string]any
		if err := json.NewDecoder(r.Body).Decode(&asked); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(asked)
	}
	mux.HandleFunc("/identity/v2/project/get", echo)
	mux.HandleFunc("/identity/v2/workspace/get", echo)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = hs.Close() }, nil
}

// seedCollectors stores the collectors as the service does; it returns
// the bench domain's ids (the first one collects).
func seedCollectors(ctx context.Context, db *mongo.Database) ([]string, error) {
	progress("seeding %d collectors", invCollectors)
	r := rand.New(rand.NewPCG(31, 32))
	var visible []string
	docs := make([]any, 0, invCollectors)
	for i := range invCollectors {
		domain := benchDomain
		if i%10 == 9 {
			domain = otherDomain
		}
		id := wire.NewID("collector")
		if domain == benchDomain {
			visible = append(visible, id)
		}
		at := time.Now().UTC().Add(-time.Duration(r.Int64N(int64(365 * 24 * time.Hour)))).Truncate(time.Millisecond)
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "collector_id", Value: id},
			{Key: "name", Value: fmt.Sprintf("%s %d", words[r.IntN(len(words))], i)}, {Key: "provider", Value: "aws"},
			{Key: "capability", Value: bson.D{}},
			{Key: "secret_filter", Value: bson.D{{Key: "state", Value: "DISABLED"}, {Key: "secrets", Value: bson.A{}}, {Key: "service_accounts", Value: bson.A{}},
				{Key: "schemas", Value: bson.A{}}, {Key: "exclude_secrets", Value: bson.A{}}, {Key: "exclude_service_accounts", Value: bson.A{}},
				{Key: "exclude_schemas", Value: bson.A{}}}},
			{Key: "plugin_info", Value: bson.D{{Key: "plugin_id", Value: invPluginID}, {Key: "version", Value: "1.0.0"}, {Key: "options", Value: bson.D{}},
				{Key: "metadata", Value: bson.D{{Key: "supported_resource_type", Value: bson.A{"inventory.CloudService"}}}}, {Key: "upgrade_mode", Value: "MANUAL"}}},
			{Key: "schedule", Value: bson.D{{Key: "state", Value: "DISABLED"}, {Key: "hours", Value: bson.A{}}}},
			{Key: "tags", Value: bson.D{{Key: "icon", Value: "aws.svg"}}}, {Key: "resource_group", Value: "DOMAIN"},
			{Key: "domain_id", Value: domain}, {Key: "workspace_id", Value: "*"}, {Key: "created_at", Value: at}, {Key: "last_collected_at", Value: nil}})
	}
	for len(docs) > 0 {
		n := min(seedBatch, len(docs))
		if _, err := db.Collection(invCollections).InsertMany(ctx, docs[:n]); err != nil {
			return nil, err
		}
		docs = docs[n:]
	}
	return visible, nil
}

// benchResource is the n-th resource the fake collector streams.
func benchResource(n int) map[string]any {
	return map[string]any{"state": "SUCCESS", "resource_type": "inventory.CloudService",
		"match_rules": map[string]any{"1": []any{"reference.resource_id", "provider", "cloud_service_type", "cloud_service_group", "account"}},
		"resource": map[string]any{"name": fmt.Sprintf("vm-%d", n), "provider": "aws", "cloud_service_group": "EC2", "cloud_service_type": "Instance",
			"account": "111111111111", "region_code": "us-east-1", "instance_type": "t3.micro",
			"reference": map[string]any{"resource_id": fmt.Sprintf("i-%08d", n)}, "data": map[string]any{"n": float64(n), "state": "running"},
			"tags": map[string]any{"env": "prod"}}}
}

// measureCollect times a collect of invResources resources from the
// collect call to the job's SUCCESS, then the raw driver upserting the
// same documents by _id (invSubTasks writers, batches of invBatch).
func (b *bench) measureCollect(ctx context.Context, db, raw *mongo.Database, fp *fakeplugin.Server, collectorID string,
	post func(context.Context, string, any, any) error) (*throughput, error) {
	per := invResources / invSubTasks
	streams := make([]fakeplugin.Reply, invSubTasks)
	tasks := make([]any, invSubTasks)
	for t := range invSubTasks {
		msgs := make([]map[string]any, per)
		for i := range msgs {
			msgs[i] = benchResource(t*per + i)
		}
		streams[t] = fakeplugin.Reply{Stream: msgs}
		tasks[t] = map[string]any{"task_options": map[string]any{"part": t}}
	}
	fp.Script("spaceone.api.inventory.plugin.Job/get_tasks", fakeplugin.Reply{Result: map[string]any{"tasks": tasks}})
	fp.Script("spaceone.api.inventory.plugin.Collector/collect", streams...)
	res := &throughput{name: "collect", unit: "res", callers: invSubTasks, items: per * invSubTasks}
	b.settle()
	progress("inventory: collect of %d resources", res.items)
	start := time.Now()
	var job struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	if err := post(ctx, "/inventory/v1/collector/collect", map[string]string{"collector_id": collectorID}, &job); err != nil {
		return nil, err
	}
	var pollErr error
	lastNote := time.Now()
	for job.Status == "IN_PROGRESS" {
		if time.Since(lastNote) > 30*time.Second {
			lastNote = time.Now()
			var tl struct {
				Results []struct {
					RemainedSubTasks int `json:"remained_sub_tasks"`
					CreatedCount     int `json:"created_count"`
				} `json:"results"`
			}
			if err := post(ctx, "/inventory/v1/job-task/list", map[string]string{"job_id": job.JobID}, &tl); err == nil && len(tl.Results) == 1 {
				progress("inventory: %s in, %d sub-tasks remain, %d created so far", time.Since(start).Round(time.Second),
					tl.Results[0].RemainedSubTasks, tl.Results[0].CreatedCount)
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Since(start) > 60*time.Minute {
			return nil, fmt.Errorf("collect of %d resources not finished in 60 min (last poll error: %v)", res.items, pollErr)
		}
		time.Sleep(200 * time.Millisecond)
		if err := post(ctx, "/inventory/v1/job/get", map[string]string{"job_id": job.JobID}, &job); err != nil {
			pollErr = err
			job.Status = "IN_PROGRESS"
		}
	}
	res.nubes = time.Since(start)
	progress("inventory: job %s %s in %s", job.JobID, job.Status, res.nubes.Round(time.Second))
	// A count scans the collection on FerretDB: a deadline of its own
	// (it replaces the client's per-operation timeout).
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	stored, err := db.Collection("inventory_cloud_services").CountDocuments(cctx, bson.D{})
	cancel()
	if err != nil {
		return nil, err
	}
	if job.Status != "SUCCESS" || stored != int64(res.items) {
		res.err = fmt.Sprintf("job %s %s with %d cloud services stored, want %d", job.JobID, job.Status, stored, res.items)
	}
	// The raw side: the same documents, upserted by _id as a hand-written
	// collector would (no match keys, no counts, no records).
	b.settle()
	progress("inventory: raw upsert of %d resources", res.items)
	coll := raw.Collection("bench_raw_cloud_services")
	defer func() { _ = coll.Drop(context.WithoutCancel(ctx)) }()
	start = time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, invSubTasks)
	for t := range invSubTasks {
		wg.Go(func() {
			for from := 0; from < per; from += invBatch {
				models := make([]mongo.WriteModel, 0, invBatch)
				now := time.Now().UTC()
				for i := from; i < min(from+invBatch, per); i++ {
					ri := streams[t].Stream[i]
					r := ri["resource"].(map[string]any)
					id := fmt.Sprintf("cloud-svc-raw%08d", t*per+i)
					doc := bson.D{{Key: "_id", Value: id}, {Key: "cloud_service_id", Value: id}, {Key: "name", Value: r["name"]},
						{Key: "state", Value: "ACTIVE"}, {Key: "account", Value: r["account"]}, {Key: "instance_type", Value: r["instance_type"]},
						{Key: "instance_size", Value: 0.0}, {Key: "ip_addresses", Value: bson.A{}}, {Key: "cloud_service_type", Value: r["cloud_service_type"]},
						{Key: "cloud_service_group", Value: r["cloud_service_group"]}, {Key: "provider", Value: r["provider"]}, {Key: "data", Value: r["data"]},
						{Key: "metadata", Value: bson.D{}}, {Key: "reference", Value: r["reference"]}, {Key: "tags", Value: r["tags"]},
						{Key: "region_code", Value: r["region_code"]}, {Key: "collection_info", Value: bson.D{{Key: "collector_id", Value: collectorID},
							{Key: "secret_id", Value: "trusted-secret-bench"}, {Key: "last_collected_at", Value: now}}},
						{Key: "project_id", Value: ""}, {Key: "workspace_id", Value: "*"}, {Key: "domain_id", Value: benchDomain},
						{Key: "created_at", Value: now}, {Key: "updated_at", Value: now}}
					models = append(models, mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).SetReplacement(doc).SetUpsert(true))
				}
				if _, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	res.raw = time.Since(start)
	for err := range errc {
		return nil, errors.Join(errors.New("raw upsert"), err)
	}
	return res, nil
}
