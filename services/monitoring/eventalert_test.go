package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

type ingestResult struct {
	Results []struct {
		EventID   string `json:"event_id"`
		EventKey  string `json:"event_key"`
		Duplicate bool   `json:"duplicate"`
		AlertID   string `json:"alert_id"`
		Dropped   bool   `json:"dropped"`
	} `json:"results"`
	Error string `json:"error"`
}

func (c *callers) ingest(t *testing.T, w webhookInfo, body string) ingestResult {
	t.Helper()
	var res ingestResult
	c.post(w, body).OK(&res)
	return res
}

func withSeverity(ev map[string]any, severity string) map[string]any {
	ev["severity"] = severity
	return ev
}

// TestEventsBecomeAlerts: upstream's rule, event by event.
func TestEventsBecomeAlerts(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Grafana")

	c.parses(alert("k-1", "ALERT"))
	res := c.ingest(t, w, `{"n": 1}`)
	first := res.Results[0].AlertID
	a := c.getAlert(t, first)
	if a.Title != "CPU high" || a.Description != "cpu > 90%" || a.Severity != "CRITICAL" || a.Urgency != "HIGH" || a.State != "TRIGGERED" ||
		a.TriggeredBy != w.WebhookID || a.WebhookID != w.WebhookID || a.EventKey != "k-1" || a.EventCount != 1 || a.AlertNumber != 1 ||
		len(a.Resources) != 1 || a.Resources[0].Name != "web-1" || a.ProjectID != "project-a1" || a.WorkspaceID != "workspace-1" ||
		a.LastEventID != res.Results[0].EventID || a.EscalationTTL != 1 {
		t.Fatalf("alert of the event: %+v", a)
	}
	// A low severity is a LOW alert.
	c.parses(withSeverity(alert("k-2", "ALERT"), "WARNING"))
	if low := c.getAlert(t, c.ingest(t, w, `{"n": 2}`).Results[0].AlertID); low.Urgency != "LOW" || low.AlertNumber != 2 {
		t.Fatalf("warning: %+v", low)
	}
	// The same body again (the sender's retry): a duplicate, counted once.
	c.parses(alert("k-1", "ALERT"))
	if again := c.ingest(t, w, `{"n": 1}`); !again.Results[0].Duplicate || again.Results[0].AlertID != first {
		t.Fatalf("retry: %+v", again)
	}
	if a := c.getAlert(t, first); a.EventCount != 1 {
		t.Fatalf("a retry counted: %+v", a)
	}
	// The key fires again in another body: the same alert, counted.
	fired := alert("k-1", "ALERT")
	fired["description"] = "cpu > 95%"
	c.parses(fired)
	res = c.ingest(t, w, `{"n": 3}`)
	if a := c.getAlert(t, first); res.Results[0].AlertID != first || a.EventCount != 2 || a.Description != "cpu > 95%" || a.LastEventID != res.Results[0].EventID {
		t.Fatalf("fired again: %+v", a)
	}
	// An acknowledged alert still takes its events.
	c.memberA1.Call(ap+"update", map[string]any{"alert_id": first, "state": "ACKNOWLEDGED"}).OK(nil)
	// RECOVERY with recovery_mode MANUAL (upstream's default): counted, not resolved.
	c.parses(alert("k-1", "RECOVERY"))
	c.ingest(t, w, `{"n": 4}`)
	if a := c.getAlert(t, first); a.State != "ACKNOWLEDGED" || a.EventCount != 3 {
		t.Fatalf("recovery, MANUAL: %+v", a)
	}
	// AUTO: a recovery resolves it.
	c.memberA1.Call(cp+"create", map[string]any{"project_id": "project-a1", "options": map[string]any{"recovery_mode": "AUTO"}}).OK(nil)
	c.ingest(t, w, `{"n": 5}`)
	if a := c.getAlert(t, first); a.State != "RESOLVED" || a.ResolvedAt == nil || a.EventCount != 4 || a.EscalationTTL != 0 {
		t.Fatalf("recovery, AUTO: %+v", a)
	}
	// Resolved: the key fires again, a new alert.
	c.parses(alert("k-1", "ALERT"))
	res = c.ingest(t, w, `{"n": 6}`)
	if next := c.getAlert(t, res.Results[0].AlertID); next.AlertID == first || next.AlertNumber != 3 || next.EventCount != 1 {
		t.Fatalf("after the resolve: %+v", next)
	}
	// A recovery with no open alert is dropped, not stored.
	events := c.count(t, core.EventsCollection, nil)
	c.parses(alert("k-9", "RECOVERY"))
	if res := c.ingest(t, w, `{"n": 7}`); !res.Results[0].Dropped || res.Results[0].AlertID != "" {
		t.Fatalf("a lone recovery: %+v", res)
	}
	if n := c.count(t, core.EventsCollection, nil); n != events {
		t.Fatalf("a dropped recovery was stored: %d -> %d", events, n)
	}
	// A body the plugin cannot parse: an ERROR alert; the same body again
	// is the same event.
	c.plugin.Script(parseMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_PARSE", "no alerts in it")})
	res = c.ingest(t, w, `{"weird": 1}`)
	bad := c.getAlert(t, res.Results[0].AlertID)
	if bad.State != "ERROR" || bad.Severity != "CRITICAL" || bad.Urgency != "HIGH" || bad.Title != "Webhook Event Parsing Error - Grafana" {
		t.Fatalf("error alert: %+v", bad)
	}
	if again := c.ingest(t, w, `{"weird": 1}`); !again.Results[0].Duplicate || again.Results[0].AlertID != bad.AlertID {
		t.Fatalf("the same failing body: %+v", again)
	}
	// Events name their alert.
	var el list[map[string]any]
	c.memberA1.Call("/monitoring/v1/event/list", map[string]any{"alert_id": first}).OK(&el)
	if el.TotalCount != 4 {
		t.Fatalf("events of the first alert: %d", el.TotalCount)
	}
	// A deleted alert (its events with it) is no longer open: the next
	// event opens another.
	c.memberA1.Call(ap+"delete", map[string]any{"alert_id": bad.AlertID}).OK(nil)
	res = c.ingest(t, w, `{"weird": 1}`)
	if again := c.getAlert(t, res.Results[0].AlertID); res.Results[0].Duplicate || again.AlertNumber != 5 || again.State != "ERROR" {
		t.Fatalf("after the delete: %+v %+v", res, again)
	}
	var l list[alertInfo]
	c.adminA.Call(ap+"list", nil).OK(&l)
	if l.TotalCount != 4 {
		t.Fatalf("%d alerts", l.TotalCount)
	}
}

// TestEventsExactlyOnceOnTwoReplicas: deliveries of one key sent to two
// replicas at once, each body several times (the sender's retries): one
// alert, counting each body once.
func TestEventsExactlyOnceOnTwoReplicas(t *testing.T) {
	t.Parallel()
	c := setup(t)
	other := c.replica(t)
	w := c.webhook(t, c.memberA1, "Grafana")
	c.parses(alert("k-1", "ALERT"))
	const bodies, tries = 4, 3
	var wg sync.WaitGroup
	for b := range bodies {
		for i := range tries {
			cl := c.anon
			if (b+i)%2 == 1 {
				cl = other
			}
			wg.Go(func() {
				r := cl.Call(core.IngestPath(w.WebhookID, w.AccessKey), fmt.Sprintf(`{"n": %d}`, b))
				if r.Status != http.StatusOK {
					t.Errorf("body %d try %d: %d %s", b, i, r.Status, r.Body)
				}
			})
		}
	}
	wg.Wait()
	var l list[alertInfo]
	c.adminA.Call(ap+"list", nil).OK(&l)
	if l.TotalCount != 1 || l.Results[0].EventCount != bodies || l.Results[0].AlertNumber != 1 {
		t.Fatalf("alerts %+v", l)
	}
	if n := c.count(t, core.EventsCollection, nil); n != bodies {
		t.Fatalf("%d events stored, want %d", n, bodies)
	}
}

// TestEventsAfterAKilledWorker: an ingest that died after any step is
// finished by the sender's retry, or by the sweep when nobody sends it
// again, without a second alert or a second count.
func TestEventsAfterAKilledWorker(t *testing.T) {
	t.Parallel()
	// The sweep of this replica looks only at events a minute old: the
	// steps below are the sender's retries; a replica sweeping fast
	// starts for the last one.
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Grafana")
	events := c.db.Collection(core.EventsCollection)
	unapply := func(id string) {
		t.Helper()
		if _, err := events.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "applied", Value: false}, {Key: "alert_id", Value: ""}}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Died after the alert was stored, before its key and the event were
	// marked: the retry finds the alert by its derived id.
	c.parses(alert("k-1", "ALERT"))
	res := c.ingest(t, w, `{"n": 1}`)
	first := res.Results[0].AlertID
	unapply(res.Results[0].EventID)
	if _, err := c.db.Collection(core.ClaimsCollection).DeleteMany(context.Background(), bson.D{{Key: "alert_id", Value: first}}); err != nil {
		t.Fatal(err)
	}
	if again := c.ingest(t, w, `{"n": 1}`); again.Results[0].Duplicate || again.Results[0].AlertID != first {
		t.Fatalf("retry after the alert: %+v", again)
	}
	// Died after the alert was updated, before the event was marked.
	res = c.ingest(t, w, `{"n": 2}`)
	unapply(res.Results[0].EventID)
	c.ingest(t, w, `{"n": 2}`)
	if a := c.getAlert(t, first); a.EventCount != 2 {
		t.Fatalf("counted twice: %+v", a)
	}
	// Died after the event was stored; nobody sends it again: the sweep.
	c.parses(alert("k-2", "ALERT"))
	res = c.ingest(t, w, `{"n": 3}`)
	second := res.Results[0].AlertID
	unapply(res.Results[0].EventID)
	if _, err := c.db.Collection(core.AlertsCollection).DeleteOne(context.Background(), bson.D{{Key: "_id", Value: second}}); err != nil {
		t.Fatal(err)
	}
	// (its number, 2, was taken: the alert is stored again with the
	// next, 3, and 2 stays a gap, docs/decisions.md)
	c.cfg.SweepEvery, c.cfg.SweepAge = 50*time.Millisecond, 200*time.Millisecond
	stop := c.instance(t)
	defer stop()
	testkit.Eventually(t, time.Minute, "the sweep", func() bool {
		return testkit.Count(t, c.db.Collection(core.AlertsCollection), bson.E{Key: "_id", Value: second}) == 1
	})
	if a := c.getAlert(t, second); a.EventCount != 1 || a.AlertNumber != 3 {
		t.Fatalf("swept: %+v", a)
	}
	testkit.Eventually(t, time.Minute, "the event marked", func() bool {
		var ev struct {
			Applied bool `bson:"applied"`
		}
		raw := c.raw(t, core.EventsCollection, res.Results[0].EventID)
		b, _ := json.Marshal(raw)
		_ = json.Unmarshal(b, &ev)
		return ev.Applied
	})
	c.checkUniqueNumbers(t, 2)
}

