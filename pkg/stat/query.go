// Package stat is the StatisticsQuery engine behind every `stat` operation
// (spec/semantics.md section 2): the query's JSON form, its validation, and
// its evaluation over one collection, always confined to the caller's
// tenancy scope.
//
// The filter always runs in the store. The stages run here, in Go, because
// the embedded store (FerretDB 1.24) lacks most aggregation operators; only
// a leading group of count and sum is pushed down, since every store
// answers it the same. The package must not load a collection into memory:
// rows stream from the cursor, projected to the fields the stages read, and
// a group keeps one accumulator per group. It knows no service and no HTTP.
package stat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/strictjson"
)

// Query is the StatisticsQuery: a list filter plus either aggregate stages,
// run in order, or distinct (a field path).
type Query struct {
	Filter    []query.Condition `json:"filter,omitempty"`
	FilterOr  []query.Condition `json:"filter_or,omitempty"`
	Keyword   string            `json:"keyword,omitempty"`
	Aggregate []Stage           `json:"aggregate,omitempty"`
	Page      *query.Page       `json:"page,omitempty"`
	Distinct  string            `json:"distinct,omitempty"`
}

// Stage is one aggregate element; exactly one member is set.
type Stage struct {
	Group   *Group      `json:"group,omitempty"`
	Project *Project    `json:"project,omitempty"`
	Unwind  *Unwind     `json:"unwind,omitempty"`
	Count   *Count      `json:"count,omitempty"`
	Sort    *query.Sort `json:"sort,omitempty"`
	Limit   *int64      `json:"limit,omitempty"`
	Skip    *int64      `json:"skip,omitempty"`
}

// Group groups rows by Keys and computes Fields for each group.
type Group struct {
	Keys   []GroupKey   `json:"keys,omitempty"`
	Fields []GroupField `json:"fields,omitempty"`
}

// GroupKey names one grouping expression; DateFormat is year, month, day or
// a $dateToString format such as %Y-%m.
type GroupKey struct {
	Key        string `json:"key"`
	Name       string `json:"name"`
	DateFormat string `json:"date_format,omitempty"`
}

// GroupField is one accumulator. Fields builds the objects of push;
// Conditions (ANDed) gate count, sum and average. DataType "array" (set
// by Go callers such as pkg/analyze, never decoded from a stat query)
// applies the operator twice: first over the array in each row, then
// across the rows, as upstream's internal data_type does.
type GroupField struct {
	Key        string            `json:"key,omitempty"`
	Name       string            `json:"name"`
	Operator   string            `json:"operator"`
	Fields     []NamedKey        `json:"fields,omitempty"`
	Conditions []query.Condition `json:"conditions,omitempty"`
	DataType   string            `json:"-"`
}

// NamedKey copies Key under Name (the members of a pushed object).
type NamedKey struct {
	Key  string `json:"key"`
	Name string `json:"name"`
}

// Project rebuilds each row from Fields; ExcludeKeys drops the group keys.
type Project struct {
	Fields      []ProjectField `json:"fields"`
	ExcludeKeys bool           `json:"exclude_keys,omitempty"`
}

// ProjectField is Name = Key, or Name = Operator(Key) or Operator(Fields...).
type ProjectField struct {
	Key      string    `json:"key,omitempty"`
	Name     string    `json:"name"`
	Operator string    `json:"operator,omitempty"`
	Fields   []Operand `json:"fields,omitempty"`
}

// Operand of add, subtract, multiply, divide: a field key, a number
// (int64 or float64), or a nested Operator over Fields.
type Operand struct {
	Key      string
	Number   any
	Operator string
	Fields   []Operand
}

// Unwind emits one row per element of the array at Path, then keeps the
// rows that match every Filter condition.
type Unwind struct {
	Path   string            `json:"path"`
	Filter []query.Condition `json:"filter,omitempty"`
}

// Count replaces the rows by one row {Name: number of rows}.
type Count struct {
	Name string `json:"name"`
}

var stageNames = []string{"group", "project", "unwind", "count", "sort", "limit", "skip"}

// UnmarshalJSON rejects unknown members.
func (q *Query) UnmarshalJSON(b []byte) error {
	var p Query
	err := members(b, "query", map[string]any{
		"filter": &p.Filter, "filter_or": &p.FilterOr, "keyword": &p.Keyword,
		"aggregate": &p.Aggregate, "page": &p.Page, "distinct": &p.Distinct,
	})
	if err != nil {
		return err
	}
	*q = p
	return nil
}

