package events_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// runDeletions runs ConsumeDeletions for service until stop is called;
// its dead letters are dropped.
func runDeletions(t *testing.T, bus *events.Bus, service string, cleanup events.Cleanup) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	dead := func(context.Context, events.Dead) error { return nil }
	go func() { done <- events.ConsumeDeletions(ctx, bus, service, dead, nil, cleanup) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("ConsumeDeletions: %v", err)
				}
			case <-time.After(patience):
				t.Errorf("ConsumeDeletions did not return %s after its context ended", patience)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// ledger records the deletions a cleanup finished.
type ledger struct {
	mu   sync.Mutex
	done map[string]int
}

func (l *ledger) add(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = map[string]int{}
	}
	l.done[id]++
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done[id]
}

func deletion(kind, id string) events.Deleted {
	d := events.Deleted{ID: events.DeletedID(kind, "domain-1", id, "t0"), Kind: kind, DomainID: "domain-1", DeletedAt: "2026-01-01T00:00:00Z"}
	switch kind {
	case events.DeletedUser:
		d.UserID = id
	case events.DeletedWorkspace:
		d.WorkspaceID = id
	default:
		d.ProjectID = id
	}
	return d
}

func publishDeleted(t *testing.T, bus *events.Bus, d events.Deleted) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Publish(ctx, events.DeletedSubject, d.ID, d); err != nil {
		t.Fatal(err)
	}
}

// A consumer killed in the middle of a cleanup finishes it on restart,
// and takes the deletions published while it was down; each service's
// consumer reads every deletion on its own.
func TestDeletionsSurviveAKilledConsumer(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	started := make(chan struct{})
	stop := runDeletions(t, bus, "svc-a", func(ctx context.Context, d events.Deleted) error {
		close(started)
		<-ctx.Done() // killed while at work: the cleanup never returns nil
		return ctx.Err()
	})
	var other ledger
	runDeletions(t, bus, "svc-b", func(_ context.Context, d events.Deleted) error { other.add(d.ID); return nil })
	first, second := deletion(events.DeletedUser, "una"), deletion(events.DeletedWorkspace, "ws-1")
	publishDeleted(t, bus, first)
	select {
	case <-started:
	case <-time.After(patience):
		t.Fatal("the cleanup never started")
	}
	stop()
	publishDeleted(t, bus, second) // while svc-a is down

	var done ledger
	runDeletions(t, bus, "svc-a", func(_ context.Context, d events.Deleted) error {
		if d.Check() != nil {
			t.Errorf("a cleanup got %+v", d)
		}
		done.add(d.ID)
		return nil
	})
	testkit.Eventually(t, patience, "both deletions finished after the restart", func() bool { return done.count(first.ID) >= 1 && done.count(second.ID) >= 1 })
	testkit.Eventually(t, patience, "the other service's consumer got both", func() bool { return other.count(first.ID) == 1 && other.count(second.ID) == 1 })
}

// A cleanup that fails is delivered again until it succeeds; the same
// deletion published twice (a retried delete) is one message; a payload
// that is no deletion is dropped, and the next one still goes through.
func TestDeletionsRetryFailuresAndDropJunk(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	var mu sync.Mutex
	calls := map[string]int{}
	var done ledger
	runDeletions(t, bus, "svc", func(_ context.Context, d events.Deleted) error {
		mu.Lock()
		calls[d.ID]++
		k := calls[d.ID]
		mu.Unlock()
		if d.ProjectID == "flaky" && k == 1 {
			return errors.New("the store is down")
		}
		done.add(d.ID)
		return nil
	})
	ctx := context.Background()
	if err := bus.Publish(ctx, events.DeletedSubject, "junk-1", map[string]any{"kind": "USER"}); err != nil {
		t.Fatal(err)
	}
	flaky, twice := deletion(events.DeletedProject, "flaky"), deletion(events.DeletedUser, "twice")
	publishDeleted(t, bus, flaky)
	publishDeleted(t, bus, twice)
	publishDeleted(t, bus, twice)
	testkit.Eventually(t, patience, "the flaky deletion finished on its second delivery", func() bool { return done.count(flaky.ID) == 1 })
	testkit.Eventually(t, patience, "the deletion published twice finished", func() bool { return done.count(twice.ID) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if calls[flaky.ID] != 2 || calls[twice.ID] != 1 {
		t.Errorf("cleanup calls %v: want flaky twice, the duplicate once", calls)
	}
}

// The contract: ids are stable per life of a record; Check refuses a
// deletion without its subject; Owner selects by the suite's fields.
func TestDeletedContract(t *testing.T) {
	t.Parallel()
	if a, b := events.DeletedID(events.DeletedUser, "d", "u", "t1"), events.DeletedID(events.DeletedUser, "d", "u", "t1"); a != b || !events.ValidID(a) {
		t.Errorf("DeletedID not stable or not valid: %q %q", a, b)
	}
	if events.DeletedID(events.DeletedUser, "d", "u", "t1") == events.DeletedID(events.DeletedUser, "d", "u", "t2") {
		t.Error("a user created again and deleted again has the same deletion id")
	}
	for _, d := range []events.Deleted{
		{ID: "deleted-1", Kind: events.DeletedUser, DomainID: "d"},
		{ID: "deleted-1", Kind: events.DeletedWorkspace, DomainID: "d", UserID: "u"},
		{ID: "deleted-1", Kind: "DOMAIN", DomainID: "d", ProjectID: "p"},
		{ID: "deleted 1", Kind: events.DeletedProject, DomainID: "d", ProjectID: "p"},
		{ID: "deleted-1", Kind: events.DeletedProject, ProjectID: "p"},
	} {
		if d.Check() == nil {
			t.Errorf("Check(%+v) = nil", d)
		}
	}
	cases := map[string]events.Deleted{
		"user_id":      deletion(events.DeletedUser, "x"),
		"workspace_id": deletion(events.DeletedWorkspace, "x"),
		"project_id":   deletion(events.DeletedProject, "x"),
	}
	for field, d := range cases {
		o := d.Owner()
		if len(o) != 2 || o[0].Key != "domain_id" || o[0].Value != "domain-1" || o[1].Key != field || o[1].Value != "x" {
			t.Errorf("Owner of a %s deletion = %v", d.Kind, o)
		}
	}
}
