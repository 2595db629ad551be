package stat

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
)

// The evaluators below give each stage MongoDB's meaning (they are the
// reference: the store runs at most a leading count/sum group). A row
// after a group is {_id: {<key names>}, <field names>...}, as in MongoDB.

type groupStage struct {
	keys   []groupKey
	fields []groupField
}

type groupKey struct {
	name string
	p    path
	date func(time.Time) any // date_format, or nil
}

type groupField struct {
	name  string
	op    string
	p     path        // accumulated key; nil for count and for push of objects
	push  []namedPath // push: the members of each pushed object
	when  []test      // conditions, ANDed
	array bool        // data_type array: reduce each row's array first
}

type namedPath struct {
	name string
	p    path
}

// test is a group field condition, an aggregation comparison: values of
// different types compare by type, and a missing field is below null.
type test struct {
	p   path
	op  string
	val any
}

func (t test) holds(d bson.D) bool {
	c := compare(t.p.of(d), t.val)
	switch t.op {
	case "eq":
		return c == 0
	case "not":
		return c != 0
	case "gt":
		return c > 0
	case "gte":
		return c >= 0
	case "lt":
		return c < 0
	}
	return c <= 0
}

// run streams the rows into one accumulator set per group.
func (g *groupStage) run(r *runner, in rows) rows {
	return func(yield func(bson.D) bool) {
		type bucket struct {
			id   bson.D
			accs []accumulator
		}
		buckets := map[string]*bucket{}
		for d := range in {
			id, err := g.id(d)
			if err != nil {
				r.fail(err)
				return
			}
			k := keyOf(id)
			b := buckets[k]
			if b == nil {
				if len(buckets) == r.lim.MaxGroups {
					r.fail(tooManyGroups(r.lim.MaxGroups))
					return
				}
				b = &bucket{id: id, accs: make([]accumulator, len(g.fields))}
				buckets[k] = b
			}
			for i := range g.fields {
				held := len(b.accs[i].list)
				if err := b.accs[i].add(g.fields[i].op, g.fields[i].input(d)); err != nil {
					r.fail(err)
					return
				}
				if r.pushed += len(b.accs[i].list) - held; r.pushed > r.lim.MaxPushed {
					r.fail(tooManyPushed(r.lim.MaxPushed))
					return
				}
			}
		}
		out := make([]bson.D, 0, len(buckets))
		for _, b := range buckets {
			row := bson.D{{Key: "_id", Value: b.id}}
			for i, f := range g.fields {
				row = append(row, bson.E{Key: f.name, Value: b.accs[i].result(f.op)})
			}
			out = append(out, row)
		}
		emitByID(r, out, yield)
	}
}

// id evaluates the group keys of d. As in MongoDB, a missing key is left
// out of a compound _id but is null when it is the only key.
func (g *groupStage) id(d bson.D) (bson.D, error) {
	id := make(bson.D, 0, len(g.keys))
	for _, k := range g.keys {
		v := k.p.of(d)
		if k.date != nil {
			switch t := v.(type) {
			case time.Time:
				v = k.date(t)
			case nil, missingValue:
				v = nil
			default:
				return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = date_format needs a date, %s is %s)", k.p, typeName(v))
			}
		}
		if v == missing {
			if len(g.keys) > 1 {
				continue
			}
			v = nil
		}
		id = append(id, bson.E{Key: k.name, Value: v})
	}
	return id, nil
}

// input is what the field accumulates from d.
func (f *groupField) input(d bson.D) any {
	for _, t := range f.when {
		if !t.holds(d) {
			return int64(0) // $cond's else: count and sum add nothing, average counts a zero
		}
	}
	switch {
	case f.op == "count":
		return int64(1)
	case f.push != nil:
		obj := bson.D{}
		for _, m := range f.push {
			if v := m.p.of(d); v != missing {
				obj = append(obj, bson.E{Key: m.name, Value: v})
			}
		}
		return obj
	case f.array:
		return reduceArray(f.op, f.p.of(d))
	}
	return f.p.of(d)
}

// reduceArray is the expression form of sum, average, max or min applied
// to one row's value: over the elements of an array, or the value itself.
// Like the expressions, it skips what is not a number (sum, average) or
// null (max, min), and gives null for nothing left (0 for sum).
func reduceArray(op string, v any) any {
	vals, ok := v.([]any)
	if !ok {
		vals = []any{v}
	}
	var a accumulator
	for _, e := range vals {
		_ = a.add(op, e) // sum, average, max and min never fail
	}
	return a.result(op)
}

