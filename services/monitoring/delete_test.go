package monitoring_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/monitoring"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// TestWebhookDeleteMarkedFirst: a webhook delete whose second child
// delete (its counters) fails answers 503 and leaves the webhook marked:
// its kept bodies are gone, its URL answers 404, it is out of get, list
// and stat and refuses update; another domain cannot finish it; a retry
// deletes its counters and the webhook (404 from then on). Its events
// stay, as upstream keeps them.
func TestWebhookDeleteMarkedFirst(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) {
		// Far above the plugin client's 300 ms ready wait: the stopped
		// plugin is a 502, never a 504 (TestIngestBounds).
		cfg.ParseTimeout, cfg.RetryInterval = 30*time.Second, time.Hour
	}})
	w := c.webhook(t, c.memberA1, "Doomed")
	other := c.webhook(t, c.memberA1, "Other")
	c.parses(alert("kept-event", "ALERT"))
	c.post(w, `{"n": 1}`).OK(nil)
	c.plugin.Stop()
	c.post(w, `{"n": 2}`).Fails(http.StatusBadGateway, errs.WebhookPluginUnavailable)
	mine := bson.D{{Key: "webhook_id", Value: w.WebhookID}}
	testkit.Eventually(t, time.Minute, "counters", func() bool { n, _ := c.requests(t, w.WebhookID); return n == 2 })
	if c.count(t, core.PendingCollection, mine) != 1 || c.count(t, core.EventsCollection, nil) != 1 {
		t.Fatal("no kept body or event")
	}
	id := map[string]any{"webhook_id": w.WebhookID}

	restore := store.FailChildDeletes(core.RequestsCollection)
	c.memberA1.Call(wp+"delete", id).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	restore()
	if c.count(t, core.PendingCollection, mine) != 0 || c.count(t, core.RequestsCollection, bson.D{{Key: "_id", Value: w.WebhookID}}) != 1 ||
		c.count(t, core.WebhooksCollection, bson.D{{Key: "_id", Value: w.WebhookID}}) != 1 {
		t.Fatal("the failed delete did not stop between its children")
	}
	c.post(w, `{"n": 3}`).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.memberA1.Call(wp+"get", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.memberA1.Call(wp+"update", map[string]any{"webhook_id": w.WebhookID, "name": "x"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.memberA1.Call(wp+"disable", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	var l list[webhookInfo]
	c.adminA.Call(wp+"list", nil).OK(&l)
	if l.TotalCount != 1 || l.Results[0].WebhookID != other.WebhookID {
		t.Fatalf("list shows %+v", l)
	}
	st := c.adminA.Call(wp+"stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}).OK(nil).JSON()
	if fmt.Sprint(st["results"]) != "[map[n:1]]" {
		t.Fatalf("stat counts %v", st["results"])
	}
	c.adminB.Call(wp+"delete", id).Fails(http.StatusNotFound, errs.NotFoundCode)

	c.memberA1.Call(wp+"delete", id).OK(nil)
	if c.count(t, core.RequestsCollection, bson.D{{Key: "_id", Value: w.WebhookID}}) != 0 || c.count(t, core.WebhooksCollection, bson.D{{Key: "_id", Value: w.WebhookID}}) != 0 {
		t.Fatal("the retry left the counters or the webhook")
	}
	c.memberA1.Call(wp+"delete", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	if c.count(t, core.EventsCollection, nil) != 1 {
		t.Fatal("the webhook's events went with it")
	}
}

// TestAlertDeleteMarkedFirst: an alert delete whose second child delete
// (its events) fails answers 503 and leaves the alert marked: its notes
// are gone, it is out of get, list and stat, refuses changes; another
// domain cannot finish it; a retry deletes its events
// and the alert (404 from then on); the other alert keeps its children.
func TestAlertDeleteMarkedFirst(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	c := setup(t)
	a := c.alert(t, c.memberA1, "x", "project-a1")
	keep := c.alert(t, c.memberA1, "y", "project-a1")
	for _, id := range []string{a.AlertID, keep.AlertID} {
		c.memberA1.Call("/monitoring/v1/note/create", map[string]any{"alert_id": id, "note": "n"}).OK(nil)
		if _, err := c.db.Collection(core.EventsCollection).InsertOne(context.Background(), bson.D{{Key: "_id", Value: "event-" + id},
			{Key: "alert_id", Value: id}, {Key: "domain_id", Value: "domain-a"}}); err != nil {
			t.Fatal(err)
		}
	}
	mine := bson.D{{Key: "alert_id", Value: a.AlertID}}
	id := map[string]any{"alert_id": a.AlertID}

	restore := store.FailChildDeletes(core.EventsCollection)
	c.memberA1.Call(ap+"delete", id).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	restore()
	if c.count(t, core.NotesCollection, mine) != 0 || c.count(t, core.EventsCollection, mine) != 1 ||
		c.count(t, core.AlertsCollection, bson.D{{Key: "_id", Value: a.AlertID}}) != 1 {
		t.Fatal("the failed delete did not stop between its children")
	}
	c.memberA1.Call(ap+"get", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.memberA1.Call(ap+"update", map[string]any{"alert_id": a.AlertID, "title": "changed"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var l list[alertInfo]
	c.adminA.Call(ap+"list", nil).OK(&l)
	if l.TotalCount != 1 || l.Results[0].AlertID != keep.AlertID {
		t.Fatalf("list shows %+v", l)
	}
	st := c.adminA.Call(ap+"stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}).OK(nil).JSON()
	if fmt.Sprint(st["results"]) != "[map[n:1]]" {
		t.Fatalf("stat counts %v", st["results"])
	}
	c.adminB.Call(ap+"delete", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	if c.count(t, core.EventsCollection, mine) != 1 {
		t.Fatal("another domain's delete went on")
	}

	c.memberA1.Call(ap+"delete", id).OK(nil)
	if c.count(t, core.EventsCollection, mine) != 0 || c.count(t, core.AlertsCollection, bson.D{{Key: "_id", Value: a.AlertID}}) != 0 {
		t.Fatal("the retry left events or the alert")
	}
	c.memberA1.Call(ap+"delete", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	for _, coll := range []string{core.NotesCollection, core.EventsCollection} {
		if n := c.count(t, coll, bson.D{{Key: "alert_id", Value: keep.AlertID}}); n != 1 {
			t.Fatalf("%s keeps %d records of the other alert", coll, n)
		}
	}
}

// TestWebhookUpdateRacingDelete: updates racing a delete that fails
// after its mark never write the webhook back without the mark (FerretDB
// writes an update back whole, so an update that read the webhook before
// the mark would drop it): in every round each update answers 200 (it
// landed before the mark) or 404, the webhook stays marked and out of
// get, and the retry deletes it. Updates that $set without the webhook's
// lease fail this within a few rounds.
func TestWebhookUpdateRacingDelete(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	c := setup(t)
	const rounds, writers = 6, 4
	for round := range rounds {
		w := c.webhook(t, c.memberA1, fmt.Sprintf("Doomed %d", round))
		id := map[string]any{"webhook_id": w.WebhookID}
		restore := store.FailChildDeletes(core.RequestsCollection)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for n := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range 3 {
					r := c.memberA1.CallQueued(wp+"update", map[string]any{"webhook_id": w.WebhookID, "name": fmt.Sprintf("w%d-%d", n, i)})
					if r.Status == http.StatusNotFound {
						return
					}
					// A fence refusing a holder whose lease ran short (or a
					// lease waited out 20 times): nothing was written.
					if r.Status == http.StatusServiceUnavailable {
						t.Logf("round %d: update: %s", round, r.Body)
						continue
					}
					if r.Status != http.StatusOK {
						t.Errorf("round %d: update: %d %s", round, r.Status, r.Body)
						return
					}
				}
			}()
		}
		close(start)
		// Queued: a lease waited out marks nothing; the child step does fail.
		c.memberA1.CallQueued(wp+"delete", id).Fails(http.StatusServiceUnavailable, errs.Unavailable)
		wg.Wait()
		restore()
		if r := c.memberA1.Call(wp+"get", id); r.Status != http.StatusNotFound {
			t.Fatalf("round %d: the webhook shows after its mark (an update wrote it back without it): %d", round, r.Status)
		}
		c.memberA1.Call(wp+"delete", id).OK(nil)
	}
	if n := c.count(t, core.WebhooksCollection, nil); n != 0 {
		t.Fatalf("%d webhooks left", n)
	}
}
