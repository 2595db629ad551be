package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// testWebhookPlugin is the plugin id the monitoring container maps to the
// test plugin (NUBES_PLUGIN_ENDPOINTS in stack_test.go).
const testWebhookPlugin = "plugin-test-webhook"

// TestMonitoringWebhook drives a webhook end to end: a project in
// identity, a monitoring.Webhook plugin registered in the repository, the
// test plugin image (test/plugin) answering Webhook.init and Event.parse
// over gRPC; an event posted to the webhook's URL, with no token, is
// parsed by the plugin and stored; refused once the webhook is disabled;
// the URL is gone once it is deleted.
func TestMonitoringWebhook(t *testing.T) {
	if !st.has("monitoring") || !st.has("repository") {
		t.Skip("needs the monitoring and repository services in the suite")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script, _ := json.Marshal(map[string]any{
		"spaceone.api.monitoring.plugin.Webhook/init": []any{map[string]any{"result": map[string]any{"metadata": map[string]any{"kind": "test"}}}},
		"spaceone.api.monitoring.plugin.Event/parse": []any{map[string]any{"result": map[string]any{"results": []any{map[string]any{
			"event_key": "e2e-1", "event_type": "ALERT", "title": "Disk full", "severity": "CRITICAL", "resource": map[string]any{"name": "db-1"}}}}}},
	})
	// The monitoring container dials grpc://test-plugin:50051 when it
	// first calls the plugin, so the plugin may start after it.
	startTestPlugin(ctx, t, "test-plugin", string(script))

	admin := rootAdmin(t, identityAt(t))
	var ws struct {
		WorkspaceID string `json:"workspace_id"`
	}
	admin.call("/identity/v2/workspace/create", map[string]any{"name": "mon-" + randHex(4)}).OK(&ws)
	var pr struct {
		ProjectID string `json:"project_id"`
	}
	admin.call("/identity/v2/project/create", map[string]any{"name": "alerts", "workspace_id": ws.WorkspaceID}).OK(&pr)
	admin.with(direct(st.first(t, "repository").url)).call("/repository/v1/plugin/register", map[string]any{
		"name": "Test webhook", "plugin_id": testWebhookPlugin, "image": "nubes/test-plugin", "resource_type": "monitoring.Webhook",
		"registry_type": "PRIVATE_REGISTRY", "registry_url": "registry.example.com"}).OK(nil)

	monURL := st.first(t, "monitoring").url
	mon := admin.with(direct(monURL))
	var wh struct {
		WebhookID  string `json:"webhook_id"`
		AccessKey  string `json:"access_key"`
		WebhookURL string `json:"webhook_url"`
		PluginInfo struct {
			Metadata map[string]any `json:"metadata"`
		} `json:"plugin_info"`
	}
	mon.call("/monitoring/webhook/create", map[string]any{"name": "e2e", "project_id": pr.ProjectID,
		"plugin_info": map[string]any{"plugin_id": testWebhookPlugin, "version": "1.0.0", "upgrade_mode": "MANUAL", "options": map[string]any{}}}).OK(&wh)
	path := "/monitoring/v1/webhook/" + wh.WebhookID + "/" + wh.AccessKey + "/events"
	if !strings.HasSuffix(wh.WebhookURL, path) || wh.PluginInfo.Metadata["kind"] != "test" {
		t.Fatalf("webhook = %+v", wh)
	}

	status, body, err := post(ctx, monURL, path, "", []byte(`{"alert": "disk full on db-1"}`))
	if err != nil || status != http.StatusOK {
		t.Fatalf("ingest: %d %v %s", status, err, body)
	}
	var evs struct {
		Results []struct {
			EventID  string `json:"event_id"`
			EventKey string `json:"event_key"`
			Severity string `json:"severity"`
		} `json:"results"`
		TotalCount int `json:"total_count"`
	}
	mon.call("/monitoring/v1/event/list", map[string]any{"webhook_id": wh.WebhookID}).OK(&evs)
	if evs.TotalCount != 1 || evs.Results[0].EventKey != "e2e-1" || evs.Results[0].Severity != "CRITICAL" {
		t.Fatalf("events = %+v", evs)
	}
	var ev struct {
		RawData map[string]any `json:"raw_data"`
	}
	mon.call("/monitoring/v1/event/get", map[string]any{"event_id": evs.Results[0].EventID}).OK(&ev) // a list leaves bodies out
	if ev.RawData["alert"] != "disk full on db-1" {
		t.Fatalf("event raw_data = %+v", ev.RawData)
	}
	if status, _, _ := post(ctx, monURL, "/monitoring/v1/webhook/"+wh.WebhookID+"/"+strings.Repeat("0", 32)+"/events", "", []byte(`{}`)); status != http.StatusForbidden {
		t.Fatalf("wrong key: %d", status)
	}

	mon.call("/monitoring/webhook/disable", map[string]any{"webhook_id": wh.WebhookID}).OK(nil)
	if status, body, _ := post(ctx, monURL, path, "", []byte(`{"alert": "again"}`)); status != http.StatusForbidden || !strings.Contains(string(body), "ERROR_WEBHOOK_STATE_DISABLED") {
		t.Fatalf("disabled: %d %s", status, body)
	}
	mon.call("/monitoring/webhook/delete", map[string]any{"webhook_id": wh.WebhookID}).OK(nil)
	if status, _, _ := post(ctx, monURL, path, "", []byte(`{"alert": "again"}`)); status != http.StatusNotFound {
		t.Fatalf("deleted: %d", status)
	}
	mon.call("/monitoring/v1/event/list", map[string]any{"webhook_id": wh.WebhookID}).OK(&evs)
	if evs.TotalCount != 1 {
		t.Fatalf("events after disable and delete: %+v", evs)
	}

	// The workspace's delete reaches every service (issue 38): a second
	// webhook's URL refuses at once, and its records go from monitoring,
	// the dashboard and the config service.
	var live struct {
		WebhookID string `json:"webhook_id"`
		AccessKey string `json:"access_key"`
	}
	mon.call("/monitoring/webhook/create", map[string]any{"name": "e2e-live", "project_id": pr.ProjectID,
		"plugin_info": map[string]any{"plugin_id": testWebhookPlugin, "version": "1.0.0", "upgrade_mode": "MANUAL", "options": map[string]any{}}}).OK(&live)
	livePath := "/monitoring/v1/webhook/" + live.WebhookID + "/" + live.AccessKey + "/events"
	if status, body, _ := post(ctx, monURL, livePath, "", []byte(`{"alert": "before"}`)); status != http.StatusOK {
		t.Fatalf("live webhook: %d %s", status, body)
	}
	dash := admin.with(direct(st.first(t, "dashboard").url))
	dash.call("/dashboard/v1/project-dashboard/create", map[string]any{"domain_id": admin.domain, "project_id": pr.ProjectID, "name": "Gone soon",
		"viewers": "PUBLIC", "layouts": []any{}, "settings": map[string]any{}}).OK(nil)
	cfg := admin.with(direct(st.first(t, "config").url))
	cfg.call("/config/shared-config/create", map[string]any{"name": "e2e-gone", "data": map[string]any{"a": 1},
		"resource_group": "WORKSPACE", "workspace_id": ws.WorkspaceID}).OK(nil)
	admin.call("/identity/v2/workspace/delete", map[string]any{"workspace_id": ws.WorkspaceID}).OK(nil)
	if status, _, _ := post(ctx, monURL, livePath, "", []byte(`{"alert": "after"}`)); status != http.StatusNotFound {
		t.Fatalf("the URL of a deleted workspace's webhook: %d, want 404 at once", status)
	}
	count := func(c *caller, path string, body map[string]any) int {
		var l struct {
			TotalCount int `json:"total_count"`
		}
		c.call(path, body).OK(&l)
		return l.TotalCount
	}
	eventually(t, time.Minute, "the workspace's records deleted in every service", func() bool {
		return count(mon, "/monitoring/webhook/list", map[string]any{"project_id": pr.ProjectID}) == 0 &&
			count(mon, "/monitoring/v1/event/list", map[string]any{"project_id": pr.ProjectID}) == 0 &&
			count(dash, "/dashboard/v1/project-dashboard/list", map[string]any{"domain_id": admin.domain, "project_id": pr.ProjectID}) == 0 &&
			count(cfg, "/config/shared-config/list", map[string]any{"name": "e2e-gone"}) == 0
	})
}
