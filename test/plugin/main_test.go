package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// TestScriptAndControl: a JSON script drives the answers of every kind, the
// control API replaces it and reports the requests received.
func TestScriptAndControl(t *testing.T) {
	srv := fakeplugin.Start(t, fakeplugin.Options{Reflection: fakeplugin.ReflectV1Alpha})
	err := load(srv, []byte(`{
		"spaceone.api.inventory.plugin.Collector/init": [{"result": {"metadata": {"supported_resource_type": ["inventory.CloudService"]}}}],
		"spaceone.api.inventory.plugin.Collector/collect": [{"stream": [{"state": "SUCCESS"}, {"state": "SUCCESS"}],
			"error": {"code": "INTERNAL", "message": "ERROR_UNKNOWN: broken"}, "interval": "10ms"}],
		"spaceone.api.notification.plugin.Notification/dispatch": [{"error": {"code": "INVALID_ARGUMENT", "message": "ERROR_INVALID_CHANNEL: bad address"}}, {}]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := plugin.New(map[string]string{"plugin-test": srv.Endpoint}, plugin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	md, err := plugin.Collector{Target: c.Plugin("plugin-test", "1.0.0")}.Init(ctx, nil)
	if err != nil || len(md["supported_resource_type"].([]any)) != 1 {
		t.Fatalf("init: %v %v", md, err)
	}
	n := 0
	err = plugin.Collector{Target: c.Plugin("plugin-test", "")}.Collect(ctx, plugin.CollectRequest{}, func(plugin.M) error { n++; return nil })
	if e, ok := errs.As(err); !ok || e.Code != errs.PluginFailed || n != 2 || !strings.Contains(e.Message, "ERROR_UNKNOWN: broken") {
		t.Fatalf("collect: %d messages, %v", n, err)
	}
	p := plugin.Protocol{Target: c.Plugin("plugin-test", "")}
	req := plugin.DispatchRequest{Message: plugin.M{"title": "t"}, NotificationType: "WARNING"}
	if err := p.Dispatch(ctx, req); err == nil || !strings.Contains(err.Error(), "ERROR_INVALID_CHANNEL") {
		t.Fatalf("first dispatch: %v", err)
	}
	if err := p.Dispatch(ctx, req); err != nil {
		t.Fatalf("second dispatch: %v", err)
	}

	h := httptest.NewServer(handler(srv))
	defer h.Close()
	resp, err := http.Get(h.URL + "/calls?method=spaceone.api.notification.plugin.Notification/dispatch")
	if err != nil {
		t.Fatal(err)
	}
	var calls []fakeplugin.Call
	_ = json.NewDecoder(resp.Body).Decode(&calls)
	resp.Body.Close()
	if len(calls) != 2 || calls[1].Request["notification_type"] != "WARNING" {
		t.Fatalf("calls %+v", calls)
	}

	put := func(body string) int {
		req, _ := http.NewRequest(http.MethodPut, h.URL+"/script", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(`{"spaceone.api.inventory.plugin.Collector/init": [{"result": {"metadata": {"v": 2}}}]}`); code != http.StatusNoContent {
		t.Fatalf("PUT /script: %d", code)
	}
	if md, err := (plugin.Collector{Target: c.Plugin("plugin-test", "")}).Init(ctx, nil); err != nil || md["v"] != 2.0 {
		t.Fatalf("after PUT: %v %v", md, err)
	}
	for _, bad := range []string{`{"init": []}`, `{"a.B/c": [{"delay": "soon"}]}`, `{"a.B/c": [{"bogus": 1}]}`, `[]`} {
		if code := put(bad); code != http.StatusBadRequest {
			t.Errorf("PUT /script %s: %d, want 400", bad, code)
		}
	}
}
