package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/api"
)

// TestConsoleMemory replays, against the devstack, what the upstream
// console sends to the config service and to identity's landing calls
// (docs/spec/console-2x.md section 3's rows, the start-up rows of section
// 0 and clients.md 1.6, 1.8 and 1.11, the workspace home and landing rows
// of sections 2.1 and 4) with the console's bodies, and checks status 200
// (or the 404 the console tolerates) and the JSON type of every field it
// reads. Step ids are "console-2x <section> <what>".
func TestConsoleMemory(t *testing.T) {
	t.Parallel()
	base, boot := sharedStack(t)
	c := &client{t: t, base: base, called: map[string]bool{}}
	login := `{"domain_id": ` + q(boot.DomainID) + `, "auth_type": "LOCAL", "credentials": {"user_id": ` + q(boot.AdminUserID) + `, "password": ` + q(boot.AdminPassword) + `}}`
	refresh := c.ok("login", "/identity/token/issue", "", login, "refresh_token:string")["refresh_token"].(string)
	grant := func(scope, ws string) string {
		body := `{"grant_type": "REFRESH_TOKEN", "token": ` + q(refresh) + `, "scope": ` + q(scope)
		if ws != "" {
			body += `, "workspace_id": ` + q(ws)
		}
		return c.ok("grant "+scope, "/identity/token/grant", "", body+`}`, "access_token:string")["access_token"].(string)
	}
	user, admin := grant("USER", ""), grant("DOMAIN", "")
	ws := c.ok("workspace/create", "/identity/workspace/create", admin, `{"name": "Memory", "tags": {}}`, "workspace_id:string")["workspace_id"].(string)
	owner := grant("WORKSPACE", ws)
	me := boot.AdminUserID

	t.Run("section 0 start-up", func(t *testing.T) {
		c.t = t
		// clients.md 1.6: before any override is set the console gets the
		// 404 it tolerates, with the error body it reads.
		status, v := c.call("console 1.6", http.MethodPost, "/config/public-config/get", "",
			`{"name": "console:override-service-setting", "domain_id": `+q(boot.DomainID)+`}`)
		if status != http.StatusNotFound {
			t.Fatalf("console 1.6: %d %v, want the tolerated 404", status, v)
		}
		if err := expect(v, "detail.code", "string"); err != nil {
			t.Error(err)
		}
		c.ok("console 1.8", "/config/user-config/list", user, `{"name": "console:last-accessed-workspace"}`, "results:array", "total_count:number")
		c.ok("console 1.11", "/config/user-config/set", owner, `{"name": "console:last-accessed-workspace", "data": {"workspace_id": `+q(ws)+`}}`,
			"name:string", "data.workspace_id:string")
		c.ok("console 1.8 again", "/config/user-config/list", user, `{"name": "console:last-accessed-workspace"}`, "results[].data.workspace_id:string")
	})

	t.Run("section 3 public-config", func(t *testing.T) {
		c.t = t
		c.ok("3 override set", "/config/public-config/set", admin, `{"name": "console:override-service-setting", "data": {"SERVICES": {"DASHBOARDS": {"ENABLED": false}}}}`, "name:string")
		c.ok("3 override get", "/config/public-config/get", "", `{"name": "console:override-service-setting", "domain_id": `+q(boot.DomainID)+`}`, "data.SERVICES:object")
		c.ok("3 ext-menu set", "/config/public-config/set", admin, `{"name": "console:ext-menu", "data": {"anomaly_detection": {"enabled": true}}}`, "name:string")
		c.ok("3 ext-menu get", "/config/public-config/get", "", `{"name": "console:ext-menu", "domain_id": `+q(boot.DomainID)+`}`, "data.anomaly_detection.enabled:bool")
		c.ok("3 task-management set", "/config/public-config/set", admin, `{"name": "console:task-management:landing", "data": {"tasks": []}}`, "data:object")
		c.ok("3 task-management get", "/config/public-config/get", owner, `{"name": "console:task-management:landing", "domain_id": `+q(boot.DomainID)+`}`, "data:object")
	})

	t.Run("section 3 user-config", func(t *testing.T) {
		c.t = t
		c.ok("3 navRail set", "/config/user-config/set", owner, `{"name": "console:gnb:navRail", "data": {"isMinimizeNavRail": true, "isHideNavRail": false}}`, "data:object")
		c.ok("3 navRail list", "/config/user-config/list", owner, `{"query": {"filter": [{"k": "name", "v": "console:gnb:navRail", "o": "eq"}]}}`,
			"results[].data.isMinimizeNavRail:bool", "results[].data.isHideNavRail:bool")
		// A recent on a route change, the top bar's recents, the home's panel.
		recent := "console:recent:PROJECT:" + ws + ":project-1"
		c.ok("3 recent set", "/config/user-config/set", owner, `{"name": `+q(recent)+`, "data": {"id": "project-1", "workspace_id": `+q(ws)+`, "type": "PROJECT", "label": "Project One"}}`, "name:string")
		c.ok("3 top-bar recents", "/config/user-config/list", owner, `{"query": {"filter": [{"k": "name", "v": "console:recent:PROJECT:", "o": "contain"}, {"k": "user_id", "v": `+q(me)+`, "o": "eq"}, {"k": "data.workspace_id", "v": [`+q(ws)+`], "o": "in"}, {"k": "data.label", "v": "One", "o": "contain"}], "page": {"limit": 10}}}`,
			"results[].name:string", "results[].data.id:string", "results[].data.label:string")
		c.ok("2.1 home recent", "/config/user-config/list", owner, `{"query": {"filter": [{"k": "user_id", "v": `+q(me)+`, "o": "eq"}, {"k": "name", "v": "console:recent:", "o": "contain"}, {"k": "data.workspace_id", "v": `+q(ws)+`, "o": "eq"}, {"k": "data.type", "v": "WORKSPACE", "o": "not"}, {"k": "data.id", "v": "workspace_home", "o": "not"}, {"k": "data.id", "v": "home-dashboard", "o": "not"}]}}`,
			"results[].name:string", "results[].data.id:string", "results[].data.workspace_id:string", "results[].data.type:string", "results[].data.label:string")
		c.ok("3 recent delete", "/config/user-config/delete", owner, `{"name": `+q(recent)+`}`)
		// Favourites.
		fav := "console:favorite:PROJECT:" + ws + ":project-1"
		c.ok("3 favourite set", "/config/user-config/set", owner, `{"name": `+q(fav)+`, "data": {"itemId": "project-1", "itemType": "PROJECT", "workspaceId": `+q(ws)+`, "type": "item"}}`, "data:object")
		c.ok("2.1 favourites", "/config/user-config/list", owner, `{"query": {"filter": [{"k": "user_id", "v": `+q(me)+`, "o": "eq"}, {"k": "data.workspaceId", "v": `+q(ws)+`, "o": "eq"}, {"k": "data.itemType", "v": "WORKSPACE", "o": "not"}, {"k": "name", "v": "console:favorite:", "o": "contain"}]}}`,
			"results[].data:object", "results[].data.itemType:string")
		c.ok("3 favourite delete", "/config/user-config/delete", owner, `{"name": `+q(fav)+`}`)
		// Notices read, and the only the console asks for.
		c.ok("3 notice set", "/config/user-config/set", user, `{"name": "console:board:NOTICE:post-1", "data": {"is_read": true, "show_popup": false}}`, "data:object")
		c.ok("3 notices", "/config/user-config/list", user, `{"query": {"filter": [{"k": "user_id", "v": `+q(me)+`, "o": "eq"}, {"k": "name", "v": "console:board:NOTICE:", "o": "contain"}], "only": ["data", "user_id"]}}`,
			"results[].data.is_read:bool", "results[].data.show_popup:bool", "results[].user_id:string")
		// Custom table columns, a page schema's table layout.
		custom := "console:USER:" + me + ":custom-field:inventory.CloudService"
		c.ok("3 custom-field set", "/config/user-config/set", user, `{"name": `+q(custom)+`, "data": {"data": ["name", "region_code"]}}`, "data:object")
		c.ok("3 custom-field list", "/config/user-config/list", user, `{"name": `+q(custom)+`}`, "results[].data.data:array+")
		schema := "console:USER:" + me + ":page-schema:identity.ServiceAccount?provider=aws:table"
		c.ok("1 page-schema list", "/config/user-config/list", user, `{"name": `+q(schema)+`}`, "results:array", "total_count:number")
		c.ok("3 page-schema create", "/config/user-config/create", user, `{"name": `+q(schema)+`, "data": {"options": {"fields": []}}}`, "data:object")
		c.ok("3 page-schema update", "/config/user-config/update", user, `{"name": `+q(schema)+`, "data": {"options": {"fields": [{"key": "name"}]}}}`, "data.options:object")
		c.ok("3 page-schema get", "/config/user-config/get", user, `{"name": `+q(schema)+`}`, "name:string", "data:object", "user_id:string", "created_at:string", "updated_at:string")
		c.ok("3 stat", "/config/user-config/stat", user, `{"query": {"aggregate": [{"count": {"name": "total"}}]}}`, "results[].total:number")
	})

	t.Run("section 3 bookmarks", func(t *testing.T) {
		c.t = t
		c.ok("3 folder create", "/config/user-config/create", owner, `{"name": "console:bookmark:Docs", "data": {"name": "Docs", "link": null, "isGlobal": false, "workspaceId": `+q(ws)+`}}`, "data:object")
		c.ok("3 link create", "/config/user-config/create", owner, `{"name": "console:bookmark:Docs:Guide-a1b2", "data": {"name": "Guide", "link": "https://example.org", "folder": "console:bookmark:Docs", "isGlobal": false, "workspaceId": `+q(ws)+`}}`, "data:object")
		c.ok("2.1 folders", "/config/user-config/list", owner, `{"query": {"sort": [{"key": "updated_at", "desc": true}], "filter": [{"k": "name", "v": "console:bookmark", "o": "contain"}, {"k": "data.link", "v": null, "o": "eq"}, {"k": "data.workspaceId", "v": `+q(ws)+`, "o": "eq"}]}}`,
			"results[].name:string", "results[].data.name:string", "results[].data.isGlobal:bool")
		c.ok("2.1 links", "/config/user-config/list", owner, `{"query": {"sort": [{"key": "updated_at", "desc": true}], "filter": [{"k": "name", "v": "console:bookmark", "o": "contain"}, {"k": "data.link", "v": null, "o": "not"}]}}`,
			"results[].data.link:string", "results[].data.folder:string")
		c.ok("3 shared folder (workspace)", "/config/shared-config/create", owner, `{"name": "console:bookmark:Team", "data": {"name": "Team", "link": null, "isGlobal": false, "workspaceId": `+q(ws)+`}, "resource_group": "WORKSPACE"}`,
			"name:string", "resource_group:string", "workspace_id:string")
		c.ok("3 shared folder (domain)", "/config/shared-config/create", admin, `{"name": "console:bookmark:Global", "data": {"name": "Global", "link": null, "isGlobal": true}, "resource_group": "DOMAIN"}`, "workspace_id:string")
		shared := c.ok("2.1 shared bookmarks", "/config/shared-config/list", owner, `{"query": {"sort": [{"key": "updated_at", "desc": true}], "filter": [{"k": "name", "v": "console:bookmark", "o": "contain"}, {"k": "data.link", "v": null, "o": "eq"}], "filter_or": [{"k": "workspace_id", "v": "*", "o": "eq"}, {"k": "data.workspaceId", "v": `+q(ws)+`, "o": "eq"}]}}`,
			"results[].name:string", "results[].data.name:string", "total_count:number")
		if n := shared["total_count"].(float64); n != 2 {
			t.Errorf("2.1 shared bookmarks: %v, want the workspace's and the domain's", n)
		}
		c.ok("3 shared update", "/config/shared-config/update", owner, `{"name": "console:bookmark:Team", "data": {"name": "Team 2", "link": null}}`, "data.name:string")
		c.ok("3 shared delete", "/config/shared-config/delete", owner, `{"name": "console:bookmark:Team"}`)
		c.ok("3 bookmark delete", "/config/user-config/delete", owner, `{"name": "console:bookmark:Docs:Guide-a1b2"}`)
	})

	t.Run("section 3 domain-config", func(t *testing.T) {
		c.t = t
		status, _ := c.call("3 anomaly get", http.MethodPost, "/config/domain-config/get", admin, `{"name": "anomaly_detection_configuration"}`)
		if status != http.StatusNotFound {
			t.Errorf("3 anomaly get before set: %d", status)
		}
		c.ok("3 anomaly set", "/config/domain-config/set", admin, `{"name": "anomaly_detection_configuration", "data": {"enabled": true}}`, "data:object")
		c.ok("3 anomaly get", "/config/domain-config/get", admin, `{"name": "anomaly_detection_configuration"}`, "data.enabled:bool")
		// The v1 settings store: list, then create or update.
		c.ok("3 v1 settings list", "/config/v1/domain-config/list", admin, `{"name": "settings"}`, "results:array", "total_count:number")
		c.ok("3 v1 settings create", "/config/v1/domain-config/create", admin, `{"name": "settings", "data": {"display_name": "Nubes", "timezone": "UTC", "language": "en", "unified_cost_config": {"currency": "USD"}}}`, "data:object")
		c.ok("3 v1 settings update", "/config/v1/domain-config/update", admin, `{"name": "settings", "data": {"display_name": "Nubes", "timezone": "Asia/Seoul"}}`, "data.timezone:string")
		c.ok("3 v1 settings list again", "/config/v1/domain-config/list", admin, `{"name": "settings"}`, "results[].data.display_name:string", "results[].name:string")
	})

	t.Run("sections 2.1 and 4 landing", func(t *testing.T) {
		c.t = t
		c.ok("4 role/list-basic-role", "/identity/role/list-basic-role", user, `{}`, "results[].role_id:string", "results[].name:string", "results[].role_type:string")
		c.ok("4 get-workspace-groups", "/identity/user-profile/get-workspace-groups", user, `{}`, "results:array", "total_count:number")
		c.ok("2.1 workspace-user count", "/identity/workspace-user/list", owner, `{"workspace_id": `+q(ws)+`, "query": {"count_only": true}}`, "total_count:number")
		c.ok("4 project-group/list", "/identity/project-group/list", owner, `{"query": {}}`, "results:array", "total_count:number")
		g := c.ok("4 project-group/create", "/identity/project-group/create", owner, `{"name": "Group", "tags": {}}`, "project_group_id:string", "name:string", "workspace_id:string")
		c.ok("4 project/create in a group", "/identity/project/create", owner, `{"name": "In group", "project_type": "PUBLIC", "project_group_id": `+q(g["project_group_id"].(string))+`}`, "project_id:string", "project_group_id:string")
		c.ok("4 project tree", "/identity/project/list", owner, `{"query": {"only": ["project_id", "name", "project_group_id"]}}`, "results[].project_group_id:string")
		c.ok("4 project-group tree", "/identity/project-group/list", owner, `{"query": {"only": ["project_group_id", "name", "parent_group_id"]}}`, "results[].project_group_id:string", "results[].parent_group_id:string?")
		// Not built: 501 naming the operation, never 403 or 404.
		for _, path := range []string{"/dashboard/public-dashboard/list", "/dashboard/private-dashboard/list", "/identity/app/list", "/search/resource/search",
			"/inventory/metric-data/analyze", "/cost-analysis/unified-cost/analyze", "/cost-analysis/cost-report-config/list", "/repository/dashboard-template/list"} {
			status, v := c.call("0 "+path, http.MethodPost, path, owner, `{"query": {}}`)
			code, msg := "", ""
			if d, ok := v.(map[string]any)["detail"].(map[string]any); ok {
				code, _ = d["code"].(string)
				msg, _ = d["message"].(string)
			}
			if status != http.StatusNotImplemented || code != "ERROR_NOT_IMPLEMENTED" || !strings.Contains(msg, api.OperationName(path)) {
				t.Errorf("0 %s: %d %s %q, want 501 naming %s", path, status, code, msg, api.OperationName(path))
			}
		}
	})

	t.Run("reflection covers every call", func(t *testing.T) {
		resp, err := http.Get(base + api.ReflectionPath)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var refl api.Reflection
		if err := jsonDecode(resp, &refl); err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, a := range refl.APIs {
			listed[a.Path] = true
		}
		for path := range c.called {
			if !listed[path] && !strings.Contains(path, "/v1/") {
				t.Errorf("%s was called but is not in the reflection", path)
			}
		}
	})
}

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
