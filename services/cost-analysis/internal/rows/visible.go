package rows

import (
	"context"
	"errors"
	"maps"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// readAttempts bounds how often a read runs again because what it must
// leave out changed while it ran.
const readAttempts = 5

// Marks is what a domain's cost reads leave out at one moment: the rows
// of its Pending jobs that have not succeeded, the rows a Pending SUCCESS
// job swapped out (core.Job), and every row of a data source whose
// deregister has begun.
type Marks struct {
	jobs    map[string]string // Pending job -> status
	swapped bson.A            // window filters of the Pending SUCCESS jobs
	sources []string          // data sources being deleted
}

// marksOf reads a domain's marks: two equality queries, on the jobs
// (domain_id, pending) and on the data sources (domain_id, deleting).
func (r *Rows) marksOf(ctx context.Context, domainID string) (*Marks, error) {
	cur, err := r.jobs.Find(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "pending", Value: true}},
		options.Find().SetProjection(bson.D{{Key: "job_id", Value: 1}, {Key: "status", Value: 1}, {Key: "data_source_id", Value: 1},
			{Key: "domain_id", Value: 1}, {Key: "swap", Value: 1}}))
	if err != nil {
		return nil, store.Wrap(err)
	}
	var jobs []core.Job
	if err := cur.All(ctx, &jobs); err != nil {
		return nil, store.Wrap(err)
	}
	m := &Marks{jobs: map[string]string{}}
	for _, j := range jobs {
		m.jobs[j.JobID] = j.Status
		if j.Status != core.Success {
			continue
		}
		for _, c := range j.Swap {
			if f, ok := WindowFilter(j.DataSourceID, j.DomainID, j.JobID, c); ok {
				m.swapped = append(m.swapped, f)
			}
		}
	}
	cur, err = r.sources.Find(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "deleting", Value: true}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, store.Wrap(err)
	}
	var sources []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &sources); err != nil {
		return nil, store.Wrap(err)
	}
	for _, s := range sources {
		m.sources = append(m.sources, s.ID)
	}
	slices.Sort(m.sources)
	return m, nil
}

// same reports whether nothing the reads go by changed between m and o.
func (m *Marks) same(o *Marks) bool {
	return maps.Equal(m.jobs, o.jobs) && slices.Equal(m.sources, o.sources)
}

// nor is the $nor condition that leaves the marked rows out (nil when
// none is).
func (m *Marks) nor() bson.A {
	var out bson.A
	var hidden []string
	for id, status := range m.jobs {
		if status != core.Success {
			hidden = append(hidden, id)
		}
	}
	if len(hidden) > 0 {
		slices.Sort(hidden)
		out = append(out, bson.D{{Key: "job_id", Value: bson.D{{Key: "$in", Value: hidden}}}})
	}
	if len(m.sources) > 0 {
		out = append(out, bson.D{{Key: "data_source_id", Value: bson.D{{Key: "$in", Value: m.sources}}}})
	}
	return append(out, m.swapped...)
}

// Scoped is the caller's scope without the marked rows. Under $nor, not
// as job_id or data_source_id conditions: with the caller's own filter on
// them the key would repeat, and query.Filter would make an $and of it,
// which FerretDB scans in Go.
func (m *Marks) Scoped(scope bson.D) bson.D {
	if nor := m.nor(); len(nor) > 0 {
		return append(scope, bson.E{Key: "$nor", Value: nor})
	}
	return scope
}

// Hides reports whether the marks leave out doc (a stored row): the Go
// reading of nor, for a get, since FerretDB scans the whole collection
// for _id plus any other condition.
func (m *Marks) Hides(doc bson.M) bool {
	for _, c := range m.nor() {
		if matches(doc, c.(bson.D)) {
			return true
		}
	}
	return false
}

// matches evaluates the conditions nor builds: equality, $in, $ne,
// $gte and $lte.
func matches(doc bson.M, f bson.D) bool {
	for _, e := range f {
		v := doc[e.Key]
		ops, ok := e.Value.(bson.D)
		if !ok {
			if !equal(v, e.Value) {
				return false
			}
			continue
		}
		for _, op := range ops {
			ok := true
			switch op.Key {
			case "$in":
				ok = slices.ContainsFunc(op.Value.([]string), func(x string) bool { return equal(v, x) })
			case "$ne":
				ok = !equal(v, op.Value)
			case "$gte", "$lte":
				s, isStr := v.(string)
				bound, _ := op.Value.(string)
				ok = isStr && (op.Key == "$gte" && s >= bound || op.Key == "$lte" && s <= bound)
			default:
				ok = false
			}
			if !ok {
				return false
			}
		}
	}
	return true
}

// equal compares a stored value with a filter's, numbers as numbers.
func equal(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	}
	return 0, false
}

// Visible runs read in scope without the marked rows. The marks are
// read before and after read: when they changed in between (a job
// started, swapped its windows or failed; a deregister began), what read
// saw may mix two moments, and it runs again with the new marks. A read
// that never sees the marks hold still answers 503.
func Visible[T any](ctx context.Context, r *Rows, domainID string, read func(m *Marks) (T, error)) (T, error) {
	var zero T
	m, err := r.marksOf(ctx, domainID)
	if err != nil {
		return zero, err
	}
	for range readAttempts {
		out, err := read(m)
		if err != nil {
			return zero, err
		}
		now, err := r.marksOf(ctx, domainID)
		if err != nil {
			return zero, err
		}
		if now.same(m) {
			return out, nil
		}
		m = now
	}
	return zero, errs.Down("The costs", errors.New("syncs kept changing them during the read; try again"))
}
