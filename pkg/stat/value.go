package stat

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Rows are ordered documents (bson.D) whose values are nil, bool, int64,
// float64, string, time.Time, bson.D or []any, as normalize makes them.
// Order matters: MongoDB compares documents and converts objects to arrays
// field by field.

// missingValue marks an absent field. MongoDB tells it apart from null: a
// project drops it, push skips it, a comparison puts it below null.
type missingValue struct{}

var missing any = missingValue{}

// normalize turns a value decoded by the driver into the row model.
func normalize(v any) any {
	switch x := v.(type) {
	case bson.D:
		out := make(bson.D, len(x))
		for i, e := range x {
			out[i] = bson.E{Key: e.Key, Value: normalize(e.Value)}
		}
		return out
	case bson.M:
		return normalize(map[string]any(x))
	case map[string]any: // JSON values of conditions; key order is lost, so sort
		out := make(bson.D, 0, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			out = append(out, bson.E{Key: k, Value: normalize(x[k])})
		}
		return out
	case bson.A:
		return normalize([]any(x))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case int32:
		return int64(x)
	case int:
		return int64(x)
	case bson.DateTime:
		return x.Time().UTC()
	case time.Time:
		return x.UTC()
	case bson.ObjectID:
		return x.Hex()
	case bson.Decimal128:
		f, _ := strconv.ParseFloat(x.String(), 64)
		return f
	}
	return v
}

