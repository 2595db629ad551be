package projectdashboard

import (
	"encoding/json"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestChanged(t *testing.T) {
	t.Parallel()
	stored := bson.D{{Key: "b", Value: int32(2)}, {Key: "a", Value: bson.A{"x", 1.5}}}
	cases := []struct {
		name   string
		given  map[string]any
		stored map[string]any
		want   bool
	}{
		{"not given", nil, map[string]any{"a": 1}, false},
		{"empty given, nothing stored", map[string]any{}, nil, false},
		{"empty given, content stored", map[string]any{}, map[string]any{"a": 1}, true},
		{"same keys in another order, other number types", map[string]any{"a": []any{"x", 1.5}, "b": 2.0}, map[string]any{"d": stored}, false},
		{"a value differs", map[string]any{"a": 1}, map[string]any{"a": 2}, true},
		{"a key more", map[string]any{"a": 1, "b": 1}, map[string]any{"a": 1}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			given, st := tc.given, tc.stored
			if d, ok := st["d"]; ok { // a document as BSON decodes it
				st = map[string]any{}
				for _, e := range d.(bson.D) {
					st[e.Key] = e.Value
				}
			}
			if got := changedObject(given, st); got != tc.want {
				t.Fatalf("changedObject(%v, %v) = %v, want %v", given, st, got, tc.want)
			}
		})
	}
	if changedList(nil, []any{1}) || changedList([]any{}, nil) || !changedList([]any{}, []any{1}) ||
		changedList([]any{bson.D{{Key: "w", Value: int32(1)}}}, []any{map[string]any{"w": 1.0}}) {
		t.Fatal("changedList")
	}
}

// TestCheckContent: content keeps keys as clouds and JSON schemas write
// them; only what no store keeps is refused, naming the field.
func TestCheckContent(t *testing.T) {
	t.Parallel()
	deep := any("x")
	for range 33 {
		deep = map[string]any{"k": deep}
	}
	cases := []struct {
		name string
		v    any
		bad  bool
	}{
		{"plain", map[string]any{"a": []any{map[string]any{"b": 1}}}, false},
		{"dollar key", map[string]any{"$schema": 1, "$ref": "#/x"}, false},
		{"nested dollar key", map[string]any{"a": []any{map[string]any{"$set": 1}}}, false},
		{"dotted and slashed keys", map[string]any{"app.kubernetes.io/name": 1, "aws:createdBy": 2}, false},
		{"empty key", map[string]any{"": 1}, true},
		{"NUL", map[string]any{"a\x00": 1}, true},
		{"too deep", deep, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkContent("variables", tc.v)
			if !tc.bad {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "key = variables") {
				t.Fatalf("error %v, want one naming variables", err)
			}
		})
	}
}

func TestOnlyFields(t *testing.T) {
	t.Parallel()
	d := Dashboard{ProjectDashboardID: "project-dash-1", Name: "n", Version: 3, only: []string{"name", "layouts.0"}}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"layouts":[],"name":"n"}` {
		t.Fatalf("only = %s", b)
	}
	d.only = nil
	b, _ = json.Marshal(d)
	var all map[string]any
	_ = json.Unmarshal(b, &all)
	if len(all) != 15 || all["workspace_id"] != nil {
		t.Fatalf("all fields = %s", b)
	}
}
