// Package query is the list Query of the platform (spec/semantics.md
// section 1): its JSON forms and its compilation into a MongoDB filter and
// find options. It holds no I/O; the store package runs what it compiles.
package query

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/strictjson"
)

// Condition is one filter member; JSON accepts key/k, value/v, operator/o.
type Condition struct {
	Key      string
	Value    any
	Operator string
	// absent marks a condition on a path the resource does not show
	// (Resource.Unshown): it is checked as any other, then decided without
	// the store, as MongoDB decides it for a document lacking the field.
	absent bool
}

// UnmarshalJSON accepts the long and the short member names, not both.
func (c *Condition) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return errs.InvalidType("query.filter", "object")
	}
	pick := func(long, short string) (json.RawMessage, error) {
		l, okL := raw[long]
		s, okS := raw[short]
		delete(raw, long)
		delete(raw, short)
		if okL && okS {
			return nil, errs.Invalid("query.filter."+long, "both "+long+" and "+short+" given")
		}
		if okS {
			return s, nil
		}
		return l, nil
	}
	k, err := pick("key", "k")
	if err != nil {
		return err
	}
	v, err := pick("value", "v")
	if err != nil {
		return err
	}
	o, err := pick("operator", "o")
	if err != nil {
		return err
	}
	for extra := range raw {
		return errs.Invalid("query.filter."+extra, "unknown member")
	}
	if k != nil && json.Unmarshal(k, &c.Key) != nil {
		return errs.InvalidType("query.filter.key", "string")
	}
	if o != nil && json.Unmarshal(o, &c.Operator) != nil {
		return errs.InvalidType("query.filter.operator", "string")
	}
	if v != nil {
		val, err := decodeValue(v)
		if err != nil {
			return errs.InvalidType("query.filter.value", "JSON value")
		}
		c.Value = val
	}
	return nil
}

// MarshalJSON writes the short form {k, v, o}, so a query can be sent on
// to another service as it was received.
func (c Condition) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		K string `json:"k"`
		V any    `json:"v"`
		O string `json:"o"`
	}{c.Key, c.Value, c.Operator})
}

// decodeValue decodes JSON keeping integers exact.
func decodeValue(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return normalizeNumbers(v), nil
}

func normalizeNumbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	case []any:
		for i := range t {
			t[i] = normalizeNumbers(t[i])
		}
	case map[string]any:
		for k := range t {
			t[k] = normalizeNumbers(t[k])
		}
	}
	return v
}

// SortKey orders by one field path.
type SortKey struct {
	Key  string `json:"key"`
	Desc bool   `json:"desc"`
}

// Sort is a list of keys in priority order; JSON accepts a list, one
// {key, desc} object, or {keys: [...]} (both query generations).
type Sort []SortKey

// UnmarshalJSON accepts the three sort shapes.
func (s *Sort) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var keys []SortKey
		if err := strictjson.Decode(b, &keys, "query.sort"); err != nil {
			return errs.InvalidType("query.sort", "list of {key, desc}")
		}
		*s = keys
		return nil
	}
	var one struct {
		Key  string    `json:"key"`
		Desc bool      `json:"desc"`
		Keys []SortKey `json:"keys"`
	}
	if err := strictjson.Decode(b, &one, "query.sort"); err != nil {
		return errs.InvalidType("query.sort", "{key, desc} or a list of them")
	}
	if one.Key != "" {
		*s = append(Sort{{Key: one.Key, Desc: one.Desc}}, one.Keys...)
	} else {
		*s = one.Keys
	}
	return nil
}

// Page selects rows start..start+limit-1, 1-based; limit 0 means no paging.
type Page struct {
	Start int `json:"start"`
	Limit int `json:"limit"`
}

// Query is the list query of every list operation.
type Query struct {
	Filter    []Condition `json:"filter"`
	FilterOr  []Condition `json:"filter_or"`
	Sort      Sort        `json:"sort"`
	Page      *Page       `json:"page"`
	Only      []string    `json:"only"`
	Keyword   string      `json:"keyword"`
	CountOnly bool        `json:"count_only"`
	Minimal   bool        `json:"minimal"`
}

// UnmarshalJSON rejects unknown members.
func (q *Query) UnmarshalJSON(b []byte) error {
	type plain Query
	var p plain
	if err := strictjson.Decode(b, &p, "query"); err != nil {
		return err
	}
	*q = Query(p)
	return nil
}

// Validate checks what decoding cannot: paths and page bounds.
func (q *Query) Validate() error {
	for _, s := range q.Sort {
		if err := checkPath("query.sort.key", s.Key); err != nil {
			return err
		}
	}
	for _, o := range q.Only {
		if err := checkPath("query.only", o); err != nil {
			return err
		}
	}
	if q.Page != nil && q.Page.Limit < 0 {
		return errs.Invalid("query.page.limit", "must not be negative")
	}
	return nil
}

// checkPath rejects empty paths and operator injection through keys.
func checkPath(what, p string) error {
	if p == "" {
		return errs.New(errs.DBQuery, "Query is invalid. (reason = %s is empty)", what)
	}
	for seg := range strings.SplitSeq(p, ".") {
		if seg == "" || strings.HasPrefix(seg, "$") || strings.ContainsRune(seg, 0) {
			return errs.New(errs.DBQuery, "Query is invalid. (reason = %s %q is not a field path)", what, p)
		}
	}
	return nil
}

func (c Condition) String() string { return fmt.Sprintf("%s %s %v", c.Key, c.Operator, c.Value) }