// emitByID yields group rows ordered by their keys. MongoDB leaves the
// order of $group output open; fixing it makes results repeatable and the
// same whichever store grouped the rows.
func emitByID(r *runner, out []bson.D, yield func(bson.D) bool) {
	if r.err != nil {
		return
	}
	slices.SortFunc(out, func(a, b bson.D) int {
		x, _ := get(a, "_id")
		y, _ := get(b, "_id")
		return compare(x, y)
	})
	for _, d := range out {
		if !yield(d) {
			return
		}
	}
}

// pushable reports whether the store computes g exactly as run does:
// plain keys and at most one unconditional count or sum, the accumulators
// every store has. At most one because FerretDB 1.24 feeds the rows of a
// group to its first accumulator only (the others see none). average is
// not pushed: $avg skips non-numbers, and counting only the numbers would
// need $cond, which FerretDB lacks.
func (g *groupStage) pushable() bool {
	if len(g.fields) > 1 {
		return false
	}
	for _, k := range g.keys {
		if k.date != nil {
			return false
		}
	}
	for _, f := range g.fields {
		if (f.op != "count" && f.op != "sum") || len(f.when) > 0 || f.array {
			return false
		}
	}
	return true
}

// storeStage is the $group stage that computes g in the store.
func (g *groupStage) storeStage() bson.D {
	var id any // null: one group of all rows
	if len(g.keys) > 0 {
		keys := bson.D{}
		for _, k := range g.keys {
			keys = append(keys, bson.E{Key: k.name, Value: "$" + k.p.String()})
		}
		id = keys
	}
	spec := bson.D{{Key: "_id", Value: id}}
	for _, f := range g.fields {
		var arg any = int32(1)
		if f.op == "sum" {
			arg = "$" + f.p.String()
		}
		spec = append(spec, bson.E{Key: f.name, Value: bson.D{{Key: "$sum", Value: arg}}})
	}
	return bson.D{{Key: "$group", Value: spec}}
}

// fromStore takes the rows the store grouped as run would have made them.
func (g *groupStage) fromStore(r *runner, in rows) rows {
	return func(yield func(bson.D) bool) {
		var out []bson.D
		for d := range in {
			if len(out) == r.lim.MaxGroups {
				r.fail(tooManyGroups(r.lim.MaxGroups))
				return
			}
			if id, _ := get(d, "_id"); id == nil {
				d = set(d, "_id", bson.D{})
			}
			out = append(out, d)
		}
		emitByID(r, out, yield)
	}
}

// accumulator is the running state of one group field.
type accumulator struct {
	sum  numSum // count, sum, average
	n    int64  // average: the numbers seen
	val  any    // max, min, first, last
	has  bool
	list []any // push, add_to_set
	seen map[string]bool
	obj  bson.D // merge_objects
}

func (a *accumulator) add(op string, v any) error {
	switch op {
	case "count", "sum":
		a.sum.add(v)
	case "average":
		if isNumber(v) {
			a.sum.add(v)
			a.n++
		}
	case "max", "min":
		if v == nil || v == missing { // both ignore null and missing
			return nil
		}
		if c := compare(v, a.val); !a.has || (op == "max" && c > 0) || (op == "min" && c < 0) {
			a.val, a.has = v, true
		}
	case "first":
		if !a.has {
			a.val, a.has = orNull(v), true
		}
	case "last":
		a.val = orNull(v)
	case "push":
		if v != missing {
			a.list = append(a.list, v)
		}
	case "add_to_set":
		if a.seen == nil {
			a.seen = map[string]bool{}
		}
		if k := keyOf(v); v != missing && !a.seen[k] {
			a.seen[k] = true
			a.list = append(a.list, v)
		}
	case "merge_objects":
		switch x := v.(type) {
		case nil, missingValue:
		case bson.D:
			for _, e := range x {
				a.obj = set(a.obj, e.Key, e.Value)
			}
		default:
			return errs.New(errs.DBQuery, "Query is invalid. (reason = merge_objects needs objects, got %s)", typeName(v))
		}
	}
	return nil
}