// render turns a row value into its JSON form: times as ISO strings with
// milliseconds, documents as maps with their keys as written (a free-form
// map's are stored escaped, see pkg/freeform), NaN and infinities as null.
func render(v any) any {
	switch x := v.(type) {
	case bson.D:
		m := make(map[string]any, len(x))
		for _, e := range x {
			m[freeform.UnescapeKey(e.Key)] = render(e.Value)
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = render(e)
		}
		return out
	case time.Time:
		return wire.FormatTime(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
	}
	return v
}

// flatten renders a result row; the members of a document _id (the group
// keys) become top-level fields, as upstream does.
func flatten(d bson.D) map[string]any {
	m := make(map[string]any, len(d))
	for _, e := range d {
		if id, ok := e.Value.(bson.D); ok && e.Key == "_id" {
			for _, k := range id {
				m[k.Key] = render(k.Value)
			}
			continue
		}
		m[e.Key] = render(e.Value)
	}
	return m
}

// path is a dotted field path, split.
type path []string

func parsePath(s string) path { return strings.Split(s, ".") }

func (p path) String() string { return strings.Join(p, ".") }

// of reads p as the expression "$p" does: through an array it collects
// the values found in its elements (skipping elements without them).
func (p path) of(d bson.D) any { return lookup(d, p) }

func lookup(v any, p path) any {
	if len(p) == 0 {
		return v
	}
	switch x := v.(type) {
	case bson.D:
		f, ok := get(x, p[0])
		if !ok {
			return missing
		}
		return lookup(f, p[1:])
	case []any:
		out := []any{}
		for _, e := range x {
			switch e.(type) {
			case bson.D, []any:
				if r := lookup(e, p); r != missing {
					out = append(out, r)
				}
			}
		}
		return out
	}
	return missing
}

// leaves calls fn with each value p reaches as a query filter sees it:
// arrays on the way are searched element by element, and a path that
// ends nowhere yields missing.
func leaves(v any, p path, fn func(any)) {
	if len(p) == 0 {
		fn(v)
		return
	}
	switch x := v.(type) {
	case bson.D:
		f, ok := get(x, p[0])
		if !ok {
			fn(missing)
			return
		}
		leaves(f, p[1:], fn)
	case []any:
		found := false
		for _, e := range x {
			if d, ok := e.(bson.D); ok {
				found = true
				leaves(d, p, fn)
			}
		}
		if !found {
			fn(missing)
		}
	default:
		fn(missing)
	}
}

// nested reads p through documents only, as $unwind does.
func nested(d bson.D, p path) (any, bool) {
	v, ok := get(d, p[0])
	if !ok || len(p) == 1 {
		return v, ok
	}
	sub, isDoc := v.(bson.D)
	if !isDoc {
		return nil, false
	}
	return nested(sub, p[1:])
}

// withNested returns a copy of d with p set to v; d is left untouched
// because other rows share it.
func withNested(d bson.D, p path, v any) bson.D {
	out := slices.Clone(d)
	if len(p) > 1 {
		sub, _ := get(out, p[0])
		v = withNested(sub.(bson.D), p[1:], v)
	}
	return set(out, p[0], v)
}

func get(d bson.D, key string) (any, bool) {
	for _, e := range d {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// set replaces key in place, or appends it.
func set(d bson.D, key string, v any) bson.D {
	for i := range d {
		if d[i].Key == key {
			d[i].Value = v
			return d
		}
	}
	return append(d, bson.E{Key: key, Value: v})
}

func isNumber(v any) bool {
	switch v.(type) {
	case int64, float64:
		return true
	}
	return false
}

func toFloat(v any) float64 {
	if i, ok := v.(int64); ok {
		return float64(i)
	}
	return v.(float64)
}

// rank is MongoDB's order of BSON types (missing first).
func rank(v any) int {
	switch v.(type) {
	case missingValue:
		return 0
	case nil:
		return 1
	case int64, float64:
		return 2
	case string:
		return 3
	case bson.D:
		return 4
	case []any:
		return 5
	case bool:
		return 8
	case time.Time:
		return 9
	}
	return 12
}

// compare orders two values as MongoDB does: by type, then by value;
// numbers compare across int and double.
func compare(a, b any) int {
	if ra, rb := rank(a), rank(b); ra != rb {
		return cmp.Compare(ra, rb)
	}
	switch x := a.(type) {
	case int64:
		if y, ok := b.(int64); ok {
			return cmp.Compare(x, y)
		}
		return cmp.Compare(float64(x), b.(float64))
	case float64:
		return cmp.Compare(x, toFloat(b)) // cmp puts NaN first, as MongoDB does
	case string:
		return strings.Compare(x, b.(string))
	case bool:
		return cmp.Compare(boolInt(x), boolInt(b.(bool)))
	case time.Time:
		return x.Compare(b.(time.Time))
	case bson.D:
		y := b.(bson.D)
		for i := 0; i < len(x) && i < len(y); i++ {
			c := cmp.Compare(rank(x[i].Value), rank(y[i].Value))
			if c == 0 {
				c = strings.Compare(x[i].Key, y[i].Key)
			}
			if c == 0 {
				c = compare(x[i].Value, y[i].Value)
			}
			if c != 0 {
				return c
			}
		}
		return cmp.Compare(len(x), len(y))
	case []any:
		y := b.([]any)
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := compare(x[i], y[i]); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(x), len(y))
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// keyOf encodes v so that values compare equal exactly when their keys
// do (1 and 1.0 alike); groups and sets are maps over it.
func keyOf(v any) string {
	var b strings.Builder
	writeKey(&b, v)
	return b.String()
}

func writeKey(b *strings.Builder, v any) {
	switch x := v.(type) {
	case missingValue:
		b.WriteString("m")
	case nil:
		b.WriteString("z")
	case int64:
		b.WriteString("n" + strconv.FormatInt(x, 10))
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			b.WriteString("n" + strconv.FormatInt(int64(x), 10))
		} else {
			b.WriteString("f" + strconv.FormatFloat(x, 'g', -1, 64))
		}
	case string:
		b.WriteString("s" + strconv.Itoa(len(x)) + ":" + x)
	case bool:
		b.WriteString("b" + strconv.FormatBool(x))
	case time.Time:
		b.WriteString("t" + strconv.FormatInt(x.UnixNano(), 10))
	case bson.D:
		b.WriteString("{")
		for _, e := range x {
			b.WriteString(strconv.Itoa(len(e.Key)) + ":" + e.Key)
			writeKey(b, e.Value)
		}
		b.WriteString("}")
	case []any:
		b.WriteString("[")
		for _, e := range x {
			writeKey(b, e)
		}
		b.WriteString("]")
	default:
		fmt.Fprintf(b, "?%T:%v", x, x)
	}
}

func typeName(v any) string {
	switch v.(type) {
	case missingValue:
		return "missing"
	case nil:
		return "null"
	case int64, float64:
		return "number"
	case string:
		return "string"
	case bson.D:
		return "object"
	case []any:
		return "array"
	case bool:
		return "bool"
	case time.Time:
		return "date"
	}
	return fmt.Sprintf("%T", v)
}
