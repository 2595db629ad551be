package schedule_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/schedule"
	"github.com/nubes-io/nubes/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type sched struct {
	State string `bson:"state"`
	Hours []int  `bson:"hours"`
}

// record is a scheduled record as a service would store it.
type record struct {
	ID       string `bson:"_id"`
	Group    string `bson:"group"`
	Schedule sched  `bson:"schedule"`
	Deleting bool   `bson:"deleting,omitempty"` // its delete has begun (store.Teardown)
}

const kind = "test-schedule"

// fixture is a records and a leases collection and the fires counted.
type fixture struct {
	records, leases *mongo.Collection
	mu              sync.Mutex
	fired           map[string]int
	fail            map[string]error // id -> what its fire returns
	log             bytes.Buffer
	logMu           sync.Mutex
}

func newFixture(t *testing.T, recs ...record) *fixture {
	t.Helper()
	db := testkit.Get().Database(t)
	f := &fixture{records: db.Collection("records"), leases: db.Collection("leases"), fired: map[string]int{}, fail: map[string]error{}}
	docs := make([]any, len(recs))
	for i, r := range recs {
		docs[i] = r
	}
	if len(docs) > 0 {
		if _, err := f.records.InsertMany(context.Background(), docs); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) Write(p []byte) (int, error) {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	return f.log.Write(p)
}

func (f *fixture) logged() string {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	return f.log.String()
}

func (f *fixture) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired[id]
}

// scheduler is one replica's scheduler at clock.
func (f *fixture) scheduler(clock *time.Time, filter bson.D) *schedule.Scheduler[record] {
	s := schedule.New(schedule.Config[record]{
		Records: f.records, Filter: filter, Leases: f.leases, Kind: kind, LeasePrefix: "p-",
		ID: func(r *record) string { return r.ID },
		Fire: func(_ context.Context, r *record) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.fired[r.ID]++
			return f.fail[r.ID]
		},
		Every: time.Hour, Log: slog.New(slog.NewTextHandler(f, nil)),
	})
	s.Now = func() time.Time { return *clock }
	return s
}

