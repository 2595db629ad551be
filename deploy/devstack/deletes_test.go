package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/devinfra"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// cascadeDeadline bounds how long a deletion may take to reach every
// service on the devstack (the consumers poll NATS; nothing sleeps).
const cascadeDeadline = 60 * time.Second

// leftovers lists, collection by collection, the documents of db that
// filter selects (nothing of a deleted owner may stay in any service).
func leftovers(t *testing.T, db *mongo.Database, filter bson.D) []string {
	t.Helper()
	ctx := context.Background()
	names, err := db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	var left []string
	for _, name := range names {
		n, err := db.Collection(name).CountDocuments(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%s: %d", name, n))
		}
	}
	return left
}

// eventually waits, up to cascadeDeadline, for no document of db to match
// filter, and reports what is left if some still do.
func eventually(t *testing.T, db *mongo.Database, what string, filter bson.D) {
	t.Helper()
	var left []string
	if testkit.Within(cascadeDeadline, func() bool { left = leftovers(t, db, filter); return len(left) == 0 }) != nil {
		t.Errorf("%s: still stored %s after the delete: %s", what, cascadeDeadline, strings.Join(left, ", "))
	}
}

// TestDeletesReachEveryService (issue 38 points 1 and 2) deletes a
// workspace and a user through the public API and checks every service:
// no collection of any service keeps a record of the workspace, its
// project or the user; the workspace's webhook URL answers 404 at once;
// the user leaves the project channels that named it; and a user created
// again with the same id inherits nothing.
func TestDeletesReachEveryService(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, err := devinfra.StartMongo(filepath.Join(dir, "mongo"), "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	mc, err := store.Connect(context.Background(), m.URI, store.Options{MaxPoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mc.Disconnect(context.Background()) }()
	db := mc.Database("nubes")

	plug := fakeplugin.Start(t, fakeplugin.Options{})
	plug.Script(string(plugin.CollectorInit), fakeplugin.Reply{Result: map[string]any{"metadata": map[string]any{}}})
	ids := map[string]string{"collector": "plugin-del-collector", "webhook": "plugin-del-webhook", "cost": "plugin-del-cost"}
	endpoints := map[string]string{}
	for _, id := range ids {
		endpoints[id] = plug.Endpoint
	}
	registry := fakeRegistry(t, "1.0.0")
	base, stop := startWith(t, Config{DataDir: dir, MongoURI: m.URI, MongoDB: "nubes", PluginEndpoints: endpoints})
	defer stop()
	boot, _ := loadBootstrap(t, dir)
	c := &client{t: t, base: base, called: map[string]bool{}}
	for kind, id := range ids {
		rt := map[string]string{"collector": "inventory.Collector", "webhook": "monitoring.Webhook", "cost": "cost_analysis.DataSource"}[kind]
		c.ok("register "+kind, "/repository/v1/plugin/register", boot.SystemToken, `{"name": `+q(id)+`, "resource_type": `+q(rt)+`, "image": `+q("deletes/"+id)+
			`, "provider": "aws", "registry_type": "PRIVATE_REGISTRY", "registry_url": `+q(registry)+`, "tags": {}, "capability": {"supported_providers": ["aws"]}}`, "plugin_id:string")
	}
	login := func(userID, password string) string {
		return c.ok("login "+userID, "/identity/token/issue", "", `{"domain_id": `+q(boot.DomainID)+`, "auth_type": "LOCAL", "credentials": {"user_id": `+
			q(userID)+`, "password": `+q(password)+`}}`, "refresh_token:string")["refresh_token"].(string)
	}
	grant := func(refresh, scope, workspaceID string) string {
		body := `{"grant_type": "REFRESH_TOKEN", "token": ` + q(refresh) + `, "scope": ` + q(scope)
		if workspaceID != "" {
			body += `, "workspace_id": ` + q(workspaceID)
		}
		return c.ok("grant "+scope, "/identity/token/grant", "", body+`}`, "access_token:string")["access_token"].(string)
	}
	refresh := login(boot.AdminUserID, boot.AdminPassword)
	admin := grant(refresh, "DOMAIN", "")
	internal := c.ok("the built-in protocol", "/notification/protocol/list", admin, `{"query": {"filter": [{"k": "protocol_type", "v": "INTERNAL", "o": "eq"}]}}`,
		"results[].protocol_id:string")["results"].([]any)[0].(map[string]any)["protocol_id"].(string)

	t.Run("workspace", func(t *testing.T) {
		c.t = t
		workspaceID := c.ok("workspace", "/identity/workspace/create", admin, `{"name": "Doomed"}`, "workspace_id:string")["workspace_id"].(string)
		ws := grant(refresh, "WORKSPACE", workspaceID)
		projectID := c.ok("project", "/identity/project/create", ws, `{"name": "Doomed project", "project_type": "PUBLIC"}`, "project_id:string")["project_id"].(string)
		pid := q(projectID)

		// One record or more in every service that holds a workspace's.
		wh := c.ok("webhook", "/monitoring/webhook/create", ws, `{"name": "Hook", "plugin_info": {"plugin_id": `+q(ids["webhook"])+`, "options": {}}, "project_id": `+pid+`}`,
			"webhook_url:string")
		c.ok("escalation policy", "/monitoring/escalation-policy/create", ws, `{"name": "Doomed policy", "rules": [{"notification_level": "ALL"}], "resource_group": "WORKSPACE"}`,
			"escalation_policy_id:string")
		alertID := c.ok("alert", "/monitoring/alert/create", ws, `{"title": "Disk full", "project_id": `+pid+`}`, "alert_id:string")["alert_id"].(string)
		c.ok("note", "/monitoring/note/create", ws, `{"alert_id": `+q(alertID)+`, "note": "looking"}`, "note_id:string")
		c.ok("project channel", "/notification/project-channel/create", ws, `{"protocol_id": `+q(internal)+`, "name": "ops", "data": {"users": [`+q(boot.AdminUserID)+`]},
			"project_id": `+pid+`}`, "project_channel_id:string")
		c.ok("collector", "/inventory/collector/create", ws, `{"name": "Doomed collector", "provider": "aws", "plugin_info": {"plugin_id": `+q(ids["collector"])+`,
			"version": "1.0.0", "options": {}, "upgrade_mode": "MANUAL"}, "schedule": {"state": "DISABLED", "hours": []}, "tags": {}, "resource_group": "WORKSPACE"}`,
			"collector_id:string")
		c.ok("data source", "/cost-analysis/data-source/register", ws, `{"name": "Doomed costs", "resource_group": "WORKSPACE",
			"plugin_info": {"plugin_id": `+q(ids["cost"])+`, "options": {}, "secret_data": {"key": "k"}}}`, "data_source_id:string")
		c.ok("trusted account", "/identity/trusted-account/create", ws, `{"name": "Doomed AWS", "data": {"account_id": "123456789012"}, "provider": "aws",
			"secret_schema_id": "aws-secret-access-key", "secret_data": {"aws_access_key_id": "AKIADOOMED", "aws_secret_access_key": "doomed-secret"},
			"resource_group": "WORKSPACE", "tags": {}}`, "trusted_secret_id:string")
		sa := c.ok("service account", "/identity/service-account/create", ws, `{"provider": "aws", "name": "Doomed account", "data": {"account_id": "210987654321"},
			"secret_schema_id": "aws-secret-access-key", "secret_data": {"aws_access_key_id": "AKIADOOMED2", "aws_secret_access_key": "doomed-secret-2"},
			"tags": {}, "project_id": `+pid+`}`, "secret_id:string")
		c.ok("dashboard", "/dashboard/project-dashboard/create", ws, `{"domain_id": `+q(boot.DomainID)+`, "project_id": `+pid+`, "name": "Doomed board", "viewers": "PUBLIC"}`, "project_dashboard_id:string")
		c.ok("shared config", "/config/shared-config/create", ws, `{"name": "doomed:shared", "data": {"a": 1}, "resource_group": "WORKSPACE"}`, "name:string")

		u, err := url.Parse(wh["webhook_url"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if status, v := c.call("ingest before the delete", http.MethodPost, u.Path, "", `{"title": "before"}`); status != http.StatusOK {
			t.Fatalf("ingest before the delete: %d %v", status, v)
		}
		inside := bson.D{{Key: "domain_id", Value: boot.DomainID}, {Key: "workspace_id", Value: workspaceID}}
		if len(leftovers(t, db, inside)) < 8 {
			t.Fatalf("the workspace's records are not where the test looks: %v", leftovers(t, db, inside))
		}

		c.ok("delete the workspace", "/identity/workspace/delete", admin, `{"workspace_id": `+q(workspaceID)+`}`)
		// At once, before any consumer ran: the URL is refused.
		if status, v := c.call("ingest after the delete", http.MethodPost, u.Path, "", `{"title": "after"}`); status != http.StatusNotFound {
			t.Errorf("ingest after the delete: %d %v, want 404 at once", status, v)
		}
		eventually(t, db, "the workspace", inside)
		eventually(t, db, "the project", bson.D{{Key: "domain_id", Value: boot.DomainID}, {Key: "project_id", Value: projectID}})
		eventually(t, db, "the service account's secret", bson.D{{Key: "_id", Value: sa["secret_id"]}})
		if status, v := c.call("secret after the delete", http.MethodPost, "/secret/secret/get", admin, `{"secret_id": `+q(sa["secret_id"].(string))+`}`); status != http.StatusNotFound {
			t.Errorf("secret/get after the delete: %d %v", status, v)
		}
	})

	t.Run("user", func(t *testing.T) {
		c.t = t
		workspaceID := c.ok("workspace", "/identity/workspace/create", admin, `{"name": "Stays"}`, "workspace_id:string")["workspace_id"].(string)
		ws := grant(refresh, "WORKSPACE", workspaceID)
		projectID := c.ok("project", "/identity/project/create", ws, `{"name": "Stays", "project_type": "PUBLIC"}`, "project_id:string")["project_id"].(string)
		const userID, password = "una", "Una-Passw0rd-1x!"
		create := func() string {
			c.ok("user create", "/identity/user/create", admin, `{"user_id": `+q(userID)+`, "email": "", "auth_type": "LOCAL", "password": `+q(password)+`, "reset_password": false}`)
			c.ok("member", "/identity/role-binding/create", admin, `{"user_id": `+q(userID)+`, "role_id": "managed-workspace-member", "resource_group": "WORKSPACE",
				"workspace_id": `+q(workspaceID)+`}`, "role_binding_id:string")
			return login(userID, password)
		}
		una := create()
		self, member := grant(una, "USER", ""), grant(una, "WORKSPACE", workspaceID)
		// An e-mail channel takes only a verified address (issue 38): una
		// proves hers with the code the mailer writes to the data dir.
		c.ok("verify e-mail", "/identity/user-profile/verify-email", self, `{"email": "una@example.com", "current_password": `+q(password)+`}`)
		c.ok("confirm e-mail", "/identity/user-profile/confirm-email", self, `{"verify_code": `+q(mailedCode(t, filepath.Join(dir, "mail"), "una@example.com"))+`}`)
		c.ok("user channel", "/notification/user-channel/create", self, `{"protocol_id": `+q(internal)+`, "name": "mine", "data": {"email": "una@example.com"}}`,
			"user_channel_id:string")
		c.ok("user secret", "/secret/user-secret/create", self, `{"name": "mine", "data": {"password": "una-secret"}}`, "user_secret_id:string")
		c.ok("user config", "/config/user-config/set", self, `{"name": "console:mine", "data": {"a": 1}}`, "name:string")
		c.ok("private dashboard", "/dashboard/project-dashboard/create", member, `{"domain_id": `+q(boot.DomainID)+`, "project_id": `+q(projectID)+`, "name": "Mine", "viewers": "PRIVATE"}`,
			"project_dashboard_id:string")
		channel := c.ok("project channel", "/notification/project-channel/create", ws, `{"protocol_id": `+q(internal)+`, "name": "team",
			"data": {"users": [`+q(userID)+`, `+q(boot.AdminUserID)+`]}, "project_id": `+q(projectID)+`}`, "project_channel_id:string")["project_channel_id"].(string)
		owned := bson.D{{Key: "domain_id", Value: boot.DomainID}, {Key: "user_id", Value: userID}}
		if n := len(leftovers(t, db, owned)); n < 5 {
			t.Fatalf("the user's records are not where the test looks: %v", leftovers(t, db, owned))
		}

		c.ok("delete the user", "/identity/user/delete", admin, `{"user_id": `+q(userID)+`}`)
		eventually(t, db, "the user", owned)
		eventually(t, db, "the user in a project channel", bson.D{{Key: "domain_id", Value: boot.DomainID}, {Key: "data.users", Value: userID}})
		got := c.ok("project channel after", "/notification/project-channel/get", ws, `{"project_channel_id": `+q(channel)+`}`, "data.users:array")
		if users := fmt.Sprint(got["data"].(map[string]any)["users"]); users != "["+boot.AdminUserID+"]" {
			t.Errorf("project channel users after the delete: %s", users)
		}

		// The same id again: a new person, who inherits nothing.
		una = create()
		self, member = grant(una, "USER", ""), grant(una, "WORKSPACE", workspaceID)
		for _, r := range []struct{ path, bearer, body string }{
			{"/notification/user-channel/list", self, `{}`},
			{"/notification/notification/list", self, `{}`},
			{"/secret/user-secret/list", self, `{}`},
			{"/config/user-config/list", self, `{}`},
			{"/dashboard/project-dashboard/list", member, `{"domain_id": ` + q(boot.DomainID) + `}`},
		} {
			l := c.ok(r.path, r.path, r.bearer, r.body, "results:array")
			for _, row := range l["results"].([]any) {
				if m, _ := row.(map[string]any); m["user_id"] == userID || r.path != "/dashboard/project-dashboard/list" {
					t.Errorf("%s: the new %s inherits %v", r.path, userID, row)
				}
			}
		}
	})
}

var mailCode = regexp.MustCompile(`confirm your e-mail address:\s+(\d{6})`)

// mailedCode waits for the e-mail verification mail to addr in dir and
// returns its code.
func mailedCode(t *testing.T, dir, addr string) string {
	t.Helper()
	var code string
	testkit.Eventually(t, waitBound, fmt.Sprintf("no verification code mailed to %s in %s", addr, dir), func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "*.eml"))
		for _, f := range files {
			raw, _ := os.ReadFile(f)
			text := strings.ReplaceAll(strings.ReplaceAll(string(raw), "=\r\n", ""), "=\n", "") // quoted-printable soft breaks
			if !strings.Contains(text, addr) {
				continue
			}
			if m := mailCode.FindStringSubmatch(strings.ReplaceAll(text, "\r", "")); m != nil {
				code = m[1]
				return true
			}
		}
		return false
	})
	return code
}
