// Command bench measures the board service end to end against the raw
// MongoDB driver doing the same work on the same store, in the same run.
//
// For each store size (-posts) it seeds posts with the driver, then runs
// four operations for -duration each, twice: "nubes" is the board service
// called over real HTTP on 127.0.0.1 (token check, strict decoding, the
// handler's queries, JSON out); "raw" is the driver alone sending the
// queries a hand-written handler would need:
//
//	create  /board/v1/post/create  vs  FindOne of its board (the category check) + InsertOne of the same document
//	get     /board/v1/post/get     vs  FindOne by _id + its view's $inc
//	grpc-get  the same get over gRPC (/spaceone.api.board.v1.Post/get, token in metadata)  vs  the same
//	list    /board/v1/post/list    vs  CountDocuments + Find (same filter, sort, limit 20)
//	stat    /board/v1/post/stat    vs  Aggregate [$match domain, $group category count]
//
// and, after the sizes, on 2,000 project dashboards (dashboard.go):
//
//	dashboard-get   /dashboard/v1/project-dashboard/get   vs  FindOne by _id
//	dashboard-list  /dashboard/v1/project-dashboard/list  vs  CountDocuments + Find (scope, project_id, limit 20)
//
// and on 2,000 sealed user secrets of 21 owners (secret.go):
//
//	secret-get   /secret/v1/user-secret/get   vs  FindOne by _id
//	secret-list  /secret/v1/user-secret/list  vs  CountDocuments + Find (domain and owner, limit 20)
//
// and on 2,000 plugins of the local repository (repository.go):
//
//	plugin-get   /repository/v1/plugin/get   vs  FindOne by _id
//	plugin-list  /repository/v1/plugin/list  vs  CountDocuments + Find (domain or global, by name, limit 20)
//
// and on 2,000 notification protocols (notification.go):
//
//	protocol-get   /notification/v1/protocol/get   vs  FindOne by _id + FindOne of its usage counters
//	protocol-list  /notification/v1/protocol/list  vs  CountDocuments + Find (domain, by name, limit 20) + the page's counters
//
// and on 2,000 cost data source rules of 20 data sources (cost.go):
//
//	rule-get   /cost-analysis/v1/data-source-rule/get   vs  FindOne by _id
//	rule-list  /cost-analysis/v1/data-source-rule/list  vs  CountDocuments + Find (domain, limit 20)
//	cost-sync  a sync whose fake plugin streams 100,000 cost rows (4 tasks, chunks of 1,000) through the
//	           JetStream workers, in rows/s from sync to SUCCESS  vs  InsertMany of the same rows (4 writers)
//
// and on 2,000 collectors of the inventory service (inventory.go):
//
//	collector-get   /inventory/v1/collector/get   vs  FindOne by _id
//	collector-list  /inventory/v1/collector/list  vs  CountDocuments + Find (domain, by name, limit 20)
//	collect         a collect whose fake plugin streams 100,000 cloud services (4 sub-tasks) through the
//	                JetStream workers, in resources/s from collect to SUCCESS  vs  upserts by _id of the same
//	                documents (4 writers, batches of 200)
//
// Read the ratio, nubes ops/s divided by raw ops/s, rather than the absolute
// figures: on FerretDB over SQLite every filter scans, so absolute times say
// more about the store than about Nubes. A ratio of 1 means the service
// costs nothing over the bare queries; 0.5 means it gets half the work done
// per second (an extra round trip, an extra write, or CPU spent in HTTP and
// JSON on the same cores). Goals (issue 35): get >= 0.9, the other gets >= 0.85,
// create, list and stat >= 0.8, and p99 reported at every size. Both sides use driver clients built like the service's
// (store.Connect, -pool, -store-timeout); a call the store does not finish
// within the timeout is an error on either side, never an op.
//
// Each phase stops starting calls after -duration and cancels what is still
// running at twice that; a cancelled call counts neither as an op nor as an
// error. FerretDB finishes a query even when its caller gave up, so before
// each phase the bench waits (at most -duration) for the store to be idle;
// a phase marked * in the table started while it was still busy.
//
// On FerretDB, list and stat scan the collection on every call, so their
// cost is CPU time inside the store: more callers than cores only queue
// until the store timeout fails every call on both sides, leaving no ratio
// to read. By default list and stat therefore run with one caller per core
// on FerretDB (-scan-concurrency), and with -concurrency callers on MongoDB.
//
// Usage, from the repository root:
//
//	go run ./test/bench [-duration 10s] [-concurrency 32] [-posts 10000,100000] [-mongo URI | -postgresql URL]
//
// With no -mongo (and no NUBES_MONGO_URI) it starts an embedded FerretDB:
// on the PostgreSQL database of -postgresql (make bench starts a throwaway
// one), else on SQLite in a temporary directory. Against any store it
// works in a fresh database, dropped at the end. Progress goes to stderr;
// a table per size and, as the last line, one JSON object with the
// figures per size go to stdout.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/devinfra"
	"github.com/nubes-io/nubes/pkg/grpcapi"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/board"
	"github.com/nubes-io/nubes/services/dashboard"
	"github.com/nubes-io/nubes/services/repository"
	"github.com/nubes-io/nubes/services/secret"
)

