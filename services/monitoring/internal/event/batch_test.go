package event

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/monitoring/internal/alert"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type batchRig struct {
	s   *Store
	al  *Alerting
	wh  *core.Webhook
	now time.Time
	seq int
	ctx context.Context
	db  *mongo.Database
}

func newBatchRig(t *testing.T) *batchRig {
	t.Helper()
	ctx := context.Background()
	db := testkit.Get().Database(t)
	log := slog.New(slog.DiscardHandler)
	clock := testkit.StoppedClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	alerts, err := alert.New(ctx, db, core.Projects{}, nil, alert.Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	alerts.SetClock(clock.Now)
	al := NewAlerting(db, alerts, nil, clock.Now, log)
	s, err := NewStore(ctx, db, nil, al, log)
	if err != nil {
		t.Fatal(err)
	}
	wh := &core.Webhook{WebhookID: "webhook-0123456789ab", Name: "w", DomainID: "domain-a", WorkspaceID: "workspace-1", ProjectID: "project-a1"}
	return &batchRig{s: s, al: al, wh: wh, now: clock.Now(), ctx: ctx, db: db}
}

// events are n new deliveries of key (each its own body).
func (r *batchRig) events(key string, n int) []*Event {
	var out []*Event
	for range n {
		r.seq++
		out = append(out, FromPlugin(r.wh, map[string]any{"event_key": key, "event_type": "ALERT", "title": "cpu",
			"description": fmt.Sprintf("body %d", r.seq)}, fmt.Sprintf(`{"n": %d}`, r.seq), r.now))
	}
	return out
}

// take records and applies evs together, as the ingest's batch does.
func (r *batchRig) take(t *testing.T, evs []*Event) ([]Recorded, []Applied) {
	t.Helper()
	recs, errs := r.s.RecordMany(r.ctx, evs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	var pending []Recorded
	for _, rec := range recs {
		if rec.Apply {
			pending = append(pending, rec)
		}
	}
	applied, errs := r.al.ApplyMany(r.ctx, pending)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	return recs, applied
}

func (r *batchRig) alert(t *testing.T, id string) bson.M {
	t.Helper()
	return testkit.Raw(t, r.db.Collection(core.AlertsCollection), id)
}

// num reads a stored number whatever its BSON type.
func num(v any) int64 {
	switch n := v.(type) {
	case int32:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return -1
}

// The events of one key that come together count on its open alert in
// one update (the alert's version moves once), each once, each marked
// applied; sent again, they are duplicates and count no more.
func TestApplyManyCountsAKeyAtOnce(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	_, first := r.take(t, r.events("k", 1))
	id := first[0].AlertID
	if id == "" || first[0].Opened == nil {
		t.Fatalf("first event: %+v", first)
	}
	before := r.alert(t, id)[store.VersionField]

	storm := r.events("k", 5)
	_, applied := r.take(t, storm)
	for i, ap := range applied {
		if ap.AlertID != id || ap.Opened != nil || ap.Dropped {
			t.Fatalf("event %d: %+v, want counted on %s", i, ap, id)
		}
	}
	a := r.alert(t, id)
	if num(a["event_count"]) != 6 || a["description"] != storm[4].Description {
		t.Fatalf("alert after the storm: count %v, description %v", a["event_count"], a["description"])
	}
	if v := num(a[store.VersionField]) - num(before); v != 1 {
		t.Fatalf("the alert was written %d times for the five events, want once", v)
	}
	for _, e := range storm {
		raw := testkit.Raw(t, r.s.c, e.ID)
		if raw["applied"] != true || raw["alert_id"] != id {
			t.Fatalf("event %s not marked: %v", e.ID, raw)
		}
	}

	// The sender's retries of the same five: duplicates, nothing counted.
	again := make([]*Event, len(storm))
	for i, e := range storm {
		c := *e
		again[i] = &c
	}
	recs, _ := r.take(t, again)
	for i, rec := range recs {
		if !rec.Outcome.Duplicate || rec.Outcome.AlertID != id {
			t.Fatalf("retry %d: %+v", i, rec.Outcome)
		}
	}
	if a := r.alert(t, id); num(a["event_count"]) != (6) {
		t.Fatalf("retries counted: %v", a["event_count"])
	}
	if n := testkit.Count(t, r.db.Collection(core.EventsCollection)); n != 6 {
		t.Fatalf("%d events stored, want 6", n)
	}
}

// A burst whose key's alert was resolved cannot count on it: decided one
// by one, it opens one new alert and the rest count there.
func TestApplyManyAfterResolve(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	_, first := r.take(t, r.events("k", 1))
	old := first[0].AlertID
	if _, err := r.db.Collection(core.AlertsCollection).UpdateOne(r.ctx, bson.D{{Key: "_id", Value: old}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: alert.Resolved}}}}); err != nil {
		t.Fatal(err)
	}
	_, applied := r.take(t, r.events("k", 4))
	opened, next := 0, applied[0].AlertID
	for _, ap := range applied {
		if ap.AlertID == old || ap.AlertID != next {
			t.Fatalf("applied %+v: want one new alert, not %s", applied, old)
		}
		if ap.Opened != nil {
			opened++
		}
	}
	if opened != 1 {
		t.Fatalf("%d alerts opened, want 1", opened)
	}
	if a := r.alert(t, next); num(a["event_count"]) != (4) {
		t.Fatalf("new alert counted %v, want 4", a["event_count"])
	}
	if a := r.alert(t, old); num(a["event_count"]) != (1) {
		t.Fatalf("resolved alert counted %v", a["event_count"])
	}
}

