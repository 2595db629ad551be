package stat

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
)

// plan is a checked query, ready to run.
type plan struct {
	steps    []step
	project  bson.D // store-side projection of the source rows; nil loads them whole
	distinct path   // set for a distinct query (then steps is empty)
}

type rows = iter.Seq[bson.D]

type step struct {
	run      func(r *runner, in rows) rows
	reads    []string    // source fields the step reads
	reshapes bool        // the step builds new rows: later steps read no source field
	group    *groupStage // set for a group, which may run in the store
}

// runner keeps the first error of a run; a failing stage records it and
// stops, and the caller checks it after draining the rows.
type runner struct {
	err    error
	lim    Limits
	pushed int // values held by push and add_to_set fields
}

func (r *runner) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (q *Query) compile() (*plan, error) {
	if q.Page != nil && q.Page.Limit < 0 {
		return nil, errs.Invalid("query.page.limit", "must not be negative")
	}
	if len(q.Aggregate) == 0 {
		if q.Distinct == "" {
			return nil, errs.Required("aggregate")
		}
		if err := checkPath("query.distinct", q.Distinct); err != nil {
			return nil, err
		}
		return &plan{distinct: parsePath(q.Distinct), project: bson.D{{Key: q.Distinct, Value: 1}}}, nil
	}
	c := &compiler{}
	p := &plan{}
	var reads []string
	reshaped := false
	for i := range q.Aggregate {
		s, err := c.stage(&q.Aggregate[i])
		if err != nil {
			return nil, err
		}
		p.steps = append(p.steps, s)
		if !reshaped {
			reads = append(reads, s.reads...)
			if s.reshapes {
				reshaped, p.project = true, projection(reads)
			}
		}
	}
	return p, nil
}

// projection keeps the paths once, a parent covering its children
// (MongoDB refuses a projection of both a and a.b).
func projection(paths []string) bson.D {
	proj := bson.D{}
	for _, p := range slices.Compact(slices.Sorted(slices.Values(paths))) {
		if !slices.ContainsFunc(paths, func(q string) bool { return strings.HasPrefix(p, q+".") }) {
			proj = append(proj, bson.E{Key: p, Value: 1})
		}
	}
	if len(proj) == 0 {
		return bson.D{{Key: "_id", Value: 1}}
	}
	return proj
}

// compiler knows the key names of the last group: a later key that names
// one refers to it inside _id, where the group put it.
type compiler struct{ groupKeys []string }

func (c *compiler) ref(key string) path {
	p := parsePath(key)
	if slices.Contains(c.groupKeys, p[0]) {
		return append(path{"_id"}, p...)
	}
	return p
}

func (c *compiler) stage(s *Stage) (step, error) {
	n := 0
	for _, set := range []bool{s.Group != nil, s.Project != nil, s.Unwind != nil, s.Count != nil,
		s.Sort != nil, s.Limit != nil, s.Skip != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return step{}, errs.Invalid("query.aggregate", "each element holds exactly one stage (one of "+strings.Join(stageNames, ", ")+")")
	}
	switch {
	case s.Group != nil:
		return c.group(s.Group)
	case s.Project != nil:
		return c.project(s.Project)
	case s.Unwind != nil:
		return c.unwind(s.Unwind)
	case s.Count != nil:
		if err := checkName("query.aggregate.count.name", s.Count.Name); err != nil {
			return step{}, err
		}
		c.groupKeys = nil
		return step{run: countStage(s.Count.Name), reshapes: true}, nil
	case s.Sort != nil:
		return c.sort(*s.Sort)
	case s.Limit != nil:
		if *s.Limit <= 0 {
			return step{}, errs.Invalid("query.aggregate.limit", "must be positive")
		}
		return step{run: limitStage(*s.Limit)}, nil
	}
	if *s.Skip < 0 {
		return step{}, errs.Invalid("query.aggregate.skip", "must not be negative")
	}
	return step{run: skipStage(*s.Skip)}, nil
}

var groupOps = []string{"count", "sum", "average", "max", "min", "first", "last", "push", "add_to_set", "merge_objects"}

