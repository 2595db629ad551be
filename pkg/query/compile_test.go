package query

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
)

// extJSON renders a document as relaxed extended JSON, so expectations read
// like the filter MongoDB receives.
func extJSON(t *testing.T, d bson.D) string {
	t.Helper()
	if d == nil {
		return "nil"
	}
	b, err := bson.MarshalExtJSON(d, false, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// cond decodes one filter condition from its JSON form.
func cond(t *testing.T, s string) Condition {
	t.Helper()
	var c Condition
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return c
}

// compileJSON decodes a query and compiles it.
func compileJSON(t *testing.T, q string, r Resource, scope bson.D) (*Plan, error) {
	t.Helper()
	var query Query
	if err := json.Unmarshal([]byte(q), &query); err != nil {
		t.Fatalf("decode %s: %v", q, err)
	}
	return Compile(&query, r, scope)
}

func TestCompileFilter(t *testing.T) {
	scope := bson.D{{Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w1"}}
	kw := Resource{KeywordFields: []string{"name", "email"}}
	cases := []struct {
		name  string
		q     string
		r     Resource
		scope bson.D
		want  string
	}{
		{"nothing", `{}`, Resource{}, nil, `{}`},
		{"scope alone", `{}`, Resource{}, scope[:1], `{"domain_id":"d1"}`},
		{"one condition", `{"filter":[{"k":"state","v":"ENABLED","o":"eq"}]}`, Resource{}, nil,
			`{"state":{"$eq":"ENABLED"}}`},
		{"scope ANDed first, in order", `{"filter":[{"k":"state","v":"ENABLED","o":"eq"},{"k":"size","v":3,"o":"gt"}]}`, Resource{}, scope,
			`{"domain_id":"d1","workspace_id":"w1","state":{"$eq":"ENABLED"},"size":{"$gt":3}}`},
		{"a repeated key stays in $and", `{"filter":[{"k":"size","v":1,"o":"gt"},{"k":"size","v":9,"o":"lt"}]}`, Resource{}, scope[:1],
			`{"$and":[{"domain_id":"d1"},{"size":{"$gt":1}},{"size":{"$lt":9}}]}`},
		{"filter_or is one OR group ANDed", `{"filter":[{"k":"a","v":1,"o":"eq"}],"filter_or":[{"k":"b","v":2,"o":"eq"},{"k":"c","v":3,"o":"eq"}]}`, Resource{}, scope[:1],
			`{"domain_id":"d1","a":{"$eq":1},"$or":[{"b":{"$eq":2}},{"c":{"$eq":3}}]}`},
		{"keyword: every field contains any token", `{"keyword":"  Web   db. "}`, kw, scope[:1],
			`{"domain_id":"d1","$or":[` +
				`{"$or":[{"name":{"$regularExpression":{"pattern":"Web","options":"i"}}},{"name":{"$regularExpression":{"pattern":"db\\.","options":"i"}}}]},` +
				`{"$or":[{"email":{"$regularExpression":{"pattern":"Web","options":"i"}}},{"email":{"$regularExpression":{"pattern":"db\\.","options":"i"}}}]}]}`},
		{"keyword joins the filter_or group", `{"keyword":"x","filter_or":[{"k":"b","v":2,"o":"eq"}]}`, Resource{KeywordFields: []string{"name"}}, nil,
			`{"$or":[{"b":{"$eq":2}},{"$or":[{"name":{"$regularExpression":{"pattern":"x","options":"i"}}}]}]}`},
		{"blank keyword ignored", `{"keyword":"   "}`, kw, scope[:1], `{"domain_id":"d1"}`},
		{"keyword without keyword fields ignored", `{"keyword":"x"}`, Resource{}, nil, `{}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := compileJSON(t, c.q, c.r, c.scope)
			if err != nil {
				t.Fatal(err)
			}
			if got := extJSON(t, p.Filter); got != c.want {
				t.Fatalf("filter\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestCompileSort(t *testing.T) {
	def := Resource{DefaultSort: []SortKey{{Key: "created_at", Desc: true}}}
	cases := []struct {
		name string
		q    string
		r    Resource
		want string
	}{
		{"no sort, no default: _id", `{}`, Resource{}, `{"_id":1}`},
		{"default sort used", `{}`, def, `{"created_at":-1,"_id":1}`},
		{"given sort wins over default", `{"sort":[{"key":"name"},{"key":"size","desc":true}]}`, def, `{"name":1,"size":-1,"_id":1}`},
		{"1.x single object", `{"sort":{"key":"tags.env","desc":true}}`, def, `{"tags.env":-1,"_id":1}`},
		{"_id given: not appended again", `{"sort":[{"key":"_id","desc":true}]}`, def, `{"_id":-1}`},
		{"_id in the default", `{}`, Resource{DefaultSort: []SortKey{{Key: "name"}, {Key: "_id", Desc: true}}}, `{"name":1,"_id":-1}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := compileJSON(t, c.q, c.r, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := extJSON(t, p.Sort); got != c.want {
				t.Fatalf("sort got %s, want %s", got, c.want)
			}
		})
	}
}

func TestCompilePage(t *testing.T) {
	cases := []struct {
		name        string
		page        *Page
		maxLimit    int
		skip, limit int64
	}{
		{"no page: default cap", nil, 0, 0, 1000},
		{"no page: resource cap", nil, 100, 0, 100},
		{"first page", &Page{Start: 1, Limit: 10}, 0, 0, 10},
		{"start 0 is 1", &Page{Start: 0, Limit: 10}, 0, 0, 10},
		{"negative start is 1", &Page{Start: -5, Limit: 10}, 0, 0, 10},
		{"third row on", &Page{Start: 3, Limit: 10}, 0, 2, 10},
		{"limit 0: cap", &Page{Start: 21, Limit: 0}, 0, 20, 1000},
		{"limit above default cap", &Page{Start: 1, Limit: 5000}, 0, 0, 1000},
		{"limit at the cap", &Page{Start: 1, Limit: 100}, 100, 0, 100},
		{"limit under the cap", &Page{Start: 1, Limit: 99}, 100, 0, 99},
		{"limit above resource cap", &Page{Start: 1, Limit: 500}, 100, 0, 100},
		{"limit 0: resource cap", &Page{Start: 1}, 100, 0, 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Compile(&Query{Page: c.page}, Resource{MaxLimit: c.maxLimit}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Skip != c.skip || p.Limit != c.limit {
				t.Fatalf("skip %d limit %d, want skip %d limit %d", p.Skip, p.Limit, c.skip, c.limit)
			}
		})
	}
	_, err := Compile(&Query{Page: &Page{Start: 1, Limit: -1}}, Resource{}, nil)
	wantError(t, err, errs.InvalidParameter)
}

func TestCompileProjection(t *testing.T) {
	r := Resource{
		DefaultSort:   []SortKey{{Key: "created_at", Desc: true}},
		MinimalFields: []string{"user_id", "name", "state"},
	}
	cases := []struct {
		name   string
		q      string
		r      Resource
		proj   string
		fields []string
	}{
		{"no only: whole documents", `{}`, r, "nil", nil},
		{"only adds the default sort keys", `{"only":["name"]}`, r, `{"created_at":1,"name":1}`, []string{"created_at", "name"}},
		{"only adds the given sort keys", `{"only":["name"],"sort":[{"key":"size"},{"key":"tags.env"}]}`, r,
			`{"name":1,"size":1,"tags.env":1}`, []string{"name", "size", "tags"}},
		{"parent wins over child", `{"only":["tags.env","tags","name"],"sort":[{"key":"tags.team"}]}`, r,
			`{"name":1,"tags":1}`, []string{"name", "tags"}},
		{"parent wins past a sibling that sorts between", `{"only":["a","a-b","a.b","a.b.c"],"sort":[{"key":"a"}]}`, r,
			`{"a":1,"a-b":1}`, []string{"a", "a-b"}},
		{"deep parent wins", `{"only":["data.x.y","data.x","name"],"sort":[{"key":"name"}]}`, r,
			`{"data.x":1,"name":1}`, []string{"data", "name"}},
		{"duplicates once", `{"only":["name","name"],"sort":[{"key":"name"}]}`, r, `{"name":1}`, []string{"name"}},
		{"a prefix that is no parent", `{"only":["tag","tags.env"],"sort":[{"key":"tag"}]}`, r,
			`{"tag":1,"tags.env":1}`, []string{"tag", "tags"}},
		{"minimal: the resource's fields", `{"minimal":true}`, r,
			`{"created_at":1,"name":1,"state":1,"user_id":1}`, []string{"created_at", "name", "state", "user_id"}},
		{"only wins over minimal", `{"minimal":true,"only":["state"]}`, r, `{"created_at":1,"state":1}`, []string{"created_at", "state"}},
		{"minimal without minimal fields: whole documents", `{"minimal":true}`, Resource{}, "nil", nil},
		{"get-only fields left out of whole documents", `{}`, Resource{GetOnly: []string{"raw", "blob"}}, `{"raw":0,"blob":0}`, nil},
		{"get-only fields left out of only", `{"only":["name","raw","raw.x"],"sort":[{"key":"name"}]}`, Resource{GetOnly: []string{"raw"}},
			`{"name":1}`, []string{"name"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			minimal := slices.Clone(c.r.MinimalFields)
			p, err := compileJSON(t, c.q, c.r, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := extJSON(t, p.Projection); got != c.proj {
				t.Fatalf("projection got %s, want %s", got, c.proj)
			}
			if !reflect.DeepEqual(p.Fields, c.fields) {
				t.Fatalf("fields got %q, want %q", p.Fields, c.fields)
			}
			if !slices.Equal(c.r.MinimalFields, minimal) {
				t.Fatalf("Compile changed Resource.MinimalFields to %q", c.r.MinimalFields)
			}
		})
	}
}

func TestCompileCountOnly(t *testing.T) {
	for _, want := range []bool{true, false} {
		p, err := Compile(&Query{CountOnly: want}, Resource{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.CountOnly != want {
			t.Fatalf("CountOnly %v, want %v", p.CountOnly, want)
		}
	}
	if p, err := Compile(nil, Resource{}, nil); err != nil || p.Limit != DefaultMaxLimit {
		t.Fatalf("nil query: plan %+v, err %v", p, err)
	}
}

// max_page_size caps what a list answers per call, asked for or not; a
// resource's own MaxLimit wins.
func TestMaxPageSize(t *testing.T) {
	t.Cleanup(func() { SetMaxPageSize(0) })
	SetMaxPageSize(5)
	for _, c := range []struct {
		q    *Query
		r    Resource
		want int64
	}{
		{nil, Resource{}, 5},
		{&Query{Page: &Page{Limit: 10}}, Resource{}, 5},
		{&Query{Page: &Page{Limit: 3}}, Resource{}, 3},
		{&Query{Page: &Page{Limit: 10}}, Resource{MaxLimit: 8}, 8},
	} {
		if p, err := Compile(c.q, c.r, nil); err != nil || p.Limit != c.want {
			t.Errorf("%+v: limit %d (%v), want %d", c.q, p.Limit, err, c.want)
		}
	}
	SetMaxPageSize(0)
	if p, _ := Compile(nil, Resource{}, nil); p.Limit != DefaultMaxLimit {
		t.Errorf("default limit %d", p.Limit)
	}
}

// re renders the extended JSON of a case-insensitive regex.
func re(pattern string) string {
	b, _ := json.Marshal(pattern)
	return `{"$regularExpression":{"pattern":` + string(b) + `,"options":"i"}}`
}

func TestCompileOperators(t *testing.T) {
	cases := []struct {
		cond string
		want string
	}{
		{`{"k":"state","v":"ENABLED","o":"eq"}`, `{"state":{"$eq":"ENABLED"}}`},
		{`{"k":"state","v":null,"o":"eq"}`, `{"state":{"$eq":null}}`},
		{`{"k":"tags","v":{"env":"prod"},"o":"eq"}`, `{"tags":{"$eq":{"env":"prod"}}}`},
		{`{"k":"tags.env","v":"prod","o":"eq"}`, `{"tags.env":{"$eq":"prod"}}`},
		{`{"k":"state","v":"ENABLED","o":"not"}`, `{"state":{"$ne":"ENABLED"}}`},
		{`{"k":"size","v":3,"o":"lt"}`, `{"size":{"$lt":3}}`},
		{`{"k":"size","v":3,"o":"lte"}`, `{"size":{"$lte":3}}`},
		{`{"k":"score","v":2.5,"o":"gt"}`, `{"score":{"$gt":2.5}}`},
		{`{"k":"name","v":"m","o":"gte"}`, `{"name":{"$gte":"m"}}`},
		{`{"k":"tags.team","v":true,"o":"exists"}`, `{"tags.team":{"$exists":true}}`},
		{`{"k":"size","v":false,"o":"exists"}`, `{"size":{"$exists":false}}`},
		{`{"k":"name","v":"a.b(c","o":"contain"}`, `{"name":` + re(`a\.b\(c`) + `}`},
		{`{"k":"size","v":12,"o":"contain"}`, `{"size":` + re(`12`) + `}`},
		{`{"k":"name","v":"x*","o":"not_contain"}`, `{"name":{"$not":` + re(`x\*`) + `}}`},
		{`{"k":"state","v":["A",null,1],"o":"in"}`, `{"state":{"$in":["A",null,1]}}`},
		{`{"k":"state","v":["A"],"o":"not_in"}`, `{"state":{"$nin":["A"]}}`},
		{`{"k":"name","v":["a","b+"],"o":"contain_in"}`, `{"$or":[{"name":` + re(`a`) + `},{"name":` + re(`b\+`) + `}]}`},
		{`{"k":"name","v":["a","b"],"o":"not_contain_in"}`, `{"$nor":[{"name":` + re(`a`) + `},{"name":` + re(`b`) + `}]}`},
		{`{"k":"name","v":[],"o":"contain_in"}`, `{"name":{"$in":[]}}`},
		{`{"k":"name","v":[],"o":"not_contain_in"}`, `{}`},
		{`{"k":"name","v":"^a.*z$","o":"regex"}`, `{"name":` + re(`^a.*z$`) + `}`},
		{`{"k":"name","v":["^a","b$"],"o":"regex_in"}`, `{"$or":[{"name":` + re(`^a`) + `},{"name":` + re(`b$`) + `}]}`},
		{`{"k":"created_at","v":"2024-05-15T13:45:10Z","o":"datetime_gt"}`, `{"created_at":{"$gt":{"$date":"2024-05-15T13:45:10Z"}}}`},
		{`{"k":"created_at","v":"2024-05-15T22:45:10.5+09:00","o":"datetime_lt"}`, `{"created_at":{"$lt":{"$date":"2024-05-15T13:45:10.5Z"}}}`},
		{`{"k":"created_at","v":"2024-05-15T13:45:10","o":"datetime_gte"}`, `{"created_at":{"$gte":{"$date":"2024-05-15T13:45:10Z"}}}`},
		{`{"k":"created_at","v":"2024-05-15T13:45","o":"datetime_lte"}`, `{"created_at":{"$lte":{"$date":"2024-05-15T13:45:00Z"}}}`},
		{`{"k":"created_at","v":"2024-05-15","o":"datetime_gt"}`, `{"created_at":{"$gt":{"$date":"2024-05-15T00:00:00Z"}}}`},
		{`{"k":"created_at","v":"2024-05","o":"datetime_gt"}`, `{"created_at":{"$gt":{"$date":"2024-05-01T00:00:00Z"}}}`},
	}
	for _, c := range cases {
		t.Run(c.cond, func(t *testing.T) {
			f, err := Filter(nil, []Condition{cond(t, c.cond)}, nil, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := extJSON(t, f); got != c.want {
				t.Fatalf("\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

// TestCompileGoValues checks conditions that a service builds in Go rather
// than decodes from JSON: typed slices are lists too.
func TestCompileGoValues(t *testing.T) {
	cases := []struct {
		name string
		c    Condition
		want string
		code string
	}{
		{"in []string", Condition{Key: "state", Value: []string{"A", "B"}, Operator: "in"}, `{"state":{"$in":["A","B"]}}`, ""},
		{"not_in [2]int", Condition{Key: "size", Value: [2]int{1, 2}, Operator: "not_in"}, `{"size":{"$nin":[1,2]}}`, ""},
		{"contain_in []string", Condition{Key: "name", Value: []string{"a"}, Operator: "contain_in"}, `{"$or":[{"name":` + re("a") + `}]}`, ""},
		{"eq []string is a list", Condition{Key: "state", Value: []string{"A"}, Operator: "eq"}, "", errs.OperatorValueType},
		{"eq []byte is one value", Condition{Key: "data", Value: []byte("x"), Operator: "eq"}, `{"data":{"$eq":{"$binary":{"base64":"eA==","subType":"00"}}}}`, ""},
		{"in int", Condition{Key: "size", Value: 3, Operator: "in"}, "", errs.OperatorListType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Filter(nil, []Condition{c.c}, nil, "", nil)
			if c.code != "" {
				wantError(t, err, c.code)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := extJSON(t, f); got != c.want {
				t.Fatalf("\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestCompileTimediff(t *testing.T) {
	ops := map[string]string{"timediff_gt": "$gt", "timediff_gte": "$gte", "timediff_lt": "$lt", "timediff_lte": "$lte"}
	for op, mop := range ops {
		t.Run(op, func(t *testing.T) {
			before := time.Now()
			f, err := Filter(nil, []Condition{{Key: "created_at", Value: "now - 1h", Operator: op}}, nil, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			v := f[0].Value.(bson.D)
			got, ok := v[0].Value.(time.Time)
			if f[0].Key != "created_at" || v[0].Key != mop || !ok {
				t.Fatalf("got %v, want {created_at: {%s: <time>}}", f, mop)
			}
			if got.Before(before.Add(-time.Hour)) || got.After(after.Add(-time.Hour)) {
				t.Fatalf("%v is not an hour before [%v, %v]", got, before, after)
			}
		})
	}
}

func TestCompileOperatorErrors(t *testing.T) {
	cases := []struct {
		cond string
		code string
	}{
		// single-valued operators given a list
		{`{"k":"state","v":["A"],"o":"eq"}`, errs.OperatorValueType},
		{`{"k":"state","v":["A"],"o":"not"}`, errs.OperatorValueType},
		{`{"k":"size","v":[1],"o":"lt"}`, errs.OperatorValueType},
		{`{"k":"size","v":[1],"o":"lte"}`, errs.OperatorValueType},
		{`{"k":"size","v":[1],"o":"gt"}`, errs.OperatorValueType},
		{`{"k":"size","v":[1],"o":"gte"}`, errs.OperatorValueType},
		{`{"k":"size","v":[true],"o":"exists"}`, errs.OperatorValueType},
		{`{"k":"name","v":["a"],"o":"contain"}`, errs.OperatorValueType},
		{`{"k":"name","v":["a"],"o":"not_contain"}`, errs.OperatorValueType},
		{`{"k":"name","v":["a"],"o":"regex"}`, errs.OperatorValueType},
		{`{"k":"items","v":[{"a":1}],"o":"match"}`, errs.OperatorValueType},
		{`{"k":"created_at","v":["2024-05-15"],"o":"datetime_gt"}`, errs.OperatorValueType},
		{`{"k":"created_at","v":["now"],"o":"timediff_lt"}`, errs.OperatorValueType},
		// single-valued operators given no scalar
		{`{"k":"size","v":{"$gt":1},"o":"lt"}`, errs.OperatorValueType},
		{`{"k":"size","v":null,"o":"gte"}`, errs.OperatorValueType},
		{`{"k":"name","v":null,"o":"contain"}`, errs.OperatorValueType},
		{`{"k":"name","v":{"$ne":1},"o":"regex"}`, errs.OperatorValueType},
		{`{"k":"name","o":"not_contain"}`, errs.OperatorValueType},
		// list operators given a scalar
		{`{"k":"state","v":"A","o":"in"}`, errs.OperatorListType},
		{`{"k":"state","v":1,"o":"not_in"}`, errs.OperatorListType},
		{`{"k":"name","v":"a","o":"contain_in"}`, errs.OperatorListType},
		{`{"k":"name","v":{"a":1},"o":"not_contain_in"}`, errs.OperatorListType},
		{`{"k":"name","v":"^a","o":"regex_in"}`, errs.OperatorListType},
		{`{"k":"name","v":null,"o":"in"}`, errs.OperatorListType},
		{`{"k":"name","v":[{"a":1}],"o":"contain_in"}`, errs.OperatorListType},
		{`{"k":"name","v":["a",null],"o":"regex_in"}`, errs.OperatorListType},
		// exists and match
		{`{"k":"size","v":"true","o":"exists"}`, errs.OperatorBooleanType},
		{`{"k":"size","v":1,"o":"exists"}`, errs.OperatorBooleanType},
		{`{"k":"size","v":null,"o":"exists"}`, errs.OperatorBooleanType},
		{`{"k":"items","v":"cpu","o":"match"}`, errs.OperatorDictType},
		{`{"k":"items","v":null,"o":"match"}`, errs.OperatorDictType},
		// operator and key
		{`{"k":"state","v":"A","o":"like"}`, errs.DBQuery},
		{`{"k":"state","v":["A"],"o":"like"}`, errs.DBQuery},
		{`{"k":"state","v":"A","o":"$eq"}`, errs.DBQuery},
		{`{"k":"state","v":"A"}`, errs.DBQuery},
		{`{"k":"state","v":"A","o":""}`, errs.DBQuery},
		{`{"v":"A","o":"eq"}`, errs.DBQuery},
		{`{"k":"$where","v":"1","o":"eq"}`, errs.DBQuery},
		{`{"k":"tags.$gt","v":"1","o":"eq"}`, errs.DBQuery},
		{`{"k":"tags..env","v":"1","o":"eq"}`, errs.DBQuery},
		// values the store cannot take
		{`{"k":"created_at","v":"yesterday","o":"datetime_gt"}`, errs.DBQuery},
		{`{"k":"created_at","v":"2024-13-01","o":"datetime_lt"}`, errs.DBQuery},
		{`{"k":"created_at","v":1715780710,"o":"datetime_gte"}`, errs.DBQuery},
		{`{"k":"created_at","v":null,"o":"datetime_lte"}`, errs.DBQuery},
		{`{"k":"created_at","v":"now-1y","o":"timediff_gt"}`, errs.DBQuery},
		{`{"k":"created_at","v":3,"o":"timediff_lt"}`, errs.DBQuery},
		{`{"k":"created_at","v":"now-99999999999999999999d","o":"timediff_lte"}`, errs.DBQuery},
		{`{"k":"name","v":"(","o":"regex"}`, errs.DBQuery},
		{`{"k":"name","v":["a","[z-a]"],"o":"regex_in"}`, errs.DBQuery},
		// nothing inside match may run code or escape the element
		{`{"k":"items","v":{"$where":"sleep(1000)"},"o":"match"}`, errs.DBQuery},
		{`{"k":"items","v":{"$expr":{"$gt":["$qty",1]}},"o":"match"}`, errs.DBQuery},
		{`{"k":"items","v":{"qty":{"$where":"1"}},"o":"match"}`, errs.DBQuery},
		{`{"k":"items","v":{"qty":{"$gt":{"$expr":1}}},"o":"match"}`, errs.DBQuery},
		{`{"k":"items","v":{"$or":[{"qty":1}]},"o":"match"}`, errs.DBQuery},
		{`{"k":"items","v":{"a.$b":1},"o":"match"}`, errs.DBQuery},
	}
	for _, c := range cases {
		t.Run(c.cond, func(t *testing.T) {
			q := &Query{Filter: []Condition{cond(t, c.cond)}}
			_, err := Compile(q, Resource{}, nil)
			wantError(t, err, c.code)
			// the same condition fails the same way in filter_or
			q = &Query{FilterOr: []Condition{cond(t, c.cond)}}
			_, err = Compile(q, Resource{}, nil)
			wantError(t, err, c.code)
			// and on a key the resource does not show
			q = &Query{Filter: []Condition{cond(t, c.cond)}}
			_, err = Compile(q, Resource{Fields: []string{"other"}}, nil)
			wantError(t, err, c.code)
		})
	}
}

// TestCompileUnshown checks the answer for paths the resource does not
// show: conditions decided as for a missing field, sort and only dropped.
func TestCompileUnshown(t *testing.T) {
	r := Resource{Fields: []string{"name", "tags"}, DefaultSort: []SortKey{{Key: "name"}}}
	none := `{"_id":{"$in":[]}}`
	cases := []struct {
		name, q, filter, sort string
		fields                []string
	}{
		{"eq a value: none", `{"filter":[{"k":"is_dormant","v":false,"o":"eq"}]}`, none, `{"name":1,"_id":1}`, nil},
		{"eq null: all", `{"filter":[{"k":"x","v":null,"o":"eq"}]}`, `{}`, `{"name":1,"_id":1}`, nil},
		{"not a value: all", `{"filter":[{"k":"x","v":1,"o":"not"}]}`, `{}`, `{"name":1,"_id":1}`, nil},
		{"not null: none", `{"filter":[{"k":"x","v":null,"o":"not"}]}`, none, `{"name":1,"_id":1}`, nil},
		{"exists false: all", `{"filter":[{"k":"x.y","v":false,"o":"exists"}]}`, `{}`, `{"name":1,"_id":1}`, nil},
		{"exists true: none", `{"filter":[{"k":"x","v":true,"o":"exists"}]}`, none, `{"name":1,"_id":1}`, nil},
		{"gt: none", `{"filter":[{"k":"x","v":3,"o":"gt"}]}`, none, `{"name":1,"_id":1}`, nil},
		{"in with null: all", `{"filter":[{"k":"x","v":[1,null],"o":"in"}]}`, `{}`, `{"name":1,"_id":1}`, nil},
		{"in: none", `{"filter":[{"k":"x","v":[1],"o":"in"}]}`, none, `{"name":1,"_id":1}`, nil},
		{"not_in with null: none", `{"filter":[{"k":"x","v":[null],"o":"not_in"}]}`, none, `{"name":1,"_id":1}`, nil},
		{"not_in: all", `{"filter":[{"k":"x","v":[1],"o":"not_in"}]}`, `{}`, `{"name":1,"_id":1}`, nil},
		{"not_contain: all", `{"filter":[{"k":"x","v":"a","o":"not_contain"}]}`, `{}`, `{"name":1,"_id":1}`, nil},
		{"not_contain_in: all", `{"filter":[{"k":"x","v":["a"],"o":"not_contain_in"}]}`, `{}`, `{"name":1,"_id":1}`, nil},
		{"contain_in, regex, match: none", `{"filter":[{"k":"x","v":["a"],"o":"contain_in"},{"k":"y","v":"a","o":"regex"},{"k":"z","v":{"a":1},"o":"match"}]}`,
			`{"$and":[` + none + `,` + none + `,` + none + `]}`, `{"name":1,"_id":1}`, nil},
		{"shown conditions stay", `{"filter":[{"k":"name","v":"a","o":"eq"},{"k":"x","v":null,"o":"eq"}]}`, `{"name":{"$eq":"a"}}`, `{"name":1,"_id":1}`, nil},
		{"an always alternative makes the OR moot", `{"filter_or":[{"k":"name","v":"a","o":"eq"},{"k":"x","v":true,"o":"exists"},{"k":"x","v":"a","o":"not"}]}`, `{}`, `{"name":1,"_id":1}`, nil},
		{"never alternatives stay", `{"filter_or":[{"k":"name","v":"a","o":"eq"},{"k":"x","v":true,"o":"exists"}]}`, `{"$or":[{"name":{"$eq":"a"}},` + none + `]}`, `{"name":1,"_id":1}`, nil},
		{"sort on it dropped, no default", `{"sort":[{"key":"options.is_pinned","desc":true},{"key":"tags.a"}]}`, `{}`, `{"tags.a":1,"_id":1}`, nil},
		{"only drops it, keeps the sort key", `{"only":["x","tags.a"]}`, `{}`, `{"name":1,"_id":1}`, []string{"name", "tags"}},
		{"_id is shown", `{"filter":[{"k":"_id","v":"a","o":"eq"}]}`, `{"_id":{"$eq":"a"}}`, `{"name":1,"_id":1}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := compileJSON(t, c.q, r, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := extJSON(t, p.Filter); got != c.filter {
				t.Fatalf("filter\n got %s\nwant %s", got, c.filter)
			}
			if got := extJSON(t, p.Sort); got != c.sort {
				t.Fatalf("sort got %s, want %s", got, c.sort)
			}
			if !slices.Equal(p.Fields, c.fields) {
				t.Fatalf("fields %v, want %v", p.Fields, c.fields)
			}
		})
	}
	// only naming nothing shown: rows without fields (the _id alone is read).
	p, err := compileJSON(t, `{"only":["x"]}`, Resource{Fields: []string{"name"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := extJSON(t, p.Projection); got != `{"_id":1}` || p.Fields == nil || len(p.Fields) != 0 {
		t.Fatalf("projection %s, fields %#v", got, p.Fields)
	}
	// With no Fields declared every path reaches the store.
	p, err = compileJSON(t, `{"filter":[{"k":"x","v":1,"o":"eq"}]}`, Resource{}, nil)
	if err != nil || extJSON(t, p.Filter) != `{"x":{"$eq":1}}` {
		t.Fatalf("no Fields: %v %v", p, err)
	}
}

// TestCompileISODates checks gt/gte/lt/lte with an ISO 8601 string: a date
// and a text alternative; other strings and the datetime_ operators as before.
func TestCompileISODates(t *testing.T) {
	cases := []struct{ cond, want string }{
		{`{"k":"created_at","v":"2026-11-01T00:00:00Z","o":"gt"}`,
			`{"$or":[{"created_at":{"$gt":{"$date":"2026-11-01T00:00:00Z"}}},{"created_at":{"$gt":"2026-11-01T00:00:00Z"}}]}`},
		{`{"k":"created_at","v":"2026-11-01T09:00:00+09:00","o":"lte"}`,
			`{"$or":[{"created_at":{"$lte":{"$date":"2026-11-01T00:00:00Z"}}},{"created_at":{"$lte":"2026-11-01T09:00:00+09:00"}}]}`},
		{`{"k":"billed_date","v":"2026-11","o":"gte"}`,
			`{"$or":[{"billed_date":{"$gte":{"$date":"2026-11-01T00:00:00Z"}}},{"billed_date":{"$gte":"2026-11"}}]}`},
		{`{"k":"name","v":"E","o":"lt"}`, `{"name":{"$lt":"E"}}`},
		{`{"k":"size","v":2026,"o":"gt"}`, `{"size":{"$gt":2026}}`},
		{`{"k":"created_at","v":"2026-11-01T00:00:00Z","o":"eq"}`, `{"created_at":{"$eq":"2026-11-01T00:00:00Z"}}`},
		{`{"k":"created_at","v":"2026-11-01T00:00:00Z","o":"datetime_gt"}`, `{"created_at":{"$gt":{"$date":"2026-11-01T00:00:00Z"}}}`},
	}
	for _, c := range cases {
		t.Run(c.cond, func(t *testing.T) {
			p, err := Compile(&Query{Filter: []Condition{cond(t, c.cond)}}, Resource{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := extJSON(t, p.Filter); got != c.want {
				t.Fatalf("filter\n got %s\nwant %s", got, c.want)
			}
		})
	}
}
