package freeform_test

import (
	"context"
	"reflect"
	"testing"
	"testing/quick"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Keys as clouds and users write them.
var realKeys = []string{
	"kubernetes.io/cluster/prod", "app.kubernetes.io/name", "aws:createdBy", "aws:cloudformation:stack-name",
	"$ref", "$", "a.b.c", ".", "..", "a$b", "ends.", "com.example/team", "env", "Name",
	"\uff0e", "\uff04x", "x\uff04", "\uff3c", "a\uff3c.b", "\uff3c\uff0e", "100%", "a b", "é.ü",
}

func TestEscapeKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"env", "env"},
		{"aws:createdBy", "aws:createdBy"},
		{"a/b", "a/b"},
		{"a$b", "a$b"},
		{"kubernetes.io/cluster/prod", "kubernetes\uff0eio/cluster/prod"},
		{"$ref", "\uff04ref"},
		{"$a.b", "\uff04a\uff0eb"},
		{"\uff0e", "\uff3c\uff0e"},
		{"\uff04x", "\uff3c\uff04x"},
		{"x\uff04", "x\uff04"}, // not leading: stored as is
		{"\uff3c", "\uff3c\uff3c"},
	} {
		if got := freeform.EscapeKey(tc.in); got != tc.want {
			t.Errorf("EscapeKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestKeysRoundTrip(t *testing.T) {
	check := func(k string) bool {
		e := freeform.EscapeKey(k)
		if got := freeform.UnescapeKey(e); got != k {
			t.Errorf("UnescapeKey(EscapeKey(%q)) = %q (stored %q)", k, got, e)
			return false
		}
		for i, r := range e { // what the stores refuse never reaches them
			if r == '.' || (r == '$' && i == 0) {
				t.Errorf("EscapeKey(%q) = %q still holds %q", k, e, r)
				return false
			}
		}
		return true
	}
	for _, k := range realKeys {
		check(k)
	}
	// Random keys over an alphabet rich in the characters that matter.
	alphabet := []rune{'a', '.', '$', '/', ':', '\uff0e', '\uff04', '\uff3c', 'é'}
	f := func(idx []uint8) bool {
		rs := make([]rune, len(idx))
		for i, x := range idx {
			rs[i] = alphabet[int(x)%len(alphabet)]
		}
		return check(string(rs))
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// doc is a free-form value with real-world keys at every level.
func doc() map[string]any {
	m := map[string]any{"plain": "v", "n": int64(3)}
	for i, k := range realKeys {
		m[k] = k
		if i%3 == 0 {
			m[k] = map[string]any{k: []any{map[string]any{k: k, "x.y": int32(1)}, "s"}}
		}
	}
	return m
}

type stored struct {
	ID     string        `bson:"_id"`
	Map    freeform.Map  `bson:"map"`
	Flat   freeform.Flat `bson:"flat"`
	List   freeform.List `bson:"list"`
	Nil    freeform.Map  `bson:"nil"`
	NoList freeform.List `bson:"no_list"`
}

func TestStoredAndReadBack(t *testing.T) {
	ctx := context.Background()
	c := testkit.Get().Database(t).Collection("docs")
	in := stored{ID: "a", Map: doc(), Flat: doc(), List: freeform.List{doc(), "x", doc()}}
	if _, err := c.InsertOne(ctx, in); err != nil {
		t.Fatalf("insert refused: %v", err)
	}
	var out stored
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&out); err != nil {
		t.Fatal(err)
	}
	want := stored{ID: "a", Map: doc(), Flat: doc(), List: freeform.List{doc(), "x", doc()}}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("read back\n%#v\nwant\n%#v", out, want)
	}
	// Updated as a whole in a $set, and as one escaped key by path.
	set := bson.D{{Key: "flat", Value: freeform.Flat{"app.kubernetes.io/name": "api"}},
		{Key: "map." + freeform.EscapeKey("$new") + ".k", Value: "v"}}
	if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "$set", Value: set}}); err != nil {
		t.Fatal(err)
	}
	out = stored{}
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.Flat, freeform.Flat{"app.kubernetes.io/name": "api"}) {
		t.Fatalf("flat after $set: %#v", out.Flat)
	}
	if got := out.Map["$new"]; !reflect.DeepEqual(got, map[string]any{"k": "v"}) {
		t.Fatalf("map.$new after $set: %#v", got)
	}
	// Legal keys are stored as they are: old documents and indexes work.
	raw := testkit.Raw(t, c, "a")
	if raw["map"].(bson.M)["plain"] != "v" || raw["map"].(bson.M)["aws:createdBy"] != "aws:createdBy" {
		t.Fatalf("legal keys changed in the store: %v", raw["map"])
	}
	// A filter on the stored path finds it (FerretDB keeps no nested
	// arrays, so the list holds none).
	fs := freeform.Fields{"flat": freeform.Whole, "map": freeform.Nested}
	n, err := c.CountDocuments(ctx, bson.D{{Key: fs.Path("flat.app.kubernetes.io/name"), Value: "api"}})
	if err != nil || n != 1 {
		t.Fatalf("filter on the escaped key: %d, %v", n, err)
	}
}

