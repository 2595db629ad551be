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
