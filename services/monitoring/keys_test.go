package monitoring_test

import (
	"reflect"
	"testing"
)

// TestIngestCloudKeys: an alert whose labels carry dotted and
// $-prefixed keys, as Grafana and Prometheus alerts on Kubernetes do, is
// stored, read back as the plugin parsed it, and found by
// additional_info.<key>. The webhook's own tags keep such keys too.
func TestIngestCloudKeys(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.adminA, "grafana")
	labels := map[string]any{"alertname": "HighCPU", "kubernetes.io/cluster": "prod", "app.kubernetes.io/name": "api",
		"grafana_folder": "k8s", "__alert_rule_uid__": "abc", "$labels.pod": "api-1"}
	ev := alert("k8s-1", "ALERT")
	ev["additional_info"] = labels
	ev["resource"] = map[string]any{"name": "api-1", "resource_id": "pod/api-1", "k8s.io/namespace": "default"}
	c.parses(ev)
	var res struct {
		Results []struct {
			EventID string `json:"event_id"`
		} `json:"results"`
	}
	c.post(w, `{"status":"firing","alerts":[{"labels":{"kubernetes.io/cluster":"prod","$weird":"1"}}]}`).OK(&res)
	if len(res.Results) != 1 {
		t.Fatalf("ingest: %+v", res)
	}
	var got struct {
		EventKey       string         `json:"event_key"`
		Resource       map[string]any `json:"resource"`
		AdditionalInfo map[string]any `json:"additional_info"`
		RawData        map[string]any `json:"raw_data"`
	}
	c.memberA1.Call("/monitoring/v1/event/get", map[string]any{"event_id": res.Results[0].EventID}).OK(&got)
	if !reflect.DeepEqual(got.AdditionalInfo, labels) || !reflect.DeepEqual(got.Resource, ev["resource"]) {
		t.Fatalf("read back\n additional_info %v\n resource %v", got.AdditionalInfo, got.Resource)
	}
	var l list[map[string]any]
	c.memberA1.Call("/monitoring/v1/event/list", map[string]any{"query": map[string]any{
		"filter": []any{map[string]any{"k": "additional_info.app.kubernetes.io/name", "v": "api", "o": "eq"}}}}).OK(&l)
	if l.TotalCount != 1 {
		t.Fatalf("filter on additional_info.app.kubernetes.io/name: %+v", l)
	}
	// A recovery of it updates the record, keys as written.
	rec := alert("k8s-1", "RECOVERY")
	rec["additional_info"] = map[string]any{"kubernetes.io/cluster": "prod", "state.reason": "resolved"}
	c.parses(rec)
	c.post(w, `{"status":"resolved"}`).OK(&res)
	c.memberA1.Call("/monitoring/v1/event/get", map[string]any{"event_id": res.Results[0].EventID}).OK(&got)
	if !reflect.DeepEqual(got.AdditionalInfo, rec["additional_info"]) {
		t.Fatalf("after the recovery: %v", got.AdditionalInfo)
	}

	// The webhook's tags, given by a user.
	tags := map[string]any{"team.io/owner": "sre", "aws:region": "us-east-1"}
	var wh webhookInfo
	c.adminA.Call(wp+"update", map[string]any{"webhook_id": w.WebhookID, "tags": tags}).OK(&wh)
	c.adminA.Call(wp+"get", map[string]any{"webhook_id": w.WebhookID}).OK(&wh)
	if !reflect.DeepEqual(wh.Tags, tags) {
		t.Fatalf("webhook tags: %v", wh.Tags)
	}
	var wl list[webhookInfo]
	c.adminA.Call(wp+"list", map[string]any{"query": map[string]any{
		"filter": []any{map[string]any{"k": "tags.team.io/owner", "v": "sre", "o": "eq"}}}}).OK(&wl)
	if wl.TotalCount != 1 {
		t.Fatalf("webhook by tag: %+v", wl)
	}
}
