package store_test

import (
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
)

func TestCheckKeys(t *testing.T) {
	deep := any("leaf")
	for range 33 {
		deep = map[string]any{"k": deep}
	}
	fine := any("leaf")
	for range 32 {
		fine = []any{fine}
	}
	for _, tc := range []struct {
		name string
		v    any
		bad  string // "" when accepted, else a part of the reason
	}{
		{"nil", nil, ""},
		{"plain", map[string]any{"a": 1, "b": map[string]any{"c-d_e f": []any{map[string]any{"x": true}}}}, ""},
		{"32 levels", fine, ""},
		{"empty key", map[string]any{"": 1}, `key ""`},
		{"operator key", map[string]any{"$gt": 1}, `key "$gt"`},
		{"dotted key, nested in a list", []any{map[string]any{"a.b": 1}}, `key "a.b"`},
		{"NUL", map[string]any{"a\x00": 1}, "key"},
		{"too deep", deep, "nested deeper than 32 levels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := store.CheckKeys("tags", tc.v)
			if tc.bad == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e, ok := errs.As(err)
			if !ok || e.Code != errs.InvalidParameter || !strings.Contains(e.Message, "key = tags") || !strings.Contains(e.Message, tc.bad) {
				t.Fatalf("got %v, want a 400 on tags naming %q", err, tc.bad)
			}
		})
	}
	if err := store.CheckAllKeys("tags", map[string]any{"ok": 1}, "options", map[string]any{"$x": 1}); err == nil ||
		!strings.Contains(err.Error(), "key = options") {
		t.Fatalf("CheckAllKeys: %v", err)
	}
}
