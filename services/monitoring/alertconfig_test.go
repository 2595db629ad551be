package monitoring_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

const cp = "/monitoring/v1/project-alert-config/"

type configInfo struct {
	ProjectID string `json:"project_id"`
	Options   struct {
		NotificationUrgency string `json:"notification_urgency"`
		RecoveryMode        string `json:"recovery_mode"`
	} `json:"options"`
	EscalationPolicyInfo struct {
		EscalationPolicyID string `json:"escalation_policy_id"`
		Name               string `json:"name"`
	} `json:"escalation_policy_info"`
	DomainID    string `json:"domain_id"`
	WorkspaceID string `json:"workspace_id"`
	CreatedAt   string `json:"created_at"`
}

func TestAlertConfig(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var cfg configInfo
	c.memberA1.Call(cp+"create", map[string]any{"project_id": "project-a1"}).OK(&cfg)
	if cfg.ProjectID != "project-a1" || cfg.Options.NotificationUrgency != "ALL" || cfg.Options.RecoveryMode != "MANUAL" ||
		cfg.EscalationPolicyInfo.EscalationPolicyID != "" || cfg.WorkspaceID != "workspace-1" || cfg.DomainID != "domain-a" || cfg.CreatedAt == "" {
		t.Fatalf("created %+v", cfg)
	}
	c.memberA1.Call(cp+"create", map[string]any{"project_id": "project-a1"}).Fails(http.StatusConflict, errs.NotUnique)
	// Partial options keep the rest.
	c.memberA1.Call(cp+"update", map[string]any{"project_id": "project-a1", "options": map[string]any{"recovery_mode": "AUTO"}}).OK(&cfg)
	if cfg.Options.RecoveryMode != "AUTO" || cfg.Options.NotificationUrgency != "ALL" {
		t.Fatalf("update %+v", cfg)
	}
	c.memberA1.Call(cp+"update", map[string]any{"project_id": "project-a1", "options": map[string]any{"notification_urgency": "HIGH_ONLY"}}).OK(&cfg)
	if cfg.Options.RecoveryMode != "AUTO" || cfg.Options.NotificationUrgency != "HIGH_ONLY" {
		t.Fatalf("update %+v", cfg)
	}
	// Policies it may follow: the project's own, its workspace's, the domain's.
	own := c.policy(t, c.memberA1, "Own", "PROJECT", map[string]any{"project_id": "project-a1", "repeat_count": 5})
	ownerA2 := c.anon.For(auth.Principal{DomainID: "domain-a", UserID: "oscar", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-2"})
	ws2 := c.policy(t, ownerA2, "Ws2", "WORKSPACE", nil)
	p3 := c.policy(t, c.memberA1, "P3", "PROJECT", map[string]any{"project_id": "project-a3"})
	dom := c.policy(t, c.adminA, "Dom", "DOMAIN", map[string]any{"repeat_count": 1})
	c.memberA1.Call(cp+"update", map[string]any{"project_id": "project-a1", "escalation_policy_id": own.EscalationPolicyID}).OK(&cfg)
	if cfg.EscalationPolicyInfo.EscalationPolicyID != own.EscalationPolicyID || cfg.EscalationPolicyInfo.Name != "Own" {
		t.Fatalf("policy %+v", cfg)
	}
	if a := c.alert(t, c.memberA1, "x", "project-a1"); a.EscalationPolicyID != own.EscalationPolicyID || a.EscalationTTL != 6 {
		t.Fatalf("an alert of the project: %+v", a)
	}
	before := c.raw(t, core.ConfigsCollection, "project-a1")
	for _, tc := range []struct {
		name   string
		as     *testkit.Client
		path   string
		body   map[string]any
		status int
		code   string
	}{
		{"another project's policy", c.memberA1, "update", map[string]any{"project_id": "project-a1", "escalation_policy_id": p3.EscalationPolicyID}, 400, errs.InvalidEscalationPolicy},
		{"another workspace's policy", c.adminA, "update", map[string]any{"project_id": "project-a1", "escalation_policy_id": ws2.EscalationPolicyID}, 400, errs.InvalidEscalationPolicy},
		{"unknown policy", c.memberA1, "update", map[string]any{"project_id": "project-a1", "escalation_policy_id": "ep-000000000000"}, 404, errs.NotFoundCode},
		{"bad urgency", c.memberA1, "update", map[string]any{"project_id": "project-a1", "options": map[string]any{"notification_urgency": "LOW"}}, 400, errs.InvalidParameter},
		{"bad mode", c.memberA1, "update", map[string]any{"project_id": "project-a1", "options": map[string]any{"recovery_mode": "auto"}}, 400, errs.InvalidParameter},
		{"unknown option", c.memberA1, "update", map[string]any{"project_id": "project-a1", "options": map[string]any{"snooze": true}}, 400, errs.InvalidParameter},
		{"no project", c.memberA1, "update", map[string]any{"options": map[string]any{}}, 400, errs.RequiredParameter},
		{"other domain", c.adminB, "update", map[string]any{"project_id": "project-a1", "options": map[string]any{"recovery_mode": "MANUAL"}}, 404, errs.NotFoundCode},
		{"other workspace", c.memberA2, "delete", map[string]any{"project_id": "project-a1"}, 404, errs.NotFoundCode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.as.Call(cp+tc.path, tc.body)
			if r.Status != tc.status {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			r.Fails(tc.status, tc.code)
			if after := c.raw(t, core.ConfigsCollection, "project-a1"); !reflect.DeepEqual(after, before) {
				t.Fatalf("changed: %v -> %v", before, after)
			}
		})
	}
	n := c.count(t, core.ConfigsCollection, nil)
	for _, body := range []map[string]any{
		{},
		{"project_id": "project-nope"},
		{"project_id": "project-a2"},
		{"project_id": "project-a3", "escalation_policy_id": own.EscalationPolicyID},
		{"project_id": "project-a3", "options": map[string]any{"recovery_mode": "SOMETIMES"}},
	} {
		if r := c.memberA1.Call(cp+"create", body); r.Status < 400 {
			t.Fatalf("%v: %d %s", body, r.Status, r.Body)
		}
	}
	if got := c.count(t, core.ConfigsCollection, nil); got != n {
		t.Fatalf("refused creates stored %d", got-n)
	}
	var l list[configInfo]
	c.adminA.Call(cp+"list", map[string]any{"escalation_policy_id": own.EscalationPolicyID}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].EscalationPolicyInfo.Name != "Own" {
		t.Fatalf("list %+v", l)
	}
	c.memberA2.Call(cp+"list", nil).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("another workspace lists %+v", l)
	}
	st := c.adminA.Call(cp+"stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}).JSON()
	if st["results"].([]any)[0].(map[string]any)["n"] != float64(1) {
		t.Fatalf("stat %v", st)
	}
	// Deleted: the project's alerts follow the scope's default again.
	c.memberA1.Call(cp+"delete", map[string]any{"project_id": "project-a1"}).OK(nil)
	c.memberA1.Call(cp+"get", map[string]any{"project_id": "project-a1"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if a := c.alert(t, c.memberA1, "y", "project-a1"); a.EscalationPolicyID != dom.EscalationPolicyID || a.EscalationTTL != 2 {
		t.Fatalf("after the delete: %+v", a)
	}
	// A config following the default names none and takes the current one.
	c.memberA1.Call(cp+"create", map[string]any{"project_id": "project-a1", "escalation_policy_id": dom.EscalationPolicyID}).OK(&cfg)
	if cfg.EscalationPolicyInfo.Name != "Dom" {
		t.Fatalf("domain policy %+v", cfg)
	}
}

func TestAlertConfigTenancy(t *testing.T) {
	t.Parallel()
	c := setup(t)
	c.memberA1.Call(cp+"create", map[string]any{"project_id": "project-a1"}).OK(nil)
	id := map[string]any{"project_id": "project-a1"}
	testkit.Tenancy{Handler: c.handler, Coll: c.db.Collection(core.ConfigsCollection), ID: "project-a1", Domain: "domain-a", Workspace: "workspace-1",
		Project: "project-a1", Insider: memberA1,
		Get:  testkit.Req{Path: cp + "get", Body: id},
		List: testkit.Req{Path: cp + "list", Body: id},
		Stat: &testkit.Req{Path: cp + "stat", Body: map[string]any{"query": map[string]any{"distinct": "project_id"}}},
		Changes: []testkit.Req{
			{Path: cp + "update", Body: map[string]any{"project_id": "project-a1", "options": map[string]any{"recovery_mode": "AUTO"}}},
			{Path: cp + "delete", Body: id},
		},
		Watch: nil,
	}.Run(t)
}
