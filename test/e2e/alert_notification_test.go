package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// The plugin ids the notification and monitoring containers map to
// TestAlertToChannel's test plugins (aliases alert-noti-plugin and
// alert-mon-plugin).
const (
	alertNotificationPlugin = "plugin-test-notification-alert"
	alertWebhookPlugin      = "plugin-test-webhook-alert"
)

// TestAlertToChannel is issue 19's pipeline end to end: an alert posted to
// a webhook (the test plugin parses it) becomes an alert; its escalation
// policy (one rule, repeated at every escalation tick) asks for a
// notification; the notification service dispatches it to the project's
// channel through the test plugin's Notification.dispatch (recorded there)
// with upstream's message and the Acknowledge callback; the link
// acknowledges the alert without a token, and the escalation stops.
func TestAlertToChannel(t *testing.T) {
	needs(t, "monitoring", "notification", "repository", "identity")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	startRegistry(ctx, t, "alert-registry", "1.0.0", "1.1.0")
	notiScript, _ := json.Marshal(map[string]any{
		protocolInitMethod: []any{map[string]any{"result": map[string]any{"metadata": map[string]any{
			"data_type": "PLAIN_TEXT", "data": map[string]any{"schema": map[string]any{"type": "object"}}}}}},
	})
	control := startTestPlugin(ctx, t, "alert-noti-plugin", string(notiScript))
	monScript, _ := json.Marshal(map[string]any{
		"spaceone.api.monitoring.plugin.Webhook/init": []any{map[string]any{"result": map[string]any{"metadata": map[string]any{}}}},
		"spaceone.api.monitoring.plugin.Event/parse": []any{map[string]any{"result": map[string]any{"results": []any{map[string]any{
			"event_key": "e2e-alert-" + randHex(4), "event_type": "ALERT", "title": "Disk full", "description": "db-1 at 99%",
			"severity": "CRITICAL", "resource": map[string]any{"name": "db-1"}}}}}},
	})
	startTestPlugin(ctx, t, "alert-mon-plugin", string(monScript))

	admin := rootAdmin(t, identityAt(t))
	repo := admin.with(direct(st.first(t, "repository").url))
	repo.call("/repository/v1/plugin/register", map[string]any{"name": "Test notification (alerts)", "plugin_id": alertNotificationPlugin,
		"image": "nubes/test-plugin", "resource_type": "notification.Protocol", "registry_type": "PRIVATE_REGISTRY",
		"registry_url": "http://alert-registry:5000", "capability": map[string]any{"supported_schema": []any{"email_smtp"}}}).OK(nil)
	repo.call("/repository/v1/plugin/register", map[string]any{"name": "Test webhook (alerts)", "plugin_id": alertWebhookPlugin,
		"image": "nubes/test-plugin", "resource_type": "monitoring.Webhook", "registry_type": "PRIVATE_REGISTRY",
		"registry_url": "registry.example.com"}).OK(nil)
	var ws struct {
		WorkspaceID string `json:"workspace_id"`
	}
	admin.call("/identity/v2/workspace/create", map[string]any{"name": "alert-" + randHex(4)}).OK(&ws)
	var pr struct {
		ProjectID string `json:"project_id"`
		DomainID  string `json:"domain_id"`
	}
	admin.call("/identity/v2/project/create", map[string]any{"name": "paged", "workspace_id": ws.WorkspaceID}).OK(&pr)

	// The channel: a protocol on the test plugin, the project's LV1 channel.
	notiURL := st.first(t, "notification").url
	var p struct {
		ProtocolID string `json:"protocol_id"`
	}
	admin.with(direct(notiURL)).call(notificationProtocol+"create", map[string]any{"name": "hooks " + randHex(3),
		"plugin_info": map[string]any{"plugin_id": alertNotificationPlugin}}).OK(&p)
	owner := workspaceOwner(t, admin, pr.DomainID, ws.WorkspaceID).with(direct(notiURL))
	owner.call("/notification/v1/project-channel/create", map[string]any{"protocol_id": p.ProtocolID, "name": "pager",
		"project_id": pr.ProjectID, "notification_level": "LV1", "data": map[string]any{"webhook_url": "https://hooks.example.com/pager"}}).OK(nil)

	// The alerting: a policy repeating its one rule at every tick until
	// the alert is acknowledged, the project's config, a webhook.
	monURL := st.first(t, "monitoring").url
	mon := owner.with(direct(monURL))
	var pol struct {
		EscalationPolicyID string `json:"escalation_policy_id"`
	}
	mon.call("/monitoring/v1/escalation-policy/create", map[string]any{"name": "page " + randHex(3), "resource_group": "WORKSPACE",
		"rules": []any{map[string]any{"notification_level": "LV1", "escalate_minutes": 0}}, "repeat_count": 50,
		"finish_condition": "ACKNOWLEDGED"}).OK(&pol)
	mon.call("/monitoring/v1/project-alert-config/create", map[string]any{"project_id": pr.ProjectID,
		"escalation_policy_id": pol.EscalationPolicyID}).OK(nil)
	var wh struct {
		WebhookID string `json:"webhook_id"`
		AccessKey string `json:"access_key"`
	}
	mon.call("/monitoring/webhook/create", map[string]any{"name": "e2e", "project_id": pr.ProjectID,
		"plugin_info": map[string]any{"plugin_id": alertWebhookPlugin, "version": "1.0.0", "upgrade_mode": "MANUAL", "options": map[string]any{}}}).OK(&wh)
	status, body, err := post(ctx, monURL, "/monitoring/v1/webhook/"+wh.WebhookID+"/"+wh.AccessKey+"/events", "", []byte(`{"alert": "disk full"}`))
	if err != nil || status != http.StatusOK {
		t.Fatalf("ingest: %d %v %s", status, err, body)
	}

	// Dispatches: the alert escalates at every tick until acknowledged
	// (two seen prove it repeats); upstream's message with the
	// Acknowledge callback.
	var first pluginCall
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if calls := pluginCalls(t, control, dispatchMethod); len(calls) >= 2 {
			first = calls[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not two dispatches 2 minutes after the alert")
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The request as plugin-protocols.md gives it: these five fields only.
	keys := make([]string, 0, len(first.Request))
	for k := range first.Request {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"channel_data", "message", "notification_type", "options", "secret_data"}) {
		t.Fatalf("dispatch request fields %v", keys)
	}
	msg, _ := first.Request["message"].(map[string]any)
	if first.Request["notification_type"] != "ERROR" || !strings.HasPrefix(msg["title"].(string), "[Alerting] ") ||
		first.Request["channel_data"].(map[string]any)["webhook_url"] != "https://hooks.example.com/pager" ||
		first.Request["options"] == nil || first.Request["secret_data"] == nil {
		t.Fatalf("dispatch request %v", first.Request)
	}
	cbs, _ := msg["callbacks"].([]any)
	if len(cbs) != 1 {
		t.Fatalf("callbacks %v", msg["callbacks"])
	}
	cb := cbs[0].(map[string]any)
	link, err := url.Parse(cb["url"].(string))
	if cb["label"] != "Acknowledge" || err != nil || !strings.HasSuffix(link.Path, "/ACKNOWLEDGED") {
		t.Fatalf("callback %v", cb)
	}
	// The link, from the host: no token, the alert is acknowledged.
	status, body, err = post(ctx, monURL, link.Path, "", []byte(`{}`))
	if err != nil || status >= 400 {
		t.Fatalf("acknowledge: %d %v %s", status, err, body)
	}
	alertID := strings.Split(strings.TrimPrefix(link.Path, "/monitoring/v1/domain/"+pr.DomainID+"/alert/"), "/")[0]
	var a struct {
		State string `json:"state"`
	}
	mon.call("/monitoring/v1/alert/get", map[string]any{"alert_id": alertID}).OK(&a)
	if a.State != "ACKNOWLEDGED" {
		t.Fatalf("alert %s is %s after the link", alertID, a.State)
	}
	// The escalation stops: at most a tick already under way adds one.
	atAck := len(pluginCalls(t, control, dispatchMethod))
	time.Sleep(15 * time.Second)
	if n := len(pluginCalls(t, control, dispatchMethod)); n > atAck+1 {
		t.Fatalf("%d dispatches after the acknowledgement, %d at it", n, atAck)
	}
	t.Logf("alert %s: %d dispatches before it was acknowledged through the link", alertID, atAck)
}
