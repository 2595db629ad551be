package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/wire"
)

// The board service's collections and the data the bench seeds.
const (
	boardsCollection = "board_boards"
	postsCollection  = "board_posts"
	benchDomain      = "domain-bench"
	otherDomain      = "domain-other" // ~10% of the posts, never visible to the bench caller
	createdWriter    = "bench-create" // writer of the posts the create phases add, so they can be removed
	seedBatch        = 1000
)

var (
	categories = []string{"notice", "event", "maintenance", "release", "security"}
	boardIDs   = []string{"board-bench00001", "board-bench00002", "board-bench00003", "board-bench00004"}
	words      = strings.Fields("cloud cost alert budget region account collector plugin schedule report " +
		"maintenance window upgrade network storage compute policy dashboard metric webhook")
)

// postDoc is a post exactly as the board service stores it (same fields,
// same order, datetimes as BSON dates).
type postDoc struct {
	ID            string          `bson:"_id"`
	PostID        string          `bson:"post_id"`
	BoardID       string          `bson:"board_id"`
	BoardType     string          `bson:"board_type"`
	Category      string          `bson:"category"`
	Title         string          `bson:"title"`
	Contents      string          `bson:"contents"`
	Options       map[string]bool `bson:"options"`
	ViewCount     int32           `bson:"view_count"`
	Writer        string          `bson:"writer"`
	Files         []string        `bson:"files"`
	ResourceGroup string          `bson:"resource_group"`
	DomainID      string          `bson:"domain_id"`
	UserID        string          `bson:"user_id"`
	CreatedAt     time.Time       `bson:"created_at"`
	UpdatedAt     time.Time       `bson:"updated_at"`
}

// boardDoc is a board as the service stores it.
type boardDoc struct {
	ID         string         `bson:"_id"`
	BoardID    string         `bson:"board_id"`
	Name       string         `bson:"name"`
	Categories []string       `bson:"categories"`
	Tags       map[string]any `bson:"tags"`
	CreatedAt  time.Time      `bson:"created_at"`
}

type bench struct {
	cfg      config
	embedded bool              // the store runs inside this process
	posts    *mongo.Collection // the raw side's, with the service's client options
	boards   *mongo.Collection // the raw side's boards
	setup    *mongo.Collection // the same collection, for seeding, checks and clean-up
	http     *http.Client
	base     string
	token    string
	grpc     *grpcService

	rng  *rand.Rand // seeding only (single goroutine)
	ids  []string   // seeded posts of the bench domain
	have int        // posts in the store

	mu      sync.Mutex
	created int // posts the create phases reported as stored
}

func newPost(r *rand.Rand, domain string) postDoc {
	id := wire.NewID("post")
	cat := categories[r.IntN(len(categories))]
	var text strings.Builder
	for range 40 + r.IntN(40) {
		text.WriteString(words[r.IntN(len(words))])
		text.WriteByte(' ')
	}
	files := []string{}
	if r.IntN(10) == 0 {
		files = append(files, wire.NewID("file"))
	}
	at := time.Now().UTC().Add(-time.Duration(r.Int64N(int64(365 * 24 * time.Hour)))).Truncate(time.Millisecond)
	writer := fmt.Sprintf("user-%02d", r.IntN(50))
	return postDoc{
		ID: id, PostID: id, BoardID: boardIDs[r.IntN(len(boardIDs))], BoardType: "NOTICE", Category: cat,
		Title:    fmt.Sprintf("%s: %s %s", cat, words[r.IntN(len(words))], words[r.IntN(len(words))]),
		Contents: text.String(), Options: map[string]bool{"is_pinned": r.IntN(20) == 0, "is_popup": r.IntN(50) == 0},
		ViewCount: r.Int32N(1000), Writer: writer, Files: files, ResourceGroup: "DOMAIN",
		DomainID: domain, UserID: writer, CreatedAt: at, UpdatedAt: at,
	}
}