// race fires every scheduler twice at once: several replicas, several
// ticks each in the same hour.
func race(t *testing.T, ss ...*schedule.Scheduler[record]) {
	t.Helper()
	var wg sync.WaitGroup
	for _, s := range ss {
		for range 2 {
			wg.Go(func() {
				if err := s.Fire(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
}

func on(hours ...int) sched  { return sched{State: schedule.Enabled, Hours: hours} }
func off(hours ...int) sched { return sched{State: "DISABLED", Hours: hours} }

func TestFireOncePerHour(t *testing.T) {
	f := newFixture(t,
		record{ID: "at-3-and-4", Group: "g", Schedule: on(3, 4)},
		record{ID: "at-3", Group: "g", Schedule: on(3)},
		record{ID: "disabled", Group: "g", Schedule: off(3, 4)},
		record{ID: "at-5", Group: "g", Schedule: on(5)},
		record{ID: "filtered-out", Group: "other", Schedule: on(3, 4)},
		record{ID: "no-hours", Group: "g", Schedule: on()},
		record{ID: "being-deleted", Group: "g", Schedule: on(3, 4), Deleting: true},
	)
	clock := time.Date(2026, 5, 1, 3, 10, 0, 0, time.UTC)
	filter := bson.D{{Key: "group", Value: "g"}}
	a, b := f.scheduler(&clock, filter), f.scheduler(&clock, filter)
	steps := []struct {
		name string
		at   time.Time
		want map[string]int // running totals
	}{
		{"03:10", time.Date(2026, 5, 1, 3, 10, 0, 0, time.UTC), map[string]int{"at-3-and-4": 1, "at-3": 1}},
		{"03:59 same hour", time.Date(2026, 5, 1, 3, 59, 59, 0, time.UTC), map[string]int{"at-3-and-4": 1, "at-3": 1}},
		{"04:00 next hour", time.Date(2026, 5, 1, 4, 0, 0, 0, time.UTC), map[string]int{"at-3-and-4": 2, "at-3": 1}},
		{"03:00 next day", time.Date(2026, 5, 2, 3, 0, 0, 0, time.UTC), map[string]int{"at-3-and-4": 3, "at-3": 2}},
		{"another zone, 03:30 UTC", time.Date(2026, 5, 3, 12, 30, 0, 0, time.FixedZone("KST", 9*3600)), map[string]int{"at-3-and-4": 4, "at-3": 3}},
	}
	for _, st := range steps {
		clock = st.at
		race(t, a, b)
		for _, id := range []string{"at-3-and-4", "at-3", "disabled", "at-5", "filtered-out", "no-hours", "being-deleted"} {
			if got := f.count(id); got != st.want[id] {
				t.Fatalf("%s: %s fired %d times, want %d", st.name, id, got, st.want[id])
			}
		}
	}
	// The lease names the record and the hour.
	if n := testkit.Count(t, f.leases, bson.E{Key: "_id", Value: "p-at-3#2026-05-01T03"}, bson.E{Key: "kind", Value: kind},
		bson.E{Key: "record_id", Value: "at-3"}); n != 1 {
		t.Fatalf("lease of at-3 at 03: %d", n)
	}
}

func TestFireErrorDoesNotStopTheOthers(t *testing.T) {
	f := newFixture(t,
		record{ID: "a", Schedule: on(7)},
		record{ID: "b", Schedule: on(7)},
		record{ID: "c", Schedule: on(7)},
	)
	f.fail["a"] = errors.New("plugin down")
	f.fail["b"] = schedule.Skip(errors.New("a run is still going"))
	clock := time.Date(2026, 5, 1, 7, 0, 0, 0, time.UTC)
	s := f.scheduler(&clock, nil)
	if err := s.Fire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.count("a") != 1 || f.count("b") != 1 || f.count("c") != 1 {
		t.Fatalf("fired %v", f.fired)
	}
	log := f.logged()
	for _, want := range []string{`msg="scheduled run failed" kind=test-schedule id=a hour=7 error="plugin down"`,
		`msg="scheduled run skipped" kind=test-schedule id=b hour=7 reason="a run is still going"`,
		`msg="scheduled run" kind=test-schedule id=c hour=7`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	// A failed fire is not tried again in the same hour: its lease is taken.
	if err := s.Fire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.count("a") != 1 {
		t.Fatalf("a fired again: %v", f.fired)
	}
}

func TestOldLeasesPurged(t *testing.T) {
	f := newFixture(t)
	clock := time.Date(2026, 5, 3, 10, 20, 0, 0, time.UTC)
	hour := clock.Truncate(time.Hour)
	ctx := context.Background()
	docs := []any{
		bson.D{{Key: "_id", Value: "old"}, {Key: "kind", Value: kind}, {Key: "at", Value: hour.Add(-49 * time.Hour)}},
		bson.D{{Key: "_id", Value: "recent"}, {Key: "kind", Value: kind}, {Key: "at", Value: hour.Add(-47 * time.Hour)}},
		bson.D{{Key: "_id", Value: "at-the-bound"}, {Key: "kind", Value: kind}, {Key: "at", Value: hour.Add(-schedule.KeepLeases)}},
		bson.D{{Key: "_id", Value: "other-kind"}, {Key: "kind", Value: "other"}, {Key: "at", Value: hour.Add(-100 * time.Hour)}},
		bson.D{{Key: "_id", Value: "no-kind"}, {Key: "expires_at", Value: hour.Add(-100 * time.Hour)}},
	}
	if _, err := f.leases.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if err := f.scheduler(&clock, nil).Fire(ctx); err != nil {
		t.Fatal(err)
	}
	for id, kept := range map[string]bool{"old": false, "recent": true, "at-the-bound": true, "other-kind": true, "no-kind": true} {
		if _, ok := testkit.Find(t, f.leases, id); ok != kept {
			t.Errorf("lease %s kept %v, want %v", id, ok, kept)
		}
	}
}

// TestRun: Run fires on its first tick and returns when ctx ends.
func TestRun(t *testing.T) {
	// One hour, whatever the wall clock does: the record's and the
	// scheduler's, so a test run across the hour's end still fires.
	clock := testkit.StoppedClock(time.Now())
	f := newFixture(t, record{ID: "a", Schedule: on(clock.Now().Hour())})
	s := schedule.New(schedule.Config[record]{Records: f.records, Leases: f.leases, Kind: kind,
		ID: func(r *record) string { return r.ID },
		Fire: func(_ context.Context, r *record) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.fired[r.ID]++
			return nil
		}, Every: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	s.Now = clock.Now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, "Run never fired", func() bool { return f.count("a") > 0 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	if f.count("a") != 1 {
		t.Fatalf("fired %d times", f.count("a"))
	}
}
