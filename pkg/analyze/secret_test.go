package analyze

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
)

// A secret field is refused in filter, filter_or, group_by and fields
// before anything runs (no collection is needed to answer).
func TestSecretFieldsAreRefused(t *testing.T) {
	t.Parallel()
	r := query.Resource{Secret: []string{"access_key"}, Fields: []string{"access_key", "name", "cost"}}
	for _, tc := range []struct{ q, path string }{
		{`{"filter": [{"k": "access_key", "v": "abc", "o": "eq"}], "fields": {"n": {"operator": "count"}}}`, "access_key"},
		{`{"filter_or": [{"k": "access_key.x", "v": "^a", "o": "regex"}], "fields": {"n": {"operator": "count"}}}`, "access_key.x"},
		{`{"group_by": ["access_key"], "fields": {"n": {"operator": "count"}}}`, "access_key"},
		{`{"fields": {"k": {"operator": "add_to_set", "key": "access_key"}}}`, "access_key"},
		{`{"fields": {"k": {"operator": "push", "fields": {"a": "name", "b": "access_key"}}}}`, "access_key"},
	} {
		var q Query
		if err := json.Unmarshal([]byte(tc.q), &q); err != nil {
			t.Fatalf("%s: %v", tc.q, err)
		}
		_, err := Run(context.Background(), nil, nil, r, &q)
		wantErr(t, tc.q, err, errs.InvalidParameter, 400)
		if e, ok := errs.As(err); ok && !strings.Contains(e.Message, tc.path) {
			t.Errorf("%s: %q does not name %s", tc.q, e.Message, tc.path)
		}
	}
}
