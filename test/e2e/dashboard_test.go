package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/auth"
)

// TestDashboardVersions drives the dashboard service as a client would:
// the root admin makes a project in identity, then a dashboard of it in
// the dashboard container, which asks identity (over the network) whether
// the project exists; updates make versions, a revert makes another, the
// latest cannot be deleted, and a private dashboard stays its owner's.
func TestDashboardVersions(t *testing.T) {
	dash := direct(st.first(t, "dashboard").url)
	admin := rootAdmin(t, identityAt(t))
	domain := admin.domain
	var ws struct {
		WorkspaceID string `json:"workspace_id"`
	}
	admin.call("/identity/v2/workspace/create", map[string]any{"name": "dash-" + randHex(4)}).OK(&ws)
	var pr struct {
		ProjectID string `json:"project_id"`
	}
	admin.call("/identity/v2/project/create", map[string]any{"name": "web", "workspace_id": ws.WorkspaceID}).OK(&pr)
	admin = admin.with(dash)

	type dashInfo struct {
		ProjectDashboardID string         `json:"project_dashboard_id"`
		ProjectID          string         `json:"project_id"`
		Version            int            `json:"version"`
		Layouts            []any          `json:"layouts"`
		Settings           map[string]any `json:"settings"`
		UserID             string         `json:"user_id"`
	}
	type versions struct {
		Results []struct {
			Version int   `json:"version"`
			Latest  bool  `json:"latest"`
			Layouts []any `json:"layouts"`
		} `json:"results"`
		TotalCount int `json:"total_count"`
	}
	const p = "/dashboard/v1/project-dashboard/"
	ref := func(id string, kv ...any) map[string]any {
		m := map[string]any{"domain_id": domain, "project_dashboard_id": id}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	var d dashInfo
	admin.call(p+"create", map[string]any{"domain_id": domain, "project_id": pr.ProjectID, "name": "Overview", "viewers": "PUBLIC",
		"layouts": []any{"a"}, "settings": map[string]any{"refresh": "off"}}).OK(&d)
	if !strings.HasPrefix(d.ProjectDashboardID, "project-dash-") || d.Version != 1 || d.ProjectID != pr.ProjectID {
		t.Fatalf("create = %+v", d)
	}
	id := d.ProjectDashboardID
	admin.call(p+"create", map[string]any{"domain_id": domain, "project_id": "project-000000000000", "name": "Ghost", "viewers": "PUBLIC"}).
		Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	admin.call(p+"create", map[string]any{"domain_id": domain, "project_id": pr.ProjectID, "name": "Overview", "viewers": "PUBLIC"}).
		Fails(http.StatusConflict, "ERROR_NOT_UNIQUE")

	admin.call(p+"update", ref(id, "layouts", []any{"b"})).OK(&d)
	admin.call(p+"update", ref(id, "settings", map[string]any{"date": "1M"})).OK(&d)
	if d.Version != 2 || d.Settings["refresh"] != "off" || d.Settings["date"] != "1M" {
		t.Fatalf("after updates: %+v", d)
	}
	admin.call(p+"revert-version", ref(id, "version", 1)).OK(&d)
	if d.Version != 3 || len(d.Layouts) != 1 || d.Layouts[0] != "a" {
		t.Fatalf("revert: %+v", d)
	}
	var l versions
	admin.call(p+"list-versions", ref(id)).OK(&l)
	if l.TotalCount != 3 || l.Results[0].Version != 3 || !l.Results[0].Latest || l.Results[2].Version != 1 || l.Results[1].Latest {
		t.Fatalf("versions: %+v", l)
	}
	admin.call(p+"delete-version", ref(id, "version", 3)).Fails(http.StatusBadRequest, "ERROR_LATEST_VERSION")
	admin.call(p+"delete-version", ref(id, "version", 2)).OK(nil)
	admin.call(p+"get-version", ref(id, "version", 2)).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")

	// A private dashboard is its owner's alone; another domain sees nothing.
	var mine dashInfo
	admin.call(p+"create", map[string]any{"domain_id": domain, "project_id": pr.ProjectID, "name": "Mine", "viewers": "PRIVATE"}).OK(&mine)
	other := as(t, dash, auth.Principal{DomainID: domain, UserID: "other@example.com", Role: auth.DomainAdmin}, time.Hour)
	other.call(p+"get", ref(mine.ProjectDashboardID)).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
	other.call(p+"get", ref(id)).OK(nil)
	stranger := domainAdmin(t, dash, "domain-"+randHex(6))
	stranger.call(p+"get", map[string]any{"domain_id": stranger.domain, "project_dashboard_id": id}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")

	admin.call(p+"delete", ref(id)).OK(nil)
	admin.call(p+"list-versions", ref(id)).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
}
