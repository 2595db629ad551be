package analyze

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
)

// plan is a checked query translated into a StatisticsQuery; limit is the
// page size (0: no page, no "more").
type plan struct {
	stat  *stat.Query
	limit int
}

var fieldOps = []string{"count", "sum", "average", "max", "min", "first", "last", "push", "add_to_set", "merge_objects"}

// totalOps get a _total_<field> in a field_group pivot, computed by the
// operator of the second group (count totals are summed).
var totalOps = map[string]string{"count": "sum", "sum": "sum", "average": "average", "max": "max", "min": "min"}

var selectOps = []string{"add", "subtract", "multiply", "divide", "size", "sum"}

var arithmetic = map[string]bool{"add": true, "subtract": true, "multiply": true, "divide": true}

const totalPrefix = "_total_"

// compile checks q and translates it; ts (or nil) adds a time series'
// date key, grouped after GroupBy, and its window.
func (q *Query) compile(ts *timeSeries) (*plan, error) {
	limit := 0
	if q.Page != nil {
		if q.Page.Limit < 0 {
			return nil, errs.Invalid("query.page.limit", "must not be negative")
		}
		limit = q.Page.Limit
	}
	keys := slices.Clone(q.GroupBy)
	if ts != nil && ts.dateKey != "" {
		keys = append(keys, GroupKey{Key: ts.dateKey, Name: "date"})
	}
	if len(keys) == 0 && len(q.Fields) == 0 {
		return nil, errs.Required("query.fields")
	}

	group := &stat.Group{}
	names := map[string]string{} // output name -> what uses it
	for _, k := range keys {
		if err := checkPath("query.group_by", k.Key); err != nil {
			return nil, err
		}
		if err := checkName("query.group_by", k.Name); err != nil {
			return nil, err
		}
		if names[k.Name] != "" {
			return nil, errs.Invalid("query.group_by", fmt.Sprintf("name %q is used twice", k.Name))
		}
		names[k.Name] = "group_by"
		group.Keys = append(group.Keys, stat.GroupKey{Key: k.Key, Name: k.Name})
	}

	fieldNames := slices.Sorted(maps.Keys(q.Fields)) // a map has no order; fix one
	for _, name := range fieldNames {
		f := q.Fields[name]
		gf, err := field(name, f)
		if err != nil {
			return nil, err
		}
		if names[name] != "" {
			return nil, errs.Invalid("query.fields", fmt.Sprintf("name %q is also a group_by name", name))
		}
		names[name] = "fields"
		group.Fields = append(group.Fields, gf)
	}
	stages := []stat.Stage{{Group: group}}

	sort := slices.Clone(q.Sort)
	if len(q.FieldGroup) > 0 {
		pivot, err := fieldGroup(q.FieldGroup, group, names)
		if err != nil {
			return nil, err
		}
		stages = append(stages, stat.Stage{Group: pivot})
		// A field is now a list; its total is what a user sorts by.
		for i, s := range sort {
			if totalOps[fieldOp(group, s.Key)] != "" {
				sort[i].Key = totalPrefix + s.Key
			}
		}
	}

	if len(q.Select) > 0 {
		project := &stat.Project{ExcludeKeys: true}
		for _, name := range slices.Sorted(maps.Keys(q.Select)) {
			pf, err := selectField(name, q.Select[name])
			if err != nil {
				return nil, err
			}
			project.Fields = append(project.Fields, pf)
		}
		stages = append(stages, stat.Stage{Project: project})
	}

	if len(sort) > 0 {
		for _, s := range sort {
			if err := checkPath("query.sort.key", s.Key); err != nil {
				return nil, err
			}
		}
		stages = append(stages, stat.Stage{Sort: &sort})
	}

	if limit > 0 {
		if start := int64(q.Page.Start); start > 1 {
			skip := start - 1
			stages = append(stages, stat.Stage{Skip: &skip})
		}
		more := int64(limit) + 1 // one row past the page tells "more"
		stages = append(stages, stat.Stage{Limit: &more})
	}

	filter := slices.Clone(q.Filter)
	if ts != nil {
		filter = append(filter, ts.filter...)
	}
	sq := &stat.Query{Filter: filter, FilterOr: q.FilterOr, Keyword: q.Keyword, Aggregate: stages}
	if err := sq.Validate(); err != nil { // a backstop: the checks above should have said it
		return nil, err
	}
	return &plan{stat: sq, limit: limit}, nil
}

