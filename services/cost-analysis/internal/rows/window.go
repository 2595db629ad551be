package rows

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

var monthOrDay = regexp.MustCompile(`^\d{4}-\d{2}(-\d{2})?$`)

// WindowFilter selects the costs of a data source in window c that jobs
// other than jobID stored: the rows a sync with that window replaces.
// start and end are YYYY-MM (compared with billed_month) or YYYY-MM-DD
// (billed_date); the filter narrows the window by equality on cost fields
// (CheckWindowFilter). A window with a malformed start or end selects
// nothing (false).
func WindowFilter(dataSourceID, domainID, jobID string, c core.Changed) (bson.D, bool) {
	if !monthOrDay.MatchString(c.Start) || (c.End != "" && !monthOrDay.MatchString(c.End)) {
		return nil, false
	}
	if CheckWindowFilter(c.Filter) != nil {
		return nil, false
	}
	field := func(s string) string {
		if len(s) == 7 {
			return "billed_month"
		}
		return "billed_date"
	}
	f := bson.D{{Key: "data_source_id", Value: dataSourceID}, {Key: "domain_id", Value: domainID},
		{Key: field(c.Start), Value: bson.D{{Key: "$gte", Value: c.Start}}}}
	if c.End != "" {
		f = append(f, bson.E{Key: field(c.End), Value: bson.D{{Key: "$lte", Value: c.End}}})
	}
	keys := slices.Sorted(maps.Keys(c.Filter))
	for _, k := range keys {
		f = append(f, bson.E{Key: k, Value: c.Filter[k]})
	}
	return append(f, bson.E{Key: "job_id", Value: bson.D{{Key: "$ne", Value: jobID}}}), true
}

// WindowFields are the cost fields a changed window's filter may name:
// the row's scalar fields a plugin or the service sets, not its ids,
// tenancy or dates (the window's start and end are the dates).
var WindowFields = []string{"provider", "region_code", "product", "usage_type", "usage_unit", "resource", "currency",
	"project_id", "service_account_id", "trusted_account_id"}

// CheckWindowFilter refuses a changed window's filter that names a field
// outside WindowFields or a value that is not a string, number or bool:
// the filter goes into a delete of costs.
func CheckWindowFilter(f core.Object) error {
	for k, v := range f {
		if !slices.Contains(WindowFields, k) {
			return errs.Invalid("changed.filter", fmt.Sprintf("%q is not a cost field a window may filter on (%s)", k, strings.Join(WindowFields, ", ")))
		}
		switch v.(type) {
		case string, bool, int, int32, int64, float64:
		default:
			return errs.Invalid("changed.filter", fmt.Sprintf("%q: only a string, number or bool is compared", k))
		}
	}
	return nil
}