// UnmarshalJSON accepts an object with exactly one stage member.
func (s *Stage) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) != nil || raw == nil {
		return errs.InvalidType("query.aggregate", "list of stage objects")
	}
	if len(raw) != 1 {
		return errs.Invalid("query.aggregate", fmt.Sprintf("each element holds exactly one stage (one of %s), got %d members",
			strings.Join(stageNames, ", "), len(raw)))
	}
	for name := range raw {
		if !slices.Contains(stageNames, name) {
			return errs.Invalid("query.aggregate", fmt.Sprintf("unknown stage %q (stages: %s)", name, strings.Join(stageNames, ", ")))
		}
	}
	var st Stage
	err := members(b, "query.aggregate", map[string]any{
		"group": &st.Group, "project": &st.Project, "unwind": &st.Unwind, "count": &st.Count,
		"sort": &st.Sort, "limit": &st.Limit, "skip": &st.Skip,
	})
	if err != nil {
		return err
	}
	*s = st
	return nil
}

// UnmarshalJSON accepts key/k and name/n.
func (g *Group) UnmarshalJSON(b []byte) error {
	return members(b, "query.aggregate.group", map[string]any{"keys": &g.Keys, "fields": &g.Fields})
}

// UnmarshalJSON accepts key/k and name/n.
func (k *GroupKey) UnmarshalJSON(b []byte) error {
	return members(b, "query.aggregate.group.keys", map[string]any{
		"key|k": &k.Key, "name|n": &k.Name, "date_format": &k.DateFormat})
}

// UnmarshalJSON accepts key/k, name/n and operator/o.
func (f *GroupField) UnmarshalJSON(b []byte) error {
	return members(b, "query.aggregate.group.fields", map[string]any{
		"key|k": &f.Key, "name|n": &f.Name, "operator|o": &f.Operator,
		"fields": &f.Fields, "conditions": &f.Conditions})
}

// UnmarshalJSON accepts key/k and name/n.
func (k *NamedKey) UnmarshalJSON(b []byte) error {
	return members(b, "query.aggregate.group.fields.fields", map[string]any{"key|k": &k.Key, "name|n": &k.Name})
}

// UnmarshalJSON rejects unknown members.
func (p *Project) UnmarshalJSON(b []byte) error {
	return members(b, "query.aggregate.project", map[string]any{"fields": &p.Fields, "exclude_keys": &p.ExcludeKeys})
}

// UnmarshalJSON accepts key/k, name/n, operator/o and fields/f.
func (f *ProjectField) UnmarshalJSON(b []byte) error {
	return members(b, "query.aggregate.project.fields", map[string]any{
		"key|k": &f.Key, "name|n": &f.Name, "operator|o": &f.Operator, "fields|f": &f.Fields})
}

// UnmarshalJSON accepts a string (a key), a number, or {operator, fields}.
func (o *Operand) UnmarshalJSON(b []byte) error {
	const at = "query.aggregate.project.fields.fields"
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &o.Key)
	case len(b) > 0 && b[0] == '{':
		return members(b, at, map[string]any{"operator|o": &o.Operator, "fields|f": &o.Fields})
	}
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if d.Decode(&n) != nil {
		return errs.InvalidType(at, "key, number or {operator, fields}")
	}
	if i, err := n.Int64(); err == nil {
		o.Number = i
	} else {
		o.Number, _ = n.Float64()
	}
	return nil
}

// UnmarshalJSON rejects unknown members.
func (u *Unwind) UnmarshalJSON(b []byte) error {
	return members(b, "query.aggregate.unwind", map[string]any{"path": &u.Path, "filter": &u.Filter})
}

// UnmarshalJSON rejects unknown members.
func (c *Count) UnmarshalJSON(b []byte) error {
	return members(b, "query.aggregate.count", map[string]any{"name": &c.Name})
}

// members decodes the JSON object b into targets keyed by member name,
// where "key|k" takes the long or the short name but not both, and a
// snake_case name also answers to its lowerCamelCase form. A null
// member counts as absent. Unknown members and wrong JSON types are 400s
// that name the member (at is the path of the object).
func members(b []byte, at string, targets map[string]any) error {
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) != nil || raw == nil {
		return errs.InvalidType(at, "object")
	}
	specs := slices.Sorted(maps.Keys(targets))
	found := map[string]json.RawMessage{}
	for _, spec := range specs {
		names := strings.Split(spec, "|")
		for _, n := range names {
			if c := strictjson.LowerCamel(n); c != n {
				names = append(names, c) // as protobuf's JSON mapping accepts
			}
		}
		var got string
		for _, n := range names {
			if v, ok := raw[n]; ok {
				if got != "" {
					return errs.Invalid(at+"."+names[0], "both "+got+" and "+n+" given")
				}
				got, found[spec] = n, v
				delete(raw, n)
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(raw)) {
		return errs.Invalid(at+"."+n, "unknown member")
	}
	for _, spec := range specs {
		v, ok := found[spec]
		if !ok || string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		long, _, _ := strings.Cut(spec, "|")
		if err := decode(v, targets[spec], at+"."+long); err != nil {
			return err
		}
	}
	return nil
}

// decode decodes b strictly into target, naming the member at fault.
func decode(b []byte, target any, at string) error { return strictjson.Decode(b, target, at) }

// Validate checks what decoding cannot (operators, required members,
// paths); api.Decode calls it, and Run does again.
func (q *Query) Validate() error {
	_, err := q.compile()
	return err
}
