package stat

import (
	"context"
	"errors"
	"iter"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
)

// Run answers q over c: {"results": [...]}, plus "total_count" (the rows
// before paging) when q.Page.Limit > 0. scope (the caller's tenancy) is
// ANDed into the filter; r.KeywordFields are searched by q.Keyword. When
// r.Fields is set, the query's stages may read only those fields (its
// filters answer for any other as for a field no row has), and a query whose
// stages never build new rows ends with a projection onto them, so stat
// never returns more of a document than the resource's Info. Client
// mistakes are *errs.Error with a 4xx status.
func Run(ctx context.Context, c *mongo.Collection, scope bson.D, r query.Resource, q *Query) (map[string]any, error) {
	if q == nil {
		q = &Query{}
	}
	if err := r.CheckDeclaration(); err != nil {
		return nil, err
	}
	// Secrets first: the answer to a query naming one depends on nothing else.
	reshaped, err := q.Paths(query.NoSecret(r.Secret))
	if err != nil {
		return nil, err
	}
	if !reshaped && len(q.Aggregate) > 0 && len(r.Secret) > 0 && r.Fields == nil {
		return nil, errors.New("stat: a resource with secret fields must declare its Fields") // rows would be whole documents
	}
	if len(r.Maps) > 0 {
		// On a copy, so a query run twice is escaped once.
		q = q.clone()
		if _, err := q.Paths(r.Maps.Rewrite); err != nil {
			return nil, err
		}
	}
	if r.Fields != nil {
		// Filters on a field the resource does not show answer as for a
		// field no row has (query.Resource.Unshown); stages on one are 400.
		stages := *q
		stages.Filter, stages.FilterOr = nil, nil
		if _, err := stages.Paths(query.Readable(r.Fields)); err != nil {
			return nil, err
		}
		c := *q
		c.Filter, c.FilterOr = r.Unshown(q.Filter), r.Unshown(q.FilterOr)
		q = &c
		if !reshaped && len(q.Aggregate) > 0 {
			fields := make([]ProjectField, 0, len(r.Fields))
			for _, f := range r.Fields {
				if !query.IsSecret(r.Secret, f) { // a top-level field holding a secret is left out whole
					fields = append(fields, ProjectField{Key: f, Name: f})
				}
			}
			q.Aggregate = append(q.Aggregate, Stage{Project: &Project{Fields: fields, ExcludeKeys: true}})
		}
	}
	return run(ctx, c, scope, r.KeywordFields, q, true)
}

// run is Run; tests turn pushDown off to check that the store and the Go
// evaluator group alike.
func run(ctx context.Context, c *mongo.Collection, scope bson.D, keywordFields []string, q *Query, pushDown bool) (map[string]any, error) {
	if q == nil {
		q = &Query{}
	}
	p, err := q.compile()
	if err != nil {
		return nil, err
	}
	filter, err := query.Filter(scope, q.Filter, q.FilterOr, q.Keyword, keywordFields)
	if err != nil {
		return nil, err
	}
	if filter, err = store.Resolve(ctx, c, filter); err != nil { // match conditions
		return nil, err
	}
	pipeline := mongo.Pipeline{{{Key: "$match", Value: filter}}}
	steps := p.steps
	lim := CurrentLimits()
	if g := firstGroup(steps); pushDown && g != nil && g.pushable() {
		// One group past the limit is enough to refuse the query.
		pipeline = append(pipeline, g.storeStage(), bson.D{{Key: "$limit", Value: int64(lim.MaxGroups) + 1}})
		steps = append([]step{{run: g.fromStore}}, steps[1:]...)
	} else if p.project != nil {
		pipeline = append(pipeline, bson.D{{Key: "$project", Value: p.project}})
	}
	cur, err := c.Aggregate(ctx, pipeline)
	if err != nil {
		return nil, store.Wrap(err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()

	r := &runner{lim: lim}
	if p.distinct != nil {
		return respond(r, distinctValues(r, source(ctx, r, cur), p.distinct), q.Page, render)
	}
	out := source(ctx, r, cur)
	for _, s := range steps {
		out = s.run(r, out)
	}
	return respond(r, anySeq(out), q.Page, func(v any) any { return flatten(v.(bson.D)) })
}

func firstGroup(steps []step) *groupStage {
	if len(steps) == 0 {
		return nil
	}
	return steps[0].group
}

// source streams the cursor's documents.
func source(ctx context.Context, r *runner, cur *mongo.Cursor) rows {
	return func(yield func(bson.D) bool) {
		for cur.Next(ctx) {
			// bson.Unmarshal, not cur.Decode: nested documents stay bson.D
			// in their stored key order (the client reads them as maps),
			// since groups and sorts compare whole documents.
			var d bson.D
			if err := bson.Unmarshal(cur.Current, &d); err != nil {
				r.fail(err)
				return
			}
			if !yield(normalize(d).(bson.D)) {
				return
			}
		}
		if err := cur.Err(); err != nil {
			r.fail(store.Wrap(err))
		}
	}
}

// distinctValues yields the distinct values at p, sorted; array values
// count element by element, as MongoDB's distinct does.
func distinctValues(r *runner, in rows, p path) iter.Seq[any] {
	return func(yield func(any) bool) {
		seen := map[string]bool{}
		var vals []any
		add := func(v any) {
			if k := keyOf(v); v != missing && !seen[k] {
				seen[k] = true
				vals = append(vals, v)
			}
		}
		for d := range in {
			if len(vals) > r.lim.MaxGroups {
				r.fail(tooManyGroups(r.lim.MaxGroups))
				return
			}
			leaves(d, p, func(v any) {
				if arr, ok := v.([]any); ok {
					for _, e := range arr {
						add(e)
					}
					return
				}
				add(v)
			})
		}
		if r.err != nil {
			return
		}
		slices.SortFunc(vals, compare)
		for _, v := range vals {
			if !yield(v) {
				return
			}
		}
	}
}

func anySeq(in rows) iter.Seq[any] {
	return func(yield func(any) bool) {
		for d := range in {
			if !yield(d) {
				return
			}
		}
	}
}

// respond drains vals into the response, rendering only the rows of the
// page; with a page limit it counts every row for total_count.
func respond(r *runner, vals iter.Seq[any], page *query.Page, show func(any) any) (map[string]any, error) {
	start, limit := 0, 0
	if page != nil {
		start, limit = max(page.Start, 1)-1, page.Limit
	}
	results := []any{}
	n := 0
	for v := range vals {
		n++
		if limit > 0 && (n <= start || n > start+limit) {
			continue
		}
		if len(results) == r.lim.MaxGroups {
			r.fail(tooManyGroups(r.lim.MaxGroups))
			break
		}
		results = append(results, show(v))
	}
	if r.err != nil {
		return nil, store.Wrap(r.err)
	}
	res := map[string]any{"results": results}
	if limit > 0 {
		res["total_count"] = n
	}
	return res, nil
}

// RunFor is Run inside what p reaches of resource r (r.Tenancy).
func RunFor(ctx context.Context, c *mongo.Collection, p *auth.Principal, r query.Resource, q *Query) (map[string]any, error) {
	scope, err := store.Scope(p, r)
	if err != nil {
		return nil, err
	}
	return Run(ctx, c, scope, r, q)
}