type config struct {
	duration     time.Duration
	concurrency  int
	scanConc     int // callers of list and stat; 0 picks
	sizes        []int
	mongoURI     string
	postgresURL  string
	pool         uint64
	storeTimeout time.Duration
	verbose      bool
	ops          []string // operations to measure; empty: all
	cpuProfile   string   // path prefix of per-phase CPU profiles; empty: none
}

func parseFlags(args []string) (config, error) {
	var c config
	var posts string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long each operation runs, per side")
	fs.IntVar(&c.concurrency, "concurrency", 32, "concurrent callers")
	fs.IntVar(&c.scanConc, "scan-concurrency", 0, "concurrent callers of list and stat (default: one per core on FerretDB, -concurrency otherwise)")
	fs.StringVar(&posts, "posts", "10000,100000", "store sizes in posts, comma separated; the store grows from one to the next")
	fs.StringVar(&c.mongoURI, "mongo", os.Getenv("NUBES_MONGO_URI"), "MongoDB URI (default $NUBES_MONGO_URI; empty starts an embedded FerretDB)")
	fs.StringVar(&c.postgresURL, "postgresql", "", "PostgreSQL URL: start the embedded FerretDB on it instead of SQLite (make bench)")
	fs.Uint64Var(&c.pool, "pool", 16, "driver pool size of both sides (the devstack's setting on FerretDB)")
	fs.DurationVar(&c.storeTimeout, "store-timeout", 10*time.Second, "driver timeout per store call on both sides (the service's default)")
	var ops string
	fs.StringVar(&ops, "ops", "", "operations to measure, comma separated (create,get,list,stat, a group's such as secret-get, monitoring); empty: all")
	fs.BoolVar(&c.verbose, "v", false, "print the service's warnings and errors to stderr")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of each measured phase to `prefix`-<op>-<side>.prof (the whole process: service, driver and an embedded store)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for s := range strings.SplitSeq(posts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return c, fmt.Errorf("-posts: %q is not a positive number", s)
		}
		c.sizes = append(c.sizes, n)
	}
	for o := range strings.SplitSeq(ops, ",") {
		if o = strings.TrimSpace(o); o != "" {
			c.ops = append(c.ops, o)
		}
	}
	slices.Sort(c.sizes)
	c.sizes = slices.Compact(c.sizes)
	if c.duration <= 0 || c.concurrency <= 0 || c.scanConc < 0 || c.pool == 0 || c.storeTimeout <= 0 {
		return c, errors.New("-duration, -concurrency, -pool and -store-timeout must be positive")
	}
	return c, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		return err
	}
	uri, embedded := cfg.mongoURI, cfg.mongoURI == ""
	switch {
	case embedded && cfg.postgresURL != "":
		m, err := devinfra.StartMongoOnPostgreSQL(cfg.postgresURL, "127.0.0.1:0", nil)
		if err != nil {
			return err
		}
		defer m.Stop()
		uri = m.URI
		progress("embedded FerretDB on PostgreSQL %s", cfg.postgresURL)
	case embedded:
		dir, err := os.MkdirTemp("", "nubes-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		m, err := devinfra.StartMongo(dir, "127.0.0.1:0", nil)
		if err != nil {
			return err
		}
		defer m.Stop()
		uri = m.URI
		progress("embedded FerretDB (SQLite) in %s", dir)
	}

	// The service's client and the raw side's are built alike; seeding,
	// checks and clean-up use a third one that may wait much longer.
	measured := store.Options{MaxPoolSize: cfg.pool, OpTimeout: cfg.storeTimeout}
	var clients [3]*mongo.Client
	for i, o := range []store.Options{measured, measured, {MaxPoolSize: 4, OpTimeout: 10 * time.Minute}} {
		if clients[i], err = store.Connect(ctx, uri, o); err != nil {
			return err
		}
		defer func() { _ = clients[i].Disconnect(context.Background()) }()
	}
	svcClient, rawClient, setupClient := clients[0], clients[1], clients[2]

	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	dbName := "nubes_bench_" + hex.EncodeToString(suffix[:])
	setup := setupClient.Database(dbName)
	defer func() {
		if err := setup.Drop(context.Background()); err != nil {
			progress("dropping %s: %v", dbName, err)
		}
	}()

	if cfg.scanConc == 0 {
		cfg.scanConc = cfg.concurrency
		var info bson.M
		if err := setup.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err == nil && info["ferretdbVersion"] != nil {
			cfg.scanConc = min(cfg.concurrency, runtime.NumCPU())
		}
	}
	// The service is built before seeding, so its indexes exist.
	base, token, grpcSvc, stopService, err := startService(ctx, svcClient.Database(dbName), cfg.verbose)
	if err != nil {
		return err
	}
	defer stopService()

	b := &bench{
		cfg:      cfg,
		embedded: embedded,
		posts:    rawClient.Database(dbName).Collection(postsCollection),
		boards:   rawClient.Database(dbName).Collection(boardsCollection),
		setup:    setup.Collection(postsCollection),
		base:     base,
		token:    token,
		grpc:     grpcSvc,
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConns:        2 * cfg.concurrency,
			MaxIdleConnsPerHost: 2 * cfg.concurrency,
			IdleConnTimeout:     time.Minute,
		}},
	}
	if err := b.seedBoards(ctx, setup.Collection(boardsCollection)); err != nil {
		return err
	}
	progress("mongo pool %d per side, store timeout %s, concurrency %d (list and stat %d), %s per operation and side, sizes %v",
		cfg.pool, cfg.storeTimeout, cfg.concurrency, cfg.scanConc, cfg.duration, cfg.sizes)

	all := map[string]map[string]figures{}
	for i, size := range cfg.sizes {
		if i > 0 { // the next size starts from the seeded posts alone
			if err := b.removeCreated(ctx); err != nil {
				return err
			}
		}
		if err := b.grow(ctx, size); err != nil {
			return fmt.Errorf("seed %d posts: %w", size, err)
		}
		res, err := b.measure(ctx)
		if err != nil {
			return fmt.Errorf("at %d posts: %w", size, err)
		}
		b.printTable(os.Stdout, size, res)
		all[strconv.Itoa(size)] = summary(res)
	}
	dres, err := b.measureDashboards(ctx, setup.Collection(dashboardsCollection), rawClient.Database(dbName).Collection(dashboardsCollection))
	if err != nil {
		return fmt.Errorf("dashboards: %w", err)
	}
	if dres != nil {
		b.printDashboardTable(os.Stdout, dres)
		all["dashboards"] = summary(dres)
	}
	sres, err := b.measureSecrets(ctx, setup.Collection(secretsCollection), rawClient.Database(dbName).Collection(secretsCollection))
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	if sres != nil {
		b.printSecretTable(os.Stdout, sres)
		all["secrets"] = summary(sres)
	}
	rres, err := b.measureRepository(ctx, setup.Collection(pluginsCollection), rawClient.Database(dbName).Collection(pluginsCollection))
	if err != nil {
		return fmt.Errorf("plugins: %w", err)
	}
	if rres != nil {
		b.printRepositoryTable(os.Stdout, rres)
		all["plugins"] = summary(rres)
	}
	nres, err := b.measureNotification(ctx, setup, rawClient.Database(dbName))
	if err != nil {
		return fmt.Errorf("protocols: %w", err)
	}
	if nres != nil {
		b.printNotificationTable(os.Stdout, nres)
		all["protocols"] = summary(nres)
	}
	mres, err := b.measureMonitoring(ctx, svcClient.Database(dbName))
	if err != nil {
		return fmt.Errorf("monitoring: %w", err)
	}
	if mres != nil {
		printMonitoringTable(os.Stdout, mres)
		all["monitoring"] = summary(mres)
	}
	cres, csync, err := b.measureCost(ctx, svcClient.Database(dbName), rawClient.Database(dbName))
	if err != nil {
		return fmt.Errorf("cost-analysis: %w", err)
	}
	if cres != nil || csync != nil {
		b.printGroup(os.Stdout, fmt.Sprintf("cost-analysis: %d data source rules", costRules), cres, csync)
		all["cost-analysis"] = groupSummary(cres, csync)
	}
	ires, icollect, err := b.measureInventory(ctx, svcClient.Database(dbName), rawClient.Database(dbName))
	if err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	if ires != nil || icollect != nil {
		b.printGroup(os.Stdout, fmt.Sprintf("inventory: %d collectors", invCollectors), ires, icollect)
		all["inventory"] = groupSummary(ires, icollect)
	}
	line, err := json.Marshal(all)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// startService serves the board service on 127.0.0.1 and returns its base
