// Package analyze is the AnalyzeQuery engine behind every `analyze`
// operation (spec/semantics.md section 2.3): the query's JSON form (and
// the TimeSeriesAnalyzeQuery's), its validation with upstream's error
// codes, and its evaluation over one collection, always confined to the
// caller's tenancy scope.
//
// It does what upstream does: it translates the query into a
// StatisticsQuery (a group, the field_group pivot as a second group, the
// select as a project, sort, skip and limit) and lets pkg/stat run it, so
// analyze inherits stat's guarantees: the filter runs in the store, the
// stages run over a streamed cursor in Go (or a lone count or sum in the
// store), and the results are the same on MongoDB and FerretDB 1.24. It
// must not evaluate stages itself, and it knows no service and no HTTP.
package analyze

import (
	"bytes"
	"encoding/json"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/strictjson"
)

// Query is the AnalyzeQuery.
type Query struct {
	// GroupBy lists the grouping keys; each output row holds one value
	// per key under the key's name.
	GroupBy []GroupKey `json:"group_by,omitempty"`
	// FieldGroup pivots: the rows are regrouped by the other group keys
	// and each field becomes a list of {value, <field_group keys>}.
	FieldGroup []string          `json:"field_group,omitempty"`
	Filter     []query.Condition `json:"filter,omitempty"`
	FilterOr   []query.Condition `json:"filter_or,omitempty"`
	Keyword    string            `json:"keyword,omitempty"`
	// Page returns rows start..start+limit-1 (1-based) and "more".
	Page *query.Page `json:"page,omitempty"`
	// Sort orders the output rows by output names.
	Sort query.Sort `json:"sort,omitempty"`
	// Fields maps an output name to an accumulator.
	Fields map[string]Field `json:"fields,omitempty"`
	// Select, when set, rebuilds each row from only these names.
	Select map[string]Select `json:"select,omitempty"`
}

// TimeSeriesQuery is the TimeSeriesAnalyzeQuery: an AnalyzeQuery over a
// date field the service names (RunTimeSeries), with a granularity that
// adds that field as the group key "date", and a [start, end] window.
type TimeSeriesQuery struct {
	// Query is decoded and checked with the members below (UnmarshalJSON,
	// Validate); "-" keeps api.Decode from checking it alone, where a
	// field_group of "date" would not be known yet.
	Query `json:"-"`
	// Granularity is DAILY, MONTHLY or YEARLY; empty adds no date key.
	Granularity string `json:"granularity,omitempty"`
	// Start (inclusive) and End (inclusive of its whole period) are
	// YYYY, YYYY-MM or YYYY-MM-DD.
	Start string `json:"start,omitempty"`
	End   string `json:"end,omitempty"`
}

// GroupKey groups by the value at Key, named Name. JSON: a path string
// (named by its last segment: data.size is "size") or {key, name}.
type GroupKey struct {
	Key  string `json:"key"`
	Name string `json:"name"`
}

// Field is one accumulator: Operator over the value at Key. push may
// build objects instead, from Fields (output name -> source key).
// DataType "array" applies sum, average, max or min to the array in each
// row first.
type Field struct {
	Operator string            `json:"operator"`
	Key      string            `json:"key,omitempty"`
	Fields   map[string]string `json:"fields,omitempty"`
	DataType string            `json:"data_type,omitempty"`
}

// Select is one output member: a copy of Key (JSON: a plain string), or
// Operator over Key (size, sum) or over Fields (add, subtract, multiply,
// divide).
type Select struct {
	Key      string    `json:"key,omitempty"`
	Operator string    `json:"operator,omitempty"`
	Fields   []Operand `json:"fields,omitempty"`
}

// Operand of add, subtract, multiply and divide: a key (a string), a
// number, or a nested {operator, fields}.
type Operand struct {
	Key      string
	Number   any // int64 or float64
	Operator string
	Fields   []Operand
}

