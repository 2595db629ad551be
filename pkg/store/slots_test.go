package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/errs"
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
	for range 2 {
		if ok, _ := s.Take(ctx, "k"); !ok {
			t.Fatal("slot refused")
		}
	}
	if ok, _ := s.Take(ctx, "k"); ok {
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

func TestLockExcludes(t *testing.T) {
	c := testkit.Get().Database(t).Collection("locks")
	ctx := context.Background()
	var inside, most, done atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			err := store.Lock(ctx, c, "k", time.Minute, 30*time.Second, func() error {
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(5 * time.Millisecond)
				inside.Add(-1)
				done.Add(1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if most.Load() != 1 || done.Load() != 8 {
		t.Fatalf("%d holders at once, %d runs; want 1 and 8", most.Load(), done.Load())
	}
}

func TestLockLeaseExpires(t *testing.T) {
	c := testkit.Get().Database(t).Collection("locks")
	ctx := context.Background()
	// A holder that died: its slot stays until the lease ends.
	if ok, err := (store.Slots{C: c, Max: 1, TTL: 300 * time.Millisecond}).Take(ctx, "k"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	ran := false
	err := store.Lock(ctx, c, "k", time.Minute, 50*time.Millisecond, func() error { ran = true; return nil })
	if e, ok := errs.As(err); !ok || e.Code != errs.Unavailable || ran {
		t.Fatalf("a held lock: %v, ran %v; want 503 and not run", err, ran)
	}
	if err := store.Lock(ctx, c, "k", time.Minute, 2*time.Second, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("after the lease: %v, ran %v", err, ran)
	}
}
