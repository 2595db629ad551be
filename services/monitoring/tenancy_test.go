package monitoring_test

import (
	"context"
	"net/http"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// TestTenancy runs the tenancy matrix over every monitoring resource: a
// record of workspace-1 (project-a1 where the resource has projects) is
// read and changed by no outsider, a member outside the project included.
func TestTenancy(t *testing.T) {
	t.Parallel()
	c := setup(t)
	member := auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1", Projects: []string{"project-a1"}}
	watch := []*mongo.Collection{c.db.Collection(core.WebhooksCollection), c.db.Collection(core.PoliciesCollection),
		c.db.Collection(core.NotesCollection), c.db.Collection(core.EventsCollection), c.db.Collection(core.AlertsCollection)}
	matrix := func(coll, id, project string, insider auth.Principal, get, list testkit.Req, stat *testkit.Req, changes ...testkit.Req) testkit.Tenancy {
		return testkit.Tenancy{Handler: c.handler, Coll: c.db.Collection(coll), ID: id, Domain: "domain-a", Workspace: "workspace-1",
			Project: project, Insider: insider, Get: get, List: list, Stat: stat, Changes: changes, Watch: watch}
	}
	distinct := func(key string) *testkit.Req {
		return &testkit.Req{Body: map[string]any{"query": map[string]any{"distinct": key}}}
	}
	at := func(r *testkit.Req, path string) *testkit.Req { r.Path = path; return r }
	const base = "/monitoring/v1/"

	t.Run("webhook", func(t *testing.T) {
		w := c.webhook(t, c.memberA1, "Grafana")
		id := map[string]any{"webhook_id": w.WebhookID}
		matrix(core.WebhooksCollection, w.WebhookID, "project-a1", member,
			testkit.Req{Path: base + "webhook/get", Body: id}, testkit.Req{Path: base + "webhook/list", Body: id},
			at(distinct("webhook_id"), base+"webhook/stat"),
			testkit.Req{Path: base + "webhook/update", Body: map[string]any{"webhook_id": w.WebhookID, "name": "taken"}},
			testkit.Req{Path: base + "webhook/update-plugin", Body: map[string]any{"webhook_id": w.WebhookID, "options": map[string]any{"tz": "CET"}}},
			testkit.Req{Path: base + "webhook/verify-plugin", Body: id},
			testkit.Req{Path: base + "webhook/disable", Body: id},
			testkit.Req{Path: base + "webhook/delete", Body: id},
		).Run(t)
	})
	t.Run("escalation policy", func(t *testing.T) {
		p := c.policy(t, c.memberA1, "Project one", "PROJECT", map[string]any{"project_id": "project-a1"})
		id := map[string]any{"escalation_policy_id": p.EscalationPolicyID}
		matrix(core.PoliciesCollection, p.EscalationPolicyID, "project-a1", member,
			testkit.Req{Path: base + "escalation-policy/get", Body: id}, testkit.Req{Path: base + "escalation-policy/list", Body: id},
			at(distinct("escalation_policy_id"), base+"escalation-policy/stat"),
			testkit.Req{Path: base + "escalation-policy/update", Body: map[string]any{"escalation_policy_id": p.EscalationPolicyID, "name": "taken"}},
			testkit.Req{Path: base + "escalation-policy/set-default", Body: id},
			testkit.Req{Path: base + "escalation-policy/delete", Body: id},
		).Run(t)
	})
	t.Run("note", func(t *testing.T) {
		var n struct {
			NoteID string `json:"note_id"`
		}
		a := c.alert(t, c.memberA1, "disk full", "project-a1")
		c.ownerA1.Call(base+"note/create", map[string]any{"alert_id": a.AlertID, "note": "looking"}).OK(&n)
		id := map[string]any{"note_id": n.NoteID}
		matrix(core.NotesCollection, n.NoteID, "project-a1", member,
			testkit.Req{Path: base + "note/get", Body: id}, testkit.Req{Path: base + "note/list", Body: id},
			at(distinct("note_id"), base+"note/stat"),
			testkit.Req{Path: base + "note/update", Body: map[string]any{"note_id": n.NoteID, "note": "taken"}},
			testkit.Req{Path: base + "note/delete", Body: id},
		).Run(t)
	})
	t.Run("alert", func(t *testing.T) {
		a := c.alert(t, c.memberA1, "disk full", "project-a1")
		id := map[string]any{"alert_id": a.AlertID}
		matrix(core.AlertsCollection, a.AlertID, "project-a1", member,
			testkit.Req{Path: base + "alert/get", Body: id}, testkit.Req{Path: base + "alert/list", Body: id},
			at(distinct("alert_id"), base+"alert/stat"),
			testkit.Req{Path: base + "alert/update", Body: map[string]any{"alert_id": a.AlertID, "title": "taken"}},
			testkit.Req{Path: base + "alert/update", Body: map[string]any{"alert_id": a.AlertID, "state": "RESOLVED"}},
			testkit.Req{Path: base + "alert/assign-user", Body: map[string]any{"alert_id": a.AlertID, "assignee": "eve"}},
			testkit.Req{Path: base + "alert/delete", Body: id},
		).Run(t)
	})
	t.Run("event", func(t *testing.T) {
		if _, err := c.db.Collection(core.EventsCollection).InsertOne(context.Background(), bson.D{{Key: "_id", Value: "event-t1"},
			{Key: "event_id", Value: "event-t1"}, {Key: "title", Value: "disk full"}, {Key: "domain_id", Value: "domain-a"},
			{Key: "workspace_id", Value: "workspace-1"}, {Key: "project_id", Value: "project-a1"}}); err != nil {
			t.Fatal(err)
		}
		id := map[string]any{"event_id": "event-t1"}
		matrix(core.EventsCollection, "event-t1", "project-a1", member,
			testkit.Req{Path: base + "event/get", Body: id}, testkit.Req{Path: base + "event/list", Body: id}, nil,
		).Run(t)
	})
}

// TestMemberOutsideProject: a member creates nothing in a project its
// token does not list (a PRIVATE project it is not in), and lists none of
// its webhooks (nor so their access keys).
func TestMemberOutsideProject(t *testing.T) {
	t.Parallel()
	c := setup(t)
	outsider := c.anon.For(auth.Principal{DomainID: "domain-a", UserID: "mo", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1", Projects: []string{"project-other"}})
	before := c.count(t, core.WebhooksCollection, nil) + c.count(t, core.PoliciesCollection, nil)
	outsider.Call(wp+"create", map[string]any{"name": "sneak", "project_id": "project-a1",
		"plugin_info": map[string]any{"plugin_id": "plugin-grafana-mon-webhook"}}).Fails(http.StatusNotFound, errs.NotFoundCode)
	outsider.Call(ep+"create", policyBody("sneak", "PROJECT", map[string]any{"project_id": "project-a1"})).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := c.count(t, core.WebhooksCollection, nil) + c.count(t, core.PoliciesCollection, nil); n != before {
		t.Fatalf("%d records stored, %d before", n, before)
	}
	c.webhook(t, c.ownerA1, "Grafana")
	var l list[webhookInfo]
	outsider.Call(wp+"list", nil).OK(&l)
	if l.TotalCount != 0 || len(l.Results) != 0 {
		t.Fatalf("the member outside the project lists %+v", l)
	}
}
