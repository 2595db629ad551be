package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// item is one element of the items array that match ($elemMatch) reads.
type item struct {
	Name string `bson:"name"`
	Qty  int    `bson:"qty"`
}

// fixtures inserts ten documents: a1..a8 in domain d1 (a7 lacks most
// fields, a8 has a null state and a scalar where the others have the ports
// array), b1 and b2 in domain d2. created_at is
// relative to now so that the timediff operators have something to find.
func fixtures(t *testing.T, now time.Time) *mongo.Collection {
	t.Helper()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	day := 24 * time.Hour
	docs := []bson.D{
		{{Key: "_id", Value: "a1"}, {Key: "domain_id", Value: "d1"}, {Key: "name", Value: "Alpha One"}, {Key: "state", Value: "ENABLED"},
			{Key: "size", Value: 10}, {Key: "score", Value: 1.5}, {Key: "tags", Value: bson.D{{Key: "env", Value: "prod"}, {Key: "team", Value: "core"}}},
			{Key: "labels", Value: bson.A{"red", "blue"}}, {Key: "items", Value: []item{{"cpu", 2}, {"mem", 8}}}, {Key: "ports", Value: bson.A{22, 443}}, {Key: "created_at", Value: ago(time.Hour)}},
		{{Key: "_id", Value: "a2"}, {Key: "domain_id", Value: "d1"}, {Key: "name", Value: "alpha two"}, {Key: "state", Value: "DISABLED"},
			{Key: "size", Value: 20}, {Key: "score", Value: 2.5}, {Key: "tags", Value: bson.D{{Key: "env", Value: "dev"}}},
			{Key: "labels", Value: bson.A{"green"}}, {Key: "items", Value: []item{{"cpu", 4}}}, {Key: "ports", Value: bson.A{8080}}, {Key: "created_at", Value: ago(25 * time.Hour)}},
		{{Key: "_id", Value: "a3"}, {Key: "domain_id", Value: "d1"}, {Key: "name", Value: "Beta"}, {Key: "state", Value: "ENABLED"},
			{Key: "size", Value: 30}, {Key: "score", Value: 0.5}, {Key: "tags", Value: bson.D{{Key: "env", Value: "prod"}, {Key: "team", Value: "edge"}}},
			{Key: "labels", Value: bson.A{"red"}}, {Key: "items", Value: []item{{"disk", 1}}}, {Key: "ports", Value: bson.A{80, 9000}}, {Key: "created_at", Value: ago(8 * day)}},
		{{Key: "_id", Value: "a4"}, {Key: "domain_id", Value: "d1"}, {Key: "name", Value: "Gamma Ray"}, {Key: "state", Value: "PENDING"},
			{Key: "size", Value: 5}, {Key: "score", Value: 9.75}, {Key: "tags", Value: bson.D{{Key: "env", Value: "staging"}}},
			{Key: "labels", Value: bson.A{}}, {Key: "items", Value: []item{}}, {Key: "created_at", Value: ago(40 * day)}},
		{{Key: "_id", Value: "a5"}, {Key: "domain_id", Value: "d1"}, {Key: "name", Value: "delta"}, {Key: "state", Value: "ENABLED"},
			{Key: "size", Value: 20}, {Key: "score", Value: 3.0}, {Key: "tags", Value: bson.D{}},
			{Key: "labels", Value: bson.A{"blue", "yellow"}}, {Key: "items", Value: []item{{"cpu", 16}}}, {Key: "created_at", Value: ago(10 * time.Minute)}},
		{{Key: "_id", Value: "a6"}, {Key: "domain_id", Value: "d1"}, {Key: "name", Value: "Epsilon (x)"}, {Key: "state", Value: "DISABLED"},
			{Key: "size", Value: 40}, {Key: "score", Value: 4.25}, {Key: "tags", Value: bson.D{{Key: "env", Value: "dev"}, {Key: "team", Value: "core"}}},
			{Key: "labels", Value: bson.A{"RED"}}, {Key: "items", Value: []item{{"mem", 4}}}, {Key: "created_at", Value: ago(3 * day)}},
		{{Key: "_id", Value: "a7"}, {Key: "domain_id", Value: "d1"}, {Key: "name", Value: "Zeta"}},
		{{Key: "_id", Value: "a8"}, {Key: "domain_id", Value: "d1"}, {Key: "name", Value: "Eta"}, {Key: "state", Value: nil},
			{Key: "size", Value: 15}, {Key: "score", Value: 1.0}, {Key: "tags", Value: bson.D{{Key: "env", Value: "prod"}}},
			{Key: "labels", Value: bson.A{"green", "red"}}, {Key: "items", Value: []item{{"mem", 32}, {"cpu", 1}}}, {Key: "ports", Value: 500}, {Key: "created_at", Value: ago(2 * time.Hour)}},
		{{Key: "_id", Value: "b1"}, {Key: "domain_id", Value: "d2"}, {Key: "name", Value: "Alpha Other"}, {Key: "state", Value: "ENABLED"},
			{Key: "size", Value: 10}, {Key: "score", Value: 1.5}, {Key: "tags", Value: bson.D{{Key: "env", Value: "prod"}}},
			{Key: "labels", Value: bson.A{"red"}}, {Key: "items", Value: []item{{"cpu", 8}}}, {Key: "created_at", Value: ago(time.Hour)}},
		{{Key: "_id", Value: "b2"}, {Key: "domain_id", Value: "d2"}, {Key: "name", Value: "Gamma Other"}, {Key: "state", Value: "PENDING"},
			{Key: "size", Value: 99}, {Key: "score", Value: 9.9}, {Key: "tags", Value: bson.D{{Key: "env", Value: "dev"}}},
			{Key: "labels", Value: bson.A{"green"}}, {Key: "items", Value: []item{{"mem", 64}}}, {Key: "created_at", Value: ago(50 * day)}},
	}
	c := testkit.Get().Database(t).Collection("things")
	if _, err := c.InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	return c
}

