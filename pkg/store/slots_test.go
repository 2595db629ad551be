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
