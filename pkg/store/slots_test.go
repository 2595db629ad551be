package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestSlotsExactUnderConcurrency: 50 concurrent takes of 10 slots give
// exactly 10 successes, where $inc on FerretDB 1.24 loses updates.
func TestSlotsExactUnderConcurrency(t *testing.T) {
	s := store.Slots{C: testkit.Get().Database(t).Collection("slots"), Max: 10, TTL: time.Minute}
	ctx := context.Background()
	var won atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			ok, err := s.Take(ctx, "user-1")
			if err != nil {
				t.Error(err)
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 10 {
		t.Fatalf("%d takes won, want 10", won.Load())
	}
	if n, _ := s.Used(ctx, "user-1"); n != 10 {
		t.Fatalf("used = %d", n)
	}
	if n, _ := s.Used(ctx, "user-2"); n != 0 {
		t.Fatalf("another key used = %d", n)
	}
	if err := s.Reset(ctx, "user-1"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Take(ctx, "user-1"); !ok {
		t.Fatal("no slot after reset")
	}
}

func TestSlotsExpire(t *testing.T) {
	s := store.Slots{C: testkit.Get().Database(t).Collection("slots"), Max: 2, TTL: 200 * time.Millisecond}
	ctx := context.Background()
	start := time.Now()
	for range 2 {
		if ok, _ := s.Take(ctx, "k"); !ok {
			t.Fatal("slot refused")
		}
	}
	// Refused while the first two live (a loaded machine may take longer
	// than the TTL to get here: then the first may rightly be free).
	if ok, _ := s.Take(ctx, "k"); ok && time.Since(start) < s.TTL {
		t.Fatal("a third slot of two")
	}
	time.Sleep(250 * time.Millisecond)
	if n, _ := s.Used(ctx, "k"); n != 0 {
		t.Fatalf("expired slots still used: %d", n)
	}
	if ok, _ := s.Take(ctx, "k"); !ok {
		t.Fatal("expired slots not freed")
	}
}

// TestSlotsRacingTakes: takers on two clients race for few slots with a
// short TTL, so that slots keep expiring and being taken again while
// others read them. A slot a take won is live from the take's answer
// until at least the take's start plus the TTL: at no instant are more
// than Max such slots live (a slot freed by another taker's stale
// delete would let one more in).
func TestSlotsRacingTakes(t *testing.T) {
	db := testkit.Get().Database(t)
	other, err := store.Connect(context.Background(), testkit.Get().Mongo.URI, store.Options{MaxPoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Disconnect(context.Background()) }()
	const max, workers = 3, 16
	ttl := 150 * time.Millisecond
	slots := []store.Slots{
		{C: db.Collection("slots"), Max: max, TTL: ttl},
		{C: other.Database(db.Name()).Collection("slots"), Max: max, TTL: ttl},
	}
	type live struct{ from, to time.Time }
	var mu sync.Mutex
	var won []live
	var calls, failed atomic.Int32
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				start := time.Now()
				ok, err := slots[w%2].Take(context.Background(), "k")
				calls.Add(1)
				if err != nil {
					// The store did not answer in time (a loaded
					// machine): the take may or may not have landed.
					// Leaving it out can hide an overlap, never make
					// one; the count below shows how many went.
					failed.Add(1)
					continue
				}
				if ok {
					// The store keeps milliseconds: the expiry may be
					// up to 1 ms before start+TTL.
					mu.Lock()
					won = append(won, live{time.Now(), start.Add(ttl - 2*time.Millisecond)})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d takes won of %d (%d failed)", len(won), calls.Load(), failed.Load())
	if len(won) <= max {
		t.Fatalf("only %d takes won: the slots never expired during the race", len(won))
	}
	for _, a := range won {
		n := 0
		for _, b := range won {
			if !b.from.After(a.from) && a.from.Before(b.to) {
				n++
			}
		}
		if n > max {
			t.Fatalf("%d slots of %d live at once (of %d takes won)", n, max, len(won))
		}
	}
}