func (a *accumulator) result(op string) any {
	switch op {
	case "count", "sum":
		return a.sum.value()
	case "average":
		if a.n == 0 {
			return nil
		}
		return toFloat(a.sum.value()) / float64(a.n)
	case "push":
		return append([]any{}, a.list...)
	case "add_to_set": // MongoDB leaves the order open; sorted is repeatable
		out := append([]any{}, a.list...)
		slices.SortFunc(out, compare)
		return out
	case "merge_objects":
		return append(bson.D{}, a.obj...)
	}
	return a.val
}

func orNull(v any) any {
	if v == missing {
		return nil
	}
	return v
}

// numSum adds numbers as $sum does: other values count for nothing; ints
// stay exact until a double joins or they overflow, doubles add apart
// (as FerretDB does, so pushed and Go sums agree).
type numSum struct {
	i     int64
	f     float64
	float bool
}

func (s *numSum) add(v any) {
	switch x := v.(type) {
	case int64:
		if r := s.i + x; (x >= 0) == (r >= s.i) {
			s.i = r
		} else {
			s.f, s.i, s.float = s.f+float64(s.i), x, true
		}
	case float64:
		s.f, s.float = s.f+x, true
	}
}

func (s *numSum) value() any {
	if s.float {
		return float64(s.i) + s.f
	}
	return s.i
}

type projectStage struct {
	fields      []projectField
	excludeKeys bool
}

type projectField struct {
	name string
	op   string
	p    path
	args []operand // add, subtract, multiply, divide
}

// operand is a key, a number or a nested operation.
type operand struct {
	p    path
	num  any
	op   string
	args []operand
}

// run rebuilds each row from the fields; _id (holding the group keys)
// stays unless excluded, as $project keeps it.
func (ps *projectStage) run(r *runner, in rows) rows {
	return func(yield func(bson.D) bool) {
		for d := range in {
			out := bson.D{}
			if id, ok := get(d, "_id"); ok && !ps.excludeKeys {
				out = append(out, bson.E{Key: "_id", Value: id})
			}
			for _, f := range ps.fields {
				v, err := f.eval(d)
				if err != nil {
					r.fail(err)
					return
				}
				if v != missing {
					out = set(out, f.name, v)
				}
			}
			if !yield(out) {
				return
			}
		}
	}
}

func (f *projectField) eval(d bson.D) (any, error) {
	if arithmetic[f.op] {
		return calc(f.op, f.args, d)
	}
	v := f.p.of(d)
	switch f.op {
	case "":
		return v, nil
	case "sum":
		var s numSum
		if arr, ok := v.([]any); ok {
			for _, e := range arr {
				s.add(e)
			}
		} else {
			s.add(v)
		}
		return s.value(), nil
	}
	if v == nil || v == missing { // MongoDB's $size would fail here; null keeps a sparse field harmless
		return nil, nil
	}
	switch f.op {
	case "size":
		if arr, ok := v.([]any); ok {
			return int64(len(arr)), nil
		}
	case "array_to_object":
		if obj, ok := arrayToObject(v); ok {
			return obj, nil
		}
	case "object_to_array":
		if obj, ok := v.(bson.D); ok {
			out := make([]any, len(obj))
			for i, e := range obj {
				out[i] = bson.D{{Key: "k", Value: e.Key}, {Key: "v", Value: e.Value}}
			}
			return out, nil
		}
	}
	return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = %s of %s: not for a %s)", f.op, f.p, typeName(v))
}

// arrayToObject takes [[k, v], ...] or [{k, v}, ...].
func arrayToObject(v any) (bson.D, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := bson.D{}
	for _, e := range arr {
		var k, val any
		switch x := e.(type) {
		case []any:
			if len(x) != 2 {
				return nil, false
			}
			k, val = x[0], x[1]
		case bson.D:
			kk, ok1 := get(x, "k")
			vv, ok2 := get(x, "v")
			if !ok1 || !ok2 || len(x) != 2 {
				return nil, false
			}
			k, val = kk, vv
		default:
			return nil, false
		}
		ks, ok := k.(string)
		if !ok {
			return nil, false
		}
		out = set(out, ks, val)
	}
	return out, true
}

func (o *operand) eval(d bson.D) (any, error) {
	switch {
	case o.op != "":
		return calc(o.op, o.args, d)
	case o.p != nil:
		return o.p.of(d), nil
	}
	return o.num, nil
}