// URL, a DOMAIN_ADMIN token of the bench domain, and a stop function.
func startService(ctx context.Context, db *mongo.Database, verbose bool) (base, token string, g *grpcService, stop func(), err error) {
	svc, err := board.New(ctx, app.Deps{DB: db})
	if err != nil {
		return "", "", nil, nil, err
	}
	dash, err := dashboard.New(ctx, app.Deps{DB: db}) // get and list need no other service
	if err != nil {
		return "", "", nil, nil, err
	}
	sec, err := secret.New(benchKeys)(ctx, app.Deps{DB: db}) // get and list need no repository
	if err != nil {
		return "", "", nil, nil, err
	}
	repo, err := repository.New(repository.Config{Keys: benchKeys})(ctx, app.Deps{DB: db}) // get and list need no registry
	if err != nil {
		return "", "", nil, nil, err
	}
	noti, err := notificationRoutes(ctx, db, slog.New(slog.DiscardHandler)) // get and list need no repository or plugin
	if err != nil {
		return "", "", nil, nil, err
	}
	signer, err := auth.GenerateSigner()
	if err != nil {
		return "", "", nil, nil, err
	}
	jwks, _ := json.Marshal(auth.JWKS{Keys: []auth.JWK{signer.PublicJWK()}})
	verifier, err := auth.NewVerifier(jwks)
	if err != nil {
		return "", "", nil, nil, err
	}
	token, err = signer.Issue(auth.Principal{DomainID: benchDomain, UserID: "bench-admin", Role: auth.DomainAdmin}, 24*time.Hour)
	if err != nil {
		return "", "", nil, nil, err
	}
	log := slog.New(slog.DiscardHandler)
	if verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv, err := server.New(server.Options{Name: board.Name, Auth: verifier, Logger: log}, slices.Concat(svc.Routes, dash.Routes, sec.Routes, repo.Routes, noti)...)
	if err != nil {
		return "", "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, nil, err
	}
	// The same server's operations over gRPC (pkg/grpcapi), for grpc-get.
	gs, err := grpcapi.New(srv, grpcapi.Options{})
	if err != nil {
		return "", "", nil, nil, err
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, nil, err
	}
	g, err = dialGRPC(gln.Addr().String(), gs, token)
	if err != nil {
		return "", "", nil, nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 2)
	go func() { served <- srv.Run(sctx, ln) }()
	go func() { served <- gs.Run(sctx, gln) }()
	return "http://" + ln.Addr().String(), token, g, func() { g.conn.Close(); cancel(); <-served; <-served }, nil
}

var started = time.Now()

// progress writes a timestamped line to stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
}