// A burst mixing an earlier try with new events: the earlier try is
// found stored, the batch counts none twice.
func TestApplyManyWithARetryAmongThem(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	_, first := r.take(t, r.events("k", 1))
	id := first[0].AlertID
	sent := r.events("k", 1)
	r.take(t, sent)
	retry := *sent[0]
	mixed := append([]*Event{&retry}, r.events("k", 3)...)
	recs, applied := r.take(t, mixed)
	if !recs[0].Outcome.Duplicate {
		t.Fatalf("the retry: %+v", recs[0].Outcome)
	}
	for _, ap := range applied {
		if ap.AlertID != id {
			t.Fatalf("applied %+v", applied)
		}
	}
	if a := r.alert(t, id); num(a["event_count"]) != (5) {
		t.Fatalf("counted %v, want 5", a["event_count"])
	}
}

// Events of new keys that come together open their alerts together:
// numbered 1 to n without a gap, each opened once and marked; the next
// events of those keys count on them.
func TestApplyManyOpensNewKeysAtOnce(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	var burst []*Event
	for k := range 4 {
		burst = append(burst, r.events(fmt.Sprintf("k-%d", k), 1)...)
	}
	_, applied := r.take(t, burst)
	numbers := map[int64]bool{}
	for i, ap := range applied {
		if ap.AlertID != AlertIDOf(burst[i].EventID) || ap.Opened == nil {
			t.Fatalf("event %d: %+v", i, ap)
		}
		a := r.alert(t, ap.AlertID)
		numbers[num(a["alert_number"])] = true
		if raw := testkit.Raw(t, r.db.Collection(core.EventsCollection), burst[i].ID); raw["applied"] != true || raw["alert_id"] != ap.AlertID {
			t.Fatalf("event %d not marked: %v", i, raw)
		}
	}
	for n := int64(1); n <= 4; n++ {
		if !numbers[n] {
			t.Fatalf("numbers %v, want 1 to 4", numbers)
		}
	}
	var next []*Event
	for k := range 4 {
		next = append(next, r.events(fmt.Sprintf("k-%d", k), 1)...)
	}
	_, again := r.take(t, next)
	for i, ap := range again {
		if ap.AlertID != applied[i].AlertID || ap.Opened != nil {
			t.Fatalf("next event %d: %+v, want counted on %s", i, ap, applied[i].AlertID)
		}
		if a := r.alert(t, ap.AlertID); num(a["event_count"]) != 2 {
			t.Fatalf("alert %s counted %v", ap.AlertID, a["event_count"])
		}
	}
	if n := testkit.Count(t, r.db.Collection(core.AlertsCollection)); n != 4 {
		t.Fatalf("%d alerts, want 4", n)
	}
}

// Several events of a new key that come together: the first opens its
// alert, the others count there, and none waits for an opener's grace.
func TestApplyManyNewKeyWithSeveral(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	burst := append(r.events("k-new", 3), r.events("k-other", 1)...)
	_, applied := r.take(t, burst)
	first := applied[0].AlertID
	if first != AlertIDOf(burst[0].EventID) || applied[0].Opened == nil || applied[3].AlertID == first || applied[3].Opened == nil {
		t.Fatalf("applied %+v", applied)
	}
	for _, ap := range applied[1:3] {
		if ap.AlertID != first || ap.Opened != nil {
			t.Fatalf("applied %+v: want the others counted on %s", applied, first)
		}
	}
	if a := r.alert(t, first); num(a["event_count"]) != 3 {
		t.Fatalf("counted %v, want 3", a["event_count"])
	}
	if n := testkit.Count(t, r.db.Collection(core.AlertsCollection)); n != 2 {
		t.Fatalf("%d alerts, want 2", n)
	}
}
