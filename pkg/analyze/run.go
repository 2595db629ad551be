package analyze

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
)

// Run answers q over c: {"results": [...]}, plus "more" (whether rows
// past the page exist) when q.Page.Limit > 0; never a total_count. scope
// (the caller's tenancy) is ANDed into the filter and cannot be widened;
// r.KeywordFields are searched by q.Keyword; when r.Fields is set, the
// filter, group_by and fields may read only those fields. Client mistakes
// are *errs.Error with a 4xx status.
func Run(ctx context.Context, c *mongo.Collection, scope bson.D, r query.Resource, q *Query) (map[string]any, error) {
	if q == nil {
		q = &Query{}
	}
	if err := readable(r, q, ""); err != nil {
		return nil, err
	}
	p, err := q.compile(nil)
	if err != nil {
		return nil, err
	}
	return run(ctx, c, scope, r, p)
}

// RunTimeSeries answers a TimeSeriesAnalyzeQuery as Run does, over the
// date field df of c (the service knows which field and format fit the
// granularity): with a granularity, df.Key is also grouped, as "date";
// start and end keep df.Key within [start, end's whole period).
func RunTimeSeries(ctx context.Context, c *mongo.Collection, scope bson.D, r query.Resource, q *TimeSeriesQuery, df DateField) (map[string]any, error) {
	if q == nil {
		q = &TimeSeriesQuery{}
	}
	if df.Key == "" || df.Format == "" {
		return nil, errors.New("analyze: RunTimeSeries needs the date field and its format")
	}
	if err := readable(r, &q.Query, df.Key); err != nil {
		return nil, err
	}
	p, err := q.compile(df)
	if err != nil {
		return nil, err
	}
	return run(ctx, c, scope, r, p)
}

func run(ctx context.Context, c *mongo.Collection, scope bson.D, r query.Resource, p *plan) (map[string]any, error) {
	res, err := stat.Run(ctx, c, scope, r, p.stat)
	if err != nil {
		return nil, err
	}
	results, _ := res["results"].([]any)
	if results == nil {
		results = []any{}
	}
	out := map[string]any{"results": results}
	if p.limit > 0 {
		more := len(results) > p.limit
		if more {
			out["results"] = results[:p.limit]
		}
		out["more"] = more
	}
	return out, nil
}

// readable names, in the query's own terms, a read of a secret field
// (first: the answer depends on nothing else) or of a field the resource
// does not show; stat checks again, in its terms.
func readable(r query.Resource, q *Query, dateKey string) error {
	if err := r.CheckDeclaration(); err != nil {
		return err
	}
	if err := paths(q, query.NoSecret(r.Secret)); err != nil {
		return err
	}
	if dateKey != "" && query.IsSecret(r.Secret, dateKey) {
		return fmt.Errorf("analyze: the date field %q is a secret", dateKey) // a service bug
	}
	if r.Fields == nil {
		return nil
	}
	// Filters on other fields answer as for a field no row has (stat.Run
	// marks them, query.Resource.Unshown); groups and fields on one are 400.
	if err := paths(&Query{GroupBy: q.GroupBy, Fields: q.Fields}, query.Readable(r.Fields)); err != nil {
		return err
	}
	if dateKey != "" {
		if err := query.Readable(r.Fields)("date field", &dateKey); err != nil {
			return fmt.Errorf("analyze: the date field %q is not among the resource's fields", dateKey) // a service bug
		}
	}
	return nil
}

// Paths calls check with every stored path q reads (filter, filter_or,
// group_by, fields and push sources), as the query names them: a service
// refuses a path its own rule keeps from the caller (cost-analysis's
// denied keys) with it.
func (q *Query) Paths(check func(at string, p *string) error) error { return paths(q, check) }

// paths calls check with every stored path q reads: filter, filter_or,
// group_by and fields.
func paths(q *Query, check func(at string, p *string) error) error {
	for _, g := range []struct {
		at   string
		list []query.Condition
	}{{"query.filter.key", q.Filter}, {"query.filter_or.key", q.FilterOr}} {
		for i := range g.list {
			if err := check(g.at, &g.list[i].Key); err != nil {
				return err
			}
		}
	}
	for i := range q.GroupBy {
		if err := check("query.group_by", &q.GroupBy[i].Key); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(q.Fields)) { // the same path named every time
		f := q.Fields[name]
		if err := check("query.fields."+name+".key", &f.Key); err != nil {
			return err
		}
		for _, out := range slices.Sorted(maps.Keys(f.Fields)) {
			src := f.Fields[out]
			if err := check("query.fields."+name+".fields", &src); err != nil {
				return err
			}
		}
	}
	return nil
}

// RunFor is Run inside what p reaches of resource r (r.Tenancy).
func RunFor(ctx context.Context, c *mongo.Collection, p *auth.Principal, r query.Resource, q *Query) (map[string]any, error) {
	scope, err := store.Scope(p, r)
	if err != nil {
		return nil, err
	}
	return Run(ctx, c, scope, r, q)
}

// RunTimeSeriesFor is RunTimeSeries inside what p reaches of resource r.
func RunTimeSeriesFor(ctx context.Context, c *mongo.Collection, p *auth.Principal, r query.Resource, q *TimeSeriesQuery, df DateField) (map[string]any, error) {
	scope, err := store.Scope(p, r)
	if err != nil {
		return nil, err
	}
	return RunTimeSeries(ctx, c, scope, r, q, df)
}
