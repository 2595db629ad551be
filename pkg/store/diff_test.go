package store_test

import (
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/store"
)

type diffDoc struct {
	ID      string             `bson:"_id"`
	Name    string             `bson:"name"`
	Tags    map[string]string  `bson:"tags"`
	List    []string           `bson:"list"`
	Nested  struct{ A, B int } `bson:"nested"`
	Note    string             `bson:"note,omitempty"`
	Version int64              `bson:"version"`
	Mark    bool               `bson:"deleting,omitempty"`
}

// Diff writes exactly the top-level fields that changed: a map in another
// order is no change, a field emptied under omitempty is unset, and the
// id, version and mark are never written.
func TestDiff(t *testing.T) {
	base := func() *diffDoc {
		d := &diffDoc{ID: "x", Name: "n", List: []string{"a", "b"}, Note: "keep", Version: 3}
		d.Tags = map[string]string{}
		for i := range 20 { // enough keys that Go marshals them in varying orders
			d.Tags[fmt.Sprint("k", i)] = fmt.Sprint(i)
		}
		d.Nested.A = 1
		return d
	}
	cases := []struct {
		name string
		edit func(d *diffDoc)
		want string
	}{
		{"nothing", func(d *diffDoc) {}, "[]"},
		{"a map rebuilt in another order", func(d *diffDoc) {
			m := map[string]string{}
			for k, v := range d.Tags {
				m[k] = v
			}
			d.Tags = m
		}, "[]"},
		{"a field", func(d *diffDoc) { d.Name = "m" }, `[{$set {"name":"m"}}]`},
		{"a map value", func(d *diffDoc) { d.Tags["k3"] = "x" }, "$set tags"},
		{"a list's order", func(d *diffDoc) { d.List = []string{"b", "a"} }, `[{$set {"list":["b","a"]}}]`},
		{"a nested field", func(d *diffDoc) { d.Nested.B = 2 }, "$set nested"},
		{"emptied under omitempty", func(d *diffDoc) { d.Note = "" }, `[{$unset {"note":""}}]`},
		{"set and unset", func(d *diffDoc) { d.Name, d.Note = "m", "" }, `[{$set {"name":"m"}} {$unset {"note":""}}]`},
		{"id, version and mark", func(d *diffDoc) { d.ID, d.Version, d.Mark = "y", 9, true }, "[]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, after := base(), base()
			c.edit(after)
			got, err := store.Diff(before, after)
			if err != nil {
				t.Fatal(err)
			}
			switch c.want {
			case "$set tags", "$set nested":
				field := c.want[len("$set "):]
				if len(got) != 1 || got[0].Key != "$set" || len(got[0].Value.(bson.D)) != 1 || got[0].Value.(bson.D)[0].Key != field {
					t.Fatalf("diff %v, want a $set of %s alone", got, field)
				}
			default:
				if s := show(got); s != c.want {
					t.Fatalf("diff %s, want %s", s, c.want)
				}
			}
		})
	}
}

// show prints an update, its values as extended JSON.
func show(u bson.D) string { return fmt.Sprint([]bson.E(u)) }
