package monitoring_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	mongoopts "go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/monitoring"
)

func escalating(cfg *monitoring.Config) { cfg.EscalationTick = 40 * time.Millisecond }

// requests are the notification requests published for an alert, in
// order (read from JetStream, where the outbox relay put them).
func (c *callers) notifyRequests(t *testing.T, alertID string) []events.NotificationRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.bus.JS.Stream(ctx, events.NotificationStream)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.NotificationRequestSubject}})
	if err != nil {
		t.Fatal(err)
	}
	var out []events.NotificationRequest
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var r events.NotificationRequest
			if err := json.Unmarshal(m.Data(), &r); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(r.ID, "notify-"+alertID+"-") {
				out = append(out, r)
			}
		}
		if n == 0 {
			return out
		}
	}
}

// passEnded waits until an escalation pass begun after the call has
// ended (where the test ticks at all): the latest claim of the tick's lease (pkg/lease: its epoch grows
// with every take) is two takes on, or one take on and released.
func (c *callers) passEnded(t *testing.T) {
	t.Helper()
	if c.cfg.EscalationTick <= 0 || c.cfg.EscalationTick >= time.Minute {
		return // no tick within the test: only the opening kick steps an alert, once
	}
	latest := func() (int64, bool) {
		var r struct {
			Epoch    int64 `bson:"epoch"`
			Released bool  `bson:"released"`
		}
		err := c.db.Collection("monitoring_claims").FindOne(context.Background(), bson.D{{Key: "lease", Value: "escalation#tick"}},
			mongoopts.FindOne().SetSort(bson.D{{Key: "epoch", Value: -1}})).Decode(&r)
		if err != nil {
			return 0, false // no claim yet
		}
		return r.Epoch, r.Released
	}
	from, _ := latest()
	testkit.Eventually(t, time.Minute, "an escalation pass begun and ended", func() bool {
		e, released := latest()
		return e >= from+2 || (e == from+1 && released)
	})
}

// waitRequests waits until the alert has n requests, then checks that no
// more come: a whole pass ran after the n-th, and what it recorded went
// from the outbox to the stream.
func (c *callers) waitRequests(t *testing.T, alertID string, n int) []events.NotificationRequest {
	t.Helper()
	var got []events.NotificationRequest
	testkit.Eventually(t, time.Minute, "notification requests", func() bool { got = c.notifyRequests(t, alertID); return len(got) >= n })
	c.passEnded(t)
	testkit.Eventually(t, time.Minute, "the outbox relayed its notification requests", func() bool {
		m, err := c.db.Collection("monitoring_outbox").CountDocuments(context.Background(), bson.D{{Key: "subject", Value: events.NotificationRequestSubject}})
		return err == nil && m == 0
	})
	if got = c.notifyRequests(t, alertID); len(got) != n {
		t.Fatalf("%d requests, want %d: %+v", len(got), n, ids(got))
	}
	return got
}

func ids(rs []events.NotificationRequest) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID+"@"+r.Level)
	}
	return out
}

func policyWith(name string, finish string, repeat int, rules ...map[string]any) map[string]any {
	list := make([]any, len(rules))
	for i, r := range rules {
		list[i] = r
	}
	return map[string]any{"name": name, "resource_group": "DOMAIN", "rules": list, "repeat_count": repeat, "finish_condition": finish}
}

func step(level string, minutes int) map[string]any {
	return map[string]any{"notification_level": level, "escalate_minutes": minutes}
}

// TestEscalationWalksThePolicy: each step at its level after the wait of
// the step before, the rules repeat_count+1 times, then nothing.
func TestEscalationWalksThePolicy(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: escalating})
	c.adminA.Call(ep+"create", policyWith("Oncall", "ACKNOWLEDGED", 1, step("LV1", 10), step("LV2", 5))).OK(nil)
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	got := c.waitRequests(t, a.AlertID, 1)
	r := got[0]
	if r.Level != "LV1" || r.Topic != "monitoring.Alert" || r.NotificationType != "ERROR" || r.ProjectID != "project-a1" ||
		r.DomainID != "domain-a" || r.Message.Title != "[Alerting] disk full" || len(r.Message.Callbacks) != 1 ||
		r.Message.Callbacks[0].Label != "Acknowledge" || r.Message.Tags[0].Value != "#1" {
		t.Fatalf("first request %+v", r)
	}
	if e := c.getAlert(t, a.AlertID); e.EscalatedAt == nil || e.EscalationStep != 1 || e.EscalationTTL != 2 {
		t.Fatalf("after the first step %+v", e)
	}
	c.clock.Advance(11 * time.Minute)
	got = c.waitRequests(t, a.AlertID, 2)
	c.clock.Advance(6 * time.Minute) // the last step: start over, one round less
	got = c.waitRequests(t, a.AlertID, 3)
	c.clock.Advance(11 * time.Minute)
	got = c.waitRequests(t, a.AlertID, 4)
	want := []string{"r2-s1@LV1", "r2-s2@LV2", "r1-s1@LV1", "r1-s2@LV2"}
	for i, r := range got {
		if !strings.HasSuffix(ids([]events.NotificationRequest{r})[0], want[i]) {
			t.Fatalf("requests %v, want %v", ids(got), want)
		}
	}
	c.clock.Advance(6 * time.Minute) // repeats used up
	c.waitRequests(t, a.AlertID, 4)
	testkit.Eventually(t, time.Minute, "ttl 0", func() bool { return c.getAlert(t, a.AlertID).EscalationTTL == 0 })
	c.clock.Advance(time.Hour)
	c.waitRequests(t, a.AlertID, 4)
}

