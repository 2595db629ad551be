package analyze

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
)

func wantErr(t *testing.T, q string, err error, code string, status int) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok {
		t.Errorf("%s: got %v, want %s", q, err, code)
		return
	}
	if e.Code != code || e.Status() != status {
		t.Errorf("%s: got %s (%d) %q, want %s (%d)", q, e.Code, e.Status(), e.Message, code, status)
	}
}

// decodeAndValidate is what api.Decode does with a request's query.
func decodeAndValidate(q string, ts bool) error {
	if ts {
		var tq TimeSeriesQuery
		if err := json.Unmarshal([]byte(q), &tq); err != nil {
			return err
		}
		return tq.Validate()
	}
	var aq Query
	if err := json.Unmarshal([]byte(q), &aq); err != nil {
		return err
	}
	return aq.Validate()
}

// TestBadInput: every malformed query is refused before it reaches the
// store, with upstream's code and the member named.
func TestBadInput(t *testing.T) {
	t.Parallel()
	const (
		required = errs.RequiredParameter
		invalid  = errs.InvalidParameter
		typ      = errs.InvalidParameterType
		dbQuery  = errs.DBQuery
	)
	cases := []struct {
		query string
		ts    bool
		code  string
		key   string // a part of the message
	}{
		{`{}`, false, required, "query.fields"},
		{`{"fields":{}}`, false, required, "query.fields"},
		{`{"fields":{"n":{}}}`, false, required, "query.fields.operator"},
		{`{"fields":{"n":null}}`, false, required, "query.fields.operator"},
		{`{"fields":{"n":{"operator":"sum"}}}`, false, required, "query.fields.key"},
		{`{"fields":{"n":{"operator":"push"}}}`, false, required, "query.fields.key"},
		{`{"fields":{"n":{"operator":"median","key":"cost"}}}`, false, dbQuery, "median"},
		{`{"fields":{"n":{"operator":"push","key":"a","fields":{"x":"b"}}}}`, false, invalid, "key or fields"},
		{`{"fields":{"n":{"operator":"sum","key":"a","fields":{"x":"b"}}}}`, false, invalid, "only push takes fields"},
		{`{"fields":{"n":{"operator":"push","fields":{"x":""}}}}`, false, required, "query.fields.fields"},
		{`{"fields":{"n":{"operator":"push","fields":{"x.y":"a"}}}}`, false, invalid, "query.fields.fields"},
		{`{"fields":{"n":{"operator":"push","fields":{"x":"$where"}}}}`, false, dbQuery, "not a field path"},
		{`{"fields":{"n":{"operator":"sum","key":"a..b"}}}`, false, dbQuery, "not a field path"},
		{`{"fields":{"a.b":{"operator":"count"}}}`, false, invalid, "query.fields"},
		{`{"fields":{"$x":{"operator":"count"}}}`, false, invalid, "query.fields"},
		{`{"fields":{"_id":{"operator":"count"}}}`, false, invalid, "query.fields"},
		{`{"fields":{"_total_n":{"operator":"count"}}}`, false, invalid, "_total_"},
		{`{"fields":{"n":{"operator":"sum","key":"a","data_type":"list"}}}`, false, invalid, "query.fields.data_type"},
		{`{"fields":{"n":{"operator":"push","key":"a","data_type":"array"}}}`, false, invalid, "query.fields.data_type"},
		{`{"fields":{"n":{"operator":"count","k":"a"}}}`, false, invalid, "query.fields.k"},
		{`{"fields":{"n":{"operator":5}}}`, false, typ, "query.fields.operator"},
		{`{"fields":{"n":{"operator":"count"}},"fields_x":1}`, false, invalid, "query.fields_x"},
		{`{"fields":{"n":{"operator":"count"}},"aggregate":[]}`, false, invalid, "query.aggregate"},
		{`{"fields":{"n":{"operator":"count"}},"granularity":"DAILY"}`, false, invalid, "query.granularity"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":[""]}`, false, required, "query.group_by"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":["$where"]}`, false, dbQuery, "not a field path"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":[5]}`, false, typ, "query.group_by"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":[{"key":"a","nam":"b"}]}`, false, invalid, "query.group_by.nam"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":["a.x","b.x"]}`, false, invalid, "used twice"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":["n"]}`, false, invalid, "also a group_by name"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":["a"],"field_group":["_total_a"]}`, false, invalid, "_total_"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":["a"],"field_group":["b"]}`, false, invalid, "not a group_by name"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":["a"],"field_group":["n"]}`, false, invalid, "not a group_by name"},
		{`{"fields":{"n":{"operator":"count"}},"group_by":["a"],"field_group":["a","a"]}`, false, invalid, "twice"},
		{`{"group_by":["a"],"field_group":["a"]}`, false, invalid, "query.field_group"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"operator":"pow","fields":["n",2]}}}`, false, invalid, "query.select.operator"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"key":"n","fields":["n"]}}}`, false, invalid, "query.select.operator"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{}}}`, false, invalid, "query.select.operator"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":""}}`, false, invalid, "query.select.operator"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"operator":"divide","fields":["n"]}}}`, false, invalid, "exactly 2"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"operator":"add","fields":[]}}}`, false, required, "query.select.fields"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"operator":"add","key":"n"}}}`, false, invalid, "query.select.key"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"operator":"add","fields":["n",{"operator":"pow","fields":[1]}]}}}`, false, invalid, "query.select.operator"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"operator":"add","fields":["n",true]}}}`, false, typ, "query.select.fields"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"operator":"size"}}}`, false, required, "query.select.key"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":{"operator":"sum","fields":["n"]}}}`, false, invalid, "query.select.fields"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x":5}}`, false, typ, "query.select"},
		{`{"fields":{"n":{"operator":"count"}},"select":{"x.y":"n"}}`, false, invalid, "query.select"},
		{`{"fields":{"n":{"operator":"count"}},"sort":[{"key":""}]}`, false, required, "query.sort.key"},
		{`{"fields":{"n":{"operator":"count"}},"sort":[{"key":"$n"}]}`, false, dbQuery, "not a field path"},
		{`{"fields":{"n":{"operator":"count"}},"sort":"n"}`, false, typ, "query.sort"},
		{`{"fields":{"n":{"operator":"count"}},"page":{"limit":-1}}`, false, invalid, "query.page.limit"},
		{`{"fields":{"n":{"operator":"count"}},"page":{"limit":"1"}}`, false, typ, "query.page.limit"},
		{`{"fields":{"n":{"operator":"count"}},"filter":[{"k":"a","v":1,"o":"eq","x":1}]}`, false, invalid, "query.filter.x"},
		{`{"fields":{"n":{"operator":"count"}},"granularity":"HOURLY"}`, true, invalid, "query.granularity"},
		{`{"fields":{"n":{"operator":"count"}},"start":"2024-1"}`, true, typ, "query.start"},
		{`{"fields":{"n":{"operator":"count"}},"end":"2024-02-30"}`, true, typ, "query.end"},
		{`{"fields":{"n":{"operator":"count"}},"granularity":"DAILY","group_by":["date"]}`, true, invalid, "used twice"},
		{`{"fields":{"n":{"operator":"count"}},"field_group":["date"]}`, true, invalid, "not a group_by name"},
		{`{"fields":{"n":{"operator":"count"}},"startt":"2024"}`, true, invalid, "query.startt"},
		{`[]`, false, typ, "query"},
		{`{"fields":[]}`, false, typ, "query.fields"},
	}
	for _, tc := range cases {
		err := decodeAndValidate(tc.query, tc.ts)
		wantErr(t, tc.query, err, tc.code, 400)
		if e, ok := errs.As(err); ok && !strings.Contains(e.Message, tc.key) {
			t.Errorf("%s: message %q does not name %q", tc.query, e.Message, tc.key)
		}
	}
}

// TestGoodInput: the accepted spellings (camelCase members, null as
// absent, count with a key, time series members) decode and validate.
func TestGoodInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		query string
		ts    bool
	}{
		{`{"groupBy":["a"],"fieldGroup":["a"],"filterOr":[],"fields":{"n":{"operator":"count"}}}`, false},
		{`{"fields":{"n":{"operator":"sum","key":"u","dataType":"array"}},"select":null,"sort":null,"page":null,"keyword":null}`, false},
		{`{"fields":{"n":{"operator":"count","key":"ignored"}}}`, false},
		{`{"fields":{"n":{"operator":"push","fields":{"status":"status","when":"finished_at"}}}}`, false},
		{`{"group_by":[{"key":"data.size"}],"fields":{"size_n":{"operator":"count"}},"sort":{"key":"size"}}`, false},
		{`{"granularity":"MONTHLY","start":"2024-01","end":"2024-03","group_by":["a"],"field_group":["date"],"fields":{"n":{"operator":"count"}}}`, true},
		{`{"granularity":"YEARLY","start":"2023","end":"2024-06-30","fields":{"n":{"operator":"count"}}}`, true},
	} {
		if err := decodeAndValidate(tc.query, tc.ts); err != nil {
			t.Errorf("%s: %v", tc.query, err)
		}
	}
	var q Query
	if err := json.Unmarshal([]byte(`{"group_by":["data.size",{"key":"x.y","name":"z"},{"key":"p.q"}]}`), &q); err != nil {
		t.Fatal(err)
	}
	if got := []GroupKey{{"data.size", "size"}, {"x.y", "z"}, {"p.q", "q"}}; len(q.GroupBy) != 3 || q.GroupBy[0] != got[0] || q.GroupBy[1] != got[1] || q.GroupBy[2] != got[2] {
		t.Errorf("group_by names: %+v", q.GroupBy)
	}
}

// TestBadFilter: a filter mistake surfaces when the query runs, with the
// list query's codes, and no row comes back.
func TestBadFilter(t *testing.T) {
	t.Parallel()
	c, _ := seed(t)
	for _, tc := range []struct{ query, code string }{
		{`{"filter":[{"k":"status","v":"x","o":"like"}],"fields":{"n":{"operator":"count"}}}`, errs.DBQuery},
		{`{"filter":[{"k":"status","v":"x","o":"in"}],"fields":{"n":{"operator":"count"}}}`, errs.OperatorListType},
		{`{"filter":[{"k":"created_at","v":"yesterday","o":"timediff_gt"}],"fields":{"n":{"operator":"count"}}}`, errs.DBQuery},
	} {
		got, err := analyze(c, tc.query)
		wantErr(t, tc.query, err, tc.code, 400)
		if got != nil {
			t.Errorf("%s: answered %v beside the error", tc.query, got)
		}
	}
	// and RunTimeSeries refuses to run without its date field (a service bug, 500)
	if _, err := RunTimeSeries(context.Background(), c, scope, resource, &TimeSeriesQuery{}, DateField{}); err == nil {
		t.Error("RunTimeSeries without a date field ran")
	}
}
