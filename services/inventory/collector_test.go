package inventory_test

import (
	"net/http"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

type collectorOut struct {
	CollectorID  string         `json:"collector_id"`
	Name         string         `json:"name"`
	Provider     string         `json:"provider"`
	Capability   map[string]any `json:"capability"`
	SecretFilter struct {
		State                  string   `json:"state"`
		Secrets                []string `json:"secrets"`
		ServiceAccounts        []string `json:"service_accounts"`
		Schemas                []string `json:"schemas"`
		ExcludeSecrets         []string `json:"exclude_secrets"`
		ExcludeServiceAccounts []string `json:"exclude_service_accounts"`
		ExcludeSchemas         []string `json:"exclude_schemas"`
	} `json:"secret_filter"`
	PluginInfo struct {
		PluginID    string         `json:"plugin_id"`
		Version     string         `json:"version"`
		Options     map[string]any `json:"options"`
		Metadata    map[string]any `json:"metadata"`
		UpgradeMode string         `json:"upgrade_mode"`
	} `json:"plugin_info"`
	Schedule struct {
		State string `json:"state"`
		Hours []int  `json:"hours"`
	} `json:"schedule"`
	Tags            map[string]any `json:"tags"`
	ResourceGroup   string         `json:"resource_group"`
	DomainID        string         `json:"domain_id"`
	WorkspaceID     string         `json:"workspace_id"`
	CreatedAt       string         `json:"created_at"`
	LastCollectedAt string         `json:"last_collected_at"`
}

func domainCollector(extra ...map[string]any) map[string]any {
	body := map[string]any{"name": "AWS", "resource_group": "DOMAIN", "plugin_info": map[string]any{"plugin_id": collectorPlugin,
		"options": map[string]any{"region": "us-east-1"}}}
	for _, e := range extra {
		for k, v := range e {
			body[k] = v
		}
	}
	return body
}

func (s *stack) createCollector(c *testkit.Client, body map[string]any) collectorOut {
	s.t.Helper()
	var out collectorOut
	c.Call("/inventory/v1/collector/create", body).OK(&out)
	return out
}

func TestCollectorCreate(t *testing.T) {
	t.Parallel()
	s := setup(t)
	t.Run("domain collector by a domain admin", func(t *testing.T) {
		c := s.createCollector(s.adminA, domainCollector(map[string]any{"tags": map[string]any{"icon": "aws.svg"},
			"schedule": map[string]any{"state": "ENABLED", "hours": []int{13, 1, 13}}}))
		if !strings.HasPrefix(c.CollectorID, "collector-") || len(c.CollectorID) != len("collector-")+12 {
			t.Fatalf("collector_id %q", c.CollectorID)
		}
		if c.WorkspaceID != "*" || c.ResourceGroup != "DOMAIN" || c.DomainID != "domain-a" || c.Provider != "aws" {
			t.Fatalf("placement or provider: %+v", c)
		}
		pi := c.PluginInfo
		if pi.PluginID != collectorPlugin || pi.Version != "1.2.0" || pi.UpgradeMode != "AUTO" || pi.Options["region"] != "us-east-1" {
			t.Fatalf("plugin_info %+v", pi)
		}
		if _, ok := pi.Metadata["options_schema"]; !ok {
			t.Fatalf("metadata from init not kept: %v", pi.Metadata)
		}
		if c.Schedule.State != "ENABLED" || len(c.Schedule.Hours) != 2 || c.Schedule.Hours[0] != 1 || c.Schedule.Hours[1] != 13 {
			t.Fatalf("schedule %+v", c.Schedule)
		}
		if c.SecretFilter.State != "DISABLED" || c.SecretFilter.Secrets == nil || c.SecretFilter.ExcludeSchemas == nil {
			t.Fatalf("secret_filter %+v", c.SecretFilter)
		}
		if c.Tags["icon"] != "aws.svg" || c.CreatedAt == "" || c.LastCollectedAt != "" {
			t.Fatalf("tags or times: %+v", c)
		}
		calls := s.plugin.Calls(initMethod)
		last := calls[len(calls)-1].Request
		if opts, _ := last["options"].(map[string]any); opts["region"] != "us-east-1" {
			t.Fatalf("init sent %v", last)
		}
		var got collectorOut
		s.memberA1.Call("/inventory/v1/collector/get", map[string]any{"collector_id": c.CollectorID}).OK(&got)
		if got.CollectorID != c.CollectorID || got.PluginInfo.Version != "1.2.0" {
			t.Fatalf("get %+v", got)
		}
	})
	t.Run("workspace collector by its owner", func(t *testing.T) {
		c := s.createCollector(s.ownerA1, map[string]any{"name": "W1", "resource_group": "WORKSPACE",
			"plugin_info": map[string]any{"plugin_id": collectorPlugin, "version": "1.1.0", "upgrade_mode": "MANUAL"}})
		if c.WorkspaceID != "workspace-1" || c.PluginInfo.Version != "1.1.0" || c.PluginInfo.UpgradeMode != "MANUAL" {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("workspace collector by a domain admin naming the workspace", func(t *testing.T) {
		c := s.createCollector(s.adminA, map[string]any{"name": "W2", "resource_group": "WORKSPACE", "workspace_id": "workspace-2",
			"plugin_info": map[string]any{"plugin_id": collectorPlugin}})
		if c.WorkspaceID != "workspace-2" {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("provider from the plugin's supported providers", func(t *testing.T) {
		c := s.createCollector(s.adminA, map[string]any{"name": "M", "resource_group": "DOMAIN", "plugin_info": map[string]any{"plugin_id": "plugin-multi-provider"}})
		if c.Provider != "aws" {
			t.Fatalf("provider %q", c.Provider)
		}
		c = s.createCollector(s.adminA, map[string]any{"name": "M2", "resource_group": "DOMAIN", "provider": "google_cloud",
			"plugin_info": map[string]any{"plugin_id": "plugin-multi-provider"}})
		if c.Provider != "google_cloud" {
			t.Fatalf("provider %q", c.Provider)
		}
	})
	t.Run("camelCase members", func(t *testing.T) {
		c := s.createCollector(s.adminA, map[string]any{"name": "C", "resourceGroup": "DOMAIN", "pluginInfo": map[string]any{"pluginId": collectorPlugin}})
		if c.ResourceGroup != "DOMAIN" {
			t.Fatalf("%+v", c)
		}
	})
}

func TestCollectorCreateRefused(t *testing.T) {
	t.Parallel()
	s := setup(t)
	plug := map[string]any{"plugin_id": collectorPlugin}
	long := strings.Repeat("n", 256)
	type tc struct {
		name   string
		caller *testkit.Client
		body   any
		status int
		code   string
	}
	tests := []tc{
		// 400
		{"not JSON", s.adminA, "[1]", http.StatusBadRequest, errs.JSONFormat},
		{"broken JSON", s.adminA, `{"name":`, http.StatusBadRequest, errs.JSONFormat},
		{"no name", s.adminA, map[string]any{"resource_group": "DOMAIN", "plugin_info": plug}, http.StatusBadRequest, errs.RequiredParameter},
		{"no plugin_info", s.adminA, map[string]any{"name": "x", "resource_group": "DOMAIN"}, http.StatusBadRequest, errs.RequiredParameter},
		{"no plugin_id", s.adminA, map[string]any{"name": "x", "resource_group": "DOMAIN", "plugin_info": map[string]any{}}, http.StatusBadRequest, errs.RequiredParameter},
		{"no resource_group", s.adminA, map[string]any{"name": "x", "plugin_info": plug}, http.StatusBadRequest, errs.RequiredParameter},
		{"resource_group PROJECT", s.adminA, domainCollector(map[string]any{"resource_group": "PROJECT"}), http.StatusBadRequest, errs.InvalidParameter},
		{"unknown field", s.adminA, domainCollector(map[string]any{"colour": "red"}), http.StatusBadRequest, errs.InvalidParameter},
		{"name too long", s.adminA, domainCollector(map[string]any{"name": long}), http.StatusBadRequest, errs.InvalidParameter},
		{"name of the wrong type", s.adminA, domainCollector(map[string]any{"name": 5}), http.StatusBadRequest, errs.InvalidParameterType},
		{"MANUAL without version", s.adminA, domainCollector(map[string]any{"plugin_info": map[string]any{"plugin_id": collectorPlugin, "upgrade_mode": "MANUAL"}}), http.StatusBadRequest, errs.RequiredParameter},
		{"bad upgrade_mode", s.adminA, domainCollector(map[string]any{"plugin_info": map[string]any{"plugin_id": collectorPlugin, "upgrade_mode": "SOMETIMES"}}), http.StatusBadRequest, errs.InvalidParameter},
		{"hour 24", s.adminA, domainCollector(map[string]any{"schedule": map[string]any{"state": "ENABLED", "hours": []int{24}}}), http.StatusBadRequest, errs.InvalidParameter},
		{"negative hour", s.adminA, domainCollector(map[string]any{"schedule": map[string]any{"hours": []int{-1}}}), http.StatusBadRequest, errs.InvalidParameter},
		{"three hours", s.adminA, domainCollector(map[string]any{"schedule": map[string]any{"state": "ENABLED", "hours": []int{1, 2, 3}}}), http.StatusBadRequest, errs.InvalidParameter},
		{"schedule state", s.adminA, domainCollector(map[string]any{"schedule": map[string]any{"state": "ON"}}), http.StatusBadRequest, errs.InvalidParameter},
		{"secret_filter state", s.adminA, domainCollector(map[string]any{"secret_filter": map[string]any{"state": "MAYBE"}}), http.StatusBadRequest, errs.InvalidParameter},
		{"secret_filter unknown key", s.adminA, domainCollector(map[string]any{"secret_filter": map[string]any{"projects": []string{"p"}}}), http.StatusBadRequest, errs.InvalidParameter},
		{"tags empty key", s.adminA, domainCollector(map[string]any{"tags": map[string]any{"": 1}}), http.StatusBadRequest, errs.InvalidParameter},
		{"options empty key", s.adminA, domainCollector(map[string]any{"plugin_info": map[string]any{"plugin_id": collectorPlugin, "options": map[string]any{"": 1}}}), http.StatusBadRequest, errs.InvalidParameter},
		{"provider the plugin does not support", s.adminA, map[string]any{"name": "x", "resource_group": "DOMAIN", "provider": "azure", "plugin_info": map[string]any{"plugin_id": "plugin-multi-provider"}}, http.StatusBadRequest, errs.InvalidParameter},
		{"DOMAIN naming a workspace", s.adminA, domainCollector(map[string]any{"workspace_id": "workspace-1"}), http.StatusBadRequest, errs.InvalidParameter},
		{"WORKSPACE without workspace", s.adminA, domainCollector(map[string]any{"resource_group": "WORKSPACE"}), http.StatusBadRequest, errs.RequiredParameter},
		// 401, 403
		{"anonymous", s.anon, domainCollector(), http.StatusUnauthorized, errs.AuthenticateFailure},
		{"DOMAIN by a workspace owner", s.ownerA1, domainCollector(), http.StatusForbidden, errs.PermissionDenied},
		{"workspace member", s.memberA1, domainCollector(map[string]any{"resource_group": "WORKSPACE"}), http.StatusForbidden, errs.PermissionDenied},
		{"user without role", s.userA, domainCollector(), http.StatusForbidden, errs.PermissionDenied},
		// 404
		{"unknown plugin", s.adminA, domainCollector(map[string]any{"plugin_info": map[string]any{"plugin_id": "plugin-nope"}}), http.StatusNotFound, errs.NotFoundCode},
		{"plugin of another kind", s.adminA, domainCollector(map[string]any{"plugin_info": map[string]any{"plugin_id": "plugin-grafana-mon-webhook"}}), http.StatusNotFound, errs.NotFoundCode},
		{"unknown workspace", s.adminA, domainCollector(map[string]any{"resource_group": "WORKSPACE", "workspace_id": "workspace-9"}), http.StatusNotFound, errs.NotFoundCode},
		{"another domain's workspace", s.adminA, domainCollector(map[string]any{"resource_group": "WORKSPACE", "workspace_id": "workspace-b"}), http.StatusNotFound, errs.NotFoundCode},
		{"owner naming another workspace", s.ownerA1, domainCollector(map[string]any{"resource_group": "WORKSPACE", "workspace_id": "workspace-2"}), http.StatusNotFound, errs.NotFoundCode},
		// 503: the plugin cannot be reached
		{"plugin unreachable", s.adminA, domainCollector(map[string]any{"plugin_info": map[string]any{"plugin_id": "plugin-unreachable"}}), http.StatusServiceUnavailable, errs.GRPCConnection},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.caller.Call("/inventory/v1/collector/create", tt.body).Fails(tt.status, tt.code)
			if n := s.count(collectorsColl, nil); n != 0 {
				t.Fatalf("%d collectors stored", n)
			}
		})
	}
	t.Run("plugin refuses its options", func(t *testing.T) {
		s.plugin.Script(initMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_INVALID_ARGUMENT", "region is required")})
		s.adminA.Call("/inventory/v1/collector/create", domainCollector()).Fails(http.StatusBadRequest, errs.PluginFailed)
		s.plugin.Script(initMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.Internal, "ERROR_UNKNOWN", "boom")})
		s.adminA.Call("/inventory/v1/collector/create", domainCollector()).Fails(http.StatusBadGateway, errs.PluginFailed)
		if n := s.count(collectorsColl, nil); n != 0 {
			t.Fatalf("%d collectors stored", n)
		}
	})
	t.Run("repository down", func(t *testing.T) {
		s.repo.Close()
		s.adminA.Call("/inventory/v1/collector/create", domainCollector()).Fails(http.StatusServiceUnavailable, errs.Unavailable)
		if n := s.count(collectorsColl, nil); n != 0 {
			t.Fatalf("%d collectors stored", n)
		}
	})
}

func TestCollectorUpdate(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector(map[string]any{"tags": map[string]any{"a": 1}}))
	w1 := s.createCollector(s.ownerA1, map[string]any{"name": "W1", "resource_group": "WORKSPACE", "plugin_info": map[string]any{"plugin_id": collectorPlugin}})
	id := map[string]any{"collector_id": c.CollectorID}

	var out collectorOut
	s.adminA.Call("/inventory/v1/collector/update", map[string]any{"collector_id": c.CollectorID, "name": "AWS prod",
		"tags": map[string]any{"b": 2}, "schedule": map[string]any{"state": "ENABLED", "hours": []int{5}},
		"secret_filter": map[string]any{"state": "ENABLED", "service_accounts": []string{"ta-a-dom"}, "exclude_secrets": []string{}},
		"plugin_info":   map[string]any{"plugin_id": "ignored"}}).OK(&out)
	if out.Name != "AWS prod" || out.Tags["b"] != float64(2) || out.Tags["a"] != nil || out.Schedule.State != "ENABLED" ||
		out.SecretFilter.State != "ENABLED" || len(out.SecretFilter.ServiceAccounts) != 1 || out.PluginInfo.PluginID != collectorPlugin {
		t.Fatalf("update: %+v", out)
	}
	// The console echoes the secret filter it read, all seven keys.
	echo := map[string]any{"collector_id": c.CollectorID, "secret_filter": map[string]any{"state": "DISABLED", "secrets": []string{},
		"service_accounts": []string{}, "schemas": []string{}, "exclude_secrets": []string{}, "exclude_service_accounts": []string{"ta-a-w1"},
		"exclude_schemas": []string{}}}
	s.adminA.Call("/inventory/v1/collector/update", echo).OK(&out)
	if out.SecretFilter.State != "DISABLED" || out.SecretFilter.ExcludeServiceAccounts[0] != "ta-a-w1" {
		t.Fatalf("echoed filter: %+v", out.SecretFilter)
	}

	t.Run("update_plugin", func(t *testing.T) {
		before := len(s.plugin.Calls(initMethod))
		s.plugin.Script(initMethod, fakeplugin.Reply{Result: map[string]any{"metadata": map[string]any{"concurrency": 3}}})
		s.adminA.Call("/inventory/v1/collector/update-plugin", map[string]any{"collector_id": c.CollectorID, "options": map[string]any{"x": "y"},
			"version": "1.1.0", "upgrade_mode": "MANUAL"}).OK(&out)
		if out.PluginInfo.Version != "1.1.0" || out.PluginInfo.UpgradeMode != "MANUAL" || out.PluginInfo.Options["x"] != "y" ||
			out.PluginInfo.Metadata["concurrency"] != float64(3) {
			t.Fatalf("update_plugin: %+v", out.PluginInfo)
		}
		if len(s.plugin.Calls(initMethod)) != before+1 {
			t.Fatal("update_plugin did not initialise the plugin")
		}
		s.adminA.Call("/inventory/v1/collector/update-plugin", map[string]any{"collector_id": c.CollectorID, "upgrade_mode": "AUTO"}).OK(&out)
		if out.PluginInfo.Version != "1.2.0" || out.PluginInfo.Options["x"] != "y" {
			t.Fatalf("AUTO takes the newest version: %+v", out.PluginInfo)
		}
		s.plugin.Script(initMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_INVALID_ARGUMENT", "bad")})
		s.adminA.Call("/inventory/v1/collector/update-plugin", map[string]any{"collector_id": c.CollectorID, "version": "1.0.0"}).Fails(http.StatusBadRequest, errs.PluginFailed)
		if v := s.raw(collectorsColl, c.CollectorID)["plugin_info"].(bson.M)["version"]; v != "1.2.0" {
			t.Fatalf("a failed init changed the version to %v", v)
		}
		s.plugin.Script(initMethod, fakeplugin.Reply{Result: map[string]any{"metadata": map[string]any{}}})
	})

	type tc struct {
		name   string
		caller *testkit.Client
		path   string
		body   any
		status int
		code   string
	}
	tests := []tc{
		{"update without id", s.adminA, "update", map[string]any{"name": "x"}, http.StatusBadRequest, errs.RequiredParameter},
		{"update three hours", s.adminA, "update", map[string]any{"collector_id": c.CollectorID, "schedule": map[string]any{"hours": []int{1, 2, 3}}}, http.StatusBadRequest, errs.InvalidParameter},
		{"update tags key", s.adminA, "update", map[string]any{"collector_id": c.CollectorID, "tags": map[string]any{"": 1}}, http.StatusBadRequest, errs.InvalidParameter},
		{"update unknown field", s.adminA, "update", map[string]any{"collector_id": c.CollectorID, "provider": "gcp"}, http.StatusBadRequest, errs.InvalidParameter},
		{"update_plugin bad mode", s.adminA, "update-plugin", map[string]any{"collector_id": c.CollectorID, "upgrade_mode": "X"}, http.StatusBadRequest, errs.InvalidParameter},
		{"update_plugin without id", s.adminA, "update-plugin", map[string]any{}, http.StatusBadRequest, errs.RequiredParameter},
		{"update_plugin options key", s.adminA, "update-plugin", map[string]any{"collector_id": c.CollectorID, "options": map[string]any{"a\x00b": 1}}, http.StatusBadRequest, errs.InvalidParameter},
		{"domain collector by a workspace owner", s.ownerA1, "update", map[string]any{"collector_id": c.CollectorID, "name": "x"}, http.StatusForbidden, errs.PermissionDenied},
		{"by a member", s.memberA1, "update", map[string]any{"collector_id": w1.CollectorID, "name": "x"}, http.StatusForbidden, errs.PermissionDenied},
		{"another domain", s.adminB, "update", map[string]any{"collector_id": c.CollectorID, "name": "x"}, http.StatusNotFound, errs.NotFoundCode},
		{"another workspace", s.ownerA2, "update", map[string]any{"collector_id": w1.CollectorID, "name": "x"}, http.StatusNotFound, errs.NotFoundCode},
		{"plugin of another domain", s.adminB, "update-plugin", id, http.StatusNotFound, errs.NotFoundCode},
		{"unknown", s.adminA, "update", map[string]any{"collector_id": "collector-000000000000", "name": "x"}, http.StatusNotFound, errs.NotFoundCode},
		{"anonymous", s.anon, "update", map[string]any{"collector_id": c.CollectorID, "name": "x"}, http.StatusUnauthorized, errs.AuthenticateFailure},
	}
	before := s.raw(collectorsColl, c.CollectorID)
	beforeW1 := s.raw(collectorsColl, w1.CollectorID)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.caller.Call("/inventory/v1/collector/"+tt.path, tt.body).Fails(tt.status, tt.code)
			if after := s.raw(collectorsColl, c.CollectorID); after["name"] != before["name"] || after["updated_at"] != before["updated_at"] {
				t.Fatalf("collector changed: %v", after)
			}
			if after := s.raw(collectorsColl, w1.CollectorID); after["name"] != beforeW1["name"] {
				t.Fatalf("workspace collector changed: %v", after)
			}
		})
	}
}

func TestCollectorVerifyPlugin(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	s.adminA.Call("/inventory/v1/collector/verify-plugin", map[string]any{"collector_id": c.CollectorID}).OK(nil)
	calls := s.plugin.Calls(verifyMethod)
	if len(calls) != 1 {
		t.Fatalf("%d verify calls", len(calls))
	}
	sd, _ := calls[0].Request["secret_data"].(map[string]any)
	if sd["access_key"] != "AK-ta-a-dom" {
		t.Fatalf("verify got the secret data of the first secret? %v", calls[0].Request)
	}
	s.adminA.Call("/inventory/v1/collector/verify-plugin", map[string]any{"collector_id": c.CollectorID, "secret_id": "trusted-secret-aw2"}).OK(nil)
	if sd, _ := s.plugin.Calls(verifyMethod)[1].Request["secret_data"].(map[string]any); sd["access_key"] != "AK-ta-a-w2" {
		t.Fatalf("verify with secret_id: %v", sd)
	}

	s.plugin.Script(verifyMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.PermissionDenied, "ERROR_AUTHENTICATE_FAILURE", "bad key")})
	s.adminA.Call("/inventory/v1/collector/verify-plugin", map[string]any{"collector_id": c.CollectorID}).Fails(http.StatusBadRequest, errs.PluginFailed)
	s.adminA.Call("/inventory/v1/collector/verify-plugin", map[string]any{"collector_id": c.CollectorID, "secret_id": "trusted-secret-b"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	s.adminA.Call("/inventory/v1/collector/verify-plugin", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	s.adminB.Call("/inventory/v1/collector/verify-plugin", map[string]any{"collector_id": c.CollectorID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	s.memberA1.Call("/inventory/v1/collector/verify-plugin", map[string]any{"collector_id": c.CollectorID}).Fails(http.StatusForbidden, errs.PermissionDenied)
	s.identity.setAccounts(nil)
	s.adminA.Call("/inventory/v1/collector/verify-plugin", map[string]any{"collector_id": c.CollectorID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	s.identity.setDown(true)
	s.adminA.Call("/inventory/v1/collector/verify-plugin", map[string]any{"collector_id": c.CollectorID}).Fails(http.StatusServiceUnavailable, errs.Unavailable)
}

func TestCollectorReadAndIsolation(t *testing.T) {
	t.Parallel()
	s := setup(t)
	dom := s.createCollector(s.adminA, domainCollector(map[string]any{"name": "a-domain"}))
	w1 := s.createCollector(s.ownerA1, map[string]any{"name": "b-w1", "resource_group": "WORKSPACE", "plugin_info": map[string]any{"plugin_id": collectorPlugin},
		"schedule": map[string]any{"state": "ENABLED", "hours": []int{3}}})
	w2 := s.createCollector(s.ownerA2, map[string]any{"name": "c-w2", "resource_group": "WORKSPACE", "plugin_info": map[string]any{"plugin_id": collectorPlugin}})
	b := s.createCollector(s.adminB, domainCollector(map[string]any{"name": "d-b"}))

	names := func(c *testkit.Client, body map[string]any) []string {
		var l list[collectorOut]
		var b any
		if body != nil {
			b = body
		}
		c.Call("/inventory/v1/collector/list", b).OK(&l)
		var out []string
		for _, r := range l.Results {
			out = append(out, r.Name)
		}
		if l.TotalCount != len(out) {
			t.Fatalf("total_count %d for %d results", l.TotalCount, len(out))
		}
		return out
	}
	for _, tt := range []struct {
		name   string
		caller *testkit.Client
		body   map[string]any
		want   string
	}{
		{"domain admin sees the domain", s.adminA, nil, "a-domain b-w1 c-w2"},
		{"owner sees its workspace and the domain's", s.ownerA1, nil, "a-domain b-w1"},
		{"member of workspace-1", s.memberA1, nil, "a-domain b-w1"},
		{"another domain", s.adminB, nil, "d-b"},
		{"the console's admin filter", s.adminA, map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "workspace_id", "v": "*", "o": "eq"}}}}, "a-domain"},
		{"schedule_state", s.adminA, map[string]any{"schedule_state": "ENABLED"}, "b-w1"},
		{"plugin_id", s.adminA, map[string]any{"plugin_id": collectorPlugin, "workspace_id": "workspace-2"}, "c-w2"},
		{"keyword", s.adminA, map[string]any{"query": map[string]any{"keyword": "W1"}}, "b-w1"},
		{"only and sort", s.adminA, map[string]any{"query": map[string]any{"only": []string{"collector_id", "name", "tags"}, "sort": map[string]any{"key": "name", "desc": true}}}, "c-w2 b-w1 a-domain"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(names(tt.caller, tt.body), " "); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	var counted list[collectorOut]
	s.adminA.Call("/inventory/v1/collector/list", map[string]any{"query": map[string]any{"count_only": true}}).OK(&counted)
	if counted.TotalCount != 3 || len(counted.Results) != 0 {
		t.Fatalf("count_only: %+v", counted)
	}
	var st struct {
		Results []map[string]any `json:"results"`
	}
	s.ownerA1.Call("/inventory/v1/collector/stat", map[string]any{"query": map[string]any{"aggregate": []any{
		map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "resource_group", "name": "g"}}, "fields": []any{map[string]any{"name": "n", "operator": "count"}}}},
		map[string]any{"sort": []any{map[string]any{"key": "g"}}}}}}).OK(&st)
	if len(st.Results) != 2 || st.Results[0]["n"] != float64(1) || st.Results[1]["n"] != float64(1) {
		t.Fatalf("stat confined to the owner's reach: %v", st.Results)
	}

	for _, tt := range []struct {
		name   string
		caller *testkit.Client
		id     string
	}{{"another domain", s.adminB, dom.CollectorID}, {"another workspace", s.ownerA1, w2.CollectorID}, {"from domain b", s.adminA, b.CollectorID}} {
		t.Run("get "+tt.name, func(t *testing.T) {
			tt.caller.Call("/inventory/v1/collector/get", map[string]any{"collector_id": tt.id}).Fails(http.StatusNotFound, errs.NotFoundCode)
		})
	}
	for path, body := range map[string]any{
		"list": map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "name", "v": "x", "o": "nope"}}}},
		"stat": map[string]any{},
		"get":  map[string]any{},
	} {
		t.Run("bad "+path, func(t *testing.T) {
			r := s.adminA.Call("/inventory/v1/collector/"+path, body)
			if r.Status != http.StatusBadRequest {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
		})
	}
	s.adminA.Call("/inventory/v1/collector/list", map[string]any{"secret_filter_state": "ON"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	s.adminA.Call("/inventory/v1/collector/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "secret_data", "v": 1, "o": "in"}}}}).Fails(http.StatusBadRequest, errs.OperatorListType)
	s.userA.Call("/inventory/v1/collector/list", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	s.anon.Call("/inventory/v1/collector/get", map[string]any{"collector_id": dom.CollectorID}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)

	t.Run("delete", func(t *testing.T) {
		s.ownerA1.Call("/inventory/v1/collector/delete", map[string]any{"collector_id": dom.CollectorID}).Fails(http.StatusForbidden, errs.PermissionDenied)
		s.adminB.Call("/inventory/v1/collector/delete", map[string]any{"collector_id": w1.CollectorID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		s.ownerA2.Call("/inventory/v1/collector/delete", map[string]any{"collector_id": w1.CollectorID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		s.memberA1.Call("/inventory/v1/collector/delete", map[string]any{"collector_id": w1.CollectorID}).Fails(http.StatusForbidden, errs.PermissionDenied)
		if n := s.count(collectorsColl, nil); n != 4 {
			t.Fatalf("%d collectors after refused deletes", n)
		}
		s.ownerA1.Call("/inventory/v1/collector/delete", map[string]any{"collector_id": w1.CollectorID}).OK(nil)
		s.ownerA1.Call("/inventory/v1/collector/get", map[string]any{"collector_id": w1.CollectorID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		s.ownerA1.Call("/inventory/v1/collector/delete", map[string]any{"collector_id": w1.CollectorID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	})
}