// TestEscalationStopsWhenAcknowledged: the link of the message
// acknowledges the alert, and escalation stops (finish ACKNOWLEDGED).
func TestEscalationStopsWhenAcknowledged(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: escalating})
	c.adminA.Call(ep+"create", policyWith("Oncall", "ACKNOWLEDGED", 3, step("LV1", 1), step("LV2", 1))).OK(nil)
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	first := c.waitRequests(t, a.AlertID, 1)[0]
	u, err := url.Parse(first.Message.Callbacks[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	if status, body := c.visit(t, http.MethodPost, u.Path, "application/json", `{"responder": "pager"}`); status != 200 {
		t.Fatalf("acknowledge: %d %s", status, body)
	}
	testkit.Eventually(t, time.Minute, "ttl 0", func() bool { return c.getAlert(t, a.AlertID).EscalationTTL == 0 })
	c.clock.Advance(time.Hour)
	c.waitRequests(t, a.AlertID, 1)
	if e := c.getAlert(t, a.AlertID); e.State != "ACKNOWLEDGED" || e.Responder != "pager" {
		t.Fatalf("%+v", e)
	}
}

// TestEscalationUntilResolved: finish RESOLVED escalates an acknowledged
// alert; resolving it stops it and sends one [Resolved] per step reached.
func TestEscalationUntilResolved(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: escalating})
	c.adminA.Call(ep+"create", policyWith("Oncall", "RESOLVED", 0, step("LV1", 1), step("LV3", 1))).OK(nil)
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	c.waitRequests(t, a.AlertID, 1)
	c.memberA1.Call(ap+"update", map[string]any{"alert_id": a.AlertID, "state": "ACKNOWLEDGED"}).OK(nil)
	c.clock.Advance(2 * time.Minute)
	c.waitRequests(t, a.AlertID, 2)
	c.memberA1.Call(ap+"update", map[string]any{"alert_id": a.AlertID, "state": "RESOLVED"}).OK(nil)
	got := c.waitRequests(t, a.AlertID, 4)
	for i, level := range []string{"LV1", "LV3"} {
		r := got[2+i]
		if r.Level != level || r.NotificationType != "SUCCESS" || r.Message.Title != "[Resolved] disk full" || len(r.Message.Callbacks) != 0 {
			t.Fatalf("resolved notice %d: %+v", i, r)
		}
	}
	c.clock.Advance(time.Hour)
	c.waitRequests(t, a.AlertID, 4)
}

// TestEscalationHighOnly: a project that wants HIGH alerts only is not
// notified of a LOW one.
func TestEscalationHighOnly(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: escalating})
	c.memberA1.Call(cp+"create", map[string]any{"project_id": "project-a1", "options": map[string]any{"notification_urgency": "HIGH_ONLY"}}).OK(nil)
	var low alertInfo
	c.memberA1.Call(ap+"create", map[string]any{"title": "x", "project_id": "project-a1", "urgency": "LOW"}).OK(&low)
	high := c.alert(t, c.memberA1, "y", "project-a1")
	c.waitRequests(t, high.AlertID, 1)
	testkit.Eventually(t, time.Minute, "ttl 0", func() bool { return c.getAlert(t, low.AlertID).EscalationTTL == 0 })
	c.waitRequests(t, low.AlertID, 0)
}

