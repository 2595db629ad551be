package monitoring_test

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/monitoring"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// stored is what the ingest may have written: events and kept bodies.
func (c *callers) stored(t *testing.T) (int64, int64) {
	t.Helper()
	return c.count(t, core.EventsCollection, nil), c.count(t, core.PendingCollection, nil)
}

// keyFor is the key the service would make for a webhook id.
func keyFor(t *testing.T, webhookID string) string {
	t.Helper()
	k, err := core.NewAccessKey(testKeys, webhookID)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// event reads an event whole (a list leaves raw_data out).
func (c *callers) event(t *testing.T, id string) eventInfo {
	t.Helper()
	var ev eventInfo
	c.memberA1.Call("/monitoring/v1/event/get", map[string]any{"event_id": id}).OK(&ev)
	return ev
}

func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestIngestAbuse: bad bodies and bad URLs are 4xx with nothing stored
// and the plugin never called.
func TestIngestAbuse(t *testing.T) {
	t.Parallel()
	c := setup(t)
	w := c.webhook(t, c.memberA1, "Target")
	off := c.webhook(t, c.memberA1, "Off")
	c.memberA1.Call(wp+"disable", map[string]any{"webhook_id": off.WebhookID}).OK(nil)
	gone := c.webhook(t, c.memberA1, "Gone")
	c.memberA1.Call(wp+"delete", map[string]any{"webhook_id": gone.WebhookID}).OK(nil)
	c.parses(alert("k", "ALERT"))
	url := core.IngestPath(w.WebhookID, w.AccessKey)
	cases := []struct {
		name   string
		path   string
		body   string
		status int
		code   string
	}{
		{"malformed JSON", url, `{"a": `, 400, errs.JSONFormat},
		{"not JSON at all", url, `hello`, 400, errs.JSONFormat},
		{"an array", url, `[{"a": 1}]`, 400, errs.JSONFormat},
		{"a string", url, `"a"`, 400, errs.JSONFormat},
		{"null", url, `null`, 400, errs.JSONFormat},
		{"two objects", url, `{"a": 1} {"b": 2}`, 400, errs.JSONFormat},
		{"trailing garbage", url, `{"a": 1} x`, 400, errs.JSONFormat},
		{"empty body", url, ``, 400, errs.JSONFormat},
		{"oversize body", url, `{"a": "` + strings.Repeat("x", 1<<20) + `"}`, 413, errs.RequestTooLarge},
		{"wrong key", core.IngestPath(w.WebhookID, randomKey()), `{"a": 1}`, 403, errs.PermissionDenied},
		{"short key", core.IngestPath(w.WebhookID, w.AccessKey[:31]), `{"a": 1}`, 403, errs.PermissionDenied},
		{"key in upper case", core.IngestPath(w.WebhookID, strings.ToUpper(w.AccessKey)), `{"a": 1}`, 403, errs.PermissionDenied},
		{"another webhook's key", core.IngestPath(w.WebhookID, off.AccessKey), `{"a": 1}`, 403, errs.PermissionDenied},
		{"wrong key of a disabled webhook", core.IngestPath(off.WebhookID, w.AccessKey), `{"a": 1}`, 403, errs.PermissionDenied},
		{"disabled webhook", core.IngestPath(off.WebhookID, off.AccessKey), `{"a": 1}`, 403, errs.WebhookStateDisabled},
		{"deleted webhook", core.IngestPath(gone.WebhookID, gone.AccessKey), `{"a": 1}`, 404, errs.NotFoundCode},
		{"another webhook's id", core.IngestPath("webhook-000000000000", w.AccessKey), `{"a": 1}`, 403, errs.PermissionDenied},
		{"unknown webhook", core.IngestPath("webhook-000000000000", keyFor(t, "webhook-000000000000")), `{"a": 1}`, 404, errs.NotFoundCode},
		{"not a webhook id", core.IngestPath("ep-000000000000", w.AccessKey), `{"a": 1}`, 404, errs.NotFoundCode},
		{"injection in the id", "/monitoring/v1/webhook/" + `%7B%22%24ne%22%3A1%7D` + "/" + w.AccessKey + "/events", `{"a": 1}`, 404, errs.NotFoundCode},
		{"no key", "/monitoring/v1/webhook/" + w.WebhookID + "//events", `{"a": 1}`, 403, errs.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.anon.Call(tc.path, tc.body).Fails(tc.status, tc.code)
			if ev, kept := c.stored(t); ev != 0 || kept != 0 {
				t.Fatalf("stored %d events, %d bodies", ev, kept)
			}
			if n := len(c.plugin.Calls(parseMethod)); n != 0 {
				t.Fatalf("the plugin was called %d times", n)
			}
		})
	}
	// Guessed keys: none of many opens the door.
	for range 200 {
		if r := c.post(webhookInfo{WebhookID: w.WebhookID, AccessKey: randomKey()}, `{"a": 1}`); r.Status != http.StatusForbidden {
			t.Fatalf("a guessed key got %d", r.Status)
		}
	}
	// Only the bodies that reached a valid key count, and as errors.
	testkit.Eventually(t, time.Minute, "counters", func() bool { n, e := c.requests(t, w.WebhookID); return n == 9 && e == 9 })
	// Other methods are not served.
	req := httptest.NewRequest(http.MethodGet, url, nil)
	rec := httptest.NewRecorder()
	c.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed && rec.Code != http.StatusNotFound {
		t.Fatalf("GET: %d", rec.Code)
	}
	c.post(w, `{"a": 1}`).OK(nil) // still open to the right key
}

