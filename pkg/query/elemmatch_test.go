package query

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestCompileMatch(t *testing.T) {
	cases := []struct {
		cond    string
		path    string
		cond2   string // Cond, keys sorted
		unwound string // the condition on one unwound element
	}{
		{`{"k":"items","v":{"qty":{"$lt":10,"$gte":4},"name":"cpu"},"o":"match"}`, "items",
			`{"name":"cpu","qty":{"$gte":4,"$lt":10}}`, `{"items.name":"cpu","items.qty":{"$gte":4,"$lt":10}}`},
		{`{"k":"labels","v":{"$regex":"^gr","$options":"i"},"o":"match"}`, "labels",
			`{"$options":"i","$regex":"^gr"}`, `{"labels":{"$options":"i","$regex":"^gr"}}`},
		{`{"k":"data.ports","v":{"$gt":100,"$lt":1000},"o":"match"}`, "data.ports",
			`{"$gt":100,"$lt":1000}`, `{"data.ports":{"$gt":100,"$lt":1000}}`},
		{`{"k":"items","v":{"name":{"$ne":"cpu"},"$exists":true},"o":"match"}`, "items",
			`{"$exists":true,"name":{"$ne":"cpu"}}`, `{"items":{"$exists":true},"items.name":{"$ne":"cpu"}}`},
		{`{"k":"items","v":{"spec":{"size":{"$in":[1,2]}}},"o":"match"}`, "items",
			`{"spec":{"size":{"$in":[1,2]}}}`, `{"items.spec":{"size":{"$in":[1,2]}}}`},
	}
	for _, c := range cases {
		t.Run(c.cond, func(t *testing.T) {
			f, err := Filter(nil, []Condition{cond(t, c.cond)}, nil, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			m, ok := f[0].Value.(ElemMatch)
			if len(f) != 1 || f[0].Key != c.path || !ok {
				t.Fatalf("filter %#v, want {%s: ElemMatch}", f, c.path)
			}
			if m.Path != c.path {
				t.Fatalf("path %q, want %q", m.Path, c.path)
			}
			if got := extJSON(t, m.Cond); got != c.cond2 {
				t.Fatalf("cond got %s, want %s", got, c.cond2)
			}
			if got := extJSON(t, m.Unwound()); got != c.unwound {
				t.Fatalf("unwound got %s, want %s", got, c.unwound)
			}
		})
	}
}

func TestElemMatchUnresolvedFails(t *testing.T) {
	f, err := Filter(bson.D{{Key: "domain_id", Value: "d1"}}, []Condition{{Key: "items", Value: map[string]any{"name": "cpu"}, Operator: "match"}}, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := bson.Marshal(f); err == nil {
		t.Fatalf("an unresolved match encoded as %s", bson.Raw(b))
	}
}

func TestReplaceElemMatch(t *testing.T) {
	scope := bson.D{{Key: "domain_id", Value: "d1"}}
	and := []Condition{
		{Key: "items", Value: map[string]any{"name": "cpu"}, Operator: "match"},
		{Key: "state", Value: "A", Operator: "eq"},
	}
	or := []Condition{
		{Key: "labels", Value: map[string]any{"$eq": "red"}, Operator: "match"},
		{Key: "size", Value: int64(1), Operator: "gt"},
	}
	f, err := Filter(scope, and, or, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range ElemMatches(f) {
		paths = append(paths, m.Path)
	}
	if len(paths) != 2 || paths[0] != "items" || paths[1] != "labels" {
		t.Fatalf("ElemMatches found %q, want [items labels]", paths)
	}
	got := ReplaceElemMatch(f, func(m ElemMatch) bson.D {
		return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{m.Path + "-id"}}}}}
	})
	want := `{"$and":[{"domain_id":"d1"},{"_id":{"$in":["items-id"]}},{"state":{"$eq":"A"}},` +
		`{"$or":[{"_id":{"$in":["labels-id"]}},{"size":{"$gt":1}}]}]}`
	if s := extJSON(t, got); s != want {
		t.Fatalf("\n got %s\nwant %s", s, want)
	}
	if len(ElemMatches(f)) != 2 {
		t.Fatal("ReplaceElemMatch changed its input")
	}
	// a filter that is the match alone
	f, _ = Filter(nil, and[:1], nil, "", nil)
	got = ReplaceElemMatch(f, func(ElemMatch) bson.D { return bson.D{{Key: "x", Value: 1}} })
	if s := extJSON(t, got); s != `{"x":1}` {
		t.Fatalf("got %s, want {\"x\":1}", s)
	}
}
