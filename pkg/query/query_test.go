package query

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
)

// wantError asserts that err is an *errs.Error with code and a 400 status.
func wantError(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	e, ok := errs.As(err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *errs.Error, want %s", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("code %s (%s), want %s", e.Code, e.Message, code)
	}
	if e.Status() != http.StatusBadRequest {
		t.Fatalf("status %d for %s, want 400", e.Status(), e.Code)
	}
	if strings.TrimSpace(e.Message) == "" {
		t.Fatalf("%s without a message", e.Code)
	}
}

func TestConditionJSON(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Condition
	}{
		{"long names", `{"key":"state","value":"ENABLED","operator":"eq"}`, Condition{Key: "state", Value: "ENABLED", Operator: "eq"}},
		{"short names", `{"k":"state","v":"ENABLED","o":"eq"}`, Condition{Key: "state", Value: "ENABLED", Operator: "eq"}},
		{"mixed names", `{"k":"size","value":3,"o":"gt"}`, Condition{Key: "size", Value: int64(3), Operator: "gt"}},
		{"null value", `{"k":"state","v":null,"o":"eq"}`, Condition{Key: "state", Value: nil, Operator: "eq"}},
		{"no value", `{"k":"state","o":"eq"}`, Condition{Key: "state", Operator: "eq"}},
		{"list keeps int and float", `{"k":"size","v":[1,2.5,"x",true],"o":"in"}`,
			Condition{Key: "size", Value: []any{int64(1), 2.5, "x", true}, Operator: "in"}},
		{"integer beyond float precision stays exact", `{"k":"n","v":9007199254740993,"o":"eq"}`,
			Condition{Key: "n", Value: int64(9007199254740993), Operator: "eq"}},
		{"object value, numbers inside", `{"k":"items","v":{"name":"cpu","qty":{"$gte":4}},"o":"match"}`,
			Condition{Key: "items", Value: map[string]any{"name": "cpu", "qty": map[string]any{"$gte": int64(4)}}, Operator: "match"}},
		{"float that is not an integer", `{"k":"score","v":1e300,"o":"lt"}`, Condition{Key: "score", Value: 1e300, Operator: "lt"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got Condition
			if err := json.Unmarshal([]byte(c.in), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

func TestConditionJSONErrors(t *testing.T) {
	cases := []struct {
		name string
		in   string
		code string
	}{
		{"key and k", `{"key":"a","k":"a","v":1,"o":"eq"}`, errs.InvalidParameter},
		{"value and v", `{"k":"a","value":1,"v":1,"o":"eq"}`, errs.InvalidParameter},
		{"operator and o", `{"k":"a","v":1,"operator":"eq","o":"eq"}`, errs.InvalidParameter},
		{"unknown member", `{"k":"a","v":1,"o":"eq","x":1}`, errs.InvalidParameter},
		{"key not a string", `{"k":1,"v":1,"o":"eq"}`, errs.InvalidParameterType},
		{"operator not a string", `{"k":"a","v":1,"o":["eq"]}`, errs.InvalidParameterType},
		{"not an object", `["a",1,"eq"]`, errs.InvalidParameterType},
		{"string", `"a eq 1"`, errs.InvalidParameterType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got Condition
			wantError(t, json.Unmarshal([]byte(c.in), &got), c.code)
		})
	}
}

func TestSortJSON(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Sort
	}{
		{"list (2.x)", `[{"key":"created_at","desc":true},{"key":"name"}]`, Sort{{"created_at", true}, {"name", false}}},
		{"one object (1.x)", `{"key":"name","desc":true}`, Sort{{"name", true}}},
		{"one object, desc defaults to false", `{"key":"name"}`, Sort{{"name", false}}},
		{"keys (1.x)", `{"keys":[{"key":"state"},{"key":"size","desc":true}]}`, Sort{{"state", false}, {"size", true}}},
		{"dotted key", `[{"key":"tags.env"}]`, Sort{{"tags.env", false}}},
		{"empty list", `[]`, Sort{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got Sort
			if err := json.Unmarshal([]byte(c.in), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

func TestSortJSONErrors(t *testing.T) {
	for _, in := range []string{
		`"name"`,
		`[{"key":"a","x":1}]`,
		`{"key":"a","x":1}`,
		`{"key":"a","desc":"yes"}`,
		`[["a",true]]`,
		`{"keys":{"key":"a"}}`,
	} {
		t.Run(in, func(t *testing.T) {
			var got Sort
			wantError(t, json.Unmarshal([]byte(in), &got), errs.InvalidParameterType)
		})
	}
}

func TestQueryJSON(t *testing.T) {
	in := `{"filter":[{"k":"state","v":"ENABLED","o":"eq"}],
		"filter_or":[{"key":"size","value":[1,2],"operator":"in"}],
		"sort":{"key":"created_at","desc":true},"page":{"start":3,"limit":10},
		"only":["name","tags.env"],"keyword":"web","count_only":true,"minimal":true}`
	want := Query{
		Filter:    []Condition{{Key: "state", Value: "ENABLED", Operator: "eq"}},
		FilterOr:  []Condition{{Key: "size", Value: []any{int64(1), int64(2)}, Operator: "in"}},
		Sort:      Sort{{"created_at", true}},
		Page:      &Page{Start: 3, Limit: 10},
		Only:      []string{"name", "tags.env"},
		Keyword:   "web",
		CountOnly: true,
		Minimal:   true,
	}
	var got Query
	if err := json.Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
}

func TestQueryJSONErrors(t *testing.T) {
	cases := []struct {
		name string
		in   string
		code string
		key  string // the member the message must name
	}{
		{"unknown member", `{"filter":[],"bogus":1}`, errs.InvalidParameter, "query.bogus"},
		{"unknown member of page", `{"page":{"start":1,"size":5}}`, errs.InvalidParameter, "query.page.size"},
		{"filter not a list", `{"filter":{"k":"a"}}`, errs.InvalidParameterType, "query.filter"},
		{"page start a string", `{"page":{"start":"1"}}`, errs.InvalidParameterType, "query.page.start"},
		{"only a string", `{"only":"name"}`, errs.InvalidParameterType, "query.only"},
		{"count_only a string", `{"count_only":"yes"}`, errs.InvalidParameterType, "query.count_only"},
		{"bad condition inside", `{"filter":[{"k":"a","key":"b","v":1,"o":"eq"}]}`, errs.InvalidParameter, "query.filter.key"},
		{"bad sort inside", `{"sort":{"key":"a","oops":true}}`, errs.InvalidParameterType, "query.sort"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var q Query
			err := json.Unmarshal([]byte(c.in), &q)
			wantError(t, err, c.code)
			e, _ := errs.As(err)
			if !strings.Contains(e.Message, "key = "+c.key) {
				t.Fatalf("message %q does not name %s", e.Message, c.key)
			}
			if strings.Contains(e.Message, "Go struct") || strings.Contains(e.Message, "plain") {
				t.Fatalf("message %q leaks Go names", e.Message)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		q    Query
		code string // "" for valid
	}{
		{"empty", Query{}, ""},
		{"dotted paths", Query{Sort: Sort{{Key: "tags.env"}}, Only: []string{"a.b.c"}}, ""},
		{"sort key empty", Query{Sort: Sort{{Key: ""}}}, errs.DBQuery},
		{"sort key operator", Query{Sort: Sort{{Key: "$where"}}}, errs.DBQuery},
		{"only empty segment", Query{Only: []string{"a..b"}}, errs.DBQuery},
		{"only operator segment", Query{Only: []string{"a.$"}}, errs.DBQuery},
		{"only NUL", Query{Only: []string{"a\x00b"}}, errs.DBQuery},
		{"negative limit", Query{Page: &Page{Start: 1, Limit: -1}}, errs.InvalidParameter},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.q.Validate()
			if c.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantError(t, err, c.code)
		})
	}
}

// TestQueryJSONNames covers protobuf's JSON mapping on the query's own
// members: lowerCamelCase names, null as "not set", and a null filter
// value kept as null (the console's `v: null` filter).
func TestQueryJSONNames(t *testing.T) {
	in := `{"filterOr":[{"k":"a","v":null,"o":"eq"}],"countOnly":true,"page":null,"keyword":null,"only":null}`
	want := Query{FilterOr: []Condition{{Key: "a", Value: nil, Operator: "eq"}}, CountOnly: true}
	var got Query
	if err := json.Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
	var both Query
	err := json.Unmarshal([]byte(`{"count_only":true,"countOnly":false}`), &both)
	wantError(t, err, errs.InvalidParameter)
	if e, _ := errs.As(err); !strings.Contains(e.Message, "key = query.count_only,") {
		t.Fatalf("message %q does not name query.count_only", e.Message)
	}
}

func TestWithout(t *testing.T) {
	in := []string{"a", "requests", "b", "usage"}
	if got := Without(in, "requests", "usage"); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("got %v", got)
	}
	if in[1] != "requests" {
		t.Fatal("the input was changed")
	}
	if got := Without(nil, "x"); got != nil {
		t.Fatalf("nil in, %v out", got)
	}
}

// TestConditionMarshal: a condition marshals to the short form and reads
// back the same, so a query can be sent on to another service.
func TestConditionMarshal(t *testing.T) {
	for _, in := range []string{
		`{"k":"state","v":"ENABLED","o":"eq"}`,
		`{"k":"tags.env","v":["a",null,3],"o":"in"}`,
		`{"k":"x","v":null,"o":"eq"}`,
		`{"k":"items","v":{"name":"cpu"},"o":"match"}`,
	} {
		var c Condition
		if err := json.Unmarshal([]byte(in), &c); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(c)
		if err != nil || string(out) != in {
			t.Fatalf("%s marshals to %s (%v)", in, out, err)
		}
	}
	b, _ := json.Marshal(Query{Filter: []Condition{{Key: "a", Value: int64(1), Operator: "gt"}}})
	var q Query
	if err := json.Unmarshal(b, &q); err != nil || len(q.Filter) != 1 || q.Filter[0].Key != "a" || q.Filter[0].Value != int64(1) {
		t.Fatalf("a marshalled query reads back as %+v (%v): %s", q, err, b)
	}
}
