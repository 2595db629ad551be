package query

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Paths calls fn with every field path q reads (filter, filter_or, sort,
// only); fn may rewrite a path in place (v1 field names).
func (q *Query) Paths(fn func(at string, p *string) error) error {
	if q == nil {
		return nil
	}
	for _, group := range []struct {
		at   string
		list []Condition
	}{{"query.filter.key", q.Filter}, {"query.filter_or.key", q.FilterOr}} {
		for i := range group.list {
			if err := fn(group.at, &group.list[i].Key); err != nil {
				return err
			}
		}
	}
	for i := range q.Sort {
		if err := fn("query.sort.key", &q.Sort[i].Key); err != nil {
			return err
		}
	}
	for i := range q.Only {
		if err := fn("query.only", &q.Only[i]); err != nil {
			return err
		}
	}
	return nil
}

// Readable returns a path check that lets through only paths whose first
// segment is one of fields: what a resource's Info shows. A filter or sort
// on anything else (a password hash, a lockout counter) would be an oracle.
func Readable(fields []string) func(at string, p *string) error {
	return func(at string, p *string) error {
		if *p == "" {
			return nil // the compiler answers it
		}
		top, _, _ := strings.Cut(*p, ".")
		if top != "_id" && !slices.Contains(fields, top) {
			return errs.Invalid(at, fmt.Sprintf("%q is not a field of this resource", *p))
		}
		return nil
	}
}

// FieldsOf lists the JSON names of T's fields: a resource's Info type
// gives the fields its queries may read.
func FieldsOf[T any]() []string {
	t := reflect.TypeFor[T]()
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// Without returns fields without those named by drop (a new slice; nil
// for nil): the fields of an Info type that are filled in after the store
// answers, which no query may read.
func Without(fields []string, drop ...string) []string {
	out := fields[:0:0]
	for _, f := range fields {
		if !slices.Contains(drop, f) {
			out = append(out, f)
		}
	}
	return out
}

// Shows reports whether path p reads a field of the resource's Info
// (Fields, or `_id`); with no Fields declared, every path.
func (r Resource) Shows(p string) bool {
	if r.Fields == nil {
		return true
	}
	top, _, _ := strings.Cut(p, ".")
	return top == "_id" || slices.Contains(r.Fields, top)
}

// Unshown returns a copy of conds in which each condition on a path r does
// not show is marked absent: it is checked as any other (operator, value)
// and then answered as MongoDB answers it for a document lacking the field
// (`eq null`, `exists false`, `not x` match every row; `gt`, `regex`,
// `exists true` none), without the store ever reading that path. So an
// upstream key Nubes does not model is no error, and a stored field the
// Info leaves out (a lockout counter) is no oracle either.
func (r Resource) Unshown(conds []Condition) []Condition {
	if r.Fields == nil || len(conds) == 0 {
		return conds
	}
	out := slices.Clone(conds)
	for i := range out {
		if out[i].Key != "" && !r.Shows(out[i].Key) {
			out[i].absent = true
		}
	}
	return out
}

// shown keeps the paths r shows (a new slice).
func (r Resource) shown(paths []string) []string {
	return slices.DeleteFunc(slices.Clone(paths), func(p string) bool { return !r.Shows(p) })
}
