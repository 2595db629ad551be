package stat

import (
	"net/http"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
)

// A query past a limit answers 400 (in the store's group and in Go alike);
// one within answers in full.
func TestLimits(t *testing.T) {
	c := seed(t) // dom-a: 5 rows, names all distinct, sizes 10 20 5 "n/a" 7
	t.Cleanup(func() { SetLimits(Limits{}) })
	SetLimits(Limits{MaxGroups: 4, MaxPushed: 4})
	for _, q := range []struct {
		name, query string
		fails       bool
	}{
		{"five groups", `{"aggregate":[{"group":{"keys":[{"key":"name","name":"n"}],"fields":[{"name":"c","operator":"count"}]}}]}`, true},
		{"three groups", `{"aggregate":[{"group":{"keys":[{"key":"kind","name":"k"}],"fields":[{"name":"c","operator":"count"}]}}]}`, false},
		{"five pushed in one group", `{"aggregate":[{"group":{"fields":[{"key":"size","name":"s","operator":"push"}]}}]}`, true},
		{"five pushed across groups", `{"aggregate":[{"group":{"keys":[{"key":"kind","name":"k"}],"fields":[{"key":"name","name":"s","operator":"add_to_set"}]}}]}`, true},
		{"four pushed", `{"filter":[{"k":"kind","v":["note","post"],"o":"in"}],"aggregate":[{"group":{"fields":[{"key":"size","name":"s","operator":"push"}]}}]}`, false},
		{"five distinct values", `{"distinct":"name"}`, true},
		{"five rows without a page", `{"aggregate":[{"project":{"fields":[{"key":"name","name":"n"}]}}]}`, true},
		{"five rows, a page of two", `{"aggregate":[{"project":{"fields":[{"key":"name","name":"n"}]}}],"page":{"limit":2}}`, false},
	} {
		for _, pushDown := range []bool{true, false} {
			res, err := stat(c, q.query, pushDown)
			if !q.fails {
				if err != nil {
					t.Errorf("%s (store group %v): %v", q.name, pushDown, err)
				}
				continue
			}
			if e, ok := errs.As(err); !ok || e.Status() != http.StatusBadRequest || e.Code != errs.InvalidParameter {
				t.Errorf("%s (store group %v): %v, %v; want 400", q.name, pushDown, res, err)
			}
		}
	}
}
