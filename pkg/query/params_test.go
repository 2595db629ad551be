package query

import (
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestParams(t *testing.T) {
	type state string
	empty, name, yes, no := "", "web", true, false
	cases := []struct {
		name  string
		pairs []any
		want  []Condition
	}{
		{"value", []any{"name", "web"}, []Condition{{Key: "name", Value: "web", Operator: "eq"}}},
		{"typed value", []any{"state", state("ENABLED")}, []Condition{{Key: "state", Value: state("ENABLED"), Operator: "eq"}}},
		{"pointer followed", []any{"name", &name}, []Condition{{Key: "name", Value: "web", Operator: "eq"}}},
		{"nil pointer skipped", []any{"name", (*string)(nil)}, nil},
		{"empty string skipped", []any{"name", ""}, nil},
		{"pointer to empty string skipped", []any{"name", &empty}, nil},
		{"zero number skipped", []any{"size", 0}, nil},
		{"nil skipped", []any{"name", nil}, nil},
		{"bool kept, true", []any{"is_pinned", &yes}, []Condition{{Key: "is_pinned", Value: true, Operator: "eq"}}},
		{"bool kept, false", []any{"is_pinned", &no}, []Condition{{Key: "is_pinned", Value: false, Operator: "eq"}}},
		{"list is in", []any{"state", []string{"A", "B"}}, []Condition{{Key: "state", Value: []any{"A", "B"}, Operator: "in"}}},
		{"typed list is in", []any{"state", []state{"A"}}, []Condition{{Key: "state", Value: []any{state("A")}, Operator: "in"}}},
		{"empty list skipped", []any{"state", []string{}}, nil},
		{"nil list skipped", []any{"state", []string(nil)}, nil},
		{"several, order kept", []any{"b", "x", "a", 0, "c", []int{1}},
			[]Condition{{Key: "b", Value: "x", Operator: "eq"}, {Key: "c", Value: []any{1}, Operator: "in"}}},
		{"odd pair ignored", []any{"a", "x", "b"}, []Condition{{Key: "a", Value: "x", Operator: "eq"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Params(c.pairs...)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

// TestParamsCompile checks that what Params makes compiles as upstream's
// append_query_filter: a list parameter is in (it used to be eq with the
// whole list, which matches no document).
func TestParamsCompile(t *testing.T) {
	q := With(nil, Params("state", []string{"A", "B"}, "name", "web")...)
	p, err := Compile(q, Resource{}, bson.D{{Key: "domain_id", Value: "d1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"domain_id":"d1","state":{"$in":["A","B"]},"name":{"$eq":"web"}}`
	if got := extJSON(t, p.Filter); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

func TestWith(t *testing.T) {
	user := &Query{Filter: []Condition{{Key: "a", Value: int64(1), Operator: "eq"}}, Keyword: "k"}
	got := With(user, Condition{Key: "b", Value: "x", Operator: "eq"})
	if len(got.Filter) != 2 || got.Filter[0].Key != "a" || got.Filter[1].Key != "b" || got.Keyword != "k" {
		t.Fatalf("got %+v", got)
	}
	if got := With(nil); got == nil || len(got.Filter) != 0 {
		t.Fatalf("With(nil) = %+v, want an empty query", got)
	}
}
