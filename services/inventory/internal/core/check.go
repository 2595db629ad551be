package core

import (
	"fmt"
	"slices"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
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

// CheckKeys and CheckAllKeys refuse free-form objects no store can keep
// (freeform.Check); dots, slashes, colons and a leading $ are kept.
var (
	CheckKeys    = freeform.Check
	CheckAllKeys = freeform.CheckAll
)
