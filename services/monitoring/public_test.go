package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/monitoring"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
	"github.com/nubes-io/nubes/services/monitoring/internal/event"
)

// newStoppedClock is a rate limits' clock that moves only when the test
// moves it.
func newStoppedClock() *testkit.Clock {
	return testkit.StoppedClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
}

// from posts body to path as a caller at address src.
func (c *callers) from(src, path, body string) (int, string) {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.RemoteAddr = src + ":40000"
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	c.handler.ServeHTTP(rec, req)
	var e struct {
		Detail struct{ Code string } `json:"detail"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	return rec.Code, e.Detail.Code
}

// TestWebhookKeyProvesItself: a new webhook's key is sealed to its id, so
// a key that was not made for it is refused without a store read (the
// webhook's record removed under the service: a forged key still gets
// 403, the real one the 404 of the read). A key of upstream's form (a
// webhook made before, or without keys) is still checked against the
// stored one.
func TestWebhookKeyProvesItself(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Proving")
	other := c.webhook(t, c.memberA1, "Other")
	if len(w.AccessKey) == 32 || strings.ContainsAny(w.AccessKey, "/+=") {
		t.Fatalf("access key %q: not a sealed, URL-safe key", w.AccessKey)
	}
	c.parses(alert("k", "ALERT"))
	c.post(w, `{"a": 1}`).OK(nil)

	flip := func(key string, i int) string { // another character at i
		b := []byte(key)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	forged := []string{other.AccessKey, flip(w.AccessKey, len(w.AccessKey)/2), flip(w.AccessKey, len(w.AccessKey)-1),
		strings.Repeat("A", len(w.AccessKey)), "x"}
	if _, err := c.db.Collection(core.WebhooksCollection).DeleteOne(context.Background(), bson.D{{Key: "_id", Value: w.WebhookID}}); err != nil {
		t.Fatal(err)
	}
	for _, key := range forged {
		c.anon.Call(core.IngestPath(w.WebhookID, key), `{"a": 1}`).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	c.anon.Call(core.IngestPath(w.WebhookID, w.AccessKey), `{"a": 1}`).Fails(http.StatusNotFound, errs.NotFoundCode)

	// Upstream's form, stored before keys proved themselves.
	legacy := randomKey()
	if _, err := c.db.Collection(core.WebhooksCollection).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: other.WebhookID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "access_key", Value: legacy}}}}); err != nil {
		t.Fatal(err)
	}
	c.parses(alert("k2", "ALERT"))
	c.post(webhookInfo{WebhookID: other.WebhookID, AccessKey: legacy}, `{"a": 2}`).OK(nil)
	c.post(webhookInfo{WebhookID: other.WebhookID, AccessKey: randomKey()}, `{"a": 2}`).Fails(http.StatusForbidden, errs.PermissionDenied)
	c.post(other, `{"a": 2}`).Fails(http.StatusForbidden, errs.PermissionDenied) // its sealed key was replaced
}

// TestPublicURLRefusalsBoundedPerSource: an address that was refused
// burst times (wrong keys, unknown webhooks, bad links) is refused with
// 429 before anything is looked at, on both public URLs, until its
// bucket refills; another address, and the address's own successes, are
// not slowed.
func TestPublicURLRefusalsBoundedPerSource(t *testing.T) {
	t.Parallel()
	clock := newStoppedClock()
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) {
		cfg.FailRate, cfg.FailBurst, cfg.Clock = 1, 3, clock.Now
		cfg.IngestRate = 0
	}})
	w := c.webhook(t, c.memberA1, "Guarded")
	right := core.IngestPath(w.WebhookID, w.AccessKey)
	c.parses(alert("k", "ALERT"))
	for i := range 10 { // successes take nothing
		if code, _ := c.from("198.51.100.7", right, fmt.Sprintf(`{"n": %d}`, i)); code != http.StatusOK {
			t.Fatalf("post %d: %d", i, code)
		}
	}
	for _, path := range []string{core.IngestPath(w.WebhookID, randomKey()), core.IngestPath("webhook-000000000000", w.AccessKey),
		core.IngestPath(w.WebhookID, "forged")} {
		if code, _ := c.from("198.51.100.7", path, `{}`); code != http.StatusForbidden && code != http.StatusNotFound {
			t.Fatalf("%s: %d", path, code)
		}
	}
	events := c.count(t, core.EventsCollection, nil)
	if code, ec := c.from("198.51.100.7", right, `{"n": "late"}`); code != http.StatusTooManyRequests || ec != errs.TooManyRequests {
		t.Fatalf("after 3 refusals the right key got %d %s", code, ec)
	}
	a := c.alert(t, c.memberA1, "linked", "project-a1")
	if code, _ := c.from("198.51.100.7", linkOf(t, a, time.Now()), `{}`); code != http.StatusTooManyRequests {
		t.Fatalf("the link from the refused address: %d", code)
	}
	if code, _ := c.from("203.0.113.9", right, `{"n": "other"}`); code != http.StatusOK {
		t.Fatalf("another address: %d", code)
	}
	if n := c.count(t, core.EventsCollection, nil); n != events+1 {
		t.Fatalf("%d events stored, want %d", n, events+1)
	}
	clock.Advance(time.Second)
	if code, _ := c.from("198.51.100.7", right, `{"n": "again"}`); code != http.StatusOK {
		t.Fatalf("a second later: %d", code)
	}
	// A bad link costs a token like a bad key.
	bad := strings.Replace(linkOf(t, a, time.Now()), "/alert/"+a.AlertID+"/", "/alert/"+a.AlertID+"/x", 1)
	if code, _ := c.from("198.51.100.7", bad, `{}`); code != http.StatusForbidden && code != http.StatusNotFound {
		t.Fatalf("a bad link: %d", code)
	}
	if code, _ := c.from("198.51.100.7", right, `{"n": "after the link"}`); code != http.StatusTooManyRequests {
		t.Fatalf("after a bad link: %d", code)
	}
}

// TestIngestRateCountsEvents: a body the plugin makes ten events of pays
// for ten, so the webhook waits for them.
func TestIngestRateCountsEvents(t *testing.T) {
	t.Parallel()
	clock := newStoppedClock()
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) {
		cfg.IngestRate, cfg.IngestBurst, cfg.Clock = 1, 5, clock.Now
		cfg.WorkspaceRate = 0
	}})
	w := c.webhook(t, c.memberA1, "Batch")
	ten := make([]map[string]any, 10)
	for i := range ten {
		ten[i] = alert(fmt.Sprint("batch-", i), "ALERT")
	}
	c.parses(ten...)
	c.post(w, `{"batch": 1}`).OK(nil) // 5 - 10: a debt of 5
	c.parses(alert("one", "ALERT"))
	c.post(w, `{"one": 1}`).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	clock.Advance(5 * time.Second) // the debt paid, no token yet
	c.post(w, `{"one": 1}`).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	clock.Advance(time.Second)
	c.post(w, `{"one": 1}`).OK(nil)

}

// TestWorkspaceBucketSharedByItsWebhooks: one workspace's webhooks share
// a bucket (events per second) that another workspace's do not, so a
// workspace's flood leaves the others' alerts alone.
func TestWorkspaceBucketSharedByItsWebhooks(t *testing.T) {
	t.Parallel()
	clock := newStoppedClock()
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) {
		cfg.IngestRate, cfg.IngestBurst, cfg.Clock = 100, 100, clock.Now
		cfg.WorkspaceRate, cfg.WorkspaceBurst = 1, 10
	}})
	w := c.webhook(t, c.memberA1, "Flood")
	sibling := c.webhook(t, c.memberA1, "Sibling")
	elsewhere := webhookInfo{}
	c.memberA2.Call(wp+"create", map[string]any{"name": "Elsewhere", "project_id": "project-a2",
		"plugin_info": map[string]any{"plugin_id": "plugin-grafana-mon-webhook"}}).OK(&elsewhere)
	ten := make([]map[string]any, 10)
	for i := range ten {
		ten[i] = alert(fmt.Sprint("flood-", i), "ALERT")
	}
	c.parses(ten...)
	c.post(w, `{"flood": 1}`).OK(nil) // the workspace's 10 spent
	c.parses(alert("one", "ALERT"))
	c.post(sibling, `{"one": 1}`).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	c.post(elsewhere, `{"one": 1}`).OK(nil)
	clock.Advance(time.Second)
	c.post(sibling, `{"one": 1}`).OK(nil)
}

// TestDeliveryBodyStoredOnce: a body of many events is stored once and
// named by its events; lists leave bodies out, a get answers them; a
// body past event.MaxRawKept is counted, not stored.
func TestDeliveryBodyStoredOnce(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Bodies")
	three := []map[string]any{alert("b-1", "ALERT"), alert("b-2", "ALERT"), alert("b-3", "ALERT")}
	c.parses(three...)
	body := `{"alerts": ["b-1", "b-2", "b-3"], "pad": "` + strings.Repeat("p", 1000) + `"}`
	c.post(w, body).OK(nil)
	if n := c.count(t, core.BodiesCollection, nil); n != 1 {
		t.Fatalf("%d bodies stored, want 1", n)
	}
	if n := c.count(t, core.EventsCollection, bson.D{{Key: "raw_data", Value: ""}, {Key: "body_id", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 3 {
		t.Fatalf("%d events name the body without a copy, want 3", n)
	}
	var page struct {
		Results []map[string]any `json:"results"`
	}
	c.memberA1.Call("/monitoring/v1/event/list", map[string]any{"webhook_id": w.WebhookID}).OK(&page)
	if len(page.Results) != 3 {
		t.Fatalf("%d events listed", len(page.Results))
	}
	for _, e := range page.Results {
		if raw, _ := json.Marshal(e["raw_data"]); string(raw) != "{}" || e["raw_bytes"] != float64(len(body)) {
			t.Fatalf("a listed event: raw_data %s, raw_bytes %v", raw, e["raw_bytes"])
		}
	}
	var got struct {
		RawData map[string]any `json:"raw_data"`
	}
	c.memberA1.Call("/monitoring/v1/event/get", map[string]any{"event_id": page.Results[0]["event_id"]}).OK(&got)
	if len(got.RawData["alerts"].([]any)) != 3 {
		t.Fatalf("event/get raw_data: %v", got.RawData)
	}
	// `only` does not bring the bodies back into a list.
	c.memberA1.Call("/monitoring/v1/event/list", map[string]any{"query": map[string]any{"only": []string{"event_id", "raw_data"}}}).OK(&page)
	for _, e := range page.Results {
		if v, ok := e["raw_data"]; ok && fmt.Sprint(v) != "map[]" {
			t.Fatalf("only brought raw_data back: %v", v)
		}
	}
	// The same body again: still one copy.
	c.parses(three...)
	c.post(w, body).OK(nil)
	if n := c.count(t, core.BodiesCollection, nil); n != 1 {
		t.Fatalf("%d bodies after a retry", n)
	}
	// Past the bound: counted, not kept.
	c.parses(alert("huge", "ALERT"))
	huge := `{"pad": "` + strings.Repeat("h", event.MaxRawKept) + `"}`
	var res struct {
		Results []struct {
			EventID string `json:"event_id"`
		} `json:"results"`
	}
	c.post(w, huge).OK(&res)
	var e struct {
		RawData    map[string]any `json:"raw_data"`
		RawBytes   int            `json:"raw_bytes"`
		RawOmitted bool           `json:"raw_omitted"`
	}
	c.memberA1.Call("/monitoring/v1/event/get", map[string]any{"event_id": res.Results[0].EventID}).OK(&e)
	if len(e.RawData) != 0 || e.RawBytes != len(huge) || !e.RawOmitted {
		t.Fatalf("a huge body: %d keys, %d bytes, omitted %v", len(e.RawData), e.RawBytes, e.RawOmitted)
	}
	// A member of another workspace reads none of it.
	c.memberA2.Call("/monitoring/v1/event/get", map[string]any{"event_id": res.Results[0].EventID}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// TestEventsPurgedAfterRetention: events and bodies older than the
// retention go; younger ones stay.
func TestEventsPurgedAfterRetention(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) {
		cfg.EventRetention, cfg.PurgeEvery = time.Hour, 20*time.Millisecond
	}})
	w := c.webhook(t, c.memberA1, "Old")
	c.parses(alert("old-1", "ALERT"), alert("old-2", "ALERT"))
	c.post(w, `{"old": true}`).OK(nil)
	c.clock.Advance(2 * time.Hour)
	c.parses(alert("new", "ALERT"))
	c.post(w, `{"new": true}`).OK(nil)
	testkit.Eventually(t, time.Minute, "old events purged", func() bool {
		return c.count(t, core.EventsCollection, nil) == 1 && c.count(t, core.BodiesCollection, nil) == 0
	})
	var page struct {
		Results []struct {
			EventKey string `json:"event_key"`
		} `json:"results"`
	}
	c.memberA1.Call("/monitoring/v1/event/list", map[string]any{}).OK(&page)
	if len(page.Results) != 1 || page.Results[0].EventKey != "new" {
		t.Fatalf("left: %+v", page.Results)
	}
}
