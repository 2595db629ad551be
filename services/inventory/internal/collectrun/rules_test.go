package collectrun

import (
	"testing"

	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

func TestParseRules(t *testing.T) {
	t.Parallel()
	got, err := parseRules(map[string]any{"2": []any{"b"}, "10": []any{"c"}, "1": []any{"a", "", 5}})
	if err != nil || len(got) != 3 || got[0][0] != "a" || len(got[0]) != 1 || got[1][0] != "b" || got[2][0] != "c" {
		t.Fatalf("orders: %v %v", got, err)
	}
	if _, err := parseRules(map[string]any{"first": []any{"a"}}); err == nil {
		t.Fatal("a non-numeric order must fail")
	}
}

func TestTruthy(t *testing.T) {
	t.Parallel()
	for v, want := range map[any]bool{nil: false, "": false, "x": true, 0.0: false, 1.5: true, false: false, true: true} {
		if truthy(v) != want {
			t.Fatalf("truthy(%v) != %v", v, want)
		}
	}
	if truthy([]any{}) || !truthy([]any{1}) || truthy(map[string]any{}) || !truthy(map[string]any{"a": 1}) {
		t.Fatal("lists and maps")
	}
}

func TestMatchKey(t *testing.T) {
	t.Parallel()
	h := &handler{task: &core.JobTask{DomainID: "d", WorkspaceID: "w"}}
	res := map[string]any{"provider": "aws", "account": "", "reference": map[string]any{"resource_id": "i-1"}}
	k1 := h.matchKey(res, []string{"reference.resource_id", "provider", "account"})
	k2 := h.matchKey(res, []string{"provider", "reference.resource_id"})
	if k1 == "" || k1 != k2 {
		t.Fatalf("a falsy path is skipped and the order does not matter: %q %q", k1, k2)
	}
	if h.matchKey(res, []string{"account", "missing.path"}) != "" {
		t.Fatal("no truthy value: no key")
	}
	other := &handler{task: &core.JobTask{DomainID: "d", WorkspaceID: "w2"}}
	if other.matchKey(res, []string{"provider", "reference.resource_id"}) == k1 {
		t.Fatal("keys are per workspace")
	}
	res2 := map[string]any{"provider": "aws", "reference": map[string]any{"resource_id": "i-2"}}
	if h.matchKey(res2, []string{"provider", "reference.resource_id"}) == k1 {
		t.Fatal("another value, another key")
	}
	num := map[string]any{"n": 1.0}
	str := map[string]any{"n": "1"}
	if h.matchKey(num, []string{"n"}) == h.matchKey(str, []string{"n"}) {
		t.Fatal("1 and \"1\" are not equal")
	}
}

func TestTagsAndJSONFields(t *testing.T) {
	t.Parallel()
	got := tags([]any{map[string]any{"key": "env", "value": "prod"}, map[string]any{"value": "no key"}})
	if len(got) != 1 || got["env"] != "prod" {
		t.Fatalf("tags list: %v", got)
	}
	if m := tags(map[string]any{"a": "b"}); m["a"] != "b" {
		t.Fatal("tags map")
	}
	res := map[string]any{"json_data": `{"a":1}`, "json_metadata": ""}
	if err := decodeJSONFields(res); err != nil || res["data"].(map[string]any)["a"] != 1.0 {
		t.Fatalf("json_data: %v %v", res, err)
	}
	if err := decodeJSONFields(map[string]any{"json_data": "not json"}); err == nil {
		t.Fatal("bad json_data must fail")
	}
}