// UnmarshalJSON decodes strictly: unknown members are refused, snake_case
// members also answer to lowerCamelCase, null means absent.
func (q *Query) UnmarshalJSON(b []byte) error {
	type plain Query
	var p plain
	if err := strictjson.Decode(b, &p, "query"); err != nil {
		return err
	}
	*q = Query(p)
	return nil
}

// UnmarshalJSON decodes strictly, as Query does, with the time series
// members besides.
func (q *TimeSeriesQuery) UnmarshalJSON(b []byte) error {
	type plainQuery Query // without Query's own decoder
	var p struct {
		plainQuery
		Granularity string `json:"granularity,omitempty"`
		Start       string `json:"start,omitempty"`
		End         string `json:"end,omitempty"`
	}
	if err := strictjson.Decode(b, &p, "query"); err != nil {
		return err
	}
	*q = TimeSeriesQuery{Query: Query(p.plainQuery), Granularity: p.Granularity, Start: p.Start, End: p.End}
	return nil
}

// MarshalJSON writes the query's members and the time series' side by
// side, as they arrived.
func (q TimeSeriesQuery) MarshalJSON() ([]byte, error) {
	type plainQuery Query
	return json.Marshal(struct {
		plainQuery
		Granularity string `json:"granularity,omitempty"`
		Start       string `json:"start,omitempty"`
		End         string `json:"end,omitempty"`
	}{plainQuery(q.Query), q.Granularity, q.Start, q.End})
}

// UnmarshalJSON accepts a path string or {key, name}.
func (k *GroupKey) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return errs.InvalidType("query.group_by", "string or {key, name}")
		}
		*k = GroupKey{Key: s, Name: lastSegment(s)}
		return nil
	}
	if len(b) == 0 || b[0] != '{' {
		return errs.InvalidType("query.group_by", "string or {key, name}")
	}
	type plain GroupKey
	var p plain
	if err := strictjson.Decode(b, &p, "query.group_by"); err != nil {
		return err
	}
	*k = GroupKey(p)
	if k.Name == "" {
		k.Name = lastSegment(k.Key)
	}
	return nil
}

// UnmarshalJSON decodes strictly (a type of its own keeps the member
// names of the error messages short).
func (f *Field) UnmarshalJSON(b []byte) error {
	type plain Field
	var p plain
	if err := strictjson.Decode(b, &p, "query.fields"); err != nil {
		return err
	}
	*f = Field(p)
	return nil
}

// UnmarshalJSON accepts a key string or {operator, key | fields}.
func (s *Select) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var key string
		if err := json.Unmarshal(b, &key); err != nil {
			return errs.InvalidType("query.select", "key or {operator, key | fields}")
		}
		*s = Select{Key: key}
		return nil
	}
	if len(b) == 0 || b[0] != '{' {
		return errs.InvalidType("query.select", "key or {operator, key | fields}")
	}
	type plain Select
	var p plain
	if err := strictjson.Decode(b, &p, "query.select"); err != nil {
		return err
	}
	*s = Select(p)
	return nil
}

// UnmarshalJSON accepts a key string, a number or {operator, fields}.
func (o *Operand) UnmarshalJSON(b []byte) error {
	const at = "query.select.fields"
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &o.Key)
	case len(b) > 0 && b[0] == '{':
		var p struct {
			Operator string    `json:"operator"`
			Fields   []Operand `json:"fields"`
		}
		if err := strictjson.Decode(b, &p, at); err != nil {
			return err
		}
		o.Operator, o.Fields = p.Operator, p.Fields
		return nil
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

func lastSegment(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '.' {
			return p[i+1:]
		}
	}
	return p
}

// Validate checks what decoding cannot (operators, required members,
// names, paths); api.Decode calls it, and Run does again.
func (q *Query) Validate() error {
	_, err := q.compile(nil)
	return err
}

// Validate checks the query and its time series members.
func (q *TimeSeriesQuery) Validate() error {
	_, err := q.compile(DateField{Key: "date", Format: "%Y-%m-%d"}) // the service's field comes with Run
	return err
}