// calc is $add, $subtract, $multiply or $divide: a null or missing
// operand gives null, a date may take milliseconds, and dividing by zero
// gives null (MongoDB fails the whole query instead).
func calc(op string, args []operand, d bson.D) (any, error) {
	vals := make([]any, len(args))
	for i := range args {
		v, err := args[i].eval(d)
		if err != nil {
			return nil, err
		}
		if v == nil || v == missing {
			return nil, nil
		}
		vals[i] = v
	}
	bad := errs.New(errs.DBQuery, "Query is invalid. (reason = %s needs numbers (or a date and milliseconds), got %s)", op, typeNames(vals))
	switch op {
	case "add":
		var sum any = int64(0)
		var date *time.Time
		for _, v := range vals {
			if t, ok := v.(time.Time); ok && date == nil {
				date = &t
				continue
			}
			if !isNumber(v) {
				return nil, bad
			}
			sum = addNum(sum, v)
		}
		if date != nil {
			return date.Add(millis(sum)), nil
		}
		return sum, nil
	case "multiply":
		var p any = int64(1)
		for _, v := range vals {
			if !isNumber(v) {
				return nil, bad
			}
			p = mulNum(p, v)
		}
		return p, nil
	case "subtract":
		a, b := vals[0], vals[1]
		ta, aDate := a.(time.Time)
		tb, bDate := b.(time.Time)
		switch {
		case aDate && bDate:
			return ta.Sub(tb).Milliseconds(), nil
		case aDate && isNumber(b):
			return ta.Add(-millis(b)), nil
		case isNumber(a) && isNumber(b):
			return subNum(a, b), nil
		}
		return nil, bad
	}
	if !isNumber(vals[0]) || !isNumber(vals[1]) {
		return nil, bad
	}
	if toFloat(vals[1]) == 0 {
		return nil, nil
	}
	return toFloat(vals[0]) / toFloat(vals[1]), nil
}

func typeNames(vals []any) string {
	names := make([]string, len(vals))
	for i, v := range vals {
		names[i] = typeName(v)
	}
	return strings.Join(names, ", ")
}

func millis(n any) time.Duration {
	return time.Duration(math.Round(toFloat(n) * float64(time.Millisecond)))
}

// addNum, subNum and mulNum keep ints exact and turn to doubles on
// overflow, as MongoDB does.
func addNum(a, b any) any {
	x, ok1 := a.(int64)
	y, ok2 := b.(int64)
	if r := x + y; ok1 && ok2 && (y >= 0) == (r >= x) {
		return r
	}
	return toFloat(a) + toFloat(b)
}

func subNum(a, b any) any {
	x, ok1 := a.(int64)
	y, ok2 := b.(int64)
	if r := x - y; ok1 && ok2 && (y >= 0) == (r <= x) {
		return r
	}
	return toFloat(a) - toFloat(b)
}

func mulNum(a, b any) any {
	x, ok1 := a.(int64)
	y, ok2 := b.(int64)
	if ok1 && ok2 {
		if x == 0 || y == 0 {
			return int64(0)
		}
		if r := x * y; r/y == x && !(x == -1 && y == math.MinInt64) && !(y == -1 && x == math.MinInt64) {
			return r
		}
	}
	return toFloat(a) * toFloat(b)
}

type unwindStage struct {
	p     path
	where []matcher
}

// run emits a row per element of the array at p (a non-array value as
// itself; no row for null, missing or []), then applies the filter.
func (u *unwindStage) run(_ *runner, in rows) rows {
	return func(yield func(bson.D) bool) {
		for d := range in {
			v, ok := nested(d, u.p)
			if !ok || v == nil {
				continue
			}
			arr, isArr := v.([]any)
			if !isArr {
				arr = []any{v}
			}
			for _, e := range arr {
				row := withNested(d, u.p, e)
				if !u.keeps(row) {
					continue
				}
				if !yield(row) {
					return
				}
			}
		}
	}
}

func (u *unwindStage) keeps(d bson.D) bool {
	for _, m := range u.where {
		if !m.holds(d) {
			return false
		}
	}
	return true
}

// matcher is an unwind filter condition with query semantics: it holds
// when a value the path reaches (or an element of it) matches, and the
// not operators hold when none does. contain is case-sensitive here.
type matcher struct {
	p    path
	op   string
	vals []any // one value unless the operator takes a list
}