func (b *bench) seedBoards(ctx context.Context, c *mongo.Collection) error {
	b.rng = rand.New(rand.NewPCG(1, 2))
	docs := make([]any, len(boardIDs))
	for i, id := range boardIDs {
		docs[i] = boardDoc{ID: id, BoardID: id, Name: fmt.Sprintf("Bench board %d", i+1), Categories: categories,
			Tags: map[string]any{}, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	}
	_, err := c.InsertMany(ctx, docs)
	return err
}

// grow seeds posts until the store holds size of them.
func (b *bench) grow(ctx context.Context, size int) error {
	if b.have >= size {
		return nil
	}
	progress("seeding %d posts (store %d -> %d)", size-b.have, b.have, size)
	t0 := time.Now()
	for b.have < size {
		docs := make([]any, min(seedBatch, size-b.have))
		for i := range docs {
			domain := benchDomain
			if b.rng.IntN(10) == 0 {
				domain = otherDomain
			}
			p := newPost(b.rng, domain)
			if domain == benchDomain {
				b.ids = append(b.ids, p.ID)
			}
			docs[i] = p
		}
		if _, err := b.setup.InsertMany(ctx, docs); err != nil {
			return err
		}
		b.have += len(docs)
		if b.have%(10*seedBatch) == 0 || b.have == size {
			progress("  %d/%d posts", b.have, size)
		}
	}
	progress("seeded in %.1fs", time.Since(t0).Seconds())
	return nil
}

// call posts body to the service and fails unless the answer is 200.
func (b *bench) call(ctx context.Context, path string, body, out any) error {
	buf, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+path, bytes.NewReader(buf))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := b.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d %s", path, resp.StatusCode, truncate(data, 160))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// listRequest asks for the first page of 20 posts of a board.
func listRequest(boardID string) map[string]any {
	return map[string]any{"board_id": boardID, "query": map[string]any{"page": map[string]int{"start": 1, "limit": 20}}}
}

// statRequest counts the domain's posts per category.
var statRequest = map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"group": map[string]any{
	"keys":   []any{map[string]any{"key": "category", "name": "category"}},
	"fields": []any{map[string]any{"name": "count", "operator": "count"}},
}}}}}

// operation is one measured operation, done by the service and by the
// driver alone.
type operation struct {
	name       string
	goal       float64 // least ratio wanted; 0 for none
	scans      bool    // runs at -scan-concurrency
	nubes, raw func(ctx context.Context, r *rand.Rand) error
}

func (b *bench) operations() []operation {
	listFilter := func(boardID string) bson.D { // what query.Compile makes of the list request
		return bson.D{{Key: "domain_id", Value: benchDomain}, {Key: "board_id", Value: bson.D{{Key: "$eq", Value: boardID}}}}
	}
	pick := func(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }
	statPipeline := mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "domain_id", Value: benchDomain}}}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$category"}, {Key: "count", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
	}
	return []operation{
		{
			name: "create", goal: 0.8,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				p := newPost(r, benchDomain)
				err := b.call(ctx, "/board/v1/post/create", map[string]any{
					"board_id": p.BoardID, "board_type": p.BoardType, "title": p.Title, "contents": p.Contents,
					"resource_group": p.ResourceGroup, "category": p.Category, "files": p.Files,
					"options": p.Options, "writer": createdWriter,
				}, nil)
				b.countCreated(err)
				return err
			},
			// A hand-written create checks the post's board as the service
			// does (it exists, the category is one of its), so reads it too.
			raw: func(ctx context.Context, r *rand.Rand) error {
				p := newPost(r, benchDomain)
				p.Writer, p.UserID = createdWriter, "bench-admin"
				var board boardDoc
				if err := b.boards.FindOne(ctx, bson.D{{Key: "_id", Value: p.BoardID}}).Decode(&board); err != nil {
					return err
				}
				if !slices.Contains(board.Categories, p.Category) {
					return fmt.Errorf("category %q is not one of board %s's", p.Category, p.BoardID)
				}
				_, err := b.posts.InsertOne(ctx, p)
				b.countCreated(err)
				return err
			},
		},
		{
			name: "get", goal: 0.9,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return b.call(ctx, "/board/v1/post/get", map[string]string{"post_id": pick(r, b.ids)}, nil)
			},
			raw: b.rawGet,
		},
		{
			// The same get over gRPC, to set beside get over HTTP.
			name: "grpc-get", goal: 0.9,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return b.grpc.getPost(ctx, pick(r, b.ids))
			},
			raw: b.rawGet,
		},
		{
			name: "list", goal: 0.8, scans: true,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return b.call(ctx, "/board/v1/post/list", listRequest(pick(r, boardIDs)), nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				f := listFilter(pick(r, boardIDs))
				if _, err := b.posts.CountDocuments(ctx, f); err != nil {
					return err
				}
				cur, err := b.posts.Find(ctx, f, options.Find().
					SetSort(bson.D{{Key: "created_at", Value: -1}, {Key: "_id", Value: 1}}).SetSkip(0).SetLimit(20))
				if err != nil {
					return err
				}
				var rows []postDoc
				return cur.All(ctx, &rows)
			},
		},
		{
			name: "stat", goal: 0.8, scans: true,
			nubes: func(ctx context.Context, _ *rand.Rand) error {
				return b.call(ctx, "/board/v1/post/stat", statRequest, nil)
			},
			raw: func(ctx context.Context, _ *rand.Rand) error {
				cur, err := b.posts.Aggregate(ctx, statPipeline)
				if err != nil {
					return err
				}
				var rows []bson.M
				return cur.All(ctx, &rows)
			},
		},
	}
}