// instance is a monitoring replica whose workers stop with stop.
func (c *callers) instance(t *testing.T) (stop func()) {
	t.Helper()
	svc, err := monitoring.Build(context.Background(), c.deps, c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(server.Options{Name: "monitoring", Auth: testkit.Get().Verifier, Logger: slog.New(slog.DiscardHandler), Raw: svc.Raw}, svc.Routes...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, len(svc.Workers))
	for _, w := range svc.Workers {
		go func() { _ = w(ctx); done <- struct{}{} }()
	}
	return func() {
		cancel()
		for range svc.Workers {
			<-done
		}
	}
}

// TestEscalationAcrossReplicasAndRestarts: three replicas escalate at
// once, one is stopped and another started mid-way: every step is asked
// for once, in order, none repeated.
func TestEscalationAcrossReplicasAndRestarts(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: escalating})
	c.adminA.Call(ep+"create", policyWith("Oncall", "ACKNOWLEDGED", 1, step("LV1", 1), step("LV2", 1))).OK(nil)
	stopB := c.instance(t)
	stopC := c.instance(t)
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	c.waitRequests(t, a.AlertID, 1)
	stopB()
	c.clock.Advance(2 * time.Minute)
	c.waitRequests(t, a.AlertID, 2)
	stopC()
	stopD := c.instance(t)
	defer stopD()
	c.clock.Advance(2 * time.Minute)
	c.waitRequests(t, a.AlertID, 3)
	c.clock.Advance(2 * time.Minute)
	got := c.waitRequests(t, a.AlertID, 4)
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.ID] {
			t.Fatalf("asked twice: %v", ids(got))
		}
		seen[r.ID] = true
	}
}

// TestEscalationStartsAtCreation: a new alert's first step is asked for
// at once, not at the next tick (upstream runs it at creation).
func TestEscalationStartsAtCreation(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) { cfg.EscalationTick = time.Hour }})
	c.parses(alert("k-1", "ALERT"))
	w := c.webhook(t, c.memberA1, "Grafana")
	id := c.ingest(t, w, `{"n": 1}`).Results[0].AlertID
	got := c.waitRequests(t, id, 1)
	if got[0].Level != "ALL" || got[0].Message.Title != "[Alerting] CPU high" {
		t.Fatalf("first step %+v", got[0])
	}
}