// resource is what the things list may do; scope confines it to domain d1.
var (
	resource = query.Resource{
		KeywordFields: []string{"name", "state"},
		DefaultSort:   []query.SortKey{{Key: "size", Desc: true}},
		MinimalFields: []string{"name", "state"},
	}
	scope = bson.D{{Key: "domain_id", Value: "d1"}}
)

// listCase is one list query and the rows it must return.
type listCase struct {
	name     string
	query    string   // JSON of the Query
	want     []string // _ids of the rows; compared in order when ordered
	ordered  bool
	total    int64    // 0: len(want)
	keys     []string // when set, the top-level keys every row must have
	maxLimit int      // Resource.MaxLimit, 0 for the default
}

// list decodes q, compiles it for domain d1 and runs it.
func list(t *testing.T, c *mongo.Collection, q string, r query.Resource) ([]bson.M, int64) {
	t.Helper()
	var qq query.Query
	if err := json.Unmarshal([]byte(q), &qq); err != nil {
		t.Fatalf("decode %s: %v", q, err)
	}
	p, err := query.Compile(&qq, r, scope)
	if err != nil {
		t.Fatalf("compile %s: %v", q, err)
	}
	rows, total, err := store.List[bson.M](context.Background(), c, p)
	if err != nil {
		t.Fatalf("list %s: %v", q, err)
	}
	return rows, total
}

func idsOf(rows []bson.M) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i], _ = r["_id"].(string)
	}
	return ids
}

