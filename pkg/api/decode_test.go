package api

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"

	"github.com/nubes-io/nubes/pkg/errs"
)

type inner struct {
	Mode string `json:"mode" v:"required,enum=A|B"`
}

type sample struct {
	Name   string         `json:"name" v:"required,max=5"`
	Kind   string         `json:"kind" v:"enum=X|Y"`
	Labels []string       `json:"labels" v:"max=2,enum=l1|l2|l3"`
	Count  int            `json:"count" v:"min=1"`
	Flag   *bool          `json:"flag"`
	Inner  *inner         `json:"inner"`
	Items  []inner        `json:"items"`
	Tags   map[string]any `json:"tags"`
	Extra  *extra         `json:"extra_info"`
}

type extra struct {
	UserID string `json:"user_id" v:"required"`
}

func (s *sample) Validate() error {
	if s.Name == "bad" {
		return errs.Invalid("name", "cannot be bad")
	}
	return nil
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name string
		body string
		code string // "" means accepted
	}{
		{"minimal", `{"name": "ok"}`, ""},
		{"empty body is {} and misses name", ``, errs.RequiredParameter},
		{"trimmed and accepted", `{"name": "  abc  "}`, ""},
		{"blank required", `{"name": "  "}`, errs.RequiredParameter},
		{"null required", `{"name": null}`, errs.RequiredParameter},
		{"too long in runes", `{"name": "ääääää"}`, errs.InvalidParameter},
		{"five runes fit", `{"name": "äääää"}`, ""},
		{"enum", `{"name": "a", "kind": "Z"}`, errs.InvalidParameter},
		{"enum ok", `{"name": "a", "kind": "Y"}`, ""},
		{"list enum", `{"name": "a", "labels": ["l1", "l9"]}`, errs.InvalidParameter},
		{"list too long", `{"name": "a", "labels": ["l1", "l2", "l3"]}`, errs.InvalidParameter},
		{"min", `{"name": "a", "count": 0}`, ""},
		{"below min", `{"name": "a", "count": -1}`, errs.InvalidParameter},
		{"wrong type", `{"name": 1}`, errs.InvalidParameterType},
		{"wrong nested type", `{"name": "a", "inner": {"mode": 1}}`, errs.InvalidParameterType},
		{"unknown field", `{"name": "a", "nme": "b"}`, errs.InvalidParameter},
		{"unknown nested field", `{"name": "a", "inner": {"mode": "A", "x": 1}}`, errs.InvalidParameter},
		{"nested required", `{"name": "a", "inner": {}}`, errs.RequiredParameter},
		{"nested enum in list", `{"name": "a", "items": [{"mode": "A"}, {"mode": "C"}]}`, errs.InvalidParameter},
		{"free-form tags", `{"name": "a", "tags": {"any": {"thing": [1]}}}`, ""},
		{"malformed", `{"name": "a"`, errs.JSONFormat},
		{"syntax", `{"name": "a",}`, errs.JSONFormat},
		{"array body", `[1]`, errs.JSONFormat},
		{"string body", `"x"`, errs.JSONFormat},
		{"trailing object", `{"name": "a"}{}`, errs.JSONFormat},
		{"custom rule", `{"name": "bad"}`, errs.InvalidParameter},
		{"camelCase member", `{"name": "a", "inner": {"mode": "A"}, "extraInfo": {"userId": "u"}}`, ""},
		{"camelCase required member", `{"name": "a", "extra_info": {"userId": "  "}}`, errs.RequiredParameter},
		{"null required nested", `{"name": "a", "extraInfo": {"userId": null}}`, errs.RequiredParameter},
		{"null optional", `{"name": "a", "kind": null, "labels": null, "inner": null, "tags": null, "flag": null}`, ""},
		{"both names", `{"name": "a", "extra_info": {"user_id": "u", "userId": "u"}}`, errs.InvalidParameter},
		{"wrong type under camelCase", `{"name": "a", "extraInfo": {"userId": 1}}`, errs.InvalidParameterType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s sample
			err := Decode([]byte(c.body), &s)
			if c.code == "" {
				if err != nil {
					t.Fatalf("Decode(%s) = %v, want nil", c.body, err)
				}
				return
			}
			e, ok := errs.As(err)
			if !ok || e.Code != c.code || e.Status() != 400 {
				t.Fatalf("Decode(%s) = %v, want %s (400)", c.body, err, c.code)
			}
		})
	}
}

// TestDecodeMessages checks that errors name the member by its snake_case
// name, whatever name the client used.
func TestDecodeMessages(t *testing.T) {
	cases := map[string]string{
		`{"name": "a", "extraInfo": {"userId": null}}`:                "key = extra_info.user_id)",
		`{"name": "a", "extraInfo": {"userId": 1}}`:                   "key = extra_info.user_id,",
		`{"name": "a", "extraInfo": {"user_id": "u", "userId": "v"}}`: "key = extra_info.user_id, reason = given as both user_id and userId",
		`{"name": "a", "extraInfo": {"userID": "u"}}`:                 "key = extra_info.userID, reason = unknown field",
	}
	for body, want := range cases {
		var s sample
		err := Decode([]byte(body), &s)
		e, ok := errs.As(err)
		if !ok || !strings.Contains(e.Message, want) {
			t.Errorf("Decode(%s) = %v, want a message with %q", body, err, want)
		}
	}
	var s sample
	if err := Decode([]byte(`{"name": "a", "extraInfo": {"userId": "u"}}`), &s); err != nil || s.Extra == nil || s.Extra.UserID != "u" {
		t.Fatalf("camelCase not decoded: %v %+v", err, s.Extra)
	}
}