func TestNilAndEmpty(t *testing.T) {
	for _, v := range []any{freeform.Map(nil), freeform.Flat(nil), freeform.List(nil)} {
		typ, _, err := bson.MarshalValue(v)
		if err != nil || typ != bson.TypeNull {
			t.Errorf("%T(nil) stored as %v, %v; want null", v, typ, err)
		}
	}
	b, err := bson.Marshal(bson.D{{Key: "m", Value: freeform.Map{}}})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		M freeform.Map `bson:"m"`
	}
	if err := bson.Unmarshal(b, &out); err != nil || out.M == nil || len(out.M) != 0 {
		t.Fatalf("empty map read back as %#v, %v", out.M, err)
	}
}

func TestFieldsOf(t *testing.T) {
	type info struct {
		Options freeform.Map `json:"options"`
	}
	type model struct {
		Tags   freeform.Flat           `json:"tags"`
		Data   freeform.Map            `json:"data"`
		Labels freeform.List           `json:"labels"`
		Plugin info                    `json:"plugin_info"`
		Other  map[string]any          `json:"other"`
		Hidden freeform.Map            `json:"-"`
		Ptr    *info                   `json:"ptr,omitempty"`
		Many   map[string]freeform.Map `json:"many"`
	}
	got := freeform.FieldsOf[model]()
	want := freeform.Fields{"tags": freeform.Whole, "data": freeform.Nested, "labels": freeform.Nested,
		"plugin_info.options": freeform.Nested, "ptr.options": freeform.Nested}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FieldsOf = %v, want %v", got, want)
	}
}

func TestPath(t *testing.T) {
	fs := freeform.Fields{"tags": freeform.Whole, "data": freeform.Nested, "plugin_info.options": freeform.Nested}
	for _, tc := range []struct{ in, want string }{
		{"tags", "tags"},
		{"tags.env", "tags.env"},
		{"tags.kubernetes.io/cluster/prod", "tags.kubernetes\uff0eio/cluster/prod"},
		{"tags.$ref", "tags.\uff04ref"},
		{"data.hardware.core", "data.hardware.core"},
		{"data.$ref.x", "data.\uff04ref.x"},
		{"plugin_info.options.$x", "plugin_info.options.\uff04x"},
		{"plugin_info.version", "plugin_info.version"},
		{"tagsx.a.b", "tagsx.a.b"},
		{"name", "name"},
	} {
		if got := fs.Path(tc.in); got != tc.want {
			t.Errorf("Path(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		bad  bool
	}{
		{"cloud keys", map[string]any{"kubernetes.io/cluster/prod": "1", "aws:createdBy": "x", "$ref": map[string]any{"a.b": 1}}, false},
		{"nil", nil, false},
		{"empty key", map[string]any{"": 1}, true},
		{"nested empty key", map[string]any{"a": []any{map[string]any{"": 1}}}, true},
		{"NUL", map[string]any{"a\x00b": 1}, true},
		{"not UTF-8", map[string]any{"a\xffb": 1}, true},
		{"typed map", map[string]string{"": "x"}, true},
		{"too deep", deep(40), true},
		{"deep enough", deep(30), false},
	} {
		err := freeform.Check("tags", tc.v)
		if (err != nil) != tc.bad {
			t.Errorf("%s: Check = %v, want bad=%v", tc.name, err, tc.bad)
		}
		if e, ok := errs.As(err); err != nil && (!ok || e.Code != errs.InvalidParameter) {
			t.Errorf("%s: %v is not ERROR_INVALID_PARAMETER", tc.name, err)
		}
	}
}

func deep(n int) any {
	var v any = "leaf"
	for range n {
		v = map[string]any{"k": v}
	}
	return v
}
