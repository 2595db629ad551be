package monitoring_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

const wp = "/monitoring/v1/webhook/"

type webhookInfo struct {
	WebhookID  string         `json:"webhook_id"`
	Name       string         `json:"name"`
	State      string         `json:"state"`
	AccessKey  string         `json:"access_key"`
	WebhookURL string         `json:"webhook_url"`
	Capability map[string]any `json:"capability"`
	PluginInfo struct {
		PluginID    string         `json:"plugin_id"`
		Version     string         `json:"version"`
		Options     map[string]any `json:"options"`
		Metadata    map[string]any `json:"metadata"`
		UpgradeMode string         `json:"upgrade_mode"`
	} `json:"plugin_info"`
	Requests struct {
		Total int `json:"total"`
		Error int `json:"error"`
	} `json:"requests"`
	Tags        map[string]any `json:"tags"`
	DomainID    string         `json:"domain_id"`
	WorkspaceID string         `json:"workspace_id"`
	ProjectID   string         `json:"project_id"`
	CreatedAt   string         `json:"created_at"`
}

type eventInfo struct {
	EventID     string         `json:"event_id"`
	EventKey    string         `json:"event_key"`
	EventType   string         `json:"event_type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Severity    string         `json:"severity"`
	Resources   []string       `json:"resources"`
	RawData     map[string]any `json:"raw_data"`
	WebhookID   string         `json:"webhook_id"`
	ProjectID   string         `json:"project_id"`
	WorkspaceID string         `json:"workspace_id"`
	DomainID    string         `json:"domain_id"`
	OccurredAt  string         `json:"occurred_at"`
}

func (c *callers) webhook(t *testing.T, as *testkit.Client, name string) webhookInfo {
	t.Helper()
	var w webhookInfo
	as.Call(wp+"create", map[string]any{"name": name, "project_id": "project-a1",
		"plugin_info": map[string]any{"plugin_id": "plugin-grafana-mon-webhook", "options": map[string]any{"tz": "UTC"}}}).OK(&w)
	return w
}

// post sends body to a webhook's ingest URL.
func (c *callers) post(w webhookInfo, body string) *testkit.Response {
	return c.anon.Call(core.IngestPath(w.WebhookID, w.AccessKey), body)
}

// parses scripts the plugin to answer events.
func (c *callers) parses(evs ...map[string]any) {
	list := make([]any, len(evs))
	for i, e := range evs {
		list[i] = e
	}
	c.plugin.Script(parseMethod, fakeplugin.Reply{Result: map[string]any{"results": list}})
}

func alert(key, typ string) map[string]any {
	return map[string]any{"event_key": key, "event_type": typ, "title": "CPU high", "description": "cpu > 90%", "severity": "CRITICAL",
		"resource": map[string]any{"name": "web-1"}, "occurred_at": "2025-01-02T03:04:05Z", "provider": "grafana"}
}

func (c *callers) requests(t *testing.T, id string) (int, int) {
	t.Helper()
	var w webhookInfo
	c.adminA.Call(wp+"get", map[string]any{"webhook_id": id}).OK(&w)
	return w.Requests.Total, w.Requests.Error
}

// sealedKey is the shape of an access key that proves itself (core.NewAccessKey).
var sealedKey = regexp.MustCompile(`^[A-Za-z0-9_-]{40,}$`)

func TestWebhookLifecycle(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Grafana")
	if !regexp.MustCompile(`^webhook-[0-9a-f]{12}$`).MatchString(w.WebhookID) || !sealedKey.MatchString(w.AccessKey) ||
		w.WebhookURL != "https://nubes.example.com/monitoring/v1/webhook/"+w.WebhookID+"/"+w.AccessKey+"/events" ||
		w.State != "ENABLED" || w.PluginInfo.Version != "1.2.0" || w.PluginInfo.UpgradeMode != "AUTO" ||
		w.PluginInfo.Metadata["supported_event_type"] == nil || w.PluginInfo.Options["tz"] != "UTC" || w.Capability == nil ||
		w.ProjectID != "project-a1" || w.WorkspaceID != "workspace-1" || w.DomainID != "domain-a" || w.Requests.Total != 0 || w.Tags == nil {
		t.Fatalf("created webhook: %+v", w)
	}
	if calls := c.plugin.Calls(initMethod); len(calls) != 1 || calls[0].Request["options"].(map[string]any)["tz"] != "UTC" {
		t.Fatalf("init calls: %+v", calls)
	}
	other := c.webhook(t, c.memberA1, "Other")
	if other.AccessKey == w.AccessKey {
		t.Fatal("two webhooks share an access key")
	}

	var got webhookInfo
	c.memberA1.Call(wp+"update", map[string]any{"webhook_id": w.WebhookID, "name": "Grafana prod", "tags": map[string]any{"env": "prod"}}).OK(&got)
	if got.Name != "Grafana prod" || got.Tags["env"] != "prod" || got.AccessKey != w.AccessKey {
		t.Fatalf("update = %+v", got)
	}
	c.plugin.Script(initMethod, fakeplugin.Reply{Result: map[string]any{"metadata": map[string]any{"v": "2"}}})
	c.memberA1.Call(wp+"update-plugin", map[string]any{"webhook_id": w.WebhookID, "version": "1.1.0", "options": map[string]any{"tz": "KST"}, "upgrade_mode": "MANUAL"}).OK(&got)
	if got.PluginInfo.Version != "1.1.0" || got.PluginInfo.Options["tz"] != "KST" || got.PluginInfo.UpgradeMode != "MANUAL" || got.PluginInfo.Metadata["v"] != "2" {
		t.Fatalf("update_plugin = %+v", got.PluginInfo)
	}
	if calls := c.plugin.Calls(initMethod); len(calls) != 3 || calls[2].Request["options"].(map[string]any)["tz"] != "KST" {
		t.Fatalf("update_plugin must initialise the plugin again: %+v", calls)
	}
	c.memberA1.Call(wp+"verify-plugin", map[string]any{"webhook_id": w.WebhookID}).OK(nil)
	if calls := c.plugin.Calls(verifyMethod); len(calls) != 1 || calls[0].Request["options"].(map[string]any)["tz"] != "KST" {
		t.Fatalf("verify calls: %+v", calls)
	}
	c.plugin.Script(verifyMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_INVALID_OPTIONS", "tz unknown")})
	c.memberA1.Call(wp+"verify-plugin", map[string]any{"webhook_id": w.WebhookID}).Fails(http.StatusBadRequest, errs.PluginFailed)

	// An event goes through the plugin and is stored, once per key.
	c.parses(alert("k-1", "ALERT"), alert("k-2", "ALERT"))
	body := `{"status": "firing", "labels.with.dots": {"$odd": 1}}`
	r := c.post(w, body)
	var res struct {
		Results []struct {
			EventID   string `json:"event_id"`
			Duplicate bool   `json:"duplicate"`
		} `json:"results"`
	}
	if r.OK(&res); len(res.Results) != 2 || res.Results[0].Duplicate {
		t.Fatalf("ingest = %s", r.Body)
	}
	if calls := c.plugin.Calls(parseMethod); len(calls) != 1 || calls[0].Request["data"].(map[string]any)["status"] != "firing" ||
		calls[0].Request["options"].(map[string]any)["tz"] != "KST" {
		t.Fatalf("parse calls: %+v", calls)
	}
	var ev eventInfo
	c.memberA1.Call("/monitoring/v1/event/get", map[string]any{"event_id": res.Results[0].EventID}).OK(&ev)
	if ev.EventKey != "k-1" || ev.EventType != "ALERT" || ev.Severity != "CRITICAL" || ev.WebhookID != w.WebhookID || ev.ProjectID != "project-a1" ||
		ev.DomainID != "domain-a" || ev.RawData["status"] != "firing" || len(ev.Resources) != 1 || ev.Resources[0] != "web-1" ||
		ev.OccurredAt != "2025-01-02T03:04:05.000Z" {
		t.Fatalf("stored event: %+v", ev)
	}
	c.post(w, body).OK(&res) // the same again: duplicates
	if !res.Results[0].Duplicate || !res.Results[1].Duplicate || c.count(t, core.EventsCollection, nil) != 2 {
		t.Fatalf("repeat = %+v, %d stored", res, c.count(t, core.EventsCollection, nil))
	}
	c.parses(alert("k-1", "RECOVERY"))
	c.post(w, `{"status": "resolved"}`).OK(&res)
	c.memberA1.Call("/monitoring/v1/event/get", map[string]any{"event_id": res.Results[0].EventID}).OK(&ev)
	if res.Results[0].Duplicate || ev.EventType != "RECOVERY" || ev.RawData["status"] != "resolved" || c.count(t, core.EventsCollection, nil) != 3 {
		t.Fatalf("a recovery is an event of its alert: %+v", ev)
	}
	var el list[eventInfo]
	c.memberA1.Call("/monitoring/event/list", map[string]any{"webhook_id": w.WebhookID, "query": map[string]any{"sort": []any{map[string]any{"key": "event_key"}}}}).OK(&el)
	if el.TotalCount != 3 || el.Results[0].EventKey != "k-1" {
		t.Fatalf("event list = %+v", el)
	}
	c.memberA2.Call("/monitoring/v1/event/get", map[string]any{"event_id": ev.EventID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.adminB.Call("/monitoring/v1/event/list", map[string]any{}).OK(&el)
	if el.TotalCount != 0 {
		t.Fatalf("another domain sees events: %+v", el)
	}
	// Published on JetStream through the outbox.
	testkit.Eventually(t, time.Minute, "the outbox to drain", func() bool { return c.count(t, core.OutboxCollection, nil) == 0 })
	msg, err := c.bus.JS.Stream(context.Background(), events.MonitoringStream)
	if err != nil {
		t.Fatal(err)
	}
	last, err := msg.GetLastMsgForSubject(context.Background(), events.MonitoringEventSubject)
	if err != nil {
		t.Fatal(err)
	}
	var pub events.MonitoringEvent
	if err := json.Unmarshal(last.Data, &pub); err != nil || pub.EventID != ev.EventID || pub.EventType != "RECOVERY" || pub.DomainID != "domain-a" {
		t.Fatalf("published %s (%v)", last.Data, err)
	}
	testkit.Eventually(t, time.Minute, "counters", func() bool { n, e := c.requests(t, w.WebhookID); return n == 3 && e == 0 })

	var l list[webhookInfo]
	c.memberA1.Call("/monitoring/webhook/list", map[string]any{"project_id": "project-a1"}).OK(&l)
	if l.TotalCount != 2 || l.Results[0].WebhookURL == "" {
		t.Fatalf("list = %+v", l)
	}
	c.memberA1.Call(wp+"list", map[string]any{"query": map[string]any{"only": []string{"webhook_id", "name", "plugin_info", "requests"}, "filter": []any{map[string]any{"k": "name", "v": "prod", "o": "contain"}}}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].Requests.Total != 3 || l.Results[0].AccessKey != "" {
		t.Fatalf("list only = %+v", l)
	}
	st := c.adminA.Call(wp+"stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}).JSON()
	if st["results"].([]any)[0].(map[string]any)["n"] != float64(2) {
		t.Fatalf("stat = %v", st)
	}

	// Disabled: refused, nothing stored; enabled again: taken.
	c.memberA1.Call(wp+"disable", map[string]any{"webhook_id": w.WebhookID}).OK(&got)
	if got.State != "DISABLED" {
		t.Fatalf("disable = %+v", got)
	}
	c.parses(alert("k-3", "ALERT"))
	c.post(w, `{"a": 1}`).Fails(http.StatusForbidden, errs.WebhookStateDisabled)
	if n := c.count(t, core.EventsCollection, nil); n != 3 {
		t.Fatalf("a disabled webhook stored an event: %d", n)
	}
	c.memberA1.Call(wp+"enable", map[string]any{"webhook_id": w.WebhookID}).OK(&got)
	c.post(w, `{"a": 1}`).OK(nil)

	// Deleted: its URL is gone; its events stay.
	c.memberA1.Call(wp+"delete", map[string]any{"webhook_id": w.WebhookID}).OK(nil)
	c.post(w, `{"a": 1}`).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.memberA1.Call(wp+"get", map[string]any{"webhook_id": w.WebhookID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := c.count(t, core.EventsCollection, nil); n != 4 {
		t.Fatalf("events after delete: %d", n)
	}
}

func TestWebhookRules(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Kept")
	before := c.count(t, core.WebhooksCollection, nil)
	create := func(extra map[string]any) map[string]any {
		b := map[string]any{"name": "x", "project_id": "project-a1", "plugin_info": map[string]any{"plugin_id": "plugin-grafana-mon-webhook"}}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	pi := func(m map[string]any) map[string]any { return create(map[string]any{"plugin_info": m}) }
	id := map[string]any{"webhook_id": w.WebhookID}
	cases := []struct {
		name   string
		as     *testkit.Client
		path   string
		body   any
		status int
		code   string
		setup  func()
	}{
		{"plugin of another kind", c.memberA1, "create", pi(map[string]any{"plugin_id": "plugin-aws-inven-collector"}), 404, errs.NotFoundCode, nil},
		{"plugin unknown to the repository", c.memberA1, "create", pi(map[string]any{"plugin_id": "plugin-nope"}), 404, errs.NotFoundCode, nil},
		{"project unknown", c.memberA1, "create", create(map[string]any{"project_id": "project-zz"}), 404, errs.NotFoundCode, nil},
		{"project of another domain", c.adminA, "create", create(map[string]any{"project_id": "project-b1"}), 404, errs.NotFoundCode, nil},
		{"project of another workspace", c.memberA1, "create", create(map[string]any{"project_id": "project-a2"}), 404, errs.NotFoundCode, nil},
		{"empty project_id (the console may send it)", c.memberA1, "create", create(map[string]any{"project_id": ""}), 400, errs.RequiredParameter, nil},
		{"no plugin_info", c.memberA1, "create", map[string]any{"name": "x", "project_id": "project-a1"}, 400, errs.RequiredParameter, nil},
		{"no plugin_id", c.memberA1, "create", pi(map[string]any{"options": map[string]any{}}), 400, errs.RequiredParameter, nil},
		{"MANUAL without version", c.memberA1, "create", pi(map[string]any{"plugin_id": "plugin-grafana-mon-webhook", "upgrade_mode": "MANUAL"}), 400, errs.RequiredParameter, nil},
		{"unknown upgrade mode", c.memberA1, "create", pi(map[string]any{"plugin_id": "plugin-grafana-mon-webhook", "upgrade_mode": "SOMETIMES"}), 400, errs.InvalidParameter, nil},
		{"no name", c.memberA1, "create", map[string]any{"project_id": "project-a1", "plugin_info": map[string]any{"plugin_id": "plugin-grafana-mon-webhook"}}, 400, errs.RequiredParameter, nil},
		{"options not an object", c.memberA1, "create", pi(map[string]any{"plugin_id": "plugin-grafana-mon-webhook", "options": "x"}), 400, errs.InvalidParameterType, nil},
		{"access_key is generated", c.memberA1, "create", create(map[string]any{"access_key": "0123"}), 400, errs.InvalidParameter, nil},
		{"init refuses the options", c.memberA1, "create", create(nil), 400, errs.PluginFailed, func() {
			c.plugin.Script(initMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_INVALID_OPTIONS", "bad")})
		}},
		{"plugin unreachable", c.memberA1, "create", pi(map[string]any{"plugin_id": "plugin-unreachable"}), 503, errs.GRPCConnection, nil},
		{"update_plugin init fails", c.memberA1, "update-plugin", map[string]any{"webhook_id": w.WebhookID, "options": map[string]any{"x": 1}}, 502, errs.PluginFailed, func() {
			c.plugin.Script(initMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.Internal, "ERROR_UNKNOWN", "boom")})
		}},
		{"bad state filter", c.memberA1, "list", map[string]any{"state": "ASLEEP"}, 400, errs.InvalidParameter, nil},
		{"bad value on requests", c.memberA1, "list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "requests.total", "v": []any{1}, "o": "gt"}}}}, 400, errs.OperatorValueType, nil},
		{"user without role", c.userA, "create", create(nil), 403, errs.PermissionDenied, nil},
		{"no token", c.anon, "create", create(nil), 401, errs.AuthenticateFailure, nil},
		{"other domain gets", c.adminB, "get", id, 404, errs.NotFoundCode, nil},
		{"other domain disables", c.adminB, "disable", id, 404, errs.NotFoundCode, nil},
		{"other domain deletes", c.adminB, "delete", id, 404, errs.NotFoundCode, nil},
		{"other domain renames", c.adminB, "update", map[string]any{"webhook_id": w.WebhookID, "name": "mine"}, 404, errs.NotFoundCode, nil},
		{"other workspace updates the plugin", c.memberA2, "update-plugin", map[string]any{"webhook_id": w.WebhookID, "version": "9"}, 404, errs.NotFoundCode, nil},
		{"other workspace verifies", c.memberA2, "verify-plugin", id, 404, errs.NotFoundCode, nil},
		{"malformed", c.memberA1, "update", `{"webhook_id": `, 400, errs.JSONFormat, nil},
		{"wrong type", c.memberA1, "enable", `{"webhook_id": 1}`, 400, errs.InvalidParameterType, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.plugin.Script(initMethod, fakeplugin.Reply{Result: map[string]any{"metadata": map[string]any{}}})
			if tc.setup != nil {
				tc.setup()
			}
			tc.as.Call(wp+tc.path, tc.body).Fails(tc.status, tc.code)
			var got core.Webhook
			if err := c.db.Collection(core.WebhooksCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: w.WebhookID}}).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if n := c.count(t, core.WebhooksCollection, nil); n != before || got.Name != "Kept" || got.State != "ENABLED" ||
				got.PluginInfo.Version != "1.2.0" || len(got.PluginInfo.Options) != 1 {
				t.Fatalf("refused request changed webhooks: %d, %+v", n, got)
			}
		})
	}
	var l list[webhookInfo]
	// access_key is a secret field: not even its parameter lists by it.
	c.adminA.Call(wp+"list", map[string]any{"access_key": w.AccessKey}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	for _, body := range []map[string]any{{}, {"webhook_id": w.WebhookID},
		{"query": map[string]any{"filter": []any{map[string]any{"k": "domain_id", "v": "domain-a", "o": "eq"}}}}} {
		c.adminB.Call(wp+"list", body).OK(&l)
		if l.TotalCount != 0 {
			t.Fatalf("list %v crossed domains: %+v", body, l)
		}
	}
}

// A webhook's access_key (whoever holds it posts events) is a secret
// field: no list or stat query reads it, whatever the caller.
func TestWebhookAccessKeyIsNoQueryOracle(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.adminA, "grafana")
	if w.AccessKey == "" {
		t.Fatal("no access_key")
	}
	for _, as := range []*testkit.Client{c.adminA, c.memberA1, c.system} {
		testkit.SecretOracle(t, as, testkit.Oracle{List: wp + "list", Stat: wp + "stat", Secret: "access_key",
			Right: w.AccessKey, Wrong: "not-the-key"})
		testkit.SecretOracle(t, as, testkit.Oracle{List: wp + "list", Stat: wp + "stat", Secret: "webhook_url",
			Right: w.AccessKey, Wrong: "not-the-key"})
	}
}