// field checks one member of fields and makes its group field.
func field(name string, f Field) (stat.GroupField, error) {
	if err := checkName("query.fields", name); err != nil {
		return stat.GroupField{}, err
	}
	if strings.HasPrefix(name, totalPrefix) {
		return stat.GroupField{}, errs.Invalid("query.fields", fmt.Sprintf("%q: names starting %s are the totals of field_group", name, totalPrefix))
	}
	if f.Operator == "" {
		return stat.GroupField{}, errs.Required("query.fields.operator")
	}
	if !slices.Contains(fieldOps, f.Operator) {
		return stat.GroupField{}, errs.New(errs.DBQuery, "Query is invalid. (reason = query.fields.%s.operator %q is not supported, use one of %s)",
			name, f.Operator, strings.Join(fieldOps, ", "))
	}
	gf := stat.GroupField{Name: name, Operator: f.Operator}
	switch {
	case f.Operator == "count" && len(f.Fields) == 0:
		// counts rows; a key means nothing, as upstream ignores it
	case len(f.Fields) > 0:
		if f.Operator != "push" {
			return stat.GroupField{}, errs.Invalid("query.fields.fields", fmt.Sprintf("%q: only push takes fields", name))
		}
		if f.Key != "" {
			return stat.GroupField{}, errs.Invalid("query.fields", fmt.Sprintf("%q: push takes key or fields, not both", name))
		}
		for _, out := range slices.Sorted(maps.Keys(f.Fields)) {
			if err := checkName("query.fields.fields", out); err != nil {
				return stat.GroupField{}, err
			}
			if err := checkPath("query.fields.fields", f.Fields[out]); err != nil {
				return stat.GroupField{}, err
			}
			gf.Fields = append(gf.Fields, stat.NamedKey{Key: f.Fields[out], Name: out})
		}
	default:
		if f.Key == "" {
			return stat.GroupField{}, errs.Required("query.fields.key")
		}
		if err := checkPath("query.fields.key", f.Key); err != nil {
			return stat.GroupField{}, err
		}
		gf.Key = f.Key
	}
	switch f.DataType {
	case "":
	case "array":
		if f.Operator != "sum" && f.Operator != "average" && f.Operator != "max" && f.Operator != "min" {
			return stat.GroupField{}, errs.Invalid("query.fields.data_type", fmt.Sprintf("%q: array applies to sum, average, max and min, not %s", name, f.Operator))
		}
		gf.DataType = "array"
	default:
		return stat.GroupField{}, errs.Invalid("query.fields.data_type", fmt.Sprintf("%q: data_type %q is not supported (array)", name, f.DataType))
	}
	return gf, nil
}

// fieldGroup makes the pivot: a second group by the group keys outside
// fg, where each field becomes a list of {value, <fg keys>} and the
// fields with a total get _total_<field>.
func fieldGroup(fg []string, first *stat.Group, names map[string]string) (*stat.Group, error) {
	const at = "query.field_group"
	for i, k := range fg {
		if strings.HasPrefix(k, totalPrefix) {
			return nil, errs.Invalid(at, "Field group keys cannot contain _total_ characters.")
		}
		if names[k] != "group_by" {
			return nil, errs.Invalid(at, fmt.Sprintf("%q is not a group_by name", k))
		}
		if slices.Contains(fg[:i], k) {
			return nil, errs.Invalid(at, fmt.Sprintf("%q is given twice", k))
		}
	}
	pivot := &stat.Group{}
	for _, k := range first.Keys {
		if !slices.Contains(fg, k.Name) {
			pivot.Keys = append(pivot.Keys, stat.GroupKey{Key: k.Name, Name: k.Name})
		}
	}
	for _, f := range first.Fields {
		push := stat.GroupField{Name: f.Name, Operator: "push", Fields: []stat.NamedKey{{Key: f.Name, Name: "value"}}}
		for _, k := range fg {
			push.Fields = append(push.Fields, stat.NamedKey{Key: k, Name: k})
		}
		pivot.Fields = append(pivot.Fields, push)
		if op := totalOps[f.Operator]; op != "" {
			pivot.Fields = append(pivot.Fields, stat.GroupField{Key: f.Name, Name: totalPrefix + f.Name, Operator: op})
		}
	}
	if len(pivot.Fields) == 0 {
		return nil, errs.Invalid(at, "pivots the fields, and the query has none")
	}
	return pivot, nil
}

// fieldOp is the operator of the first group's field named name, or "".
func fieldOp(g *stat.Group, name string) string {
	for _, f := range g.Fields {
		if f.Name == name {
			return f.Operator
		}
	}
	return ""
}

// selectField checks one member of select and makes its project field.
func selectField(name string, s Select) (stat.ProjectField, error) {
	const at = "query.select"
	if err := checkName(at, name); err != nil {
		return stat.ProjectField{}, err
	}
	pf := stat.ProjectField{Name: name, Operator: s.Operator}
	switch {
	case s.Operator == "" && len(s.Fields) == 0 && s.Key != "":
		// a copy
	case !slices.Contains(selectOps, s.Operator):
		return stat.ProjectField{}, errs.Invalid(at+".operator", fmt.Sprintf("%q: operator %q is not one of %s", name, s.Operator, strings.Join(selectOps, ", ")))
	case arithmetic[s.Operator]:
		if s.Key != "" {
			return stat.ProjectField{}, errs.Invalid(at+".key", fmt.Sprintf("%q: %s takes fields, not key", name, s.Operator))
		}
		args, err := operands(s.Operator, s.Fields)
		if err != nil {
			return stat.ProjectField{}, err
		}
		pf.Fields = args
		return pf, nil
	default: // size, sum
		if len(s.Fields) > 0 {
			return stat.ProjectField{}, errs.Invalid(at+".fields", fmt.Sprintf("%q: %s takes key, not fields", name, s.Operator))
		}
		if s.Key == "" {
			return stat.ProjectField{}, errs.Required(at + ".key")
		}
	}
	if err := checkPath(at+".key", s.Key); err != nil {
		return stat.ProjectField{}, err
	}
	pf.Key = s.Key
	return pf, nil
}

