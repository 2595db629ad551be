package analyze

import (
	"encoding/json"
	"testing"

	"github.com/nubes-io/nubes/pkg/jsonschema"
)

// TestJSONSchema: the documented shapes accept what the decoder accepts
// (in snake_case) and refuse what it refuses.
func TestJSONSchema(t *testing.T) {
	t.Parallel()
	plain, err := jsonschema.Compile((&Query{}).JSONSchema())
	if err != nil {
		t.Fatal(err)
	}
	series, err := jsonschema.Compile((&TimeSeriesQuery{}).JSONSchema())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		query    string
		ts, good bool
	}{
		{`{"filter":[{"k":"a","v":1,"o":"eq"}],"group_by":["a",{"key":"b.c","name":"c"}],"field_group":["a"],
		   "fields":{"n":{"operator":"count"},"p":{"operator":"push","fields":{"x":"y"}},"s":{"operator":"sum","key":"u","data_type":"array"}},
		   "select":{"a":"a","d":{"operator":"divide","fields":["n",2]},"z":{"operator":"size","key":"p"}},
		   "sort":[{"key":"n","desc":true}],"page":{"start":1,"limit":10}}`, false, true},
		{`{"granularity":"DAILY","start":"2024-01","end":"2024-02","fields":{"n":{"operator":"count"}}}`, true, true},
		{`{"fields":{"n":{"operator":"median","key":"a"}}}`, false, false},
		{`{"fields":{"n":{"operator":"count"}},"aggregate":[]}`, false, false},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"operator":"pow"}}}`, false, false},
		{`{"fields":{"n":{"operator":"count"}},"granularity":"DAILY"}`, false, false},
		{`{"fields":{"n":{"operator":"count"}},"granularity":"HOURLY"}`, true, false},
	} {
		var doc any
		if err := json.Unmarshal([]byte(tc.query), &doc); err != nil {
			t.Fatal(err)
		}
		s := plain
		if tc.ts {
			s = series
		}
		if err := s.Validate(doc); (err == nil) != tc.good {
			t.Errorf("%s: schema says %v, want good=%v", tc.query, err, tc.good)
		}
		if err := decodeAndValidate(tc.query, tc.ts); (err == nil) != tc.good {
			t.Errorf("%s: decoder says %v, want good=%v", tc.query, err, tc.good)
		}
	}
}