// TestEventRetryAfterNumberedInsert: a worker killed after it stored a
// new alert, before the key's record and the event were marked; the
// retry of the same event (the same derived alert id) finds the alert
// and spends no number on it.
func TestEventRetryAfterNumberedInsert(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Grafana")
	c.parses(alert("k-1", "ALERT"))
	res := c.ingest(t, w, `{"n": 1}`)
	first := res.Results[0].AlertID
	ctx := context.Background()
	claims := c.db.Collection(core.ClaimsCollection)
	// The state of the death: the key's open alert not recorded, the
	// event not marked.
	if _, err := claims.DeleteMany(ctx, bson.D{{Key: "alert_id", Value: first}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.db.Collection(core.EventsCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: res.Results[0].EventID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "applied", Value: false}, {Key: "alert_id", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	if again := c.ingest(t, w, `{"n": 1}`); again.Results[0].AlertID != first {
		t.Fatalf("retry: %+v", again)
	}
	c.parses(alert("k-2", "ALERT"))
	c.ingest(t, w, `{"n": 2}`)
	c.checkNumbers(t, 2)
}

// TestEventDedupeWindow: upstream's dedupe (alerts.md §2.4): an event
// counts on its key's open alert only when the key's last event (not a
// RECOVERY) came at most 600 s before it; the window slides with each
// duplicate; a key quiet longer opens a new alert (the old one stays
// open), and a RECOVERY that late is dropped.
func TestEventDedupeWindow(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Grafana")
	n := 0
	send := func(typ string) ingestResult {
		t.Helper()
		n++
		c.parses(alert("k-w", typ))
		return c.ingest(t, w, fmt.Sprintf(`{"n": %d}`, n))
	}
	first := send("ALERT").Results[0].AlertID
	for range 2 { // 18 minutes in all, never 10 quiet
		c.clock.Advance(9 * time.Minute)
		if got := send("ALERT").Results[0].AlertID; got != first {
			t.Fatalf("inside the window: alert %s, want %s", got, first)
		}
	}
	c.clock.Advance(11 * time.Minute)
	second := send("ALERT").Results[0].AlertID
	if second == first {
		t.Fatal("a key quiet for 11 minutes counted on its old alert")
	}
	if a := c.getAlert(t, first); a.State != "TRIGGERED" || a.EventCount != 3 {
		t.Fatalf("the old alert: %+v", a)
	}
	c.clock.Advance(11 * time.Minute)
	if r := send("RECOVERY").Results[0]; !r.Dropped {
		t.Fatalf("a RECOVERY 11 minutes late: %+v", r)
	}
	// The RECOVERY did not slide the window: 22 minutes since the last ALERT.
	third := send("ALERT").Results[0].AlertID
	if third == second {
		t.Fatal("a RECOVERY slid the window")
	}
	c.clock.Advance(5 * time.Minute)
	if r := send("RECOVERY").Results[0]; r.Dropped || r.AlertID != third {
		t.Fatalf("a RECOVERY inside the window: %+v", r)
	}
	c.checkNumbers(t, 3)
}

// TestEventRetryAfterLaterEvents: a worker killed after it counted an
// event on its alert and before it marked the event applied; other
// events of the key are applied before the retry comes (the sender's or
// the sweep's). The retry must not count the event a second time.
func TestEventRetryAfterLaterEvents(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Grafana")
	c.parses(alert("k-1", "ALERT"))
	first := c.ingest(t, w, `{"n": 1}`).Results[0].AlertID
	died := c.ingest(t, w, `{"n": 2}`).Results[0].EventID
	if _, err := c.db.Collection(core.EventsCollection).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: died}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "applied", Value: false}, {Key: "alert_id", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	c.ingest(t, w, `{"n": 3}`)
	if again := c.ingest(t, w, `{"n": 2}`); again.Results[0].AlertID != first {
		t.Fatalf("retry: %+v", again)
	}
	if a := c.getAlert(t, first); a.EventCount != 3 {
		t.Fatalf("3 events counted %d times", a.EventCount)
	}
}

// TestSameBodyAfterResolveIsANewEvent: a body sent again is a retry only
// within the dedupe window and while the alert it made is open. After
// the alert is resolved, or after the window, the same body is a new
// event that opens an alert, as upstream stores every event; its retry
// is a duplicate of it in turn.
func TestSameBodyAfterResolveIsANewEvent(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Grafana")
	c.parses(alert("k-1", "ALERT"))
	res := c.ingest(t, w, `{"same": true}`).Results[0]
	first := res.AlertID
	if again := c.ingest(t, w, `{"same": true}`).Results[0]; !again.Duplicate || again.AlertID != first || again.EventID != res.EventID {
		t.Fatalf("a retry inside the window: %+v", again)
	}
	c.memberA1.Call(ap+"update", map[string]any{"alert_id": first, "state": "RESOLVED"}).OK(nil)
	after := c.ingest(t, w, `{"same": true}`).Results[0]
	if after.Duplicate || after.AlertID == first || after.EventID == res.EventID {
		t.Fatalf("the same body after its alert was resolved: %+v", after)
	}
	if again := c.ingest(t, w, `{"same": true}`).Results[0]; !again.Duplicate || again.AlertID != after.AlertID || again.EventID != after.EventID {
		t.Fatalf("a retry of the new event: %+v", again)
	}
	c.clock.Advance(11 * time.Minute)
	late := c.ingest(t, w, `{"same": true}`).Results[0]
	if late.Duplicate || late.AlertID == after.AlertID || late.EventID == after.EventID {
		t.Fatalf("the same body after the window: %+v", late)
	}
	if a := c.getAlert(t, after.AlertID); a.EventCount != 1 {
		t.Fatalf("the second alert counted %d events", a.EventCount)
	}
	c.checkNumbers(t, 3)
	if n := testkit.Count(t, c.db.Collection(core.EventsCollection)); n != 3 {
		t.Fatalf("%d events stored, want 3", n)
	}
}

// TestMovedAlertTakesItsRecords: an alert moved to another project takes
// its notes and events with it: the old project's members read them no
// more, the new project's do.
func TestMovedAlertTakesItsRecords(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Grafana")
	c.parses(alert("k-1", "ALERT"))
	id := c.ingest(t, w, `{"n": 1}`).Results[0].AlertID
	c.memberA1.Call("/monitoring/v1/note/create", map[string]any{"alert_id": id, "note": "looking"}).OK(nil)
	c.adminA.Call(ap+"update", map[string]any{"alert_id": id, "project_id": "project-a2"}).OK(nil)
	reads := func(cl *testkit.Client) (notes, events int) {
		t.Helper()
		var n, e list[map[string]any]
		cl.Call("/monitoring/v1/note/list", map[string]any{"alert_id": id}).OK(&n)
		cl.Call("/monitoring/v1/event/list", map[string]any{"alert_id": id}).OK(&e)
		return n.TotalCount, e.TotalCount
	}
	if n, e := reads(c.memberA1); n != 0 || e != 0 {
		t.Fatalf("the old project's member reads %d notes and %d events of the moved alert", n, e)
	}
	if n, e := reads(c.memberA2); n != 1 || e != 1 {
		t.Fatalf("the new project's member reads %d notes and %d events, want 1 and 1", n, e)
	}
}