func TestIngestRateLimit(t *testing.T) {
	t.Parallel()
	// The limiter's clock moves only when the test moves it: a slow run
	// refills no token behind the test's back.
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) {
		cfg.IngestRate, cfg.IngestBurst, cfg.Clock = 0.5, 3, clock
	}})
	w := c.webhook(t, c.memberA1, "Flooded")
	quiet := c.webhook(t, c.memberA1, "Quiet")
	for i := range 3 {
		c.parses(alert(fmt.Sprint("k", i), "ALERT"))
		c.post(w, `{"n": 1}`).OK(nil)
	}
	for range 20 {
		r := c.post(w, `{"n": 2}`)
		r.Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	}
	if ev, kept := c.stored(t); ev != 3 || kept != 0 || len(c.plugin.Calls(parseMethod)) != 3 {
		t.Fatalf("the flood stored %d events, %d bodies", ev, kept)
	}
	// A webhook's flood leaves the others alone.
	c.parses(alert("q", "ALERT"))
	c.post(quiet, `{"n": 3}`).OK(nil)
	// Two seconds on, the flooded webhook has one token again, one only.
	advance(2 * time.Second)
	c.parses(alert("k3", "ALERT"))
	c.post(w, `{"n": 4}`).OK(nil)
	c.post(w, `{"n": 5}`).Fails(http.StatusTooManyRequests, errs.TooManyRequests)
	if ev, _ := c.stored(t); ev != 5 {
		t.Fatalf("%d events stored, want 5", ev)
	}
}

// TestIngestSlowBody: a body that does not arrive within the read
// timeout is refused with 408 over a real connection, nothing stored.
func TestIngestSlowBody(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) { cfg.ReadTimeout = 300 * time.Millisecond }})
	w := c.webhook(t, c.memberA1, "Slow")
	srv := httptest.NewServer(c.handler)
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"a\": ", core.IngestPath(w.WebhookID, w.AccessKey))
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute)) // only bounds a failing test
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout { // the read timeout's answer, whenever it comes
		t.Fatalf("slow body: %d after %s", resp.StatusCode, time.Since(start))
	}
	if ev, kept := c.stored(t); ev != 0 || kept != 0 || len(c.plugin.Calls(parseMethod)) != 0 {
		t.Fatalf("a slow body stored %d events, %d bodies", ev, kept)
	}
}