// TestEscalationBegunByTheInsert: a new alert is stored with its first
// step taken (step 1, escalated_at, the next look after the rule's wait)
// and the step's notice pending. A replica that stored it and died
// before recording the notice leaves it to any replica's tick, which
// records it once and clears it. The replica that stores it records the
// notice without another write of the alert: its version stays.
func TestEscalationBegunByTheInsert(t *testing.T) {
	t.Parallel()
	// No tick within the test but the one of the replica started below:
	// the notice stays pending until then.
	c := setupWith(t, options{settings: func(cfg *monitoring.Config) { cfg.EscalationTick = time.Hour }})
	c.adminA.Call(ep+"create", policyWith("Oncall", "ACKNOWLEDGED", 0, step("LV2", 10), step("LV3", 10))).OK(nil)
	// A replica whose workers never run: as one killed right after the insert.
	dead, err := monitoring.Build(context.Background(), c.deps, c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Name: "monitoring", Auth: testkit.Get().Verifier, Logger: slog.New(slog.DiscardHandler), Raw: dead.Raw}, dead.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	var a alertInfo
	testkit.NewClient(t, srv.Handler()).For(memberA1).Call(ap+"create", map[string]any{"title": "disk full", "project_id": "project-a1"}).OK(&a)
	if a.EscalationStep != 1 || a.EscalationTTL != 1 || a.EscalatedAt == nil {
		t.Fatalf("created %+v", a)
	}
	doc := c.raw(t, "monitoring_alerts", a.AlertID)
	want := "notify-" + a.AlertID + "-r1-s1"
	notice, _ := doc["notice"].(bson.M)
	created, _ := doc["created_at"].(bson.DateTime)
	look, _ := doc["escalate_at"].(bson.DateTime)
	if notice["id"] != want || notice["level"] != "LV2" || look.Time().Sub(created.Time()) != 10*time.Minute+time.Millisecond {
		t.Fatalf("stored %v", doc)
	}
	// A replica that ticks finds the notice left.
	cfg := c.cfg
	cfg.EscalationTick = 40 * time.Millisecond
	ticking, err := monitoring.Build(context.Background(), c.deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.RunWorkers(t, ticking.Workers)
	got := c.waitRequests(t, a.AlertID, 1)
	if got[0].ID != want || got[0].Level != "LV2" || got[0].Message.Title != "[Alerting] disk full" {
		t.Fatalf("recorded %+v", got[0])
	}
	testkit.Eventually(t, time.Minute, "the notice cleared", func() bool { _, ok := c.raw(t, "monitoring_alerts", a.AlertID)["notice"]; return !ok })

	// Stored by a replica that runs: recorded from the alert it stored
	// (or by the tick, which finds the step taken), never written again.
	b := c.alert(t, c.memberA1, "cpu high", "project-a1")
	c.waitRequests(t, b.AlertID, 1)
	testkit.Eventually(t, time.Minute, "the notice cleared", func() bool { _, ok := c.raw(t, "monitoring_alerts", b.AlertID)["notice"]; return !ok })
	if v := c.raw(t, "monitoring_alerts", b.AlertID)["version"]; v != int64(0) {
		t.Fatalf("version %v (%T): the first step wrote the alert again", v, v)
	}
}

// TestEscalationTakesOnlyDueAlerts: a tick steps only the alerts due
// for a step. Between steps, many ticks write no alert (its version,
// bumped by every write, stands still); once the step's wait is over,
// the next step is asked for, once.
func TestEscalationTakesOnlyDueAlerts(t *testing.T) {
	t.Parallel()
	c := setupWith(t, options{settings: escalating})
	c.adminA.Call(ep+"create", policyWith("Oncall", "ACKNOWLEDGED", 0, step("LV1", 10), step("LV2", 10))).OK(nil)
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	b := c.alert(t, c.memberA1, "cpu high", "project-a1")
	c.waitRequests(t, a.AlertID, 1)
	c.waitRequests(t, b.AlertID, 1)
	version := func(id string) int64 {
		t.Helper()
		var doc struct {
			Version int64 `bson:"version"`
		}
		if err := c.db.Collection("monitoring_alerts").FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		return doc.Version
	}
	// A tick's lease's epoch grows with every take (pkg/lease).
	ticks := func() int64 {
		t.Helper()
		var cl struct {
			Epoch int64 `bson:"epoch"`
		}
		err := c.db.Collection("monitoring_claims").FindOne(context.Background(), bson.D{{Key: "lease", Value: "escalation#tick"}},
			mongoopts.FindOne().SetSort(bson.D{{Key: "epoch", Value: -1}})).Decode(&cl)
		if err != nil {
			t.Fatal(err)
		}
		return cl.Epoch
	}
	va, vb, from := version(a.AlertID), version(b.AlertID), ticks()
	testkit.Eventually(t, time.Minute, "ten ticks", func() bool { return ticks() >= from+10 })
	if na, nb := version(a.AlertID), version(b.AlertID); na != va || nb != vb {
		t.Fatalf("alerts written %d and %d times over ten ticks with no step due", na-va, nb-vb)
	}
	c.clock.Advance(11 * time.Minute)
	c.waitRequests(t, a.AlertID, 2)
	c.waitRequests(t, b.AlertID, 2)
}

// TestEscalationNoticeLeftByACrash: a step's notice is written with the
// step and recorded after it; one left pending by a replica killed in
// between is recorded by the next tick, once, and cleared.
func TestEscalationNoticeLeftByACrash(t *testing.T) {
	c := setupWith(t, options{settings: escalating})
	c.adminA.Call(ep+"create", policyWith("Oncall", "ACKNOWLEDGED", 0, step("LV1", 10), step("LV2", 10))).OK(nil)
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	c.waitRequests(t, a.AlertID, 1)
	alerts := c.db.Collection("monitoring_alerts")
	raw := func() bson.M {
		t.Helper()
		var doc bson.M
		if err := alerts.FindOne(context.Background(), bson.D{{Key: "_id", Value: a.AlertID}}).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	if n, ok := raw()["notice"]; ok {
		t.Fatalf("the first step's notice was left pending: %v", n)
	}
	// As a step cut off after its write: the step is stored, its notice not recorded.
	left := "notify-" + a.AlertID + "-r1-s2"
	if _, err := alerts.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: a.AlertID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "escalation_step", Value: 2}, {Key: "notice", Value: bson.D{{Key: "id", Value: left}, {Key: "level", Value: "LV2"}}}}}}); err != nil {
		t.Fatal(err)
	}
	got := c.waitRequests(t, a.AlertID, 2)
	if got[1].ID != left || got[1].Level != "LV2" || got[1].Message.Title != "[Alerting] disk full" {
		t.Fatalf("the left notice recorded as %+v", got[1])
	}
	testkit.Eventually(t, time.Minute, "the notice cleared", func() bool { _, ok := raw()["notice"]; return !ok })
	c.waitRequests(t, a.AlertID, 2) // once
}
