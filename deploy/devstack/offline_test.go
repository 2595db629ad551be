package main

import (
	"net"
	"testing"

	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// deadURL is an http address nothing listens on: a registry out of reach,
// refused at once as on a machine without network.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// TestMakeRunOfflinePlugins is `make run` without a network (issue 18
// point 5): the devstack configured as its main does, from
// NUBES_PLUGIN_ENDPOINTS naming a test plugin, with every plugin's
// registry out of reach. An admin still creates a collector, a webhook, a
// notification protocol and a cost data source, each with the version it
// asks (or none), and each plugin is really called (its init).
func TestMakeRunOfflinePlugins(t *testing.T) {
	plug := fakeplugin.Start(t, fakeplugin.Options{})
	ids := map[string]string{"inventory.Collector": "plugin-off-collector", "monitoring.Webhook": "plugin-off-webhook",
		"cost_analysis.DataSource": "plugin-off-cost", "notification.Protocol": "plugin-off-protocol"}
	env := ""
	for _, id := range ids {
		if env != "" {
			env += ","
		}
		env += id + "=grpc://" + plug.Addr
	}
	t.Setenv("NUBES_PLUGIN_ENDPOINTS", env)
	var cfg Config
	if err := config.Load(&cfg, defaults()); err != nil {
		t.Fatal(err)
	}
	if len(cfg.PluginEndpoints) != len(ids) {
		t.Fatalf("NUBES_PLUGIN_ENDPOINTS read as %v", cfg.PluginEndpoints)
	}
	cfg.DataDir, cfg.HTTPAddr, cfg.GRPCAddr = t.TempDir(), "127.0.0.1:0", "127.0.0.1:0"
	base, stop := startWith(t, cfg)
	defer stop()
	boot, _ := loadBootstrap(t, cfg.DataDir)
	c := &client{t: t, base: base, called: map[string]bool{}}
	registry := deadURL(t)
	for rt, id := range ids {
		c.ok("register "+id, "/repository/v1/plugin/register", boot.SystemToken, `{"name": `+q(id)+`, "resource_type": `+q(rt)+`, "image": `+q("offline/"+id)+
			`, "provider": "aws", "registry_type": "PRIVATE_REGISTRY", "registry_url": `+q(registry)+`, "capability": {"supported_providers": ["aws"], "supported_schema": ["slack_webhook"]}}`, "plugin_id:string")
	}
	pair := c.ok("login", "/identity/token/issue", "", `{"domain_id": `+q(boot.DomainID)+`, "auth_type": "LOCAL", "credentials": {"user_id": `+
		q(boot.AdminUserID)+`, "password": `+q(boot.AdminPassword)+`}}`, "refresh_token:string")
	admin := c.ok("login DOMAIN", "/identity/token/grant", "", `{"grant_type": "REFRESH_TOKEN", "token": `+q(pair["refresh_token"].(string))+`, "scope": "DOMAIN"}`,
		"access_token:string")["access_token"].(string)
	workspaceID := c.ok("workspace", "/identity/workspace/create", admin, `{"name": "Offline"}`, "workspace_id:string")["workspace_id"].(string)
	ws := c.ok("login WORKSPACE", "/identity/token/grant", "", `{"grant_type": "REFRESH_TOKEN", "token": `+q(pair["refresh_token"].(string))+
		`, "scope": "WORKSPACE", "workspace_id": `+q(workspaceID)+`}`, "access_token:string")["access_token"].(string)
	projectID := c.ok("project", "/identity/project/create", ws, `{"name": "Offline project", "project_type": "PUBLIC"}`, "project_id:string")["project_id"].(string)

	for _, tc := range []struct {
		what, path, token, body, version string
	}{
		{"collector", "/inventory/collector/create", admin, `{"name": "Offline collector", "provider": "aws", "resource_group": "DOMAIN",
			"plugin_info": {"plugin_id": ` + q(ids["inventory.Collector"]) + `, "version": "1.2.0", "options": {}, "upgrade_mode": "MANUAL"}}`, "1.2.0"},
		{"webhook", "/monitoring/webhook/create", ws, `{"name": "Offline webhook", "project_id": ` + q(projectID) + `,
			"plugin_info": {"plugin_id": ` + q(ids["monitoring.Webhook"]) + `, "options": {}}}`, ""},
		{"protocol", "/notification/protocol/create", admin, `{"name": "Offline protocol",
			"plugin_info": {"plugin_id": ` + q(ids["notification.Protocol"]) + `, "version": "2.0.1", "options": {}}}`, "2.0.1"},
		{"data source", "/cost-analysis/data-source/register", admin, `{"name": "Offline costs", "resource_group": "DOMAIN",
			"plugin_info": {"plugin_id": ` + q(ids["cost_analysis.DataSource"]) + `, "options": {}, "secret_data": {"key": "k"}}}`, ""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c.t = t
			got := c.ok(tc.what, tc.path, tc.token, tc.body, "plugin_info.plugin_id:string", "plugin_info.version:string?")
			if v := got["plugin_info"].(map[string]any)["version"]; tc.version != "" && v != tc.version {
				t.Errorf("%s: version %v, want the one asked, %s", tc.what, v, tc.version)
			}
		})
	}
	// Each plugin answered its init: the endpoint map, not a registry, said where.
	for _, m := range []plugin.Method{plugin.CollectorInit, plugin.WebhookInit, plugin.CostDataSourceInit, plugin.ProtocolInit} {
		if len(plug.Calls(string(m))) == 0 {
			t.Errorf("%s was never called", m)
		}
	}
}
