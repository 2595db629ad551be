package monitoring_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

const ep = "/monitoring/v1/escalation-policy/"

type rule struct {
	NotificationLevel string `json:"notification_level"`
	EscalateMinutes   int    `json:"escalate_minutes"`
}

type policyInfo struct {
	EscalationPolicyID string         `json:"escalation_policy_id"`
	Name               string         `json:"name"`
	IsDefault          bool           `json:"is_default"`
	Rules              []rule         `json:"rules"`
	RepeatCount        int            `json:"repeat_count"`
	FinishCondition    string         `json:"finish_condition"`
	ResourceGroup      string         `json:"resource_group"`
	Scope              string         `json:"scope"`
	ProjectID          string         `json:"project_id"`
	Tags               map[string]any `json:"tags"`
	WorkspaceID        string         `json:"workspace_id"`
	DomainID           string         `json:"domain_id"`
	CreatedAt          string         `json:"created_at"`
}

func policyBody(name, group string, extra map[string]any) map[string]any {
	b := map[string]any{"name": name, "resource_group": group,
		"rules": []any{map[string]any{"notification_level": "ALL", "escalate_minutes": 0}, map[string]any{"notification_level": "LV1", "escalate_minutes": 30}}}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func (c *callers) policy(t *testing.T, as *testkit.Client, name, group string, extra map[string]any) policyInfo {
	t.Helper()
	var p policyInfo
	as.Call(ep+"create", policyBody(name, group, extra)).OK(&p)
	return p
}

func (c *callers) getPolicy(t *testing.T, as *testkit.Client, id string) policyInfo {
	t.Helper()
	var p policyInfo
	as.Call(ep+"get", map[string]any{"escalation_policy_id": id}).OK(&p)
	return p
}

func TestPolicyLifecycle(t *testing.T) {
	t.Parallel()
	c := setup(t)
	d := c.policy(t, c.adminA, "Domain first", "DOMAIN", nil)
	if !strings.HasPrefix(d.EscalationPolicyID, "ep-") || len(d.EscalationPolicyID) != 15 || !d.IsDefault ||
		d.WorkspaceID != "*" || d.ProjectID != "*" || d.FinishCondition != "ACKNOWLEDGED" || d.Scope != "DOMAIN" ||
		len(d.Rules) != 2 || d.Rules[1].EscalateMinutes != 30 || d.Tags == nil || d.DomainID != "domain-a" || !strings.HasSuffix(d.CreatedAt, "Z") {
		t.Fatalf("first DOMAIN policy: %+v", d)
	}
	d2 := c.policy(t, c.adminA, "Domain second", "DOMAIN", map[string]any{"finish_condition": "RESOLVED", "repeat_count": 3, "tags": map[string]any{"a": "b"}})
	if d2.IsDefault || d2.FinishCondition != "RESOLVED" || d2.RepeatCount != 3 {
		t.Fatalf("second DOMAIN policy: %+v", d2)
	}
	w := c.policy(t, c.ownerA1, "Workspace one", "WORKSPACE", nil)
	if !w.IsDefault || w.WorkspaceID != "workspace-1" || w.ProjectID != "*" {
		t.Fatalf("first WORKSPACE policy is the workspace's default: %+v", w)
	}
	p := c.policy(t, c.memberA1, "Project one", "PROJECT", map[string]any{"project_id": "project-a1"})
	if p.IsDefault || p.ProjectID != "project-a1" || p.WorkspaceID != "workspace-1" {
		t.Fatalf("PROJECT policy: %+v", p)
	}

	var got policyInfo
	c.adminA.Call(ep+"set-default", map[string]any{"escalation_policy_id": d2.EscalationPolicyID}).OK(&got)
	if !got.IsDefault || got.EscalationPolicyID != d2.EscalationPolicyID {
		t.Fatalf("set_default = %+v", got)
	}
	if c.getPolicy(t, c.adminA, d.EscalationPolicyID).IsDefault {
		t.Fatal("the former default is still default")
	}
	if !c.getPolicy(t, c.adminA, w.EscalationPolicyID).IsDefault {
		t.Fatal("a workspace default must not change with the domain's")
	}
	c.adminA.Call(ep+"set-default", map[string]any{"escalation_policy_id": d2.EscalationPolicyID}).OK(&got) // again: harmless
	if !got.IsDefault {
		t.Fatalf("set_default twice = %+v", got)
	}

	// Update: rules reset repeat_count; a rename frees the old name.
	c.adminA.Call(ep+"update", map[string]any{"escalation_policy_id": d2.EscalationPolicyID, "name": "Renamed",
		"rules": []any{map[string]any{"notification_level": "LV10"}}}).OK(&got)
	if got.Name != "Renamed" || got.RepeatCount != 0 || len(got.Rules) != 1 || got.Rules[0].NotificationLevel != "LV10" || !got.IsDefault {
		t.Fatalf("update = %+v", got)
	}
	c.adminA.Call(ep+"update", map[string]any{"escalation_policy_id": d2.EscalationPolicyID, "repeat_count": 5, "finish_condition": "ACKNOWLEDGED"}).OK(&got)
	if got.RepeatCount != 5 || got.FinishCondition != "ACKNOWLEDGED" || got.Name != "Renamed" {
		t.Fatalf("update repeat_count = %+v", got)
	}
	c.policy(t, c.adminA, "Domain second", "DOMAIN", nil) // the old name is free again

	var l list[policyInfo]
	c.adminA.Call(ep+"list", map[string]any{"resource_group": "DOMAIN"}).OK(&l)
	if l.TotalCount != 3 {
		t.Fatalf("DOMAIN list = %+v", l)
	}
	c.adminA.Call(ep+"list", map[string]any{"is_default": true}).OK(&l)
	if l.TotalCount != 2 {
		t.Fatalf("defaults: %+v", l)
	}
	// The console's picker: project_id in [<project>, "*"].
	c.memberA1.Call("/monitoring/escalation-policy/list", map[string]any{"query": map[string]any{
		"filter": []any{map[string]any{"k": "project_id", "v": []string{"project-a1", "*"}, "o": "in"}},
		"sort":   []any{map[string]any{"key": "created_at", "desc": true}}}}).OK(&l)
	if l.TotalCount != 5 {
		t.Fatalf("member of workspace-1 sees the domain's, its workspace's and its project's policies: %+v", l)
	}
	c.memberA2.Call(ep+"list", map[string]any{}).OK(&l)
	if l.TotalCount != 3 {
		t.Fatalf("member of workspace-2 sees only the domain's policies: %+v", l)
	}
	st := c.adminA.Call(ep+"stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"group": map[string]any{
		"keys": []any{map[string]any{"key": "resource_group", "name": "g"}}, "fields": []any{map[string]any{"name": "n", "operator": "count"}}}},
		map[string]any{"sort": []any{map[string]any{"key": "g"}}}}}}).JSON()
	rows := st["results"].([]any)
	if len(rows) != 3 || rows[0].(map[string]any)["g"] != "DOMAIN" || rows[0].(map[string]any)["n"] != float64(3) {
		t.Fatalf("stat = %v", st)
	}

	c.adminA.Call(ep+"delete", map[string]any{"escalation_policy_id": d.EscalationPolicyID}).OK(nil)
	c.adminA.Call(ep+"get", map[string]any{"escalation_policy_id": d.EscalationPolicyID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.memberA1.Call(ep+"delete", map[string]any{"escalation_policy_id": p.EscalationPolicyID}).OK(nil)
}

func TestPolicyRules(t *testing.T) {
	t.Parallel()
	c := setup(t)
	def := c.policy(t, c.adminA, "Default", "DOMAIN", nil)
	other := c.policy(t, c.adminA, "Other", "DOMAIN", nil)
	proj := c.policy(t, c.memberA1, "Project", "PROJECT", map[string]any{"project_id": "project-a1"})
	before := c.count(t, core.PoliciesCollection, nil)
	id := func(p policyInfo) map[string]any { return map[string]any{"escalation_policy_id": p.EscalationPolicyID} }
	refused := []struct {
		name   string
		as     *testkit.Client
		path   string
		body   map[string]any
		status int
		code   string
	}{
		{"set_default of a project's policy", c.adminA, "set-default", id(proj), 400, errs.InvalidEscalationPolicyScope},
		{"deleting the default", c.adminA, "delete", id(def), 400, errs.DefaultEscalationPolicyNotAllowDeletion},
		{"name taken in the domain", c.adminA, "create", policyBody("Other", "DOMAIN", nil), 409, errs.NotUnique},
		{"name taken, other group", c.memberA1, "create", policyBody("Default", "PROJECT", map[string]any{"project_id": "project-a1"}), 409, errs.NotUnique},
		{"rename to a taken name", c.adminA, "update", map[string]any{"escalation_policy_id": other.EscalationPolicyID, "name": "Default"}, 409, errs.NotUnique},
		{"project unknown to identity", c.adminA, "create", policyBody("X", "PROJECT", map[string]any{"project_id": "project-zz"}), 404, errs.NotFoundCode},
		{"project of another domain", c.adminA, "create", policyBody("X", "PROJECT", map[string]any{"project_id": "project-b1"}), 404, errs.NotFoundCode},
		{"project of another workspace", c.memberA1, "create", policyBody("X", "PROJECT", map[string]any{"project_id": "project-a2"}), 404, errs.NotFoundCode},
		{"PROJECT without project_id", c.adminA, "create", policyBody("X", "PROJECT", nil), 400, errs.RequiredParameter},
		{"DOMAIN with a project_id", c.adminA, "create", policyBody("X", "DOMAIN", map[string]any{"project_id": "project-a1"}), 400, errs.InvalidParameter},
		{"DOMAIN by a workspace member", c.memberA1, "create", policyBody("X", "DOMAIN", nil), 403, errs.PermissionDenied},
		{"WORKSPACE without a workspace token", c.adminA, "create", policyBody("X", "WORKSPACE", nil), 400, errs.InvalidParameter},
		{"negative escalate_minutes", c.adminA, "create", map[string]any{"name": "X", "resource_group": "DOMAIN", "rules": []any{map[string]any{"notification_level": "LV1", "escalate_minutes": -1}}}, 400, errs.InvalidParameter},
		{"unknown notification level", c.adminA, "create", map[string]any{"name": "X", "resource_group": "DOMAIN", "rules": []any{map[string]any{"notification_level": "LV11"}}}, 400, errs.InvalidParameter},
		{"rule without level", c.adminA, "create", map[string]any{"name": "X", "resource_group": "DOMAIN", "rules": []any{map[string]any{"escalate_minutes": 5}}}, 400, errs.RequiredParameter},
		{"no rules", c.adminA, "create", map[string]any{"name": "X", "resource_group": "DOMAIN", "rules": []any{}}, 400, errs.RequiredParameter},
		{"unknown finish condition", c.adminA, "create", policyBody("X", "DOMAIN", map[string]any{"finish_condition": "FORGOTTEN"}), 400, errs.InvalidParameter},
		{"negative repeat_count", c.adminA, "create", policyBody("X", "DOMAIN", map[string]any{"repeat_count": -1}), 400, errs.InvalidParameter},
		{"huge repeat_count", c.adminA, "create", policyBody("X", "DOMAIN", map[string]any{"repeat_count": 101}), 400, errs.InvalidParameter},
		{"unknown resource group", c.adminA, "create", policyBody("X", "GALAXY", nil), 400, errs.InvalidParameter},
		{"member changes a DOMAIN policy", c.memberA1, "update", map[string]any{"escalation_policy_id": other.EscalationPolicyID, "name": "Mine"}, 403, errs.PermissionDenied},
		{"member sets the domain default", c.memberA1, "set-default", id(other), 403, errs.PermissionDenied},
		{"member deletes a DOMAIN policy", c.memberA1, "delete", id(other), 403, errs.PermissionDenied},
		{"user without role", c.userA, "create", policyBody("X", "DOMAIN", nil), 403, errs.PermissionDenied},
		{"no token", c.anon, "create", policyBody("X", "DOMAIN", nil), 401, errs.AuthenticateFailure},
		{"other workspace's project policy", c.memberA2, "delete", id(proj), 404, errs.NotFoundCode},
		{"unknown policy", c.adminA, "set-default", map[string]any{"escalation_policy_id": "ep-000000000000"}, 404, errs.NotFoundCode},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			r.as.Call(ep+r.path, r.body).Fails(r.status, r.code)
			if n := c.count(t, core.PoliciesCollection, nil); n != before {
				t.Fatalf("%d policies stored, want %d", n, before)
			}
			if got := c.getPolicy(t, c.adminA, other.EscalationPolicyID); got.Name != "Other" || got.IsDefault {
				t.Fatalf("refused request changed a policy: %+v", got)
			}
			if !c.getPolicy(t, c.adminA, def.EscalationPolicyID).IsDefault {
				t.Fatal("the default changed")
			}
		})
	}
}