func TestDecodeTrims(t *testing.T) {
	var s sample
	if err := Decode([]byte(`{"name": " ab ", "labels": [" l1 "]}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.Name != "ab" || s.Labels[0] != "l1" {
		t.Fatalf("not trimmed: %+v", s)
	}
}

func TestAlias(t *testing.T) {
	cases := map[string]string{
		"/board/v1/board/create":        "/board/board/create",
		"/identity/v2/user-profile/get": "/identity/user-profile/get",
		"/cost-analysis/v1/job/cancel":  "/cost-analysis/job/cancel",
		"/board/board/create":           "",
		"/monitoring/v1/webhook/x/y/z":  "",
		"/identity/version/user/create": "",
		"/identity/v10/api-key/enable":  "/identity/api-key/enable",
	}
	for in, want := range cases {
		if got := Alias(in); got != want {
			t.Errorf("Alias(%s) = %q, want %q", in, got, want)
		}
	}
	if Version("/identity/v10/user/get") != 10 || Version("/board/board/get") != 0 {
		t.Error("Version")
	}
}

func TestReflect(t *testing.T) {
	noop := func(context.Context, *auth.Principal, *Empty) (*Empty, error) { return &Empty{}, nil }
	routes := []Route{
		Op[Empty, Empty]{Path: "/identity/v2/user/create", Handle: noop},
		Op[Empty, Empty]{Path: "/identity/v1/user/create", Handle: noop},
		Op[Empty, Empty]{Path: "/board/v1/post/list", Handle: noop},
		Op[Empty, Empty]{Path: "/plugin/plugin/get-plugin-metadata", Handle: noop},
	}
	got := Reflect(routes)
	want := []Reflected{
		{Name: "board.post.list", Path: "/board/post/list", Method: "POST"},
		{Name: "identity.user.create", Path: "/identity/user/create", Method: "POST"},
		{Name: "plugin.plugin.get-plugin-metadata", Path: "/plugin/plugin/get-plugin-metadata", Method: "POST"},
	}
	if !reflect.DeepEqual(got.APIs, want) {
		t.Fatalf("Reflect = %+v\nwant %+v", got.APIs, want)
	}
	merged := MergeReflections(Reflection{APIs: want[1:2]}, Reflection{APIs: []Reflected{{Name: "other", Path: "/identity/user/create", Method: "POST"}, want[0]}}, Reflection{})
	if !reflect.DeepEqual(merged.APIs, want[:2]) {
		t.Fatalf("MergeReflections = %+v", merged.APIs)
	}
	if b, _ := json.Marshal(MergeReflections()); string(b) != `{"apis":[]}` {
		t.Fatalf("empty reflection = %s, want an empty list", b)
	}
}

// common is embedded: its fields are the outer object's, as in JSON.
type common struct {
	ID   string `json:"id" v:"required,max=4"`
	Mode string `json:"mode" v:"enum=A|B"`
}

type withEmbedded struct {
	common
	Name string `json:"name" v:"required"`
}

func TestDecodeEmbedded(t *testing.T) {
	for _, tc := range []struct {
		body, code string
	}{
		{`{"id": "a1", "name": "n"}`, ""},
		{`{"name": "n"}`, errs.RequiredParameter},
		{`{"id": "a12345", "name": "n"}`, errs.InvalidParameter},
		{`{"id": "a1", "mode": "Z", "name": "n"}`, errs.InvalidParameter},
		{`{"id": "a1"}`, errs.RequiredParameter},
	} {
		var r withEmbedded
		err := Decode([]byte(tc.body), &r)
		switch e, _ := errs.As(err); {
		case tc.code == "" && err != nil:
			t.Fatalf("%s: %v", tc.body, err)
		case tc.code != "" && (e == nil || e.Code != tc.code):
			t.Fatalf("%s: got %v, want %s", tc.body, err, tc.code)
		}
	}
	var r withEmbedded
	if err := Decode([]byte(`{"id": " a1 ", "name": "n"}`), &r); err != nil || r.ID != "a1" {
		t.Fatalf("embedded string not trimmed: %q, %v", r.ID, err)
	}
	s := (&schemaGen{defs: map[string]any{}}).schema(reflect.TypeFor[withEmbedded]())
	props := s["properties"].(map[string]any)
	if _, ok := props["id"]; !ok || props["common"] != nil || len(props) != 3 {
		t.Fatalf("schema properties %v", props)
	}
	if req := s["required"].([]string); !reflect.DeepEqual(req, []string{"id", "name"}) {
		t.Fatalf("required %v", req)
	}
}
