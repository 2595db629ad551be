package stat

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/testkit"
)

var scope = bson.D{{Key: "domain_id", Value: "dom-a"}}

var keywordFields = []string{"name", "kind"}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

type d = bson.D
type a = bson.A

// seed stores five documents of dom-a (strings, numbers, nested objects,
// arrays, times, a field missing here and there) and one of dom-b, which
// no result may ever show.
func seed(t *testing.T) *mongo.Collection {
	t.Helper()
	c := testkit.Get().Database(t).Collection("x")
	docs := []any{
		d{{Key: "_id", Value: "p1"}, {Key: "domain_id", Value: "dom-a"}, {Key: "name", Value: "Alpha"}, {Key: "kind", Value: "note"},
			{Key: "size", Value: 10}, {Key: "score", Value: 1.5}, {Key: "labels", Value: a{"x", "y"}},
			{Key: "owner", Value: d{{Key: "team", Value: "red"}, {Key: "level", Value: 2}}},
			{Key: "created_at", Value: at("2024-01-15T10:30:00Z")},
			{Key: "tags", Value: a{d{{Key: "k", Value: "env"}, {Key: "v", Value: "prod"}}, d{{Key: "k", Value: "tier"}, {Key: "v", Value: "web"}}}},
			{Key: "meta", Value: d{{Key: "a", Value: 1}}}, {Key: "nums", Value: a{1, 2.5, "x"}}},
		d{{Key: "_id", Value: "p2"}, {Key: "domain_id", Value: "dom-a"}, {Key: "name", Value: "beta"}, {Key: "kind", Value: "note"},
			{Key: "size", Value: 20}, {Key: "score", Value: 2.5}, {Key: "labels", Value: a{"y"}},
			{Key: "owner", Value: d{{Key: "team", Value: "blue"}, {Key: "level", Value: 1}}},
			{Key: "created_at", Value: at("2024-01-20T08:00:00Z")},
			{Key: "tags", Value: a{d{{Key: "k", Value: "env"}, {Key: "v", Value: "dev"}}}},
			{Key: "meta", Value: d{{Key: "b", Value: 2}}}},
		d{{Key: "_id", Value: "p3"}, {Key: "domain_id", Value: "dom-a"}, {Key: "name", Value: "Gamma"}, {Key: "kind", Value: "post"},
			{Key: "size", Value: 5}, {Key: "labels", Value: a{}},
			{Key: "owner", Value: d{{Key: "team", Value: "red"}, {Key: "level", Value: 3}}},
			{Key: "created_at", Value: at("2024-02-03T00:00:00Z")}, {Key: "tags", Value: a{}},
			{Key: "meta", Value: d{{Key: "a", Value: 3}, {Key: "c", Value: 4}}}},
		d{{Key: "_id", Value: "p4"}, {Key: "domain_id", Value: "dom-a"}, {Key: "name", Value: "delta"}, {Key: "kind", Value: "post"},
			{Key: "size", Value: "n/a"}, {Key: "score", Value: 4.0}, {Key: "labels", Value: a{"x"}},
			{Key: "created_at", Value: at("2023-12-31T23:59:59.5Z")},
			{Key: "tags", Value: a{d{{Key: "k", Value: "env"}, {Key: "v", Value: "prod"}}}}},
		d{{Key: "_id", Value: "p5"}, {Key: "domain_id", Value: "dom-a"}, {Key: "name", Value: "Epsilon"},
			{Key: "size", Value: 7}, {Key: "score", Value: 0.5}, {Key: "labels", Value: nil},
			{Key: "owner", Value: d{{Key: "team", Value: "blue"}, {Key: "level", Value: 5}}},
			{Key: "created_at", Value: at("2024-02-10T12:00:00Z")}},
		d{{Key: "_id", Value: "q1"}, {Key: "domain_id", Value: "dom-b"}, {Key: "name", Value: "Other"}, {Key: "kind", Value: "note"},
			{Key: "size", Value: 1000}, {Key: "score", Value: 9.0}, {Key: "labels", Value: a{"x", "z"}},
			{Key: "owner", Value: d{{Key: "team", Value: "red"}, {Key: "level", Value: 9}}},
			{Key: "created_at", Value: at("2024-01-01T00:00:00Z")}},
	}
	if _, err := c.InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	return c
}

func stat(c *mongo.Collection, q string, pushDown bool) (map[string]any, error) {
	var query Query
	if err := json.Unmarshal([]byte(q), &query); err != nil {
		return nil, err
	}
	return run(context.Background(), c, scope, keywordFields, &query, pushDown)
}

