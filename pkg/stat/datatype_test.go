package stat

import (
	"context"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
)

// TestDataTypeArray covers the Go-only data_type "array" of a group
// field (pkg/analyze sets it): the operator runs over each row's array,
// then across the rows, and is never pushed to the store.
func TestDataTypeArray(t *testing.T) {
	c := seed(t)
	q := &Query{Aggregate: []Stage{{Group: &Group{Fields: []GroupField{
		{Key: "nums", Name: "s", Operator: "sum", DataType: "array"},
	}}}}}
	for _, push := range []bool{true, false} {
		got, err := run(context.Background(), c, scope, keywordFields, q, push)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, got, `{"results":[{"s":3.5}]}`) // p1's [1, 2.5, "x"]; the others have none
	}
	q = &Query{Aggregate: []Stage{{Group: &Group{Keys: []GroupKey{{Key: "kind", Name: "kind"}}, Fields: []GroupField{
		{Key: "nums", Name: "avg", Operator: "average", DataType: "array"},
		{Key: "nums", Name: "max", Operator: "max", DataType: "array"},
		{Key: "size", Name: "min", Operator: "min", DataType: "array"}, // not arrays: the values themselves
	}}}}}
	got, err := run(context.Background(), c, scope, keywordFields, q, true)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, got, `{"results":[{"kind":null,"avg":null,"max":null,"min":7},
		{"kind":"note","avg":1.75,"max":"x","min":10},{"kind":"post","avg":null,"max":null,"min":5}]}`)

	for _, f := range []GroupField{
		{Key: "nums", Name: "x", Operator: "push", DataType: "array"},
		{Key: "nums", Name: "x", Operator: "sum", DataType: "list"},
	} {
		err := (&Query{Aggregate: []Stage{{Group: &Group{Fields: []GroupField{f}}}}}).Validate()
		if e, ok := errs.As(err); !ok || e.Code != errs.InvalidParameter {
			t.Errorf("%+v: %v", f, err)
		}
	}
}

func TestReduceArray(t *testing.T) {
	for _, tc := range []struct {
		op   string
		in   any
		want any
	}{
		{"sum", []any{int64(1), 2.5, "x", nil}, 3.5},
		{"sum", []any{}, int64(0)},
		{"sum", int64(4), int64(4)},
		{"sum", missing, int64(0)},
		{"average", []any{int64(1), int64(2), "x"}, 1.5},
		{"average", []any{"x"}, nil},
		{"max", []any{int64(1), nil, int64(3)}, int64(3)},
		{"max", []any{}, nil},
		{"min", []any{int64(5), 2.0, nil}, 2.0},
		{"min", "s", "s"},
	} {
		if got := reduceArray(tc.op, tc.in); compare(got, tc.want) != 0 || rank(got) != rank(tc.want) {
			t.Errorf("%s %v = %v, want %v", tc.op, tc.in, got, tc.want)
		}
	}
}

func TestStrftimeExported(t *testing.T) {
	at := at("2024-03-05T07:08:09.123Z")
	for f, want := range map[string]string{"%Y-%m-%d": "2024-03-05", "%Y-%m": "2024-03", "%Y": "2024", "%H:%M:%S.%L %%": "07:08:09.123 %"} {
		if got, err := Strftime(f, at); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", f, got, err, want)
		}
	}
	for _, f := range []string{"", "year", "%Q", "%"} {
		if _, err := Strftime(f, at); err == nil {
			t.Errorf("%q accepted", f)
		}
	}
}
