package costanalysis_test

import (
	"reflect"
	"testing"

	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// TestSyncCloudKeys: cost rows whose tags and additional_info carry keys
// as AWS and Kubernetes write them are stored, read back as the plugin
// sent them, and filtered, grouped and matched by rules as tags.<key>.
func TestSyncCloudKeys(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	ds := e.register(t, e.adminA, domainSource("aws"))
	// A rule on a cloud tag key labels its rows.
	e.createRule(t, e.adminA, M{"data_source_id": ds.DataSourceID, "name": "prod", "conditions_policy": "ALL", "resource_group": "DOMAIN",
		"conditions": []M{{"key": "tags.kubernetes.io/cluster/prod", "value": "owned", "operator": "eq"}},
		"actions":    M{"add_additional_info": M{"cost.center": "k8s"}}})
	tags := []M{
		{"kubernetes.io/cluster/prod": "owned", "app.kubernetes.io/name": "api", "aws:createdBy": "IAMUser:alice", "$ref": "x"},
		{"kubernetes.io/cluster/prod": "shared", "app.kubernetes.io/name": "web", "aws:cloudformation:stack-name": "web"},
	}
	var rows []any
	for i, tg := range tags {
		rows = append(rows, M{"cost": float64(10 * (i + 1)), "provider": "aws", "product": "Amazon EKS", "billed_date": "2024-05-01",
			"tags": tg, "additional_info": M{"Usage Type.Details": "EKS-Hours", "$currency": "USD"}, "data": M{"line.item": M{"$id": i}}})
	}
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{{"results": rows}}})
	j := e.waitJob(t, e.adminA, e.sync(t, e.adminA, ds.DataSourceID, "2024-05").JobID, finished)
	if j.Status != "SUCCESS" {
		t.Fatalf("job %+v", j)
	}

	filter := func(key string, v any) costList {
		return e.costs(t, e.adminA, ds.DataSourceID, M{"query": M{"filter": []M{{"k": key, "v": v, "o": "eq"}}}})
	}
	l := filter("tags.kubernetes.io/cluster/prod", "owned")
	if l.TotalCount != 1 {
		t.Fatalf("filter on tags.kubernetes.io/cluster/prod: %+v", l)
	}
	c := l.Results[0]
	if !reflect.DeepEqual(c.Tags, tags[0]) {
		t.Fatalf("tags read back as %v", c.Tags)
	}
	for k, v := range (M{"Usage Type.Details": "EKS-Hours", "$currency": "USD", "cost.center": "k8s"}) {
		if c.AdditionalInfo[k] != v {
			t.Fatalf("additional_info read back as %v (the rule on the dotted tag key labels it)", c.AdditionalInfo)
		}
	}
	if want := (M{"line.item": M{"$id": float64(0)}}); !reflect.DeepEqual(c.Data, want) {
		t.Fatalf("data read back as %v", c.Data)
	}
	if l := filter("additional_info.Usage Type.Details", "EKS-Hours"); l.TotalCount != 2 {
		t.Fatalf("filter on additional_info: %+v", l)
	}
	if l := filter("additional_info.cost.center", "k8s"); l.TotalCount != 1 {
		t.Fatalf("the rule's dotted key: %+v", l)
	}

	res := e.adminA.Call(costBase+"analyze", M{"data_source_id": ds.DataSourceID, "query": M{"granularity": "MONTHLY", "start": "2024-05", "end": "2024-05",
		"group_by": []M{{"key": "tags.app.kubernetes.io/name", "name": "app"}}, "fields": M{"total": M{"key": "cost", "operator": "sum"}},
		"sort": []M{{"key": "app"}}}}).OK(nil).JSON()
	want := []any{map[string]any{"app": "api", "date": "2024-05", "total": float64(10)}, map[string]any{"app": "web", "date": "2024-05", "total": float64(20)}}
	if !reflect.DeepEqual(res["results"], want) {
		t.Fatalf("analyze by tag: %v", res["results"])
	}
	res = e.adminA.Call(costBase+"stat", M{"data_source_id": ds.DataSourceID, "query": M{"distinct": "tags.aws:cloudformation:stack-name"}}).OK(nil).JSON()
	if !reflect.DeepEqual(res["results"], []any{"web"}) {
		t.Fatalf("distinct: %v", res["results"])
	}
}

// TestUserTagsOfCostRecords: data sources and rules keep the tags users
// give them, dotted keys included.
func TestUserTagsOfCostRecords(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tags := M{"kubernetes.io/team": "finops", "aws:owner": "alice"}
	body := domainSource("aws")
	body["tags"] = tags
	ds := e.register(t, e.adminA, body)
	var got DataSource
	e.adminA.Call(dsBase+"get", M{"data_source_id": ds.DataSourceID}).OK(&got)
	if !reflect.DeepEqual(got.Tags, tags) {
		t.Fatalf("data source tags: %v", got.Tags)
	}
	changed := M{"app.kubernetes.io/name": "cost"}
	e.adminA.Call(dsBase+"update", M{"data_source_id": ds.DataSourceID, "tags": changed}).OK(&got)
	e.adminA.Call(dsBase+"get", M{"data_source_id": ds.DataSourceID}).OK(&got)
	if !reflect.DeepEqual(got.Tags, changed) {
		t.Fatalf("updated tags: %v", got.Tags)
	}
	rule := customRule(ds.DataSourceID, "r")
	rule["tags"] = tags
	if r := e.createRule(t, e.adminA, rule); !reflect.DeepEqual(r.Tags, tags) {
		t.Fatalf("rule tags: %v", r.Tags)
	}
}