func operands(op string, args []Operand) ([]stat.Operand, error) {
	const at = "query.select.fields"
	if len(args) == 0 {
		return nil, errs.Required(at)
	}
	if (op == "subtract" || op == "divide") && len(args) != 2 {
		return nil, errs.Invalid(at, fmt.Sprintf("%s needs exactly 2 fields, got %d", op, len(args)))
	}
	out := make([]stat.Operand, len(args))
	for i, a := range args {
		switch {
		case a.Operator != "" || len(a.Fields) > 0:
			if !arithmetic[a.Operator] {
				return nil, errs.Invalid("query.select.operator", fmt.Sprintf("nested operator %q is not one of add, subtract, multiply, divide", a.Operator))
			}
			nested, err := operands(a.Operator, a.Fields)
			if err != nil {
				return nil, err
			}
			out[i] = stat.Operand{Operator: a.Operator, Fields: nested}
		case a.Number != nil:
			out[i] = stat.Operand{Number: a.Number}
		default:
			if err := checkPath(at, a.Key); err != nil {
				return nil, err
			}
			out[i] = stat.Operand{Key: a.Key}
		}
	}
	return out, nil
}

// checkPath refuses an empty path (required) and operator injection
// through a key (ERROR_DB_QUERY, as the list query does).
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

// checkName accepts an output name: MongoDB refuses dots and a leading $
// there, and _id holds the group keys.
func checkName(at, n string) error {
	if n == "" {
		return errs.Required(at)
	}
	if strings.ContainsAny(n, ".\x00") || strings.HasPrefix(n, "$") || n == "_id" {
		return errs.Invalid(at, fmt.Sprintf("%q is not an output name", n))
	}
	return nil
}

// DateField names the date field of a time series and its stored format
// (a strftime pattern such as %Y-%m-%d; dates are stored as strings).
type DateField struct {
	Key    string
	Format string
}

var granularities = []string{"DAILY", "MONTHLY", "YEARLY"}

// timeSeries is what a TimeSeriesQuery adds: a date group key and the
// window's conditions.
type timeSeries struct {
	dateKey string
	filter  []query.Condition
}

// compile checks q against the date field and translates it.
func (q *TimeSeriesQuery) compile(df DateField) (*plan, error) {
	ts, err := q.window(df)
	if err != nil {
		return nil, err
	}
	return q.Query.compile(ts)
}

// window checks the time series members against the date field.
func (q *TimeSeriesQuery) window(df DateField) (*timeSeries, error) {
	ts := &timeSeries{}
	if q.Granularity != "" {
		if !slices.Contains(granularities, q.Granularity) {
			return nil, errs.Invalid("query.granularity", fmt.Sprintf("%q is not one of %s", q.Granularity, strings.Join(granularities, ", ")))
		}
		ts.dateKey = df.Key
	}
	for _, b := range []struct {
		at, val, op string
	}{{"query.start", q.Start, "gte"}, {"query.end", q.End, "lt"}} {
		if b.val == "" {
			continue
		}
		t, next, err := period(b.at, b.val)
		if err != nil {
			return nil, err
		}
		if b.op == "lt" {
			t = next // the end's whole period is in
		}
		s, err := stat.Strftime(df.Format, t)
		if err != nil {
			return nil, err
		}
		ts.filter = append(ts.filter, query.Condition{Key: df.Key, Operator: b.op, Value: s})
	}
	return ts, nil
}

// period parses YYYY, YYYY-MM or YYYY-MM-DD: its first instant and the
// first instant of the next period of the same length.
func period(at, s string) (time.Time, time.Time, error) {
	for _, p := range []struct {
		layout  string
		y, m, d int
	}{{"2006", 1, 0, 0}, {"2006-01", 0, 1, 0}, {"2006-01-02", 0, 0, 1}} {
		if len(s) != len(p.layout) {
			continue
		}
		t, err := time.Parse(p.layout, s)
		if err != nil {
			break
		}
		return t, t.AddDate(p.y, p.m, p.d), nil
	}
	return time.Time{}, time.Time{}, errs.InvalidType(at, "date as YYYY, YYYY-MM or YYYY-MM-DD")
}