func (m matcher) holds(d bson.D) bool {
	contain := strings.Contains(m.op, "contain")
	hit := false
	leaves(d, m.p, func(v any) {
		cands := []any{v}
		if arr, ok := v.([]any); ok {
			cands = append(cands, arr...)
		}
		for _, c := range cands {
			for _, want := range m.vals {
				if contain {
					s, ok := c.(string)
					hit = hit || (ok && strings.Contains(s, want.(string)))
				} else {
					hit = hit || queryEqual(c, want)
				}
			}
		}
	})
	return hit != strings.HasPrefix(m.op, "not")
}

// queryEqual is equality in a filter: null also matches a missing field.
func queryEqual(c, want any) bool {
	if want == nil {
		return c == nil || c == missing
	}
	return c != missing && compare(c, want) == 0
}

type sortKey struct {
	p    path
	desc bool
}

// sortStage orders rows by the keys; equal rows keep their order.
func sortStage(keys []sortKey) func(*runner, rows) rows {
	return func(r *runner, in rows) rows {
		return func(yield func(bson.D) bool) {
			type keyed struct {
				d  bson.D
				ks []any
			}
			var all []keyed
			for d := range in {
				ks := make([]any, len(keys))
				for i, k := range keys {
					ks[i] = sortValue(k.p.of(d), k.desc)
				}
				all = append(all, keyed{d, ks})
			}
			if r.err != nil {
				return
			}
			slices.SortStableFunc(all, func(a, b keyed) int {
				for i, k := range keys {
					c := compare(a.ks[i], b.ks[i])
					if k.desc {
						c = -c
					}
					if c != 0 {
						return c
					}
				}
				return 0
			})
			for _, k := range all {
				if !yield(k.d) {
					return
				}
			}
		}
	}
}

// sortValue is what $sort compares: missing as null, an array by its
// smallest element ascending or its largest descending, [] below null.
func sortValue(v any, desc bool) any {
	switch x := v.(type) {
	case missingValue:
		return nil
	case []any:
		if len(x) == 0 {
			return missing
		}
		best := x[0]
		for _, e := range x[1:] {
			if c := compare(e, best); (desc && c > 0) || (!desc && c < 0) {
				best = e
			}
		}
		return best
	}
	return v
}

func limitStage(n int64) func(*runner, rows) rows {
	return func(_ *runner, in rows) rows {
		return func(yield func(bson.D) bool) {
			var i int64
			for d := range in {
				if !yield(d) {
					return
				}
				if i++; i >= n {
					return // stops the stages upstream, and the cursor
				}
			}
		}
	}
}

func skipStage(n int64) func(*runner, rows) rows {
	return func(_ *runner, in rows) rows {
		return func(yield func(bson.D) bool) {
			var i int64
			for d := range in {
				if i++; i > n && !yield(d) {
					return
				}
			}
		}
	}
}

// countStage yields {name: rows}, or nothing for no rows, as $count does.
func countStage(name string) func(*runner, rows) rows {
	return func(r *runner, in rows) rows {
		return func(yield func(bson.D) bool) {
			var n int64
			for range in {
				n++
			}
			if r.err == nil && n > 0 {
				yield(bson.D{{Key: name, Value: n}})
			}
		}
	}
}

// specifiers of $dateToString that date_format supports (UTC).
var specifiers = map[byte]func(t time.Time) string{
	'Y': func(t time.Time) string { return fmt.Sprintf("%04d", t.Year()) },
	'm': func(t time.Time) string { return fmt.Sprintf("%02d", int(t.Month())) },
	'd': func(t time.Time) string { return fmt.Sprintf("%02d", t.Day()) },
	'H': func(t time.Time) string { return fmt.Sprintf("%02d", t.Hour()) },
	'M': func(t time.Time) string { return fmt.Sprintf("%02d", t.Minute()) },
	'S': func(t time.Time) string { return fmt.Sprintf("%02d", t.Second()) },
	'L': func(t time.Time) string { return fmt.Sprintf("%03d", t.Nanosecond()/1e6) },
	'j': func(t time.Time) string { return fmt.Sprintf("%03d", t.YearDay()) },
	'u': func(t time.Time) string { return fmt.Sprint((int(t.Weekday())+6)%7 + 1) }, // ISO: Monday 1
	'w': func(t time.Time) string { return fmt.Sprint(int(t.Weekday()) + 1) },       // Sunday 1
}

// strftime renders t in a format dateFormat has checked.
func strftime(f string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		i++
		if f[i] == '%' {
			b.WriteByte('%')
		} else {
			b.WriteString(specifiers[f[i]](t))
		}
	}
	return b.String()
}
