package inventory_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// Keys as clouds write them: Kubernetes labels and AWS tags.
var cloudTags = map[string]any{
	"kubernetes.io/cluster/prod": "owned",
	"app.kubernetes.io/name":     "api",
	"aws:createdBy":              "IAMUser:alice",
	"$ref":                       "x",
	"Name":                       "vm",
}

// TestCollectCloudKeys: a collector whose resources carry cloud tags ends
// SUCCESS; the tags, data, metadata and labels read back as the plugin
// wrote them, and `tags.<key>` filters, sorts and groups by them.
func TestCollectCloudKeys(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector(map[string]any{"tags": cloudTags}))
	if !reflect.DeepEqual(c.Tags, cloudTags) {
		t.Fatalf("collector tags: %v", c.Tags)
	}
	data := map[string]any{"labels": map[string]any{"topology.kubernetes.io/zone": "us-east-1a"}, "$schema": "v1", "a.b": []any{map[string]any{"c.d": "e"}}}
	one := instance(1, map[string]any{"tags": cloudTags, "data": data,
		"metadata": map[string]any{"view.sub": map[string]any{"$type": "table"}}})
	// Newer plugins send tags as a list of {key, value}.
	two := instance(2, map[string]any{"tags": []any{map[string]any{"key": "kubernetes.io/cluster/prod", "value": "shared"},
		map[string]any{"key": "app.kubernetes.io/name", "value": "web"}}})
	typ := map[string]any{"state": "SUCCESS", "resource_type": "inventory.CloudServiceType", "match_rules": map[string]any{"1": []any{"name", "group", "provider"}},
		"resource": map[string]any{"name": "Instance", "group": "EC2", "provider": "aws", "tags": map[string]any{"spaceone.io/icon": "ec2.svg"},
			"labels": []any{"Compute", map[string]any{"k8s.io/x": "y"}}}}
	region := map[string]any{"state": "SUCCESS", "resource_type": "inventory.Region", "match_rules": map[string]any{"1": []any{"provider", "region_code"}},
		"resource": map[string]any{"name": "N. Virginia", "provider": "aws", "region_code": "us-east-1", "tags": map[string]any{"aws.amazon.com/partition": "aws"}}}
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: []map[string]any{one, two, typ, region}})
	j := s.wait(s.collect(s.adminA, c.CollectorID, "trusted-secret-adom").JobID, time.Minute)
	if j.Status != "SUCCESS" {
		t.Fatalf("job: %+v, tasks %+v", j, s.tasksOf(j.JobID))
	}
	if tk := s.tasksOf(j.JobID)[0]; tk.CreatedCount != 2 || tk.FailureCount != 0 {
		t.Fatalf("task: %+v", tk)
	}

	byTag := func(key, value string) []serviceOut {
		var l list[serviceOut]
		s.adminA.Call("/inventory/v1/cloud-service/list", map[string]any{"query": map[string]any{
			"filter": []any{map[string]any{"k": key, "v": value, "o": "eq"}}}}).OK(&l)
		return l.Results
	}
	got := byTag("tags.kubernetes.io/cluster/prod", "owned")
	if len(got) != 1 || got[0].Name != "vm-1" {
		t.Fatalf("filter on tags.kubernetes.io/cluster/prod: %+v", got)
	}
	if !reflect.DeepEqual(got[0].Tags, cloudTags) || !reflect.DeepEqual(got[0].Data, data) {
		t.Fatalf("read back\n tags %v\n data %v", got[0].Tags, got[0].Data)
	}
	if got := byTag("tags.app.kubernetes.io/name", "web"); len(got) != 1 || got[0].Name != "vm-2" ||
		got[0].Tags["kubernetes.io/cluster/prod"] != "shared" {
		t.Fatalf("list-form tags: %+v", got)
	}
	if got := byTag("data.labels.topology.kubernetes.io/zone", "us-east-1a"); len(got) != 0 {
		t.Fatalf("data is nested: a dotted path goes down, found %+v", got)
	}

	var st struct {
		Results []map[string]any `json:"results"`
	}
	s.adminA.Call("/inventory/v1/cloud-service/stat", map[string]any{"query": map[string]any{"aggregate": []any{
		map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "tags.app.kubernetes.io/name", "name": "app"}},
			"fields": []any{map[string]any{"name": "n", "operator": "count"}}}},
		map[string]any{"sort": map[string]any{"key": "app"}}}}}).OK(&st)
	if want := []map[string]any{{"app": "api", "n": float64(1)}, {"app": "web", "n": float64(1)}}; !reflect.DeepEqual(st.Results, want) {
		t.Fatalf("stat by tag: %v", st.Results)
	}

	var types list[typeOut]
	s.adminA.Call("/inventory/v1/cloud-service-type/list", map[string]any{"query": map[string]any{
		"filter": []any{map[string]any{"k": "tags.spaceone.io/icon", "v": "ec2.svg", "o": "eq"}}}}).OK(&types)
	if types.TotalCount != 1 || !reflect.DeepEqual(types.Results[0].Labels, []any{"Compute", map[string]any{"k8s.io/x": "y"}}) {
		t.Fatalf("type: %+v", types)
	}
	if n := s.count(regionsColl, nil); n != 1 {
		t.Fatalf("%d regions", n)
	}

	// A second run updates the documents in place with new tags.
	changed := map[string]any{"kubernetes.io/cluster/prod": "shared", "aws:cloudformation:stack-name": "web"}
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: []map[string]any{instance(1, map[string]any{"tags": changed}), two}})
	j = s.wait(s.collect(s.adminA, c.CollectorID, "trusted-secret-adom").JobID, time.Minute)
	if tk := s.tasksOf(j.JobID)[0]; j.Status != "SUCCESS" || tk.UpdatedCount != 2 {
		t.Fatalf("second run: %+v %+v", j, tk)
	}
	if got := byTag("tags.aws:cloudformation:stack-name", "web"); len(got) != 1 || !reflect.DeepEqual(got[0].Tags, changed) {
		t.Fatalf("updated tags: %+v", got)
	}
	if got := byTag("tags.kubernetes.io/cluster/prod", "shared"); len(got) != 2 {
		t.Fatalf("both shared after the update: %+v", got)
	}

	// The collector's own tags: filtered and updated by users.
	var cl list[collectorOut]
	s.adminA.Call("/inventory/v1/collector/list", map[string]any{"query": map[string]any{
		"filter": []any{map[string]any{"k": "tags.aws:createdBy", "v": "IAMUser:alice", "o": "eq"}}}}).OK(&cl)
	if cl.TotalCount != 1 {
		t.Fatalf("collector by tag: %+v", cl)
	}
	var up collectorOut
	s.adminA.Call("/inventory/v1/collector/update", map[string]any{"collector_id": c.CollectorID, "tags": changed}).OK(&up)
	s.adminA.Call("/inventory/v1/collector/get", map[string]any{"collector_id": c.CollectorID}).OK(&up)
	if !reflect.DeepEqual(up.Tags, changed) {
		t.Fatalf("updated collector tags: %v", up.Tags)
	}
}

// TestCollectorKeysStillRefused: keys no store keeps are a 400 naming the
// field, and nothing is stored.
func TestCollectorKeysStillRefused(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for _, tags := range []map[string]any{{"": "x"}, {"a\x00b": "x"}, {"ok": map[string]any{"": 1}}} {
		s.adminA.Call("/inventory/v1/collector/create", domainCollector(map[string]any{"tags": tags})).Fails(400, "ERROR_INVALID_PARAMETER")
	}
	if n := s.count(collectorsColl, nil); n != 0 {
		t.Fatalf("%d collectors stored", n)
	}
}
