package analyze

import (
	"encoding/json"
	"testing"
)

// TestCompile pins the translation into a StatisticsQuery, which is the
// contract with pkg/stat: group, pivot group, project, sort, skip, limit.
func TestCompile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, query, want string }{
		{"group only, fields in name order",
			`{"group_by":["data.size"],"fields":{"z":{"operator":"count"},"a":{"operator":"sum","key":"x"}}}`,
			`[{"group":{"keys":[{"key":"data.size","name":"size"}],"fields":[{"key":"x","name":"a","operator":"sum"},{"name":"z","operator":"count"}]}}]`},
		{"push with fields",
			`{"fields":{"p":{"operator":"push","fields":{"s":"status","i":"job_id"}}}}`,
			`[{"group":{"fields":[{"name":"p","operator":"push","fields":[{"key":"job_id","name":"i"},{"key":"status","name":"s"}]}]}}]`},
		{"pivot: totals for count and max, none for push; sort goes to the total; page",
			`{"group_by":["a","b"],"field_group":["b"],"fields":{"n":{"operator":"count"},"m":{"operator":"max","key":"x"},"p":{"operator":"push","key":"y"}},
			  "sort":[{"key":"n","desc":true},{"key":"p"},{"key":"a"}],"page":{"start":3,"limit":5}}`,
			`[{"group":{"keys":[{"key":"a","name":"a"},{"key":"b","name":"b"}],"fields":[
				{"key":"x","name":"m","operator":"max"},{"name":"n","operator":"count"},{"key":"y","name":"p","operator":"push"}]}},
			  {"group":{"keys":[{"key":"a","name":"a"}],"fields":[
				{"name":"m","operator":"push","fields":[{"key":"m","name":"value"},{"key":"b","name":"b"}]},{"key":"m","name":"_total_m","operator":"max"},
				{"name":"n","operator":"push","fields":[{"key":"n","name":"value"},{"key":"b","name":"b"}]},{"key":"n","name":"_total_n","operator":"sum"},
				{"name":"p","operator":"push","fields":[{"key":"p","name":"value"},{"key":"b","name":"b"}]}]}},
			  {"sort":[{"key":"_total_n","desc":true},{"key":"p","desc":false},{"key":"a","desc":false}]},
			  {"skip":2},{"limit":6}]`},
		{"select becomes a project without the keys",
			`{"group_by":["a"],"fields":{"n":{"operator":"count"}},"select":{"k":"a","half":{"operator":"divide","fields":["n",2]}}}`,
			`[{"group":{"keys":[{"key":"a","name":"a"}],"fields":[{"name":"n","operator":"count"}]}},
			  {"project":{"fields":[{"name":"half","operator":"divide","fields":[{"Key":"n","Number":null,"Operator":"","Fields":null},{"Key":"","Number":2,"Operator":"","Fields":null}]},
				{"key":"a","name":"k"}],"exclude_keys":true}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q Query
			if err := json.Unmarshal([]byte(tc.query), &q); err != nil {
				t.Fatal(err)
			}
			p, err := q.compile(nil)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, p.stat.Aggregate, json.RawMessage(tc.want))
		})
	}
}