func (c *compiler) group(g *Group) (step, error) {
	const at = "query.aggregate.group"
	if len(g.Keys) == 0 && len(g.Fields) == 0 {
		return step{}, errs.Required(at + ".keys || " + at + ".fields")
	}
	gs := &groupStage{}
	var reads, keyNames, fieldNames []string
	for _, k := range g.Keys {
		if err := checkPath(at+".keys.key", k.Key); err != nil {
			return step{}, err
		}
		if err := checkName(at+".keys.name", k.Name); err != nil {
			return step{}, err
		}
		if slices.Contains(keyNames, k.Name) {
			return step{}, errs.Invalid(at+".keys.name", "duplicate name "+k.Name)
		}
		date, err := dateFormat(k.DateFormat)
		if err != nil {
			return step{}, err
		}
		gs.keys = append(gs.keys, groupKey{name: k.Name, p: c.ref(k.Key), date: date})
		keyNames, reads = append(keyNames, k.Name), append(reads, k.Key)
	}
	for _, f := range g.Fields {
		if err := checkName(at+".fields.name", f.Name); err != nil {
			return step{}, err
		}
		if f.Name == "_id" || slices.Contains(fieldNames, f.Name) {
			return step{}, errs.Invalid(at+".fields.name", "duplicate name "+f.Name)
		}
		fieldNames = append(fieldNames, f.Name)
		if f.Operator == "" {
			return step{}, errs.Required(at + ".fields.operator")
		}
		if !slices.Contains(groupOps, f.Operator) {
			return step{}, unsupported(at+".fields.operator", f.Operator, groupOps)
		}
		gf := groupField{name: f.Name, op: f.Operator}
		switch f.DataType {
		case "":
		case "array":
			if !slices.Contains(arrayOps, f.Operator) {
				return step{}, errs.Invalid(at+".fields.data_type", "array applies to "+strings.Join(arrayOps, ", ")+", not "+f.Operator)
			}
			gf.array = true
		default:
			return step{}, errs.Invalid(at+".fields.data_type", fmt.Sprintf("%q is not a data type (array)", f.DataType))
		}
		switch {
		case f.Operator == "count": // counts rows; a key means nothing
		case f.Operator == "push" && f.Key == "" && len(f.Fields) > 0:
			for _, sf := range f.Fields {
				if err := checkPath(at+".fields.fields.key", sf.Key); err != nil {
					return step{}, err
				}
				if err := checkName(at+".fields.fields.name", sf.Name); err != nil {
					return step{}, err
				}
				gf.push = append(gf.push, namedPath{sf.Name, c.ref(sf.Key)})
				reads = append(reads, sf.Key)
			}
		default:
			if err := checkPath(at+".fields.key", f.Key); err != nil {
				return step{}, err
			}
			gf.p = c.ref(f.Key)
			reads = append(reads, f.Key)
		}
		if len(f.Fields) > 0 && f.Operator != "push" {
			return step{}, errs.Invalid(at+".fields.fields", "only push takes fields")
		}
		if len(f.Conditions) > 0 && !slices.Contains([]string{"count", "sum", "average"}, f.Operator) {
			return step{}, errs.New(errs.DBQuery, "Query is invalid. (reason = conditions apply to count, sum and average only, not %s)", f.Operator)
		}
		for _, cond := range f.Conditions {
			t, err := c.test(cond)
			if err != nil {
				return step{}, err
			}
			gf.when = append(gf.when, t)
			reads = append(reads, cond.Key)
		}
		gs.fields = append(gs.fields, gf)
	}
	c.groupKeys = keyNames
	return step{run: gs.run, reads: reads, reshapes: true, group: gs}, nil
}

// arrayOps take data_type array: each has an expression form over an array.
var arrayOps = []string{"sum", "average", "max", "min"}

var testOps = []string{"eq", "not", "gt", "gte", "lt", "lte"}

