package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// A group is one service's get and list measured beside the raw driver on
// a store the group seeds once: a service's file holds only its documents,
// its seeding and its request shapes; this file holds the rest.

// measureGroup seeds the store (only when -ops asks for one of the group's
// operations, or for all) and measures each operation asked for; nil when
// -ops names none of them. ops gives the operations on the seeded ids; it
// is called once before seeding, with none, to learn their names.
func (b *bench) measureGroup(ctx context.Context, what string, seed func(context.Context) ([]string, error),
	ops func(ids []string) []operation) ([]result, error) {
	asked := func(o operation) bool { return len(b.cfg.ops) == 0 || slices.Contains(b.cfg.ops, o.name) }
	if !slices.ContainsFunc(ops(nil), asked) {
		return nil, nil
	}
	ids, err := seed(ctx)
	if err != nil {
		return nil, fmt.Errorf("seed %s: %w", what, err)
	}
	var out []result
	for _, op := range ops(ids) {
		if !asked(op) {
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

// throughput is a bulk operation timed once per side (a sync, a collect):
// items stored through the service's workers beside the driver storing
// the same documents.
type throughput struct {
	name, unit string // table row name; unit of items ("rows", "res")
	callers    int    // tasks that ran at once
	items      int
	nubes, raw time.Duration
	err        string
}

func (t *throughput) print(tw io.Writer) {
	fmt.Fprintf(tw, "%s\tnubes\t%d\t%.1f %s/s\t\t\t%d\t%d\t%.3f\t\t\n", t.name, t.callers, float64(t.items)/t.nubes.Seconds(), t.unit, t.items,
		map[bool]int{true: 1}[t.err != ""], t.raw.Seconds()/t.nubes.Seconds())
	fmt.Fprintf(tw, "%s\traw\t%d\t%.1f %s/s\t\t\t%d\t0\t\t\t\n", t.name, t.callers, float64(t.items)/t.raw.Seconds(), t.unit, t.items)
	if t.err != "" {
		fmt.Fprintf(tw, "  error: %s\t\t\t\t\t\t\t\t\t\t\n", t.err)
	}
}

// groupSummary is summary(rs) with t's figures added under its name.
func groupSummary(rs []result, t *throughput) map[string]figures {
	out := summary(rs)
	if t != nil && t.nubes > 0 && t.raw > 0 {
		ratio := math.Round(t.raw.Seconds()/t.nubes.Seconds()*1000) / 1000
		out[t.name] = figures{OpsPerS: math.Round(float64(t.items) / t.nubes.Seconds()), RawOpsPerS: math.Round(float64(t.items) / t.raw.Seconds()),
			Ratio: &ratio}
	}
	return out
}

// printGroup prints a group's results under heading (what the store
// holds), and t's rows when t is not nil.
func (b *bench) printGroup(w io.Writer, heading string, rs []result, t ...*throughput) {
	fmt.Fprintf(w, "\n%s, %s per side, mongo pool %d\n", heading, b.cfg.duration, b.cfg.pool)
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
			name, ratio, goal := "nubes", fmt.Sprintf("%.3f", r.ratio()), fmt.Sprintf(">= %g %s", r.op.goal, verdict)
			if i == 1 {
				name, ratio, goal = "raw", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.2f\t%.2f\t%d\t%d\t%s\t%s\t\n", r.op.name, name, r.op.callers(b.cfg),
				side.opsPerSec(), side.percentile(.5), side.percentile(.99), len(side.lat), side.errors, ratio, goal)
		}
		if r.nubes.firstErr != "" {
			fmt.Fprintf(tw, "  first error: %s\t\t\t\t\t\t\t\t\t\t\n", r.nubes.firstErr)
		}
	}
	for _, t := range t {
		if t != nil {
			t.print(tw)
		}
	}
	_ = tw.Flush()
}

// seedDocs stores count documents, seedBatch at a time; doc makes the
// n-th (from 0).
func seedDocs(ctx context.Context, c *mongo.Collection, count int, doc func(n int) (any, error)) error {
	for done := 0; done < count; {
		docs := make([]any, min(seedBatch, count-done))
		for i := range docs {
			d, err := doc(done + i)
			if err != nil {
				return err
			}
			docs[i] = d
		}
		if _, err := c.InsertMany(ctx, docs); err != nil {
			return err
		}
		done += len(docs)
	}
	return nil
}

// pickID is one of ids at random.
func pickID(r *rand.Rand, ids []string) string { return ids[r.IntN(len(ids))] }

// pastYear is a random time of the last year, as the store keeps it.
func pastYear(r *rand.Rand) time.Time {
	return time.Now().UTC().Add(-time.Duration(r.Int64N(int64(365 * 24 * time.Hour)))).Truncate(time.Millisecond)
}

// pageOf is a list request of the first page of 20, with more members
// given as key, value pairs.
func pageOf(kv ...any) map[string]any {
	m := map[string]any{"query": map[string]any{"page": map[string]int{"start": 1, "limit": 20}}}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// post is the service side of an operation: a call of path with the body
// made for this call.
func (b *bench) post(path string, body func(r *rand.Rand) any) func(context.Context, *rand.Rand) error {
	return func(ctx context.Context, r *rand.Rand) error { return b.call(ctx, path, body(r), nil) }
}

// rawGet is the driver's side of a get: FindOne by _id of one of ids,
// decoded as the service's document T.
func rawGet[T any](c *mongo.Collection, ids []string) func(context.Context, *rand.Rand) error {
	return func(ctx context.Context, r *rand.Rand) error {
		var d T
		return c.FindOne(ctx, bson.D{{Key: "_id", Value: pickID(r, ids)}}).Decode(&d)
	}
}

// rawPage is the driver's side of a list: the count of filter's matches
// and their first page of 20 sorted by sort, then _id, decoded as T.
func rawPage[T any](ctx context.Context, c *mongo.Collection, filter bson.D, sort bson.E) ([]T, error) {
	if _, err := c.CountDocuments(ctx, filter); err != nil {
		return nil, err
	}
	cur, err := c.Find(ctx, filter, options.Find().SetSort(bson.D{sort, {Key: "_id", Value: 1}}).SetLimit(20))
	if err != nil {
		return nil, err
	}
	var rows []T
	return rows, cur.All(ctx, &rows)
}

// rawList is rawPage as an operation's side; filter makes the filter of
// each call.
func rawList[T any](c *mongo.Collection, filter func(r *rand.Rand) bson.D, sort bson.E) func(context.Context, *rand.Rand) error {
	return func(ctx context.Context, r *rand.Rand) error {
		_, err := rawPage[T](ctx, c, filter(r), sort)
		return err
	}
}
