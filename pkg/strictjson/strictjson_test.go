package strictjson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
)

type leaf struct {
	UserID string `json:"user_id"`
}

type Base struct {
	DomainID string `json:"domain_id"`
}

type target struct {
	Base
	WorkspaceID string           `json:"workspace_id"`
	Name        string           `json:"name"`
	Count       *int             `json:"count_max"`
	Leaf        *leaf            `json:"leaf_info"`
	Leaves      []leaf           `json:"leaf_list"`
	ByKey       map[string]leaf  `json:"by_key"`
	Tags        map[string]any   `json:"tags"`
	Data        any              `json:"data_value"`
	Raw         []map[string]any `json:"raw_rows"`
	Skipped     string           `json:"-"`
	NoTag       string
	Nested      *struct{ Base } `json:"nested"`
}

func TestDecodeNames(t *testing.T) {
	two := 2
	cases := []struct {
		name string
		in   string
		want target
	}{
		{"snake", `{"workspace_id": "w", "name": "n"}`, target{WorkspaceID: "w", Name: "n"}},
		{"camel", `{"workspaceId": "w"}`, target{WorkspaceID: "w"}},
		{"camel at depth", `{"leafInfo": {"userId": "u"}, "leafList": [{"userId": "a"}, {"user_id": "b"}]}`,
			target{Leaf: &leaf{UserID: "u"}, Leaves: []leaf{{UserID: "a"}, {UserID: "b"}}}},
		{"map keys verbatim, struct values renamed", `{"byKey": {"some_key": {"userId": "u"}}}`,
			target{ByKey: map[string]leaf{"some_key": {UserID: "u"}}}},
		{"free-form keys verbatim", `{"tags": {"userId": 1, "user_id": null}, "dataValue": {"aB": [{"c_d": 1}]}, "rawRows": [{"workspaceId": "x"}]}`,
			target{Tags: map[string]any{"userId": 1.0, "user_id": nil}, Data: map[string]any{"aB": []any{map[string]any{"c_d": 1.0}}},
				Raw: []map[string]any{{"workspaceId": "x"}}}},
		{"embedded member promoted, camel too", `{"domainId": "d"}`, target{Base: Base{DomainID: "d"}}},
		{"null is not set", `{"workspace_id": null, "countMax": null, "leaf_info": null, "leaf_list": null, "tags": null}`, target{}},
		{"null inside a nested struct", `{"leaf_info": {"user_id": null}}`, target{Leaf: &leaf{}}},
		{"pointer number", `{"count_max": 2}`, target{Count: &two}},
		{"untagged member by its Go name", `{"NoTag": "x"}`, target{NoTag: "x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got target
			if err := Decode([]byte(c.in), &got, ""); err != nil {
				t.Fatalf("Decode(%s) = %v", c.in, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Decode(%s)\n got %+v\nwant %+v", c.in, got, c.want)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	cases := []struct {
		name, in, code, key string
	}{
		{"both names", `{"workspace_id": "a", "workspaceId": "b"}`, errs.InvalidParameter, "key = workspace_id,"},
		{"both names, one null", `{"workspaceId": null, "workspace_id": "a"}`, errs.InvalidParameter, "key = workspace_id,"},
		{"same name twice", `{"name": "a", "name": "b"}`, errs.InvalidParameter, "key = name,"},
		{"both names nested", `{"leaf_list": [{"user_id": "a", "userId": "b"}]}`, errs.InvalidParameter, "key = leaf_list.user_id,"},
		{"unknown", `{"bogus": 1}`, errs.InvalidParameter, "key = bogus,"},
		{"unknown nested", `{"leafInfo": {"bogus": 1}}`, errs.InvalidParameter, "key = leaf_info.bogus,"},
		{"unknown in a map's struct value", `{"by_key": {"k": {"bogus": 1}}}`, errs.InvalidParameter, "key = by_key.k.bogus,"},
		{"other case is unknown", `{"WorkspaceId": "w"}`, errs.InvalidParameter, "key = WorkspaceId,"},
		{"upper snake is unknown", `{"WORKSPACE_ID": "w"}`, errs.InvalidParameter, "key = WORKSPACE_ID,"},
		{"ignored Go member is unknown", `{"Skipped": "x"}`, errs.InvalidParameter, "key = Skipped,"},
		{"embedded struct name is unknown", `{"Base": {}}`, errs.InvalidParameter, "key = Base,"},
		{"wrong type under camel name", `{"workspaceId": 1}`, errs.InvalidParameterType, "key = workspace_id,"},
		{"wrong nested type", `{"leafInfo": {"userId": true}}`, errs.InvalidParameterType, "key = leaf_info.user_id,"},
		{"struct not an object", `{"leaf_info": "x"}`, errs.InvalidParameterType, "key = leaf_info,"},
		{"list not a list", `{"leaf_list": {}}`, errs.InvalidParameterType, "key = leaf_list,"},
		{"wrong type of an embedded member", `{"domain_id": 1}`, errs.InvalidParameterType, "key = domain_id,"},
		{"wrong type of an embedded member at depth", `{"nested": {"domainId": {}}}`, errs.InvalidParameterType, "key = nested.domain_id,"},
		{"malformed", `{"name": "a"`, errs.JSONFormat, "JSON parsing error"},
		{"two values", `{"name": "a"} {}`, errs.JSONFormat, "more than one value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got target
			err := Decode([]byte(c.in), &got, "")
			e, ok := errs.As(err)
			if !ok || e.Code != c.code || e.Status() != 400 || !strings.Contains(e.Message, c.key) {
				t.Fatalf("Decode(%s) = %v, want %s naming %q", c.in, err, c.code, c.key)
			}
		})
	}
}

func TestDecodeAtPrefix(t *testing.T) {
	var got leaf
	err := Decode([]byte(`{"userId": "a", "user_id": "b"}`), &got, "query.page")
	if e, ok := errs.As(err); !ok || !strings.Contains(e.Message, "key = query.page.user_id,") {
		t.Fatalf("got %v", err)
	}
}

func TestLowerCamel(t *testing.T) {
	for in, want := range map[string]string{
		"workspace_id": "workspaceId", "name": "name", "count_only": "countOnly",
		"filter_or": "filterOr", "a_b_c": "aBC", "v2_x": "v2X", "x_1": "x1", "NoTag": "NoTag",
	} {
		if got := LowerCamel(in); got != want {
			t.Errorf("LowerCamel(%s) = %s, want %s", in, got, want)
		}
	}
}

// BenchmarkDecode measures the renaming pass against plain encoding/json
// on a typical request body.
func BenchmarkDecode(b *testing.B) {
	body := []byte(`{"workspaceId": "ws-1", "name": "n", "count_max": 3, "leaf_info": {"userId": "u"},
		"leaf_list": [{"user_id": "a"}, {"user_id": "b"}], "tags": {"a": 1, "b": [1, 2, 3]}, "domainId": "d"}`)
	b.Run("strictjson", func(b *testing.B) {
		for b.Loop() {
			var v target
			if err := Decode(body, &v, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	plain := []byte(`{"workspace_id": "ws-1", "name": "n", "count_max": 3, "leaf_info": {"user_id": "u"},
		"leaf_list": [{"user_id": "a"}, {"user_id": "b"}], "tags": {"a": 1, "b": [1, 2, 3]}, "domain_id": "d"}`)
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var v target
			if err := json.Unmarshal(plain, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestScan checks the member and element scanner against encoding/json on
// awkward but valid documents.
func TestScan(t *testing.T) {
	for _, doc := range []string{
		`{}`, ` { } `, `{"a":1}`, `{"a":true}`, `{"a":null}`, `{"a":-1.5e3,"b":false}`,
		`{ "a" : "x}y]z,\"" , "b\"c" : [1, {"d": "]"}], "e\u0041": {"f": [[], {}]} , "g":"\\"}`,
		"{\n\t\"a\":\r\n 1 ,\"b\":[ ]\n}",
	} {
		ms, err := members(json.RawMessage(doc))
		if err != nil {
			t.Fatalf("members(%s): %v", doc, err)
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		if len(ms) != len(want) {
			t.Fatalf("members(%s) = %d members, want %d", doc, len(ms), len(want))
		}
		for _, m := range ms {
			var got, exp any
			if json.Unmarshal(m.val, &got) != nil || json.Unmarshal(want[m.key], &exp) != nil || !reflect.DeepEqual(got, exp) {
				t.Fatalf("members(%s): %q = %s, want %s", doc, m.key, m.val, want[m.key])
			}
		}
	}
	for _, doc := range []string{`[]`, `[ ]`, `[1]`, `[1,"a,]",{"b":[2]},null, true ,[[]]]`} {
		var want []json.RawMessage
		_ = json.Unmarshal([]byte(doc), &want)
		got := elements(json.RawMessage(doc))
		if len(got) != len(want) {
			t.Fatalf("elements(%s) = %q", doc, got)
		}
		for i := range got {
			if !bytes.Equal(bytes.TrimSpace(got[i]), bytes.TrimSpace(want[i])) {
				t.Fatalf("elements(%s)[%d] = %s, want %s", doc, i, got[i], want[i])
			}
		}
	}
}

// FuzzDecode: any input decodes or fails with an *errs.Error, never a panic
// or another error (the scanner trusts that Decode checked the syntax).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"workspaceId":"w","leaf_list":[{"userId":"u"}]}`, `{"tags":{"a":[1,{"b":null}]}}`, `{"by_key":{"k":{"user_id":"x"}}}`, `[]`, `{"a"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v target
		err := Decode(b, &v, "")
		if err == nil {
			return
		}
		if _, ok := errs.As(err); !ok {
			t.Fatalf("Decode(%q) = %v, not an *errs.Error", b, err)
		}
	})
}