// TestIngestPluginFailures: a parse failure is one error event; a plugin
// that hangs or cannot be reached is a 504 or 502 within the parse
// timeout, and the body is kept and parsed later.
func TestIngestPluginFailures(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) {
		// A parse timeout far above a parse's time on a loaded machine:
		// 400 ms left a parse at load 20-40 little room before a 504.
		cfg.ParseTimeout, cfg.RetryInterval, cfg.MaxAttempts = 2*time.Second, 100*time.Millisecond, 3
	}})
	w := c.webhook(t, c.memberA1, "Flaky")

	// The plugin refuses the body: one error event, as upstream.
	c.plugin.Script(parseMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_PARSE", "no alerts in it")})
	var res struct {
		Results []struct {
			EventID string `json:"event_id"`
		} `json:"results"`
		Error string `json:"error"`
	}
	c.post(w, `{"weird": true}`).OK(&res)
	var ev eventInfo
	c.memberA1.Call("/monitoring/v1/event/get", map[string]any{"event_id": res.Results[0].EventID}).OK(&ev)
	if ev.EventType != "ERROR" || ev.Severity != "CRITICAL" || ev.Title != "Webhook Event Parsing Error - Flaky" ||
		!strings.Contains(ev.Description, "no alerts in it") || ev.RawData["weird"] != true || res.Error == "" {
		t.Fatalf("error event: %+v (%+v)", ev, res)
	}
	testkit.Eventually(t, time.Minute, "counters", func() bool { n, e := c.requests(t, w.WebhookID); return n == 1 && e == 1 })

	// The plugin hangs: 504 within the parse timeout, the body kept, then
	// parsed by the retry worker once the plugin answers.
	c.plugin.Script(parseMethod, fakeplugin.Reply{Hang: true})
	start := time.Now()
	c.post(w, `{"hung": 1}`).Fails(http.StatusGatewayTimeout, errs.WebhookPluginTimeout)
	if d := time.Since(start); d > time.Minute { // a hang, not a slow machine
		t.Fatalf("answered after %s", d)
	}
	if ev, kept := c.stored(t); ev != 1 || kept != 1 {
		t.Fatalf("after a hang: %d events, %d kept", ev, kept)
	}
	c.parses(alert("late", "ALERT"))
	testkit.Eventually(t, time.Minute, "the kept body to be parsed", func() bool { ev, kept := c.stored(t); return ev == 2 && kept == 0 })
	var l list[eventInfo]
	c.memberA1.Call("/monitoring/v1/event/list", map[string]any{"event_key": "late"}).OK(&l)
	if l.TotalCount != 1 || c.event(t, l.Results[0].EventID).RawData["hung"] != float64(1) {
		t.Fatalf("retried event: %+v", l)
	}

	// The plugin is gone: 502, kept; after MaxAttempts it becomes an error
	// event carrying the body.
	c.plugin.Stop()
	c.post(w, `{"lost": 1}`).Fails(http.StatusBadGateway, errs.WebhookPluginUnavailable)
	if _, kept := c.stored(t); kept != 1 {
		t.Fatalf("kept %d", kept)
	}
	testkit.Eventually(t, time.Minute, "the kept body to give up", func() bool { ev, kept := c.stored(t); return ev == 3 && kept == 0 })
	c.memberA1.Call("/monitoring/v1/event/list", map[string]any{"event_type": "ERROR", "query": map[string]any{"sort": []any{map[string]any{"key": "created_at", "desc": true}}}}).OK(&l)
	if l.TotalCount != 2 || c.event(t, l.Results[0].EventID).RawData["lost"] != float64(1) || !strings.Contains(l.Results[0].Description, "tries") {
		t.Fatalf("given-up body: %+v", l.Results)
	}
	testkit.Eventually(t, time.Minute, "counters", func() bool { n, e := c.requests(t, w.WebhookID); return n == 3 && e == 3 })
}

// A webhook keeps at most MaxKept bodies for its plugin: one more is
// dropped (503, counted as a failed request) and nothing more is stored.
// A plugin with no endpoint configured is a final failure: an error
// event, nothing kept for retry.
func TestIngestBounds(t *testing.T) {
	t.Parallel()
	// The parse timeout far above the plugin client's 300 ms wait for a
	// ready connection: a stopped plugin is unavailable (502), never a
	// timeout (504), however loaded the machine (400 ms met the 504 once
	// in 3 runs side by side at load 17).
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) {
		cfg.ParseTimeout, cfg.RetryInterval, cfg.MaxKept = 30*time.Second, time.Hour, 2
	}})
	w := c.webhook(t, c.memberA1, "Bounded")
	other := c.webhook(t, c.memberA1, "Other")
	c.plugin.Stop()
	c.post(w, `{"n": 1}`).Fails(http.StatusBadGateway, errs.WebhookPluginUnavailable)
	c.post(w, `{"n": 2}`).Fails(http.StatusBadGateway, errs.WebhookPluginUnavailable)
	for range 2 {
		c.post(w, `{"n": 3}`).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	}
	if ev, kept := c.stored(t); ev != 0 || kept != 2 {
		t.Fatalf("%d events, %d kept", ev, kept)
	}
	// The bound is the webhook's: another one keeps its own.
	c.post(other, `{"n": 1}`).Fails(http.StatusBadGateway, errs.WebhookPluginUnavailable)
	if _, kept := c.stored(t); kept != 3 {
		t.Fatalf("%d kept", kept)
	}
	testkit.Eventually(t, time.Minute, "counters", func() bool { n, e := c.requests(t, w.WebhookID); return n == 4 && e == 4 })

	// The webhook's plugin has no endpoint (plugin_endpoints lacks it).
	if _, err := c.db.Collection(core.WebhooksCollection).UpdateOne(t.Context(), bson.D{{Key: "_id", Value: other.WebhookID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "plugin_info.plugin_id", Value: "plugin-without-endpoint"}}}}); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Error string `json:"error"`
	}
	c.post(other, `{"n": 2}`).OK(&res)
	if ev, kept := c.stored(t); ev != 1 || kept != 3 || res.Error == "" {
		t.Fatalf("no endpoint: %d events, %d kept, %+v", ev, kept, res)
	}
}
