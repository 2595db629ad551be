package inv

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nubes-io/nubes/pkg/errs"
)

// MaxScheduleHours is how many hours a collector schedule may hold
// (semantics.md 5: upstream allows at most 2).
const MaxScheduleHours = 2

// CheckSchedule validates hours (0 to 23, at most MaxScheduleHours after
// repeats are dropped) and sorts them; nil is a DISABLED schedule.
func CheckSchedule(sc *Schedule) (Schedule, error) {
	if sc == nil {
		return Schedule{State: Disabled, Hours: []int{}}, nil
	}
	out := Schedule{State: sc.State, Hours: []int{}}
	if out.State == "" {
		out.State = Disabled
	}
	for _, h := range sc.Hours {
		if h < 0 || h > 23 {
			return Schedule{}, errs.Invalid("schedule.hours", "hours are 0 to 23")
		}
		if !slices.Contains(out.Hours, h) {
			out.Hours = append(out.Hours, h)
		}
	}
	if len(out.Hours) > MaxScheduleHours {
		return Schedule{}, errs.Invalid("schedule.hours", fmt.Sprintf("a collector collects at most %d hours a day", MaxScheduleHours))
	}
	slices.Sort(out.Hours)
	return out, nil
}

// CheckKeys refuses free-form objects whose keys the store cannot keep
// or query safely: empty keys, keys starting with "$", keys with "." or
// NUL, and nesting deeper than 32 levels.
func CheckKeys(field string, v any) error { return checkKeys(field, v, 0) }

func checkKeys(field string, v any, depth int) error {
	if depth > 32 {
		return errs.Invalid(field, "nested too deeply")
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

// CheckAllKeys is CheckKeys over name, value pairs.
func CheckAllKeys(pairs ...any) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := CheckKeys(pairs[i].(string), pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}
