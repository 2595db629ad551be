package monitoring_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// A deleted project's webhook URL is 404 as soon as identity no longer
// holds the project (before the deletion arrives); a wrong key is
// refused without asking identity; the deletion then takes the
// project's webhooks, alerts, notes, events and policies, and nothing of
// another project; delivered again, it changes nothing more (issue 38).
func TestDeletedProjectEndsItsMonitoring(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{ownNATS: true})
	w := c.webhook(t, c.memberA1, "doomed")
	c.parses(alert("k-1", "ALERT"))
	c.post(w, `{"status": "firing"}`).OK(nil)
	doomed := c.alert(t, c.memberA1, "doomed", "project-a1")
	c.memberA1.Call("/monitoring/v1/note/create", map[string]any{"alert_id": doomed.AlertID, "note": "n"}).OK(nil)
	c.policy(t, c.memberA1, "doomed policy", "PROJECT", map[string]any{"project_id": "project-a1"})
	kept := c.alert(t, c.memberA1, "kept", "project-a3")
	a1 := bson.D{{Key: "domain_id", Value: "domain-a"}, {Key: "project_id", Value: "project-a1"}}
	for _, coll := range []string{core.WebhooksCollection, core.AlertsCollection, core.NotesCollection, core.EventsCollection, core.PoliciesCollection} {
		if c.count(t, coll, a1) == 0 {
			t.Fatalf("nothing of project-a1 in %s before the delete", coll)
		}
	}

	// identity deletes the project: it answers 404 from now on.
	c.identity.Handle(testkit.ProjectGetPath, func(p *auth.Principal, req map[string]any) (any, error) {
		if testkit.Str(req, "project_id") == "project-a1" {
			return nil, errs.New(errs.NotFoundCode, "fake identity: project-a1 was deleted")
		}
		return map[string]any{"project_id": testkit.Str(req, "project_id"), "workspace_id": "workspace-1", "domain_id": "domain-a"}, nil
	})
	events0 := c.count(t, core.EventsCollection, nil)
	asked := c.identity.Calls()
	c.anon.Call(core.IngestPath(w.WebhookID, "0123456789abcdef0123456789abcdef"), `{}`).Fails(http.StatusForbidden, errs.PermissionDenied)
	if c.identity.Calls() != asked {
		t.Error("a wrong key made the ingest ask identity")
	}
	c.parses(alert("k-2", "ALERT"))
	c.post(w, `{"status": "firing"}`).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := c.count(t, core.EventsCollection, nil); n != events0 {
		t.Errorf("the deleted project's URL stored %d events", n-events0)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := events.Deleted{ID: events.DeletedID(events.DeletedProject, "domain-a", "project-a1", "t0"), Kind: events.DeletedProject,
		DomainID: "domain-a", WorkspaceID: "workspace-1", ProjectID: "project-a1", DeletedAt: "2026-01-01T00:00:00Z"}
	if err := c.bus.Publish(ctx, events.DeletedSubject, d.ID, d); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the project's monitoring gone", func() bool {
		for _, coll := range []string{core.WebhooksCollection, core.AlertsCollection, core.NotesCollection, core.EventsCollection, core.PoliciesCollection, core.PendingCollection} {
			if c.count(t, coll, a1) > 0 {
				return false
			}
		}
		return true
	})
	c.adminA.Call(wp+"get", map[string]any{"webhook_id": w.WebhookID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.adminA.Call(ap+"get", map[string]any{"alert_id": doomed.AlertID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if got := c.getAlert(t, kept.AlertID); got.AlertID != kept.AlertID {
		t.Fatalf("another project's alert: %+v", got)
	}

	// Delivered again (a second deletion of the same project): nothing
	// more goes, and the other project's alert stays.
	d.ID = events.DeletedID(events.DeletedProject, "domain-a", "project-a1", "t1")
	if err := c.bus.Publish(ctx, events.DeletedSubject, d.ID, d); err != nil {
		t.Fatal(err)
	}
	later := c.alert(t, c.memberA1, "after", "project-a3")
	testkit.Eventually(t, time.Minute, "the second deletion acked", func() bool { return consumerIdle(t, c.bus) })
	c.getAlert(t, kept.AlertID)
	c.getAlert(t, later.AlertID)
}

// consumerIdle reports whether monitoring's deletion consumer has nothing
// pending or unacknowledged.
func consumerIdle(t *testing.T, bus *events.Bus) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := bus.JS.Consumer(ctx, events.DeletedStream, events.DeletedConsumer("monitoring"))
	if err != nil {
		return false
	}
	info, err := cons.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}
