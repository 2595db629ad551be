package store

import (
	"fmt"
	"strings"

	"github.com/nubes-io/nubes/pkg/errs"
)

// maxDepth bounds how deep a free-form object may nest.
const maxDepth = 32

// CheckKeys refuses a free-form value (tags, options, labels, ...) whose
// keys MongoDB cannot keep or would read as operators or paths: an empty
// key, one starting with $, one holding a dot or NUL, at any depth, and
// nesting deeper than 32 levels. The 400 names field and the key, never
// a value.
func CheckKeys(field string, v any) error { return checkKeys(field, v, 0) }

func checkKeys(field string, v any, depth int) error {
	if depth > maxDepth {
		return errs.Invalid(field, fmt.Sprintf("nested deeper than %d levels", maxDepth))
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "" || strings.HasPrefix(k, "$") || strings.ContainsAny(k, ".\x00") {
				return errs.Invalid(field, fmt.Sprintf("key %q: keys must not be empty, start with $ or hold a dot", k))
			}
			if err := checkKeys(field, e, depth+1); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkKeys(field, e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckAllKeys is CheckKeys over field, value pairs, in order.
func CheckAllKeys(pairs ...any) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := CheckKeys(pairs[i].(string), pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}
