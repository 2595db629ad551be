package store_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestUnshownFieldsAnswerAsAbsent checks the rule for a path the resource
// does not show (query.Resource.Unshown): each condition on it answers
// exactly the rows the store gives for the same condition on a field no
// document has, even though the documents do hold the hidden field (score),
// so a hidden stored field is never read.
func TestUnshownFieldsAnswerAsAbsent(t *testing.T) {
	t.Parallel()
	c := fixtures(t, time.Now().UTC().Truncate(time.Millisecond))
	// shown: every fixture field but score; open: no Fields (the store answers).
	shown := resource
	shown.Fields = []string{"domain_id", "name", "state", "size", "tags", "labels", "items", "ports", "created_at"}
	open := resource
	conds := []struct {
		op string
		v  any
	}{
		{"eq", nil}, {"eq", 1.5}, {"eq", "x"}, {"eq", map[string]any{"a": 1}},
		{"not", nil}, {"not", 1.5}, {"not", "x"},
		{"gt", 0}, {"gte", 0}, {"lt", 100}, {"lte", "z"}, {"gt", "2000-01-01T00:00:00Z"},
		{"exists", true}, {"exists", false},
		{"contain", "1"}, {"not_contain", "1"}, {"regex", "."},
		{"in", []any{1.5, 2.5}}, {"in", []any{nil, 1.5}}, {"in", []any{}},
		{"not_in", []any{1.5}}, {"not_in", []any{nil}}, {"not_in", []any{}},
		{"contain_in", []any{"1", "2"}}, {"not_contain_in", []any{"1"}}, {"regex_in", []any{"."}},
		{"datetime_gt", "2000-01-01"}, {"datetime_lte", "2100-01-01T00:00:00Z"},
		{"timediff_gt", "now - 100w"}, {"timediff_lt", "now + 1d"},
		{"match", map[string]any{"name": "cpu"}},
	}
	for _, cd := range conds {
		hidden, _ := list(t, c, f("score", cd.op, cd.v), shown)
		missing, _ := list(t, c, f("no_such_field", cd.op, cd.v), open)
		stored, _ := list(t, c, f("score", cd.op, cd.v), open)
		if !slices.Equal(idsOf(hidden), idsOf(missing)) {
			t.Errorf("score %s %v: hidden gives %v, a missing field %v", cd.op, cd.v, idsOf(hidden), idsOf(missing))
		}
		if cd.op == "gt" && cd.v == 0 && slices.Equal(idsOf(hidden), idsOf(stored)) {
			t.Errorf("score gt 0 read the stored score: %v", idsOf(hidden))
		}
		// In filter_or, with another alternative.
		or := func(key string) string {
			v, _ := json.Marshal(cd.v)
			return `{"filter_or":[{"k":"` + key + `","v":` + string(v) + `,"o":"` + cd.op + `"},{"k":"name","v":"Beta","o":"eq"}]}`
		}
		hidden, _ = list(t, c, or("score"), shown)
		missing, _ = list(t, c, or("no_such_field"), open)
		if !slices.Equal(idsOf(hidden), idsOf(missing)) {
			t.Errorf("filter_or score %s %v: hidden gives %v, a missing field %v", cd.op, cd.v, idsOf(hidden), idsOf(missing))
		}
	}

	// sort on a hidden field is no sort at all (the _id tie-breaker orders),
	// and only drops it (rows keep the sort keys only).
	rows, _ := list(t, c, `{"sort":[{"key":"score","desc":true}]}`, shown)
	if got := idsOf(rows); !slices.IsSorted(got) || len(got) != 8 {
		t.Fatalf("sort on a hidden field: %v, want the _id order", got)
	}
	rows, _ = list(t, c, `{"only":["score","name"],"sort":[{"key":"score"}]}`, shown)
	for _, r := range rows {
		if !slices.Equal(keysOf(r), []string{"_id", "name"}) && !slices.Equal(keysOf(r), []string{"_id"}) {
			t.Fatalf("only score,name: row keys %v", keysOf(r))
		}
	}
	var q query.Query
	if err := json.Unmarshal([]byte(`{"only":["score"]}`), &q); err != nil {
		t.Fatal(err)
	}
	unsorted := shown
	unsorted.DefaultSort = nil // else the sort keys come back, as upstream adds them
	l, err := store.Search[bson.M](context.Background(), c, &q, unsorted, scope)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(l)
	if string(b) != `{"results":[{},{},{},{},{},{},{},{}],"total_count":8}` {
		t.Fatalf("only a hidden field: %s", b)
	}
}

// TestISODateComparisons checks gt/gte/lt/lte with an ISO 8601 string: a
// date stored as a BSON date compares as a date, one stored as text as
// text, and a non-date string as before.
func TestISODateComparisons(t *testing.T) {
	t.Parallel()
	c := testkit.Get().Database(t).Collection("dated")
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	docs := []any{
		bson.D{{Key: "_id", Value: "d-oct"}, {Key: "domain_id", Value: "d1"}, {Key: "created_at", Value: at("2026-10-31T23:59:59Z")}},
		bson.D{{Key: "_id", Value: "d-nov"}, {Key: "domain_id", Value: "d1"}, {Key: "created_at", Value: at("2026-11-01T00:00:01Z")}},
		bson.D{{Key: "_id", Value: "d-dec"}, {Key: "domain_id", Value: "d1"}, {Key: "created_at", Value: at("2026-12-15T10:00:00Z")}},
		bson.D{{Key: "_id", Value: "s-oct"}, {Key: "domain_id", Value: "d1"}, {Key: "created_at", Value: "2026-10-31"}},
		bson.D{{Key: "_id", Value: "s-nov"}, {Key: "domain_id", Value: "d1"}, {Key: "created_at", Value: "2026-11-02"}},
		bson.D{{Key: "_id", Value: "none"}, {Key: "domain_id", Value: "d1"}},
	}
	if _, err := c.InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	r := query.Resource{Fields: []string{"domain_id", "created_at"}}
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{f("created_at", "gt", "2026-11-01T00:00:00Z"), ids("d-dec", "d-nov", "s-nov")},
		{f("created_at", "gte", "2026-11-01T00:00:01.000Z"), ids("d-dec", "d-nov", "s-nov")},
		{f("created_at", "lt", "2026-11-01T00:00:00Z"), ids("d-oct", "s-oct")},
		{f("created_at", "lte", "2026-11-01"), ids("d-oct", "s-oct")},
		{f("created_at", "gt", "2026-12"), ids("d-dec")},
		{f("created_at", "datetime_gt", "2026-11-01T00:00:00Z"), ids("d-dec", "d-nov")},
		{f("created_at", "lt", "2026-11-01T09:00:00+09:00"), ids("d-oct", "s-oct")},
		{`{"filter":[{"k":"created_at","v":"2026-11-01T00:00:00Z","o":"gt"},{"k":"created_at","v":"2026-12-01T00:00:00Z","o":"lt"}]}`, ids("d-nov", "s-nov")},
		{f("created_at", "gt", "not a date"), nil},
	} {
		rows, _ := list(t, c, tc.q, r)
		got := idsOf(rows)
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.q, got, tc.want)
		}
	}
}
