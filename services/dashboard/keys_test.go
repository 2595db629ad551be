package dashboard_test

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestContentCloudKeys: a dashboard's layouts, variables, settings,
// variables_schema (a JSON schema: "$schema", "$ref", "$defs"), labels
// and tags keep keys as clouds and schemas write them, on create and on
// update, in the dashboard and in its version snapshots; tags filter as
// tags.<key>.
func TestContentCloudKeys(t *testing.T) {
	t.Parallel()
	c := setup(t)
	same := func(what string, got, want any) {
		t.Helper()
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		var x, y any
		_ = json.Unmarshal(a, &x)
		_ = json.Unmarshal(b, &y)
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%s: %s, want %s", what, a, b)
		}
	}
	layouts := []any{map[string]any{"name": "pods", "options": map[string]any{"group_by": "tags.app.kubernetes.io/name", "app.kubernetes.io/name": "web"}}}
	variables := map[string]any{"kubernetes.io/cluster/prod": "owned", "aws:createdBy": "alice", "$env": "prod"}
	schema := map[string]any{"$schema": "http://json-schema.org/draft-07/schema#", "$defs": map[string]any{"env": map[string]any{"type": "string"}},
		"properties": map[string]any{"region.name": map[string]any{"$ref": "#/$defs/env"}}}
	settings := map[string]any{"date_range": map[string]any{"aws:region": "eu-west-1"}}
	labels := []any{"k8s", map[string]any{"app.kubernetes.io/name": "web"}}
	tags := map[string]any{"kubernetes.io/cluster/prod": "owned"}
	d := c.create(t, c.adminA, "domain-a", "project-a1", "Keys", "PUBLIC", "layouts", layouts, "variables", variables,
		"variables_schema", schema, "settings", settings, "labels", labels, "tags", tags)
	var got dashInfo
	c.adminA.Call(prefix+"get", body("domain-a", "project_dashboard_id", d.ProjectDashboardID)).OK(&got)
	same("layouts", got.Layouts, layouts)
	same("variables", got.Variables, variables)
	same("variables_schema", got.VariablesSchema, schema)
	same("settings", got.Settings, settings)
	same("labels", got.Labels, labels)
	same("tags", got.Tags, tags)
	var l list[dashInfo]
	c.adminA.Call(prefix+"list", body("domain-a", "query", map[string]any{"filter": []any{
		map[string]any{"k": "tags.kubernetes.io/cluster/prod", "v": "owned", "o": "eq"}}})).OK(&l)
	if l.TotalCount != 1 {
		t.Errorf("filter on tags.kubernetes.io/cluster/prod: %d", l.TotalCount)
	}

	// An update: settings merge one level deep, variables and labels replace.
	variables2 := map[string]any{"$ref": "#/x", "team.name": "ops"}
	c.adminA.Call(prefix+"update", body("domain-a", "project_dashboard_id", d.ProjectDashboardID, "variables", variables2,
		"settings", map[string]any{"app.kubernetes.io/part-of": "shop"}, "labels", labels[1:])).OK(nil)
	c.adminA.Call(prefix+"get", body("domain-a", "project_dashboard_id", d.ProjectDashboardID)).OK(&got)
	same("updated variables", got.Variables, variables2)
	same("merged settings", got.Settings, map[string]any{"date_range": map[string]any{"aws:region": "eu-west-1"}, "app.kubernetes.io/part-of": "shop"})
	same("updated labels", got.Labels, labels[1:])
	var v versionInfo
	c.adminA.Call(prefix+"get-version", body("domain-a", "project_dashboard_id", d.ProjectDashboardID, "version", 1)).OK(&v)
	same("version 1 variables", v.Variables, variables)
	same("version 1 variables_schema", v.VariablesSchema, schema)
	c.adminA.Call(prefix+"get-version", body("domain-a", "project_dashboard_id", d.ProjectDashboardID, "version", got.Version)).OK(&v)
	same("latest version variables", v.Variables, variables2)
	// A revert copies the snapshot's content back, keys and all.
	c.adminA.Call(prefix+"revert-version", body("domain-a", "project_dashboard_id", d.ProjectDashboardID, "version", 1)).OK(&got)
	same("reverted variables", got.Variables, variables)
	same("reverted layouts", got.Layouts, layouts)
}