func (c *compiler) test(cond query.Condition) (test, error) {
	const at = "query.aggregate.group.fields.conditions"
	if err := checkPath(at+".key", cond.Key); err != nil {
		return test{}, err
	}
	if cond.Operator == "" {
		return test{}, errs.Required(at + ".operator")
	}
	if !slices.Contains(testOps, cond.Operator) {
		return test{}, unsupported(at+".operator", cond.Operator, testOps)
	}
	if cond.Value == nil {
		return test{}, errs.Required(at + ".value")
	}
	return test{p: c.ref(cond.Key), op: cond.Operator, val: normalize(cond.Value)}, nil
}

var projectOps = []string{"size", "sum", "array_to_object", "object_to_array", "add", "subtract", "multiply", "divide"}

func (c *compiler) project(p *Project) (step, error) {
	const at = "query.aggregate.project.fields"
	if len(p.Fields) == 0 {
		return step{}, errs.Required(at)
	}
	ps := &projectStage{excludeKeys: p.ExcludeKeys}
	var reads []string
	for _, f := range p.Fields {
		if err := checkName(at+".name", f.Name); err != nil {
			return step{}, err
		}
		pf := projectField{name: f.Name, op: f.Operator}
		switch {
		case f.Operator != "" && !slices.Contains(projectOps, f.Operator):
			return step{}, unsupported(at+".operator", f.Operator, projectOps)
		case arithmetic[f.Operator]:
			if f.Key != "" {
				return step{}, errs.Invalid(at+".key", f.Operator+" takes fields, not key")
			}
			args, err := c.operands(f.Operator, f.Fields, &reads)
			if err != nil {
				return step{}, err
			}
			pf.args = args
		default:
			if err := checkPath(at+".key", f.Key); err != nil {
				return step{}, err
			}
			if len(f.Fields) > 0 {
				return step{}, errs.Invalid(at+".fields", "only add, subtract, multiply and divide take fields")
			}
			pf.p = c.ref(f.Key)
			reads = append(reads, f.Key)
		}
		ps.fields = append(ps.fields, pf)
	}
	if p.ExcludeKeys {
		c.groupKeys = nil
	}
	return step{run: ps.run, reads: reads, reshapes: true}, nil
}

var arithmetic = map[string]bool{"add": true, "subtract": true, "multiply": true, "divide": true}

func (c *compiler) operands(op string, fields []Operand, reads *[]string) ([]operand, error) {
	const at = "query.aggregate.project.fields.fields"
	if len(fields) == 0 {
		return nil, errs.Required(at)
	}
	if (op == "subtract" || op == "divide") && len(fields) != 2 {
		return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = %s needs exactly 2 fields, got %d)", op, len(fields))
	}
	out := make([]operand, len(fields))
	for i, f := range fields {
		switch {
		case f.Operator != "" || len(f.Fields) > 0:
			if !arithmetic[f.Operator] {
				return nil, unsupported(at+".operator", f.Operator, []string{"add", "subtract", "multiply", "divide"})
			}
			args, err := c.operands(f.Operator, f.Fields, reads)
			if err != nil {
				return nil, err
			}
			out[i] = operand{op: f.Operator, args: args}
		case f.Number != nil:
			n := normalize(f.Number)
			if !isNumber(n) {
				return nil, errs.InvalidType(at, "key, number or {operator, fields}")
			}
			out[i] = operand{num: n}
		default:
			if err := checkPath(at, f.Key); err != nil {
				return nil, err
			}
			out[i] = operand{p: c.ref(f.Key)}
			*reads = append(*reads, f.Key)
		}
	}
	return out, nil
}

// matchOps of the unwind filter, each marked true when it takes a list.
var matchOps = map[string]bool{"eq": false, "not": false, "in": true, "not_in": true,
	"contain": false, "not_contain": false, "contain_in": true, "not_contain_in": true}