// TestPolicyDefaultUnderConcurrency: many set_default calls at once, on
// every global policy of a domain, leave exactly one default, and it is
// the one the scope's record names.
func TestPolicyDefaultUnderConcurrency(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var ids []string
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		ids = append(ids, c.policy(t, c.adminA, n, "DOMAIN", nil).EscalationPolicyID)
	}
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.adminA.CallQueued(ep+"set-default", map[string]any{"escalation_policy_id": ids[(i+round)%len(ids)]}).OK(nil)
			}()
		}
		wg.Wait()
		n := c.count(t, core.PoliciesCollection, bson.D{{Key: "domain_id", Value: "domain-a"}, {Key: "workspace_id", Value: "*"}, {Key: "is_default", Value: true}})
		var l list[policyInfo]
		c.adminA.Call(ep+"list", map[string]any{"is_default": true}).OK(&l)
		owner, err := core.Claims{C: c.db.Collection(core.ClaimsCollection)}.Owner(t.Context(), "ep-default#domain-a#*")
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 || l.TotalCount != 1 || l.Results[0].EscalationPolicyID != owner {
			t.Fatalf("round %d: %d defaults stored, list %+v, record %v", round, n, l, owner)
		}
		// The default cannot be deleted, even while others change it.
		c.adminA.Call(ep+"delete", map[string]any{"escalation_policy_id": owner}).Fails(http.StatusBadRequest, errs.DefaultEscalationPolicyNotAllowDeletion)
	}
	// Concurrent creates with one name: exactly one wins.
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.adminA.CallQueued(ep+"create", policyBody("same", "DOMAIN", nil))
			if r.Status == http.StatusOK {
				mu.Lock()
				won++
				mu.Unlock()
			} else if r.Status != http.StatusConflict {
				t.Errorf("create: %d %s", r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	if n := c.count(t, core.PoliciesCollection, bson.D{{Key: "name", Value: "same"}}); won != 1 || n != 1 {
		t.Fatalf("%d creates of one name won, %d stored", won, n)
	}
}

// A set-default racing the delete of the same policy never leaves the
// scope's default deleted: one of the two fails, and the flags follow
// the default record.
func TestPolicyDefaultRacingDelete(t *testing.T) {
	c := setup(t)
	keep := c.policy(t, c.adminA, "keep", "DOMAIN", nil).EscalationPolicyID // the scope's first: its default
	claims := core.Claims{C: c.db.Collection(core.ClaimsCollection)}
	for round := range 8 {
		id := c.policy(t, c.adminA, fmt.Sprintf("p%d", round), "DOMAIN", nil).EscalationPolicyID
		var wg sync.WaitGroup
		var set, del *testkit.Response
		wg.Go(func() { set = c.adminA.CallQueued(ep+"set-default", map[string]any{"escalation_policy_id": id}) })
		wg.Go(func() { del = c.adminA.CallQueued(ep+"delete", map[string]any{"escalation_policy_id": id}) })
		wg.Wait()
		if set.Status == http.StatusOK && del.Status == http.StatusOK {
			t.Fatalf("round %d: both the set-default and the delete of one policy succeeded", round)
		}
		if set.Status != http.StatusOK && set.Status != http.StatusNotFound {
			t.Fatalf("round %d: set-default %d %s", round, set.Status, set.Body)
		}
		if del.Status != http.StatusOK && del.Status != http.StatusBadRequest {
			t.Fatalf("round %d: delete %d %s", round, del.Status, del.Body)
		}
		owner, err := claims.Owner(t.Context(), "ep-default#domain-a#*")
		if err != nil {
			t.Fatal(err)
		}
		var l list[policyInfo]
		c.adminA.Call(ep+"list", map[string]any{"is_default": true}).OK(&l)
		if l.TotalCount != 1 || l.Results[0].EscalationPolicyID != owner {
			t.Fatalf("round %d: default record %q, flagged %+v", round, owner, l.Results)
		}
		// The default is a live policy; put keep back for the next round.
		c.getPolicy(t, c.adminA, owner)
		c.adminA.Call(ep+"set-default", map[string]any{"escalation_policy_id": keep}).OK(nil)
		if set.Status == http.StatusOK {
			c.adminA.Call(ep+"delete", map[string]any{"escalation_policy_id": id}).OK(nil)
		}
	}
}

func TestNoteLifecycle(t *testing.T) {
	t.Parallel()
	c := setup(t)
	const np = "/monitoring/v1/note/"
	type noteInfo struct {
		NoteID  string `json:"note_id"`
		AlertID string `json:"alert_id"`
		Note    string `json:"note"`
	}
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	elsewhere := c.alert(t, c.memberA2, "cpu", "project-a2")
	var n noteInfo
	c.memberA1.Call(np+"create", map[string]any{"alert_id": a.AlertID, "note": "looking"}).OK(&n)
	if !strings.HasPrefix(n.NoteID, "note-") || len(n.NoteID) != 17 {
		t.Fatalf("note = %+v", n)
	}
	raw := c.memberA1.Call(np+"get", map[string]any{"note_id": n.NoteID}).JSON()
	if raw["created_by"] != "mia" || raw["workspace_id"] != "workspace-1" || raw["project_id"] != "project-a1" || raw["domain_id"] != "domain-a" ||
		raw["note"] != "looking" {
		t.Fatalf("get = %v", raw)
	}
	c.memberA1.Call(np+"update", map[string]any{"note_id": n.NoteID, "note": "fixed"}).OK(nil)
	if got := c.raw(t, core.NotesCollection, n.NoteID); got["note"] != "fixed" || got["created_by"] != "mia" || got["alert_id"] != a.AlertID {
		t.Fatalf("stored after update: %v", got)
	}
	// A domain admin's note on another workspace's alert is that alert's.
	var other noteInfo
	c.adminA.Call(np+"create", map[string]any{"alert_id": elsewhere.AlertID, "note": "domain note"}).OK(&other)
	if got := c.raw(t, core.NotesCollection, other.NoteID); got["workspace_id"] != "workspace-2" || got["project_id"] != "project-a2" {
		t.Fatalf("admin's note: %v", got)
	}
	var l list[map[string]any]
	c.memberA1.Call("/monitoring/note/list", map[string]any{"query": map[string]any{"filter": []any{map[string]any{"k": "alert_id", "v": a.AlertID, "o": "eq"}}, "sort": []any{map[string]any{"key": "created_at", "desc": true}}}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0]["note"] != "fixed" {
		t.Fatalf("list by alert = %+v", l)
	}
	c.memberA1.Call(np+"list", map[string]any{"created_by": "alice"}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("a workspace member sees another workspace's notes: %+v", l)
	}
	c.memberA2.Call(np+"get", map[string]any{"note_id": n.NoteID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.adminB.Call(np+"get", map[string]any{"note_id": n.NoteID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	st := c.adminA.Call(np+"stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}).JSON()
	if rows := st["results"].([]any); rows[0].(map[string]any)["n"] != float64(2) {
		t.Fatalf("stat = %v", st)
	}

	before := c.count(t, core.NotesCollection, nil)
	for _, tc := range []struct {
		name   string
		as     *testkit.Client
		path   string
		body   any
		status int
		code   string
	}{
		{"no alert", c.memberA1, "create", map[string]any{"note": "x"}, 400, errs.RequiredParameter},
		{"no text", c.memberA1, "create", map[string]any{"alert_id": a.AlertID}, 400, errs.RequiredParameter},
		{"too long", c.memberA1, "create", map[string]any{"alert_id": a.AlertID, "note": strings.Repeat("x", 10001)}, 400, errs.InvalidParameter},
		{"created_by is the caller's", c.memberA1, "create", map[string]any{"alert_id": a.AlertID, "note": "x", "created_by": "eve"}, 400, errs.InvalidParameter},
		{"unknown alert", c.memberA1, "create", map[string]any{"alert_id": "alert-123456789012", "note": "x"}, 404, errs.NotFoundCode},
		{"alert of another workspace", c.memberA1, "create", map[string]any{"alert_id": elsewhere.AlertID, "note": "x"}, 404, errs.NotFoundCode},
		{"alert of another domain", c.adminB, "create", map[string]any{"alert_id": a.AlertID, "note": "x"}, 404, errs.NotFoundCode},
		{"only the text changes", c.memberA1, "update", map[string]any{"note_id": n.NoteID, "alert_id": "alert-9"}, 400, errs.InvalidParameter},
		{"wrong type", c.memberA1, "update", map[string]any{"note_id": n.NoteID, "note": 5}, 400, errs.InvalidParameterType},
		{"other domain deletes", c.adminB, "delete", map[string]any{"note_id": n.NoteID}, 404, errs.NotFoundCode},
		{"other workspace updates", c.memberA2, "update", map[string]any{"note_id": n.NoteID, "note": "x"}, 404, errs.NotFoundCode},
		{"user without role", c.userA, "create", map[string]any{"alert_id": a.AlertID, "note": "x"}, 403, errs.PermissionDenied},
		{"malformed", c.memberA1, "create", `{"alert_id": `, 400, errs.JSONFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.as.Call(np+tc.path, tc.body).Fails(tc.status, tc.code)
			if got := c.raw(t, core.NotesCollection, n.NoteID); c.count(t, core.NotesCollection, nil) != before || got["note"] != "fixed" {
				t.Fatalf("refused request changed notes: %v", got)
			}
		})
	}
	c.memberA1.Call(np+"delete", map[string]any{"note_id": n.NoteID}).OK(nil)
	c.memberA1.Call(np+"get", map[string]any{"note_id": n.NoteID}).Fails(http.StatusNotFound, errs.NotFoundCode)
}