// sameJSON compares as JSON, so 2 and 2.0, or key order, do not matter.
func sameJSON(t *testing.T, got any, want string) {
	t.Helper()
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// TestRun checks exact results; each query runs with and without the
// store-side group, which must not change a thing.
func TestRun(t *testing.T) {
	c := seed(t)
	cases := []struct{ name, query, want string }{
		{"match filter (resolved to ids, same on both stores)",
			`{"filter":[{"k":"tags","v":{"k":"env","v":"prod"},"o":"match"}],
			  "aggregate":[{"group":{"keys":[{"key":"name","name":"name"}],"fields":[{"name":"n","operator":"count"}]}}]}`,
			`{"results":[{"name":"Alpha","n":1},{"name":"delta","n":1}]}`},
		{"group count sum average max min",
			`{"aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"}],"fields":[
				{"name":"n","operator":"count"},
				{"key":"size","name":"total","operator":"sum"},
				{"key":"score","name":"avg","operator":"average"},
				{"key":"size","name":"max","operator":"max"},
				{"key":"score","name":"min","operator":"min"}]}}]}`,
			`{"results":[
				{"kind":null,"n":1,"total":7,"avg":0.5,"max":7,"min":0.5},
				{"kind":"note","n":2,"total":30,"avg":2,"max":20,"min":1.5},
				{"kind":"post","n":2,"total":5,"avg":4,"max":"n/a","min":4}]}`},
		{"group first last push add_to_set merge_objects, short names",
			`{"aggregate":[{"group":{"keys":[{"k":"owner.team","n":"team"}],"fields":[
				{"k":"name","n":"first","o":"first"},
				{"k":"name","n":"last","o":"last"},
				{"k":"size","n":"sizes","o":"push"},
				{"n":"items","o":"push","fields":[{"k":"name","n":"name"},{"key":"score","name":"score"}]},
				{"k":"kind","n":"kinds","o":"add_to_set"},
				{"k":"labels","n":"label_sets","o":"add_to_set"},
				{"k":"meta","n":"meta","o":"merge_objects"}]}}]}`,
			`{"results":[
				{"team":null,"first":"delta","last":"delta","sizes":["n/a"],"items":[{"name":"delta","score":4}],
				 "kinds":["post"],"label_sets":[["x"]],"meta":{}},
				{"team":"blue","first":"beta","last":"Epsilon","sizes":[20,7],
				 "items":[{"name":"beta","score":2.5},{"name":"Epsilon","score":0.5}],
				 "kinds":["note"],"label_sets":[null,["y"]],"meta":{"b":2}},
				{"team":"red","first":"Alpha","last":"Gamma","sizes":[10,5],
				 "items":[{"name":"Alpha","score":1.5},{"name":"Gamma"}],
				 "kinds":["note","post"],"label_sets":[[],["x","y"]],"meta":{"a":3,"c":4}}]}`},
		{"group conditions",
			`{"aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"}],"fields":[
				{"name":"big","operator":"count","conditions":[{"key":"size","value":8,"operator":"gt"}]},
				{"name":"mid","operator":"count","conditions":[{"key":"size","value":7,"operator":"lte"},{"key":"size","value":5,"operator":"gt"}]},
				{"name":"lt10","operator":"count","conditions":[{"key":"size","value":10,"operator":"lt"}]},
				{"key":"size","name":"big_red","operator":"sum","conditions":[{"key":"size","value":8,"operator":"gte"},{"k":"owner.team","v":"red","o":"eq"}]},
				{"key":"score","name":"avg_not_red","operator":"average","conditions":[{"key":"owner.team","value":"red","operator":"not"}]}]}}]}`,
			`{"results":[
				{"kind":null,"big":0,"mid":1,"lt10":1,"big_red":0,"avg_not_red":0.5},
				{"kind":"note","big":2,"mid":0,"lt10":0,"big_red":10,"avg_not_red":1.25},
				{"kind":"post","big":1,"mid":0,"lt10":1,"big_red":0,"avg_not_red":2}]}`},
		{"date_format year and month",
			`{"aggregate":[{"group":{"keys":[{"key":"created_at","name":"year","date_format":"year"},{"key":"created_at","name":"month","date_format":"month"}],
				"fields":[{"name":"n","operator":"count"}]}}]}`,
			`{"results":[{"year":2023,"month":12,"n":1},{"year":2024,"month":1,"n":2},{"year":2024,"month":2,"n":2}]}`},
		{"date_format day",
			`{"aggregate":[{"group":{"keys":[{"key":"created_at","name":"day","date_format":"day"}],"fields":[{"name":"n","operator":"count"}]}}]}`,
			`{"results":[{"day":3,"n":1},{"day":10,"n":1},{"day":15,"n":1},{"day":20,"n":1},{"day":31,"n":1}]}`},
		{"date_format %Y-%m, max of a time",
			`{"aggregate":[{"group":{"keys":[{"key":"created_at","name":"ym","date_format":"%Y-%m"}],
				"fields":[{"name":"n","operator":"count"},{"key":"created_at","name":"latest","operator":"max"}]}}]}`,
			`{"results":[
				{"ym":"2023-12","n":1,"latest":"2023-12-31T23:59:59.500Z"},
				{"ym":"2024-01","n":2,"latest":"2024-01-20T08:00:00.000Z"},
				{"ym":"2024-02","n":2,"latest":"2024-02-10T12:00:00.000Z"}]}`},
		{"project after group: group keys, size, arithmetic",
			`{"aggregate":[
				{"group":{"keys":[{"key":"kind","name":"kind"}],"fields":[{"name":"n","operator":"count"},
					{"key":"size","name":"total","operator":"sum"},{"key":"labels","name":"labels","operator":"push"}]}},
				{"project":{"fields":[
					{"key":"kind","name":"k2"},
					{"key":"labels","name":"label_lists","operator":"size"},
					{"name":"per","operator":"divide","fields":["total","n"]},
					{"name":"plus","operator":"add","fields":["total",1,{"operator":"multiply","fields":["n",10]}]},
					{"name":"minus","operator":"subtract","fields":["total","n"]},
					{"name":"zero","operator":"divide","fields":["n",0]}]}}]}`,
			`{"results":[
				{"kind":null,"k2":null,"label_lists":1,"per":7,"plus":18,"minus":6,"zero":null},
				{"kind":"note","k2":"note","label_lists":2,"per":15,"plus":51,"minus":28,"zero":null},
				{"kind":"post","k2":"post","label_lists":2,"per":2.5,"plus":26,"minus":3,"zero":null}]}`},
		{"project operators, exclude_keys",
			`{"filter":[{"k":"name","v":"Alpha","o":"eq"}],"aggregate":[{"project":{"exclude_keys":true,"fields":[
				{"key":"name","name":"name"},
				{"key":"tags","name":"tag_map","operator":"array_to_object"},
				{"key":"meta","name":"meta_list","operator":"object_to_array"},
				{"key":"labels","name":"n_labels","operator":"size"},
				{"key":"nums","name":"nums_sum","operator":"sum"},
				{"key":"owner.level","name":"lvl","operator":"sum"},
				{"key":"missing","name":"gone"},
				{"name":"later","operator":"add","fields":["created_at",1500]},
				{"name":"age_ms","operator":"subtract","fields":["created_at","created_at"]}]}}]}`,
			`{"results":[{"name":"Alpha","tag_map":{"env":"prod","tier":"web"},
				"meta_list":[{"k":"a","v":1}],"n_labels":2,"nums_sum":3.5,"lvl":2,
				"later":"2024-01-15T10:30:01.500Z","age_ms":0}]}`},
		{"project keeps a document's _id",
			`{"filter":[{"k":"size","v":10,"o":"gte"}],"aggregate":[{"project":{"fields":[{"key":"name","name":"name"}]}}]}`,
			`{"results":[{"_id":"p1","name":"Alpha"},{"_id":"p2","name":"beta"}]}`},
		{"unwind then group",
			`{"aggregate":[{"unwind":{"path":"labels"}},{"group":{"keys":[{"key":"labels","name":"label"}],"fields":[{"name":"n","operator":"count"}]}}]}`,
			`{"results":[{"label":"x","n":2},{"label":"y","n":2}]}`},
		{"unwind with eq and contain_in",
			`{"aggregate":[{"unwind":{"path":"tags","filter":[{"k":"tags.k","v":"env","o":"eq"},{"k":"tags.v","v":["pro","xx"],"o":"contain_in"}]}},
				{"project":{"exclude_keys":true,"fields":[{"key":"name","name":"name"},{"key":"tags.v","name":"env"}]}}]}`,
			`{"results":[{"name":"Alpha","env":"prod"},{"name":"delta","env":"prod"}]}`},
		{"unwind with not and case-sensitive contain",
			`{"aggregate":[{"unwind":{"path":"labels","filter":[{"k":"labels","v":"x","o":"not"},{"k":"name","v":"A","o":"contain"}]}},
				{"project":{"fields":[{"key":"name","name":"name"},{"key":"labels","name":"label"}]}}]}`,
			`{"results":[{"_id":"p1","name":"Alpha","label":"y"}]}`},
		{"unwind with not_in and not_contain_in",
			`{"aggregate":[{"unwind":{"path":"labels","filter":[{"k":"labels","v":["x"],"o":"not_in"},{"k":"name","v":["eta","zz"],"o":"not_contain_in"}]}},
				{"project":{"exclude_keys":true,"fields":[{"key":"name","name":"name"},{"key":"labels","name":"label"}]}}]}`,
			`{"results":[{"name":"Alpha","label":"y"}]}`},
		{"unwind with in and not_contain",
			`{"aggregate":[{"unwind":{"path":"labels","filter":[{"k":"labels","v":["x","q"],"o":"in"},{"k":"name","v":"elt","o":"not_contain"}]}},
				{"project":{"exclude_keys":true,"fields":[{"key":"name","name":"name"},{"key":"labels","name":"label"}]}}]}`,
			`{"results":[{"name":"Alpha","label":"x"}]}`},
		{"count",
			`{"filter":[{"k":"kind","v":"note","o":"eq"}],"aggregate":[{"count":{"name":"total"}}]}`,
			`{"results":[{"total":2}]}`},
		{"count of nothing is no row",
			`{"filter":[{"k":"kind","v":"none","o":"eq"}],"aggregate":[{"count":{"name":"total"}}]}`,
			`{"results":[]}`},
		{"sort by several keys, desc",
			`{"aggregate":[{"project":{"exclude_keys":true,"fields":[{"key":"name","name":"name"},{"key":"kind","name":"kind"},{"key":"size","name":"size"}]}},
				{"sort":[{"key":"kind"},{"key":"size","desc":true}]}]}`,
			`{"results":[{"name":"Epsilon","size":7},{"name":"beta","kind":"note","size":20},{"name":"Alpha","kind":"note","size":10},
				{"name":"delta","kind":"post","size":"n/a"},{"name":"Gamma","kind":"post","size":5}]}`},
		{"sort as one object, skip, limit",
			`{"aggregate":[{"project":{"exclude_keys":true,"fields":[{"key":"name","name":"name"}]}},
				{"sort":{"key":"name","desc":true}},{"skip":1},{"limit":2}]}`,
			`{"results":[{"name":"beta"},{"name":"Gamma"}]}`},
		{"sort on group fields and keys",
			`{"aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"}],"fields":[{"name":"n","operator":"count"}]}},
				{"sort":[{"key":"n","desc":true},{"key":"kind"}]}]}`,
			`{"results":[{"kind":"note","n":2},{"kind":"post","n":2},{"kind":null,"n":1}]}`},
		{"sort as {keys}",
			`{"aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"}],"fields":[{"name":"n","operator":"count"}]}},
				{"sort":{"keys":[{"key":"kind","desc":true}]}}]}`,
			`{"results":[{"kind":"post","n":2},{"kind":"note","n":2},{"kind":null,"n":1}]}`},
		{"sort by an array: smallest element ascending, [] first",
			`{"aggregate":[{"sort":[{"key":"labels"}]},{"project":{"exclude_keys":true,"fields":[{"key":"name","name":"name"}]}}]}`,
			`{"results":[{"name":"Gamma"},{"name":"Epsilon"},{"name":"Alpha"},{"name":"delta"},{"name":"beta"}]}`},
		{"sort by an array: largest element descending",
			`{"aggregate":[{"sort":[{"key":"labels","desc":true}]},{"project":{"exclude_keys":true,"fields":[{"key":"name","name":"name"}]}}]}`,
			`{"results":[{"name":"Alpha"},{"name":"beta"},{"name":"delta"},{"name":"Epsilon"},{"name":"Gamma"}]}`},
		{"unwind a nested non-array value",
			`{"aggregate":[{"unwind":{"path":"owner.team"}},{"group":{"keys":[{"key":"owner.team","name":"team"}],"fields":[{"name":"n","operator":"count"}]}}]}`,
			`{"results":[{"team":"blue","n":2},{"team":"red","n":2}]}`},
		{"unwind filter reaching into another array",
			`{"aggregate":[{"unwind":{"path":"labels","filter":[{"k":"tags.v","v":"prod","o":"eq"}]}},{"count":{"name":"n"}}]}`,
			`{"results":[{"n":3}]}`},
		{"unwind filter eq null matches a missing field",
			`{"aggregate":[{"unwind":{"path":"owner.team","filter":[{"k":"score","v":null,"o":"eq"}]}},
				{"project":{"exclude_keys":true,"fields":[{"key":"name","name":"name"}]}}]}`,
			`{"results":[{"name":"Gamma"}]}`},
		{"page with total_count",
			`{"aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"}],"fields":[{"name":"n","operator":"count"}]}}],"page":{"start":2,"limit":1}}`,
			`{"results":[{"kind":"note","n":2}],"total_count":3}`},
		{"page past the end",
			`{"aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"}]}}],"page":{"start":9,"limit":5}}`,
			`{"results":[],"total_count":3}`},
		{"page without limit has no total_count",
			`{"aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"}]}}],"page":{"start":3}}`,
			`{"results":[{"kind":null},{"kind":"note"},{"kind":"post"}]}`},
		{"distinct: arrays by element, null kept, sorted",
			`{"distinct":"labels"}`,
			`{"results":[null,"x","y"]}`},
		{"distinct nested with page",
			`{"distinct":"owner.team","page":{"start":1,"limit":1}}`,
			`{"results":["blue"],"total_count":2}`},
		{"distinct times",
			`{"distinct":"created_at","filter":[{"k":"kind","v":"note","o":"eq"}]}`,
			`{"results":["2024-01-15T10:30:00.000Z","2024-01-20T08:00:00.000Z"]}`},
		{"keyword",
			`{"keyword":" ALP gam ","aggregate":[{"group":{"keys":[{"key":"name","name":"name"}],"fields":[{"name":"n","operator":"count"}]}}]}`,
			`{"results":[{"name":"Alpha","n":1},{"name":"Gamma","n":1}]}`},
		{"filter and filter_or",
			`{"filter":[{"k":"size","v":6,"o":"gt"}],"filter_or":[{"k":"kind","v":"post","o":"eq"},{"k":"owner.team","v":"blue","o":"eq"}],
				"aggregate":[{"group":{"keys":[{"key":"name","name":"name"}]}}]}`,
			`{"results":[{"name":"Epsilon"},{"name":"beta"}]}`},
		{"scope: dom-b never counts",
			`{"aggregate":[{"group":{"fields":[{"name":"n","operator":"count"},{"key":"size","name":"total","operator":"sum"}]}}]}`,
			`{"results":[{"n":5,"total":42}]}`},
		{"two groups: the second reads the first's key",
			`{"aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"},{"key":"owner.team","name":"team"}],"fields":[{"name":"n","operator":"count"}]}},
				{"group":{"keys":[{"key":"team","name":"team"}],"fields":[{"key":"n","name":"docs","operator":"sum"},{"key":"kind","name":"kinds","operator":"push"}]}}]}`,
			`{"results":[{"team":null,"docs":1,"kinds":["post"]},{"team":"blue","docs":2,"kinds":["note"]},{"team":"red","docs":2,"kinds":["note","post"]}]}`},
		{"no reshaping stage: whole documents",
			`{"filter":[{"k":"_id","v":"p3","o":"eq"}],"aggregate":[{"sort":[{"key":"name"}]}]}`,
			`{"results":[{"_id":"p3","domain_id":"dom-a","name":"Gamma","kind":"post","size":5,"labels":[],"owner":{"team":"red","level":3},
				"created_at":"2024-02-03T00:00:00.000Z","tags":[],"meta":{"a":3,"c":4}}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, push := range []bool{true, false} {
				got, err := stat(c, tc.query, push)
				if err != nil {
					t.Fatalf("push down %v: %v", push, err)
				}
				sameJSON(t, got, tc.want)
			}
		})
	}
}

// TestPushDown checks that the queries the store groups give what the Go
// evaluator gives, including missing keys, non-numeric sums, array and
// time keys.
func TestPushDown(t *testing.T) {
	c := seed(t)
	for _, q := range []string{
		`{"aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"}],"fields":[{"key":"size","name":"s","operator":"sum"}]}}]}`,
		`{"aggregate":[{"group":{"keys":[{"key":"owner.team","name":"team"},{"key":"kind","name":"kind"}],"fields":[{"key":"score","name":"s","operator":"sum"}]}}]}`,
		`{"aggregate":[{"group":{"fields":[{"key":"owner.level","name":"l","operator":"sum"}]}}]}`,
		`{"aggregate":[{"group":{"fields":[{"name":"n","operator":"count"}]}}]}`,
		`{"aggregate":[{"group":{"keys":[{"key":"owner.team","name":"team"},{"key":"kind","name":"kind"}]}}]}`,
		`{"aggregate":[{"group":{"keys":[{"key":"labels","name":"labels"}],"fields":[{"name":"n","operator":"count"}]}}]}`,
		`{"aggregate":[{"group":{"keys":[{"key":"created_at","name":"t"}],"fields":[{"key":"size","name":"s","operator":"sum"}]}}]}`,
		`{"aggregate":[{"group":{"keys":[{"key":"tags.k","name":"tk"}],"fields":[{"key":"nums","name":"s","operator":"sum"}]}}]}`,
		`{"keyword":"a","aggregate":[{"group":{"keys":[{"key":"kind","name":"kind"}],"fields":[{"name":"n","operator":"count"}]}},
			{"sort":[{"key":"n","desc":true}]},{"limit":2}],"page":{"limit":1}}`,
	} {
		var query Query
		if err := json.Unmarshal([]byte(q), &query); err != nil {
			t.Fatal(err)
		}
		p, err := query.compile()
		if err != nil {
			t.Fatal(err)
		}
		if g := firstGroup(p.steps); g == nil || !g.pushable() {
			t.Fatalf("%s: not pushed down", q)
		}
		inStore, err := stat(c, q, true)
		if err != nil {
			t.Fatal(err)
		}
		inGo, err := stat(c, q, false)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(inGo)
		sameJSON(t, inStore, string(want))
	}

	for _, q := range []string{
		`{"aggregate":[{"group":{"fields":[{"key":"size","name":"a","operator":"average"}]}}]}`,
		`{"aggregate":[{"group":{"fields":[{"name":"n","operator":"count","conditions":[{"k":"size","v":1,"o":"gt"}]}]}}]}`,
		`{"aggregate":[{"group":{"keys":[{"key":"created_at","name":"y","date_format":"year"}],"fields":[{"name":"n","operator":"count"}]}}]}`,
		// FerretDB 1.24 gives every accumulator after the first no rows.
		`{"aggregate":[{"group":{"fields":[{"name":"n","operator":"count"},{"key":"size","name":"s","operator":"sum"}]}}]}`,
	} {
		var query Query
		if err := json.Unmarshal([]byte(q), &query); err != nil {
			t.Fatal(err)
		}
		if p, _ := query.compile(); firstGroup(p.steps).pushable() {
			t.Errorf("%s pushed down", q)
		}
	}
}

// TestProjection checks that the store sends only the fields the stages
// read, up to the first stage that rebuilds the rows.
func TestProjection(t *testing.T) {
	var q Query
	err := json.Unmarshal([]byte(`{"aggregate":[{"unwind":{"path":"tags","filter":[{"k":"tags.k","v":"env","o":"eq"}]}},{"sort":[{"key":"owner.team"}]},
		{"group":{"keys":[{"key":"owner.level","name":"l"}],"fields":[{"name":"n","operator":"count","conditions":[{"k":"size","v":1,"o":"gt"}]}]}},
		{"project":{"fields":[{"key":"other","name":"o"}]}}]}`), &q)
	if err != nil {
		t.Fatal(err)
	}
	p, err := q.compile()
	if err != nil {
		t.Fatal(err)
	}
	want := bson.D{{Key: "owner.level", Value: 1}, {Key: "owner.team", Value: 1}, {Key: "size", Value: 1}, {Key: "tags", Value: 1}}
	if !reflect.DeepEqual(p.project, want) {
		t.Errorf("projection %v, want %v", p.project, want)
	}
}

// TestBadQueries: every client mistake is a 4xx with its code.
func TestBadQueries(t *testing.T) {
	c := seed(t)
	cases := []struct{ name, query, code string }{
		{"no aggregate nor distinct", `{}`, errs.RequiredParameter},
		{"empty aggregate", `{"aggregate":[]}`, errs.RequiredParameter},
		{"unknown member", `{"aggregate":[{"count":{"name":"n"}}],"only":["a"]}`, errs.InvalidParameter},
		{"aggregate not a list", `{"aggregate":{"count":{"name":"n"}}}`, errs.InvalidParameterType},
		{"unknown stage", `{"aggregate":[{"bogus":{}}]}`, errs.InvalidParameter},
		{"two stages in one element", `{"aggregate":[{"count":{"name":"n"},"limit":1}]}`, errs.InvalidParameter},
		{"empty element", `{"aggregate":[{}]}`, errs.InvalidParameter},
		{"null stage", `{"aggregate":[{"group":null}]}`, errs.InvalidParameter},
		{"stage not an object", `{"aggregate":["group"]}`, errs.InvalidParameterType},
		{"empty group", `{"aggregate":[{"group":{}}]}`, errs.RequiredParameter},
		{"group key without name", `{"aggregate":[{"group":{"keys":[{"key":"a"}]}}]}`, errs.RequiredParameter},
		{"group key without key", `{"aggregate":[{"group":{"keys":[{"name":"a"}]}}]}`, errs.RequiredParameter},
		{"group key both long and short", `{"aggregate":[{"group":{"keys":[{"key":"a","k":"b","name":"a"}]}}]}`, errs.InvalidParameter},
		{"group key unknown member", `{"aggregate":[{"group":{"keys":[{"key":"a","name":"a","extra":1}]}}]}`, errs.InvalidParameter},
		{"group key not a string", `{"aggregate":[{"group":{"keys":[{"key":1,"name":"a"}]}}]}`, errs.InvalidParameterType},
		{"group key an operator", `{"aggregate":[{"group":{"keys":[{"key":"$where","name":"a"}]}}]}`, errs.DBQuery},
		{"group key name with a dot", `{"aggregate":[{"group":{"keys":[{"key":"a","name":"a.b"}]}}]}`, errs.InvalidParameter},
		{"duplicate key names", `{"aggregate":[{"group":{"keys":[{"key":"a","name":"a"},{"key":"b","name":"a"}]}}]}`, errs.InvalidParameter},
		{"bad date_format", `{"aggregate":[{"group":{"keys":[{"key":"a","name":"a","date_format":"%Q"}]}}]}`, errs.DBQuery},
		{"unknown group operator", `{"aggregate":[{"group":{"fields":[{"key":"a","name":"n","operator":"median"}]}}]}`, errs.DBQuery},
		{"group field without operator", `{"aggregate":[{"group":{"fields":[{"key":"a","name":"n"}]}}]}`, errs.RequiredParameter},
		{"group field without name", `{"aggregate":[{"group":{"fields":[{"operator":"count"}]}}]}`, errs.RequiredParameter},
		{"sum without key", `{"aggregate":[{"group":{"fields":[{"name":"n","operator":"sum"}]}}]}`, errs.RequiredParameter},
		{"push without key or fields", `{"aggregate":[{"group":{"fields":[{"name":"n","operator":"push"}]}}]}`, errs.RequiredParameter},
		{"conditions on max", `{"aggregate":[{"group":{"fields":[{"key":"a","name":"n","operator":"max","conditions":[{"k":"a","v":1,"o":"eq"}]}]}}]}`, errs.DBQuery},
		{"condition operator in", `{"aggregate":[{"group":{"fields":[{"name":"n","operator":"count","conditions":[{"k":"a","v":[1],"o":"in"}]}]}}]}`, errs.DBQuery},
		{"condition without value", `{"aggregate":[{"group":{"fields":[{"name":"n","operator":"count","conditions":[{"k":"a","o":"eq"}]}]}}]}`, errs.RequiredParameter},
		{"fields on sum", `{"aggregate":[{"group":{"fields":[{"key":"a","name":"n","operator":"sum","fields":[{"k":"a","n":"a"}]}]}}]}`, errs.InvalidParameter},
		{"empty project", `{"aggregate":[{"project":{"fields":[]}}]}`, errs.RequiredParameter},
		{"project without key", `{"aggregate":[{"project":{"fields":[{"name":"x"}]}}]}`, errs.RequiredParameter},
		{"unknown project operator", `{"aggregate":[{"project":{"fields":[{"name":"x","operator":"pow","key":"a"}]}}]}`, errs.DBQuery},
		{"divide with one field", `{"aggregate":[{"project":{"fields":[{"name":"x","operator":"divide","fields":["a"]}]}}]}`, errs.DBQuery},
		{"subtract with three fields", `{"aggregate":[{"project":{"fields":[{"name":"x","operator":"subtract","fields":["a",1,2]}]}}]}`, errs.DBQuery},
		{"operand a boolean", `{"aggregate":[{"project":{"fields":[{"name":"x","operator":"add","fields":[true]}]}}]}`, errs.InvalidParameterType},
		{"nested unknown operator", `{"aggregate":[{"project":{"fields":[{"name":"x","operator":"add","fields":[{"operator":"pow","fields":[1]}]}]}}]}`, errs.DBQuery},
		{"unwind without path", `{"aggregate":[{"unwind":{}}]}`, errs.RequiredParameter},
		{"unwind filter regex", `{"aggregate":[{"unwind":{"path":"a","filter":[{"k":"a","v":"x","o":"regex"}]}}]}`, errs.DBQuery},
		{"unwind filter in without list", `{"aggregate":[{"unwind":{"path":"a","filter":[{"k":"a","v":"x","o":"in"}]}}]}`, errs.OperatorListType},
		{"unwind filter eq with list", `{"aggregate":[{"unwind":{"path":"a","filter":[{"k":"a","v":["x"],"o":"eq"}]}}]}`, errs.OperatorValueType},
		{"count without name", `{"aggregate":[{"count":{}}]}`, errs.RequiredParameter},
		{"limit zero", `{"aggregate":[{"limit":0}]}`, errs.InvalidParameter},
		{"limit a string", `{"aggregate":[{"limit":"5"}]}`, errs.InvalidParameterType},
		{"limit a fraction", `{"aggregate":[{"limit":1.5}]}`, errs.InvalidParameterType},
		{"negative skip", `{"aggregate":[{"skip":-1}]}`, errs.InvalidParameter},
		{"empty sort", `{"aggregate":[{"sort":[]}]}`, errs.RequiredParameter},
		{"sort a string", `{"aggregate":[{"sort":"name"}]}`, errs.InvalidParameterType},
		{"sort key empty", `{"aggregate":[{"sort":[{"key":""}]}]}`, errs.RequiredParameter},
		{"negative page limit", `{"aggregate":[{"count":{"name":"n"}}],"page":{"limit":-1}}`, errs.InvalidParameter},
		{"unknown page member", `{"aggregate":[{"count":{"name":"n"}}],"page":{"size":1}}`, errs.InvalidParameter},
		{"bad distinct path", `{"distinct":"a..b"}`, errs.DBQuery},
		{"bad filter operator", `{"filter":[{"k":"a","v":1,"o":"bogus"}],"aggregate":[{"count":{"name":"n"}}]}`, errs.DBQuery},
		{"date_format of a string", `{"aggregate":[{"group":{"keys":[{"key":"name","name":"y","date_format":"year"}]}}]}`, errs.DBQuery},
		{"merge_objects of a string", `{"aggregate":[{"group":{"fields":[{"key":"name","name":"m","operator":"merge_objects"}]}}]}`, errs.DBQuery},
		{"size of a string", `{"aggregate":[{"project":{"fields":[{"key":"name","name":"s","operator":"size"}]}}]}`, errs.DBQuery},
		{"add a string", `{"aggregate":[{"project":{"fields":[{"name":"s","operator":"add","fields":["name",1]}]}}]}`, errs.DBQuery},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stat(c, tc.query, true)
			e, ok := errs.As(err)
			if !ok {
				t.Fatalf("error %v, want *errs.Error %s", err, tc.code)
			}
			if e.Code != tc.code || e.Status() < 400 || e.Status() > 499 {
				t.Errorf("got %s (%d) %q, want %s 4xx", e.Code, e.Status(), e.Message, tc.code)
			}
		})
	}

	// A query built in Go is checked as well.
	one := int64(1)
	q := &Query{Aggregate: []Stage{{Count: &Count{Name: "n"}, Limit: &one}}}
	if _, err := Run(context.Background(), c, scope, query.Resource{}, q); err == nil {
		t.Error("two stages in one element accepted")
	}
	if _, err := Run(context.Background(), c, scope, query.Resource{}, nil); err == nil {
		t.Error("nil query accepted")
	}
}

func TestNormalize(t *testing.T) {
	oid := bson.NewObjectID()
	dec, _ := bson.ParseDecimal128("2.5")
	got := normalize(bson.M{"b": bson.A{int32(1), oid}, "a": dec, "t": bson.NewDateTimeFromTime(at("2024-01-02T03:04:05Z"))})
	want := bson.D{{Key: "a", Value: 2.5}, {Key: "b", Value: []any{int64(1), oid.Hex()}}, {Key: "t", Value: at("2024-01-02T03:04:05Z")}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}

func TestValidate(t *testing.T) {
	var q Query
	if err := json.Unmarshal([]byte(`{"aggregate":[{"group":{"keys":[{"k":"a","n":"a"}]}},{"sort":[{"key":"a"}]}]}`), &q); err != nil {
		t.Fatal(err)
	}
	if err := q.Validate(); err != nil {
		t.Error(err)
	}
	q.Aggregate = append(q.Aggregate, Stage{Project: &Project{Fields: []ProjectField{{Name: "x", Operator: "divide", Fields: []Operand{{Key: "a"}, {Number: 0}}}}}})
	if err := q.Validate(); err != nil {
		t.Error(err)
	}
	q.Aggregate = append(q.Aggregate, Stage{})
	if e, ok := errs.As(q.Validate()); !ok || e.Code != errs.InvalidParameter {
		t.Errorf("empty stage: %v", e)
	}
}

// TestArrayToObject covers the [[k, v], ...] form, which FerretDB cannot
// store (it refuses nested arrays).
func TestArrayToObject(t *testing.T) {
	got, ok := arrayToObject([]any{[]any{"a", int64(1)}, []any{"b", "x"}, []any{"a", int64(3)}})
	if want := (bson.D{{Key: "a", Value: int64(3)}, {Key: "b", Value: "x"}}); !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []any{"s", []any{[]any{"a"}}, []any{[]any{int64(1), int64(2)}}, []any{bson.D{{Key: "k", Value: "a"}}}} {
		if _, ok := arrayToObject(bad); ok {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestStrftime(t *testing.T) {
	f, err := dateFormat("%Y-%m-%dT%H:%M:%S.%L %j %u %w %%")
	if err != nil {
		t.Fatal(err)
	}
	if got := f(at("2024-02-04T05:06:07.089Z")); got != "2024-02-04T05:06:07.089 035 7 1 %" {
		t.Errorf("got %q", got)
	}
	if _, err := dateFormat("%Y-%"); err == nil {
		t.Error("a trailing % accepted")
	}
}

func TestJSONSchema(t *testing.T) {
	s := (&Query{}).JSONSchema()
	if _, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	}
	props := s["properties"].(map[string]any)
	for _, k := range []string{"filter", "filter_or", "keyword", "aggregate", "page", "distinct"} {
		if props[k] == nil {
			t.Errorf("schema lacks %s", k)
		}
	}
}

// TestQueryJSONNames covers protobuf's JSON mapping on the stat query:
// lowerCamelCase names, null as "not set", both names refused.
func TestQueryJSONNames(t *testing.T) {
	var q Query
	in := `{"filterOr":[{"k":"a","v":1,"o":"eq"}],"keyword":null,"aggregate":[{"group":{"keys":[{"key":"t","name":"m","dateFormat":"month"}]}},
		{"project":{"fields":[{"key":"m","name":"m"}],"excludeKeys":true}}]}`
	if err := json.Unmarshal([]byte(in), &q); err != nil {
		t.Fatal(err)
	}
	if len(q.FilterOr) != 1 || q.Aggregate[0].Group.Keys[0].DateFormat != "month" || !q.Aggregate[1].Project.ExcludeKeys {
		t.Fatalf("camelCase members not decoded: %+v", q)
	}
	err := json.Unmarshal([]byte(`{"filter_or":[],"filterOr":[]}`), &q)
	if e, ok := errs.As(err); !ok || e.Code != errs.InvalidParameter || !strings.Contains(e.Message, "query.filter_or") {
		t.Fatalf("both names: %v", err)
	}
}
