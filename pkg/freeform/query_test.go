package freeform_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/analyze"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// resourceDoc is a resource with cloud tags and nested data.
type resourceDoc struct {
	ID       string        `bson:"_id" json:"id"`
	DomainID string        `bson:"domain_id" json:"domain_id"`
	Cost     int64         `bson:"cost" json:"cost"`
	Tags     freeform.Flat `bson:"tags" json:"tags"`
	Data     freeform.Map  `bson:"data" json:"data"`
}

var docsResource = query.Resource{Fields: query.FieldsOf[resourceDoc](), Maps: freeform.FieldsOf[resourceDoc]()}

func seedResources(t *testing.T) *mongo.Collection {
	t.Helper()
	c := testkit.Get().Database(t).Collection("resources")
	for _, d := range []resourceDoc{
		{ID: "r1", DomainID: "dom", Cost: 10, Tags: freeform.Flat{"kubernetes.io/cluster/prod": "owned", "app.kubernetes.io/name": "api", "aws:createdBy": "alice"},
			Data: freeform.Map{"hardware": map[string]any{"core": int64(4)}, "k8s.io/zone": "a"}},
		{ID: "r2", DomainID: "dom", Cost: 5, Tags: freeform.Flat{"kubernetes.io/cluster/prod": "shared", "app.kubernetes.io/name": "web"}},
		{ID: "r3", DomainID: "dom", Cost: 1, Tags: freeform.Flat{"kubernetes.io/cluster/prod": "owned", "app.kubernetes.io/name": "api"}},
		{ID: "r4", DomainID: "other", Cost: 100, Tags: freeform.Flat{"kubernetes.io/cluster/prod": "owned"}},
	} {
		if _, err := c.InsertOne(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func decodeJSON[T any](t *testing.T, s string) *T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

func ids(rows []resourceDoc) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

func TestListByCloudKeys(t *testing.T) {
	c := seedResources(t)
	ctx := context.Background()
	scope := bson.D{{Key: "domain_id", Value: "dom"}}
	q := decodeJSON[query.Query](t, `{"filter":[{"k":"tags.kubernetes.io/cluster/prod","v":"owned","o":"eq"}],
		"sort":[{"key":"tags.app.kubernetes.io/name"},{"key":"cost","desc":true}]}`)
	before := *q
	before.Filter = append([]query.Condition(nil), q.Filter...)
	for range 2 { // a query compiled twice is escaped once
		got, err := store.Search[resourceDoc](ctx, c, q, docsResource, scope)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"r1", "r3"}; !reflect.DeepEqual(ids(got.Results), want) {
			t.Fatalf("rows %v, want %v", ids(got.Results), want)
		}
		if got.Results[0].Tags["aws:createdBy"] != "alice" || got.Results[0].Tags["kubernetes.io/cluster/prod"] != "owned" {
			t.Fatalf("tags read back as %v", got.Results[0].Tags)
		}
		if got.Results[0].Data["k8s.io/zone"] != "a" {
			t.Fatalf("data read back as %v", got.Results[0].Data)
		}
	}
	if q.Filter[0].Key != before.Filter[0].Key {
		t.Fatalf("the caller's query was changed: %q", q.Filter[0].Key)
	}

	// only on one tag returns that tag, as written; nested data paths
	// still go down.
	q = decodeJSON[query.Query](t, `{"filter":[{"k":"data.hardware.core","v":4,"o":"eq"}],"only":["tags.app.kubernetes.io/name"]}`)
	got, err := store.Search[resourceDoc](ctx, c, q, docsResource, scope)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Results) != 1 || !reflect.DeepEqual(got.Results[0].Tags, freeform.Flat{"app.kubernetes.io/name": "api"}) {
		t.Fatalf("only: %+v", got.Results)
	}

	// The other operators reach the escaped key too.
	for _, tc := range []struct {
		cond string
		want []string
	}{
		{`{"k":"tags.app.kubernetes.io/name","v":["web"],"o":"in"}`, []string{"r2"}},
		{`{"k":"tags.app.kubernetes.io/name","v":"AP","o":"contain"}`, []string{"r1", "r3"}},
		{`{"k":"tags.aws:createdBy","v":true,"o":"exists"}`, []string{"r1"}},
		{`{"k":"tags.kubernetes.io/cluster/prod","v":"owned","o":"not"}`, []string{"r2"}},
		{`{"k":"data.k8s.io/zone","v":"a","o":"eq"}`, []string{}}, // data is nested: k8s -> io/zone
	} {
		q := decodeJSON[query.Query](t, `{"filter":[`+tc.cond+`]}`)
		got, err := store.Search[resourceDoc](ctx, c, q, docsResource, scope)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ids(got.Results), tc.want) {
			t.Errorf("%s: rows %v, want %v", tc.cond, ids(got.Results), tc.want)
		}
	}
}

func TestStatAndAnalyzeByCloudKeys(t *testing.T) {
	c := seedResources(t)
	ctx := context.Background()
	scope := bson.D{{Key: "domain_id", Value: "dom"}}
	q := decodeJSON[stat.Query](t, `{"filter":[{"k":"tags.app.kubernetes.io/name","v":"api","o":"eq"}],
		"aggregate":[{"group":{"keys":[{"key":"tags.kubernetes.io/cluster/prod","name":"cluster"}],
		"fields":[{"key":"cost","name":"total","operator":"sum"},{"key":"tags","name":"tags","operator":"push"}]}},
		{"sort":{"key":"cluster"}}]}`)
	for range 2 {
		res, err := stat.Run(ctx, c, scope, docsResource, q)
		if err != nil {
			t.Fatal(err)
		}
		rows := res["results"].([]any)
		if len(rows) != 1 {
			t.Fatalf("stat rows: %v", rows)
		}
		row := rows[0].(map[string]any)
		if row["cluster"] != "owned" || row["total"] != int64(11) {
			t.Fatalf("stat row: %v", row)
		}
		pushed := row["tags"].([]any)
		if len(pushed) != 2 || pushed[0].(map[string]any)["app.kubernetes.io/name"] != "api" {
			t.Fatalf("pushed tags not as written: %v", pushed)
		}
	}

	dq := decodeJSON[stat.Query](t, `{"distinct":"tags.kubernetes.io/cluster/prod"}`)
	res, err := stat.Run(ctx, c, scope, docsResource, dq)
	if err != nil {
		t.Fatal(err)
	}
	if got := res["results"]; !reflect.DeepEqual(got, []any{"owned", "shared"}) {
		t.Fatalf("distinct: %v", got)
	}

	aq := decodeJSON[analyze.Query](t, `{"group_by":["tags.app.kubernetes.io/name"],
		"fields":{"total":{"key":"cost","operator":"sum"}},"sort":[{"key":"total","desc":true}]}`)
	res, err = analyze.Run(ctx, c, scope, docsResource, aq)
	if err != nil {
		t.Fatal(err)
	}
	// The default name of a group key is its last dotted segment (here
	// "io/name"), as
	// upstream names it.
	want := []any{map[string]any{"io/name": "api", "total": int64(11)}, map[string]any{"io/name": "web", "total": int64(5)}}
	if !reflect.DeepEqual(res["results"], want) {
		t.Fatalf("analyze: %v, want %v", res["results"], want)
	}
}
