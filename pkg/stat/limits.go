package stat

import (
	"fmt"
	"sync/atomic"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Limits bound what one stat (or analyze) run holds in memory; a query
// past one answers 400 and reads no further row.
type Limits struct {
	// MaxGroups is the most rows a group stage makes (the store's group
	// included), the most distinct values, and the most rows a query
	// without page.limit answers (config stat_max_groups).
	MaxGroups int
	// MaxPushed is the most values the push and add_to_set fields of one
	// run hold, all groups together (config stat_max_pushed).
	MaxPushed int
}

// DefaultLimits: 10,000 groups, 100,000 pushed values.
func DefaultLimits() Limits { return Limits{MaxGroups: 10000, MaxPushed: 100000} }

var limits atomic.Pointer[Limits]

// SetLimits sets the limits of every later run (a binary's config, at
// start); a zero field keeps its default.
func SetLimits(l Limits) {
	d := DefaultLimits()
	if l.MaxGroups <= 0 {
		l.MaxGroups = d.MaxGroups
	}
	if l.MaxPushed <= 0 {
		l.MaxPushed = d.MaxPushed
	}
	limits.Store(&l)
}

// CurrentLimits are the limits runs use now.
func CurrentLimits() Limits {
	if l := limits.Load(); l != nil {
		return *l
	}
	return DefaultLimits()
}

func tooManyGroups(n int) error {
	return errs.Invalid("query.aggregate", fmt.Sprintf("more than %d groups or rows (stat_max_groups): narrow the filter, group by fewer keys or set page.limit", n))
}

func tooManyPushed(n int) error {
	return errs.Invalid("query.aggregate", fmt.Sprintf("more than %d pushed values (stat_max_pushed): narrow the filter or push less", n))
}