func (c *compiler) unwind(u *Unwind) (step, error) {
	const at = "query.aggregate.unwind"
	if err := checkPath(at+".path", u.Path); err != nil {
		return step{}, err
	}
	us := &unwindStage{p: c.ref(u.Path)}
	reads := []string{u.Path}
	for _, f := range u.Filter {
		if err := checkPath(at+".filter.key", f.Key); err != nil {
			return step{}, err
		}
		if f.Operator == "" {
			return step{}, errs.Required(at + ".filter.operator")
		}
		multi, ok := matchOps[f.Operator]
		if !ok {
			return step{}, unsupported(at+".filter.operator", f.Operator, slices.Sorted(maps.Keys(matchOps)))
		}
		list, isList := f.Value.([]any)
		switch {
		case multi && !isList:
			return step{}, errs.New(errs.OperatorListType, "Operator value must be a list. (key = %s, operator = %s)", f.Key, f.Operator)
		case !multi && isList:
			return step{}, errs.New(errs.OperatorValueType, "Operator value must be a single value. (key = %s, operator = %s)", f.Key, f.Operator)
		case !multi:
			list = []any{f.Value}
		}
		vals := normalize(list).([]any)
		if strings.Contains(f.Operator, "contain") {
			for i, v := range vals {
				if v == nil {
					return step{}, errs.New(errs.OperatorValueType, "Operator value must be a string. (key = %s, operator = %s)", f.Key, f.Operator)
				}
				vals[i] = fmt.Sprint(v)
			}
		}
		us.where = append(us.where, matcher{p: c.ref(f.Key), op: f.Operator, vals: vals})
		reads = append(reads, f.Key)
	}
	return step{run: us.run, reads: reads}, nil
}

func (c *compiler) sort(s query.Sort) (step, error) {
	if len(s) == 0 {
		return step{}, errs.Required("query.aggregate.sort.key")
	}
	keys := make([]sortKey, len(s))
	var reads []string
	for i, k := range s {
		if err := checkPath("query.aggregate.sort.key", k.Key); err != nil {
			return step{}, err
		}
		keys[i] = sortKey{p: c.ref(k.Key), desc: k.Desc}
		reads = append(reads, k.Key)
	}
	return step{run: sortStage(keys), reads: reads}, nil
}

// dateFormat compiles a group key's date_format: year, month, day, or a
// $dateToString format. Nil means none.
func dateFormat(f string) (func(time.Time) any, error) {
	switch f {
	case "":
		return nil, nil
	case "year":
		return func(t time.Time) any { return int64(t.Year()) }, nil
	case "month":
		return func(t time.Time) any { return int64(t.Month()) }, nil
	case "day":
		return func(t time.Time) any { return int64(t.Day()) }, nil
	}
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		if i++; i == len(f) || (f[i] != '%' && specifiers[f[i]] == nil) {
			return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = date_format %q: use year, month, day or %%Y %%m %%d %%H %%M %%S %%L %%j %%u %%w %%%%)", f)
		}
	}
	return func(t time.Time) any { return strftime(f, t) }, nil
}

// Strftime renders t (in UTC) in a date_format pattern (%Y %m %d %H %M %S
// %L %j %u %w %%); a pattern with another specifier is a 400.
func Strftime(format string, t time.Time) (string, error) {
	if _, err := dateFormat(format); err != nil || format == "" || format == "year" || format == "month" || format == "day" {
		return "", errs.Invalid("date_format", fmt.Sprintf("%q is not a date pattern", format))
	}
	return strftime(format, t.UTC()), nil
}

func checkPath(at, p string) error {
	if p == "" {
		return errs.Required(at)
	}
	for _, seg := range strings.Split(p, ".") {
		if seg == "" || strings.HasPrefix(seg, "$") || strings.ContainsRune(seg, 0) {
			return errs.New(errs.DBQuery, "Query is invalid. (reason = %s %q is not a field path)", at, p)
		}
	}
	return nil
}

// checkName accepts an output field name: MongoDB refuses dots and a
// leading $ there.
func checkName(at, n string) error {
	if n == "" {
		return errs.Required(at)
	}
	if strings.ContainsAny(n, ".\x00") || strings.HasPrefix(n, "$") {
		return errs.Invalid(at, fmt.Sprintf("%q is not a field name", n))
	}
	return nil
}

func unsupported(at, op string, ops []string) error {
	return errs.New(errs.DBQuery, "Query is invalid. (reason = %s %q is not supported, use one of %s)", at, op, strings.Join(ops, ", "))
}