func (o operation) callers(c config) int {
	if o.scans {
		return c.scanConc
	}
	return c.concurrency
}

// settle waits until the store has finished the work the last phase left
// behind (FerretDB runs a query to its end even when its caller gave up)
// and reports whether it has. An embedded store runs in this process, so
// idle CPU tells; an external one is given a second. It waits at most
// -duration.
func (b *bench) settle() bool {
	if !b.embedded {
		time.Sleep(time.Second)
		return true
	}
	t0, quiet := time.Now(), 0
	prevCPU, prev := cpuTime(), t0
	for quiet < 2 && time.Since(t0) < b.cfg.duration {
		time.Sleep(250 * time.Millisecond)
		cpu, now := cpuTime(), time.Now()
		if cpu-prevCPU < now.Sub(prev)/10 { // under a tenth of a core
			quiet++
		} else {
			quiet = 0
		}
		prevCPU, prev = cpu, now
	}
	switch d := time.Since(t0); {
	case quiet < 2:
		progress("store still busy with leftover work after %.1fs; the next phase shares it", d.Seconds())
		return false
	case d > 2*time.Second:
		progress("store busy with leftover work for %.1fs", d.Seconds())
	}
	return true
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (b *bench) countCreated(err error) {
	if err == nil {
		b.mu.Lock()
		b.created++
		b.mu.Unlock()
	}
}

// phase is what one side of one operation did.
type phase struct {
	lat      []time.Duration // of successful ops, sorted
	errors   int
	cut      int // cancelled at the hard stop
	firstErr string
	elapsed  time.Duration
	busy     bool // started while the store was still busy
}

func (p phase) opsPerSec() float64 {
	if p.elapsed <= 0 {
		return 0
	}
	return float64(len(p.lat)) / p.elapsed.Seconds()
}

// percentile by nearest rank, in milliseconds.
func (p phase) percentile(q float64) float64 {
	if len(p.lat) == 0 {
		return math.NaN()
	}
	i := max(int(math.Ceil(q*float64(len(p.lat))))-1, 0)
	return float64(p.lat[i].Microseconds()) / 1000
}

// run calls fn from callers workers until cfg.duration has passed, then
// waits for the calls in flight, cancelling them at twice the duration.
func (b *bench) run(ctx context.Context, callers int, fn func(context.Context, *rand.Rand) error) phase {
	// A plain cancel rather than a deadline: the driver would see a deadline
	// and fail calls early on its own, which would count as errors.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hardStop := time.AfterFunc(2*b.cfg.duration, cancel)
	defer hardStop.Stop()
	start := time.Now()
	stopAt := start.Add(b.cfg.duration)
	var (
		mu  sync.Mutex
		out phase
		wg  sync.WaitGroup
	)
	for w := range callers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			var mine phase
			for time.Now().Before(stopAt) && ctx.Err() == nil {
				t0 := time.Now()
				err := fn(ctx, r)
				d := time.Since(t0)
				switch {
				case err == nil:
					mine.lat = append(mine.lat, d)
				case ctx.Err() != nil:
					mine.cut++
				default:
					mine.errors++
					if mine.firstErr == "" {
						mine.firstErr = err.Error()
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			out.lat = append(out.lat, mine.lat...)
			out.errors += mine.errors
			out.cut += mine.cut
			if out.firstErr == "" {
				out.firstErr = mine.firstErr
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	slices.Sort(out.lat)
	return out
}

// result is one operation measured on both sides.
type result struct {
	op         operation
	nubes, raw phase
	skipped    string // why the operation was not measured
}

// measure runs every operation on both sides at the current store size.
// create goes last and its posts are removed afterwards, so the size holds;
// the results come back in the order of operations().
func (b *bench) measure(ctx context.Context) ([]result, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	ops := b.operations()
	var out []result
	for _, op := range append(ops[1:], ops[0]) {
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
	return append(out[len(out)-1:], out[:len(out)-1]...), nil
}

// measureOp runs one operation on both sides, after one raw call alone: if
// the store cannot do even that within the store timeout, the phases would
// only pile up abandoned queries, so the operation is skipped.
func (b *bench) measureOp(ctx context.Context, op operation) (result, error) {
	res := result{op: op}
	b.settle()
	t0 := time.Now()
	if err := op.raw(ctx, rand.New(rand.NewPCG(3, 4))); err != nil {
		why := truncate([]byte(err.Error()), 160)
		if mongo.IsTimeout(err) {
			why = fmt.Sprintf("the store timeout (%s) passed", b.cfg.storeTimeout)
		}
		res.skipped = fmt.Sprintf("one raw call alone failed after %.1fs: %s", time.Since(t0).Seconds(), why)
		progress("%d posts: %s skipped: %s", b.have, op.name, res.skipped)
		return res, ctx.Err()
	}
	for _, side := range []struct {
		name string
		fn   func(context.Context, *rand.Rand) error
		into *phase
	}{{"nubes", op.nubes, &res.nubes}, {"raw", op.raw, &res.raw}} {
		busy := !b.settle()
		progress("%d posts: %s %s, %d callers ...", b.have, op.name, side.name, op.callers(b.cfg))
		stopProfile, err := b.startProfile(op.name, side.name)
		if err != nil {
			return res, err
		}
		p := b.run(ctx, op.callers(b.cfg), side.fn)
		stopProfile()
		p.busy = busy
		progress("  %d ops in %.1fs: %.1f ops/s, p50 %.1f ms, p99 %.1f ms, %d errors, %d cancelled",
			len(p.lat), p.elapsed.Seconds(), p.opsPerSec(), p.percentile(.5), p.percentile(.99), p.errors, p.cut)
		if p.firstErr != "" {
			progress("  first error: %s", p.firstErr)
		}
		*side.into = p
	}
	return res, ctx.Err()
}

// startProfile starts a CPU profile of one phase when -cpuprofile asks
// for them, and returns what stops it.
func (b *bench) startProfile(op, side string) (func(), error) {
	if b.cfg.cpuProfile == "" {
		return func() {}, nil
	}
	name := fmt.Sprintf("%s-%s-%s.prof", b.cfg.cpuProfile, op, side)
	if slices.Contains([]string{"create", "get", "list", "stat"}, op) { // the board's, once per store size
		name = fmt.Sprintf("%s-%d-%s-%s.prof", b.cfg.cpuProfile, b.have, op, side)
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			progress("  profile %s: %v", name, err)
		}
	}, nil
}

// check makes sure both sides see the same data before measuring: the
// list total of one board and the stat counts must match the driver's.
// Disagreement stops the bench; a call that fails (a store timeout on a
// large FerretDB store) is only reported, as the phases will count it.
func (b *bench) check(ctx context.Context) error {
	progress("%d posts: checking that the service and the driver agree", b.have)
	if err := b.compare(ctx); err != nil {
		var bad mismatch
		if errors.As(err, &bad) {
			return err
		}
		progress("  check not done: %v", err)
	}
	return nil
}

// mismatch is a disagreement between the service and the driver.
type mismatch string

func (m mismatch) Error() string { return string(m) }

func (b *bench) compare(ctx context.Context) error {
	filter := bson.D{{Key: "domain_id", Value: benchDomain}, {Key: "board_id", Value: boardIDs[0]}}
	want, err := b.setup.CountDocuments(ctx, filter)
	if err != nil {
		return err
	}
	var list struct {
		Results    []json.RawMessage `json:"results"`
		TotalCount int64             `json:"total_count"`
	}
	if err := b.call(ctx, "/board/v1/post/list", listRequest(boardIDs[0]), &list); err != nil {
		return err
	}
	if list.TotalCount != want || len(list.Results) != int(min(want, 20)) {
		return mismatch(fmt.Sprintf("list: total_count %d and %d rows, the driver counts %d", list.TotalCount, len(list.Results), want))
	}
	var stat struct {
		Results []struct {
			Count int64 `json:"count"`
		} `json:"results"`
	}
	if err := b.call(ctx, "/board/v1/post/stat", statRequest, &stat); err != nil {
		return err
	}
	var sum int64
	for _, row := range stat.Results {
		sum += row.Count
	}
	if sum != int64(len(b.ids)) || len(stat.Results) != len(categories) {
		return mismatch(fmt.Sprintf("stat: %d rows counting %d posts, want %d rows counting %d", len(stat.Results), sum, len(categories), len(b.ids)))
	}
	return nil
}

// removeCreated deletes what the create phases added, in batches by _id
// (FerretDB on PostgreSQL fails a delete of over 65,535 rows at once).
func (b *bench) removeCreated(ctx context.Context) error {
	var deleted int64
	for {
		cur, err := b.setup.Find(ctx, bson.D{{Key: "writer", Value: createdWriter}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetLimit(20000))
		if err != nil {
			return fmt.Errorf("remove created posts: %w", err)
		}
		var rows []struct {
			ID string `bson:"_id"`
		}
		if err := cur.All(ctx, &rows); err != nil {
			return fmt.Errorf("remove created posts: %w", err)
		}
		if len(rows) == 0 {
			break
		}
		ids := make(bson.A, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		res, err := b.setup.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
		if err != nil {
			return fmt.Errorf("remove created posts: %w", err)
		}
		deleted += res.DeletedCount
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	progress("removed the %d posts the create phases added (%d reported stored)", deleted, b.created)
	b.created = 0
	return nil
}

// figures are one operation's numbers in the JSON summary.
type figures struct {
	OpsPerS    float64  `json:"ops_per_s"`
	P50        *float64 `json:"p50_ms"`
	P99        *float64 `json:"p99_ms"`
	RawOpsPerS float64  `json:"raw_ops_per_s"`
	Ratio      *float64 `json:"ratio"`
}

func (r result) ratio() float64 {
	if len(r.raw.lat) == 0 {
		return math.NaN()
	}
	return r.nubes.opsPerSec() / r.raw.opsPerSec()
}

func summary(rs []result) map[string]figures {
	round := func(v float64, digits int) float64 {
		p := math.Pow(10, float64(digits))
		return math.Round(v*p) / p
	}
	orNull := func(v float64, digits int) *float64 { // NaN: no op to measure
		if math.IsNaN(v) {
			return nil
		}
		v = round(v, digits)
		return &v
	}
	out := map[string]figures{}
	for _, r := range rs {
		out[r.op.name] = figures{
			OpsPerS: round(r.nubes.opsPerSec(), 1), P50: orNull(r.nubes.percentile(.5), 2), P99: orNull(r.nubes.percentile(.99), 2),
			RawOpsPerS: round(r.raw.opsPerSec(), 1), Ratio: orNull(r.ratio(), 3),
		}
	}
	return out
}

func (b *bench) printTable(w io.Writer, size int, rs []result) {
	fmt.Fprintf(w, "\n%d posts in the store (%d in the bench domain, %d boards), %s per side, mongo pool %d\n",
		size, len(b.ids), len(boardIDs), b.cfg.duration, b.cfg.pool)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tside\tcallers\tops/s\tp50 ms\tp99 ms\tops\terrors\tcancelled\tratio\tgoal\t")
	for _, r := range rs {
		if r.skipped != "" {
			fmt.Fprintf(tw, "%s\tboth\t%d\t\t\t\t\t\t\t\tskipped (see below)\t\n", r.op.name, r.op.callers(b.cfg))
			continue
		}
		goal, verdict := "-", ""
		if r.op.goal > 0 {
			goal = fmt.Sprintf(">= %g", r.op.goal)
			switch {
			case len(r.raw.lat) == 0:
				verdict = "no data"
			case r.ratio() >= r.op.goal && r.nubes.errors == 0:
				verdict = "met"
			default:
				verdict = "MISSED"
			}
		}
		for i, side := range []phase{r.nubes, r.raw} {
			name, ratio, g := "nubes", fmt.Sprintf("%.3f", r.ratio()), goal+" "+verdict
			if i == 1 {
				name, ratio, g = "raw", "", ""
			}
			if side.busy {
				name += "*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.2f\t%.2f\t%d\t%d\t%d\t%s\t%s\t\n", r.op.name, name,
				r.op.callers(b.cfg), side.opsPerSec(), side.percentile(.5), side.percentile(.99), len(side.lat), side.errors, side.cut, ratio, g)
		}
	}
	tw.Flush()
	for _, r := range rs {
		if r.skipped != "" {
			fmt.Fprintf(w, "%s skipped: %s\n", r.op.name, r.skipped)
		}
	}
	fmt.Fprintln(w, "ratio = nubes ops/s / raw ops/s (goal MISSED also when nubes had errors); p99 is reported at every size, no bound is set")
	if slices.ContainsFunc(rs, func(r result) bool { return r.nubes.busy || r.raw.busy }) {
		fmt.Fprintln(w, "* started while the store was still finishing earlier work: its figures are pessimistic")
	}
}

func truncate(b []byte, n int) string {
	t := strings.TrimSpace(string(b))
	if len(t) > n {
		return t[:n] + "..."
	}
	return t
}

// rawGet is what a hand-written get of a post does: it counts a view,
// so the read, then its $inc.
func (b *bench) rawGet(ctx context.Context, r *rand.Rand) error {
	var p postDoc
	id := pickID(r, b.ids)
	if err := b.posts.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&p); err != nil {
		return err
	}
	_, err := b.posts.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "view_count", Value: int64(1)}}}})
	return err
}
