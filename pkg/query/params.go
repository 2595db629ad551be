package query

import "reflect"

// Params turns a request's top-level filter fields into conditions,
// skipping the ones the caller left empty (upstream append_query_filter):
// eq for a value, in for a list. Pairs are key, value; a pointer is
// followed, a nil or zero value or an empty list skipped.
func Params(pairs ...any) []Condition {
	var out []Condition
	for i := 0; i+1 < len(pairs); i += 2 {
		v := reflect.ValueOf(pairs[i+1])
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				continue
			}
			v = v.Elem()
		}
		if !v.IsValid() || (v.Kind() != reflect.Bool && v.IsZero()) {
			continue
		}
		key := pairs[i].(string)
		if v.Kind() == reflect.Slice || v.Kind() == reflect.Array {
			if v.Len() == 0 {
				continue
			}
			// the in operator takes []any, whatever the element type
			list := make([]any, v.Len())
			for j := range list {
				list[j] = v.Index(j).Interface()
			}
			out = append(out, Condition{Key: key, Value: list, Operator: "in"})
			continue
		}
		out = append(out, Condition{Key: key, Value: v.Interface(), Operator: "eq"})
	}
	return out
}

// With returns q (or an empty query) with conds ANDed to its filter.
func With(q *Query, conds ...Condition) *Query {
	if q == nil {
		q = &Query{}
	}
	q.Filter = append(q.Filter, conds...)
	return q
}
