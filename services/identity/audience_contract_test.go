package identity_test

import (
	"reflect"
	"slices"
	"testing"
)

// TestNotificationAudienceReads pins what the notification service's
// audience (services/notification/internal/audience) reads of identity
// with the service credential, naming the domain: user/list and
// role-binding/list filtered by `user_id in [...]`, and project/list by
// project_id, with the fields its rule needs (a user's state, email and
// email_verified; a binding's role_type and workspace_id, "" for the
// domain's; a project's type, users and workspace).
func TestNotificationAudienceReads(t *testing.T) {
	h := newHarness(t)
	ws, _, _ := h.WorkspaceUsers("aud")
	var pr map[string]any
	h.Admin.Call("/identity/v2/project/create", map[string]any{"name": "Private", "workspace_id": ws, "project_type": "PRIVATE",
		"users": []string{"aud-member"}}).OK(&pr)
	ids := []string{"admin", "aud-owner", "aud-member", "ghost"}
	in := map[string]any{"filter": []map[string]any{{"k": "user_id", "v": ids, "o": "in"}}, "page": map[string]any{"start": 1, "limit": 1000}}

	type list struct {
		Results []map[string]any `json:"results"`
	}
	var users list
	h.System.Call("/identity/v2/user/list", map[string]any{"domain_id": h.Domain, "state": "ENABLED", "query": in}).OK(&users)
	var got []string
	for _, u := range users.Results {
		if _, ok := u["email_verified"].(bool); !ok || u["state"] != "ENABLED" || u["domain_id"] != h.Domain {
			t.Errorf("user %v", u)
		}
		got = append(got, u["user_id"].(string))
	}
	slices.Sort(got)
	if !reflect.DeepEqual(got, []string{"admin", "aud-member", "aud-owner"}) {
		t.Fatalf("users %v", got)
	}

	var bindings list
	h.System.Call("/identity/v2/role-binding/list", map[string]any{"domain_id": h.Domain, "query": in}).OK(&bindings)
	want := map[string][2]string{"admin": {"DOMAIN_ADMIN", ""}, "aud-owner": {"WORKSPACE_OWNER", ws}, "aud-member": {"WORKSPACE_MEMBER", ws}}
	seen := map[string][2]string{}
	for _, b := range bindings.Results {
		w, _ := b["workspace_id"].(string)
		seen[b["user_id"].(string)] = [2]string{b["role_type"].(string), w}
		if b["domain_id"] != h.Domain {
			t.Errorf("binding %v", b)
		}
	}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("bindings %v, want %v", seen, want)
	}

	var projects list
	h.System.Call("/identity/v2/project/list", map[string]any{"domain_id": h.Domain, "project_id": pr["project_id"]}).OK(&projects)
	if len(projects.Results) != 1 {
		t.Fatalf("projects %v", projects)
	}
	p := projects.Results[0]
	if p["project_type"] != "PRIVATE" || !reflect.DeepEqual(p["users"], []any{"aud-member"}) || p["workspace_id"] != ws || p["domain_id"] != h.Domain {
		t.Fatalf("project %v", p)
	}
}