func keysOf(row bson.M) []string {
	keys := make([]string, 0, len(row))
	for k := range row {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// f is the JSON of a query with one filter condition.
func f(key, op string, value any) string {
	v, _ := json.Marshal(value)
	return fmt.Sprintf(`{"filter":[{"k":%q,"v":%s,"o":%q}]}`, key, v, op)
}

func ids(s ...string) []string { return s }

func TestList(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := fixtures(t, now)
	iso := func(d time.Duration) string { return now.Add(-d).Format("2006-01-02T15:04:05.000Z07:00") }
	day := 24 * time.Hour
	all := ids("a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8")

	cases := []listCase{
		{name: "no filter: the scope only", query: `{}`, want: all},

		// eq and not
		{name: "eq", query: f("state", "eq", "ENABLED"), want: ids("a1", "a3", "a5")},
		{name: "eq null matches null and missing", query: f("state", "eq", nil), want: ids("a7", "a8")},
		{name: "eq int", query: f("size", "eq", 20), want: ids("a2", "a5")},
		{name: "eq int matches a double", query: f("score", "eq", 3), want: ids("a5")},
		{name: "eq on an array matches an element", query: f("labels", "eq", "red"), want: ids("a1", "a3", "a8")},
		{name: "eq dotted path into an object", query: f("tags.env", "eq", "prod"), want: ids("a1", "a3", "a8")},
		{name: "eq dotted path into an array of objects", query: f("items.name", "eq", "cpu"), want: ids("a1", "a2", "a5", "a8")},
		{name: "not includes null and missing", query: f("state", "not", "ENABLED"), want: ids("a2", "a4", "a6", "a7", "a8")},
		{name: "not null", query: f("state", "not", nil), want: ids("a1", "a2", "a3", "a4", "a5", "a6")},
		{name: "not on an array: no element equals", query: f("labels", "not", "red"), want: ids("a2", "a4", "a5", "a6", "a7")},

		// comparisons
		{name: "lt", query: f("size", "lt", 20), want: ids("a1", "a4", "a8")},
		{name: "lte", query: f("size", "lte", 20), want: ids("a1", "a2", "a4", "a5", "a8")},
		{name: "gt", query: f("size", "gt", 20), want: ids("a3", "a6")},
		{name: "gte", query: f("size", "gte", 20), want: ids("a2", "a3", "a5", "a6")},
		{name: "gt float", query: f("score", "gt", 2.5), want: ids("a4", "a5", "a6")},
		{name: "lte int against doubles", query: f("score", "lte", 1), want: ids("a3", "a8")},
		{name: "lt string compares strings only", query: f("state", "lt", "E"), want: ids("a2", "a6")},
		{name: "gt dotted path into an array of objects", query: f("items.qty", "gt", 10), want: ids("a5", "a8")},

		// exists
		{name: "exists true, nested", query: f("tags.team", "exists", true), want: ids("a1", "a3", "a6")},
		{name: "exists false", query: f("size", "exists", false), want: ids("a7")},
		{name: "exists true on a null value", query: f("state", "exists", true), want: ids("a1", "a2", "a3", "a4", "a5", "a6", "a8")},

		// substring and regex
		{name: "contain is case-insensitive", query: f("name", "contain", "ALPHA"), want: ids("a1", "a2")},
		{name: "contain is literal, not a regex", query: f("name", "contain", "(x)"), want: ids("a6")},
		{name: "contain a dot is literal", query: f("name", "contain", "a."), want: nil},
		{name: "contain on array elements", query: f("labels", "contain", "re"), want: ids("a1", "a2", "a3", "a6", "a8")},
		{name: "not_contain includes missing", query: f("name", "not_contain", "alpha"), want: ids("a3", "a4", "a5", "a6", "a7", "a8")},
		{name: "not_contain null and missing", query: f("state", "not_contain", "able"), want: ids("a4", "a7", "a8")},
		{name: "regex is case-insensitive", query: f("name", "regex", "^a"), want: ids("a1", "a2")},
		{name: "regex anchored end", query: f("name", "regex", "TA$"), want: ids("a3", "a5", "a7", "a8")},
		{name: "regex dotted path", query: f("tags.team", "regex", "^C"), want: ids("a1", "a6")},
		{name: "regex_in", query: f("name", "regex_in", []string{"^g", `\(X\)$`}), want: ids("a4", "a6")},

		// lists
		{name: "in", query: f("state", "in", []string{"ENABLED", "PENDING"}), want: ids("a1", "a3", "a4", "a5")},
		{name: "in with null matches missing", query: f("state", "in", []any{nil, "PENDING"}), want: ids("a4", "a7", "a8")},
		{name: "in on an array field", query: f("labels", "in", []string{"green", "yellow"}), want: ids("a2", "a5", "a8")},
		{name: "not_in", query: f("state", "not_in", []string{"ENABLED", "DISABLED"}), want: ids("a4", "a7", "a8")},
		{name: "not_in on an array field", query: f("labels", "not_in", []string{"red", "blue"}), want: ids("a2", "a4", "a6", "a7")},
		{name: "contain_in", query: f("name", "contain_in", []string{"ALPHA", "ray"}), want: ids("a1", "a2", "a4")},
		{name: "not_contain_in: contains none", query: f("name", "not_contain_in", []string{"alpha", "eta"}), want: ids("a4", "a5", "a6")},
		{name: "contain_in empty list matches nothing", query: f("name", "contain_in", []string{}), want: nil},
		{name: "not_contain_in empty list matches all", query: f("name", "not_contain_in", []string{}), want: all},

		// match
		{name: "match: one element meets every condition", query: f("items", "match", map[string]any{"name": "cpu", "qty": map[string]any{"$gte": 4}}),
			want: ids("a2", "a5")},
		{name: "match on one member", query: f("items", "match", map[string]any{"name": "mem"}), want: ids("a1", "a6", "a8")},
		{name: "match range on one element", query: f("items", "match", map[string]any{"qty": map[string]any{"$gt": 3, "$lt": 8}}),
			want: ids("a2", "a6")},
		{name: "match on an array of strings", query: f("labels", "match", map[string]any{"$in": []string{"yellow", "green"}}),
			want: ids("a2", "a5", "a8")},
		{name: "match two bounds on one scalar element", query: f("ports", "match", map[string]any{"$gt": 100, "$lt": 1000}),
			want: ids("a1")}, // a3 (80, 9000) meets each bound with another element; a8 holds no array
		{name: "match with ne", query: f("items", "match", map[string]any{"name": map[string]any{"$ne": "cpu"}}),
			want: ids("a1", "a3", "a6", "a8")},
		{name: "match with exists false", query: f("items", "match", map[string]any{"size": map[string]any{"$exists": false}}),
			want: ids("a1", "a2", "a3", "a5", "a6", "a8")},
		{name: "match in filter_or", query: `{"filter_or":[{"k":"items","v":{"name":"disk"},"o":"match"},{"k":"state","v":"PENDING","o":"eq"}]}`,
			want: ids("a3", "a4")},
		{name: "two matches", query: `{"filter":[{"k":"items","v":{"name":"mem","qty":{"$gte":8}},"o":"match"},{"k":"labels","v":{"$eq":"blue"},"o":"match"}]}`,
			want: ids("a1")},
		{name: "match, sorted and paged", query: `{"filter":[{"k":"items","v":{"qty":{"$gte":2}},"o":"match"}],"sort":[{"key":"name","desc":true}],"page":{"start":2,"limit":2}}`,
			ordered: true, want: ids("a2", "a8"), total: 5}, // delta, alpha two, Eta, Epsilon (x), Alpha One: binary order

		// datetime
		{name: "datetime_gt", query: f("created_at", "datetime_gt", iso(2*day)), want: ids("a1", "a2", "a5", "a8")},
		{name: "datetime_lt", query: f("created_at", "datetime_lt", iso(2*day)), want: ids("a3", "a4", "a6")},
		{name: "datetime_gte is inclusive", query: f("created_at", "datetime_gte", iso(8*day)), want: ids("a1", "a2", "a3", "a5", "a6", "a8")},
		{name: "datetime_lte is inclusive", query: f("created_at", "datetime_lte", iso(8*day)), want: ids("a3", "a4")},
		{name: "datetime_gt is exclusive", query: f("created_at", "datetime_gt", iso(time.Hour)), want: ids("a5")},

		// timediff
		{name: "timediff_gt", query: f("created_at", "timediff_gt", "now-1d"), want: ids("a1", "a5", "a8")},
		{name: "timediff_lt", query: f("created_at", "timediff_lt", "now - 7d"), want: ids("a3", "a4")},
		{name: "timediff_gte", query: f("created_at", "timediff_gte", "now-30d"), want: ids("a1", "a2", "a3", "a5", "a6", "a8")},
		{name: "timediff_lte", query: f("created_at", "timediff_lte", "now - 3h"), want: ids("a2", "a3", "a4", "a6")},
		{name: "timediff in the future", query: f("created_at", "timediff_gt", "now+1h"), want: nil},

		// filter_or and keyword
		{name: "filter_or", query: `{"filter_or":[{"k":"state","v":"PENDING","o":"eq"},{"k":"size","v":40,"o":"gte"}]}`, want: ids("a4", "a6")},
		{name: "filter AND filter_or", query: `{"filter":[{"k":"labels","v":"red","o":"eq"}],"filter_or":[{"k":"state","v":"DISABLED","o":"eq"},{"k":"size","v":12,"o":"lt"}]}`,
			want: ids("a1")},
		{name: "keyword: any field contains any token", query: `{"keyword":" alpha  RAY "}`, want: ids("a1", "a2", "a4")},
		{name: "keyword over a second field", query: `{"keyword":"able"}`, want: ids("a1", "a2", "a3", "a5", "a6")},
		{name: "keyword is literal", query: `{"keyword":"(x)"}`, want: ids("a6")},
		{name: "keyword joins filter_or", query: `{"keyword":"gamma","filter_or":[{"k":"size","v":40,"o":"eq"}]}`, want: ids("a4", "a6")},
		{name: "keyword AND filter", query: `{"keyword":"alpha","filter":[{"k":"state","v":"DISABLED","o":"eq"}]}`, want: ids("a2")},
		{name: "blank keyword", query: `{"keyword":"   "}`, want: all},

		// sort and page
		{name: "default sort, _id breaks ties", query: `{}`, ordered: true,
			want: ids("a6", "a3", "a2", "a5", "a8", "a1", "a4", "a7")},
		{name: "sort by two keys, null and missing first", query: `{"sort":[{"key":"state"},{"key":"size","desc":true}]}`, ordered: true,
			want: ids("a8", "a7", "a6", "a2", "a3", "a5", "a1", "a4")},
		{name: "sort null and missing as equal, _id breaks the tie", query: `{"sort":[{"key":"state"}],"filter":[{"k":"state","v":null,"o":"eq"}]}`,
			ordered: true, want: ids("a7", "a8")},
		{name: "sort desc, missing last", query: `{"sort":[{"key":"score","desc":true}]}`, ordered: true,
			want: ids("a4", "a6", "a5", "a2", "a1", "a8", "a3", "a7")},
		{name: "sort by a dotted key (1.x form)", query: `{"sort":{"keys":[{"key":"tags.env"},{"key":"size","desc":true}]}}`, ordered: true,
			want: ids("a5", "a7", "a6", "a2", "a3", "a8", "a1", "a4")},
		{name: "sort by _id desc", query: `{"sort":{"key":"_id","desc":true},"filter":[{"k":"size","v":20,"o":"gte"}]}`, ordered: true,
			want: ids("a6", "a5", "a3", "a2")},
		{name: "page", query: `{"sort":[{"key":"size"}],"page":{"start":2,"limit":3}}`, ordered: true,
			want: ids("a4", "a1", "a8"), total: 8},
		{name: "page start 0 is 1", query: `{"sort":[{"key":"size"}],"page":{"start":0,"limit":2}}`, ordered: true,
			want: ids("a7", "a4"), total: 8},
		{name: "last page is short", query: `{"sort":[{"key":"size"}],"page":{"start":7,"limit":5}}`, ordered: true,
			want: ids("a3", "a6"), total: 8},
		{name: "page past the end", query: `{"page":{"start":9,"limit":5}}`, want: nil, total: 8},
		{name: "page limit 0 means the cap", query: `{"sort":[{"key":"size"}],"page":{"start":3}}`, ordered: true,
			want: ids("a1", "a8", "a2", "a5", "a3", "a6"), total: 8},
		{name: "resource cap without page", query: `{}`, maxLimit: 3, ordered: true, want: ids("a6", "a3", "a2"), total: 8},
		{name: "resource cap over a larger page", query: `{"page":{"start":2,"limit":10}}`, maxLimit: 3, ordered: true,
			want: ids("a3", "a2", "a5"), total: 8},

		// only, minimal, count_only
		{name: "only keeps the fields and the sort keys", query: `{"only":["name"],"filter":[{"k":"size","v":30,"o":"gte"}]}`,
			want: ids("a6", "a3"), ordered: true, keys: []string{"_id", "name", "size"}},
		{name: "only with a nested path", query: `{"only":["tags.env","name"],"sort":[{"key":"name"}],"filter":[{"k":"_id","v":"a1","o":"eq"}]}`,
			want: ids("a1"), keys: []string{"_id", "name", "tags"}},
		{name: "only, parent and child", query: `{"only":["tags","tags.env"],"sort":[{"key":"tags.team"}],"filter":[{"k":"_id","v":"a1","o":"eq"}]}`,
			want: ids("a1"), keys: []string{"_id", "tags"}},
		{name: "minimal", query: `{"minimal":true,"filter":[{"k":"_id","v":"a2","o":"eq"}]}`,
			want: ids("a2"), keys: []string{"_id", "name", "size", "state"}},
		{name: "count_only", query: `{"count_only":true,"filter":[{"k":"state","v":"ENABLED","o":"eq"}]}`, want: nil, total: 3},

		// scope confinement: nothing of domain d2 ever comes back
		{name: "scope: filter on the other domain", query: f("domain_id", "eq", "d2"), want: nil},
		{name: "scope: filter_or on the other domain", query: `{"filter_or":[{"k":"domain_id","v":"d2","o":"eq"},{"k":"_id","v":"b1","o":"eq"}]}`, want: nil},
		{name: "scope: ids of the other domain", query: f("_id", "in", []string{"b1", "b2", "a1"}), want: ids("a1")},
		{name: "scope: keyword found only in the other domain", query: `{"keyword":"other"}`, want: nil},
		{name: "scope: not on the domain", query: f("domain_id", "not", "d1"), want: nil},
		{name: "scope: count_only", query: `{"count_only":true,"filter":[{"k":"size","v":50,"o":"gt"}]}`, want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := resource
			r.MaxLimit = tc.maxLimit
			rows, total := list(t, c, tc.query, r)
			got := idsOf(rows)
			want := tc.want
			if want == nil {
				want = []string{}
			}
			if !tc.ordered {
				slices.Sort(got)
			}
			if !slices.Equal(got, want) {
				t.Errorf("ids %q, want %q", got, want)
			}
			wantTotal := tc.total
			if wantTotal == 0 {
				wantTotal = int64(len(tc.want))
			}
			if total != wantTotal {
				t.Errorf("total_count %d, want %d", total, wantTotal)
			}
			if tc.keys != nil {
				for _, row := range rows {
					if k := keysOf(row); !slices.Equal(k, tc.keys) {
						t.Errorf("row %v has keys %q, want %q", row["_id"], k, tc.keys)
					}
				}
			}
		})
	}
}

// TestListProjectionNested checks that a nested only path loads just that
// member of the object.
func TestListProjectionNested(t *testing.T) {
	t.Parallel()
	c := fixtures(t, time.Now().UTC())
	rows, _ := list(t, c, `{"only":["tags.env","name"],"sort":[{"key":"name"}],"filter":[{"k":"_id","v":"a1","o":"eq"}]}`, resource)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	want := bson.M{"_id": "a1", "name": "Alpha One", "tags": bson.M{"env": "prod"}}
	if !reflect.DeepEqual(rows[0], want) {
		t.Fatalf("row %#v, want %#v", rows[0], want)
	}
}

// TestSearch checks the one-call list: the rows trimmed to only (plus the
// sort keys) on the wire, and a compile error passed through.
func TestSearch(t *testing.T) {
	t.Parallel()
	c := fixtures(t, time.Now().UTC())
	ctx := context.Background()
	var q query.Query
	if err := json.Unmarshal([]byte(`{"only":["name"],"filter":[{"k":"size","v":30,"o":"gte"}]}`), &q); err != nil {
		t.Fatal(err)
	}
	l, err := store.Search[bson.M](ctx, c, &q, resource, scope)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"results":[{"name":"Epsilon (x)","size":40},{"name":"Beta","size":30}],"total_count":2}`
	if string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}

	bad := &query.Query{Filter: []query.Condition{{Key: "size", Value: "x", Operator: "in"}}}
	_, err = store.Search[bson.M](ctx, c, bad, resource, scope)
	wantCode(t, err, http.StatusBadRequest, errs.OperatorListType)
}

// TestListMaxPageBytes: a page stops before the row that would pass the
// bound, never before the first; total_count counts every row; the
// next page starts where the short one ended.
func TestListMaxPageBytes(t *testing.T) {
	t.Parallel()
	c := fixtures(t, time.Now().UTC())
	all, total := list(t, c, `{"sort":[{"key":"_id"}]}`, resource)
	one, err := bson.Marshal(all[0])
	if err != nil {
		t.Fatal(err)
	}
	bounded := resource
	bounded.MaxPageBytes = 2*len(one) + len(one)/2 // two rows of about a1's size
	rows, n := list(t, c, `{"sort":[{"key":"_id"}]}`, bounded)
	if n != total || len(rows) < 1 || len(rows) >= len(all) {
		t.Fatalf("bounded page: %d of %d rows, total %d (want %d)", len(rows), len(all), n, total)
	}
	for i := range rows {
		if rows[i]["_id"] != all[i]["_id"] {
			t.Fatalf("row %d: %v, want %v", i, rows[i]["_id"], all[i]["_id"])
		}
	}
	next, _ := list(t, c, fmt.Sprintf(`{"sort":[{"key":"_id"}],"page":{"start":%d}}`, len(rows)+1), bounded)
	if len(next) == 0 || next[0]["_id"] != all[len(rows)]["_id"] {
		t.Fatalf("next page starts at %v", next)
	}
	tiny := resource
	tiny.MaxPageBytes = 1
	if rows, _ := list(t, c, `{"sort":[{"key":"_id"}]}`, tiny); len(rows) != 1 {
		t.Fatalf("a bound below one row: %d rows, want 1", len(rows))
	}
}
