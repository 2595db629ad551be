package testkit

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestWithin: a condition that holds at once returns at once, one that
// comes true later is waited for, and one that never does is an error
// after the bound.
func TestWithin(t *testing.T) {
	t.Parallel()
	if err := Within(time.Hour, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	if err := Within(time.Hour, func() bool { return calls.Add(1) == 5 }); err != nil || calls.Load() != 5 {
		t.Fatalf("%v after %d calls, want nil after 5", err, calls.Load())
	}
	if err := Within(10*time.Millisecond, func() bool { return false }); err == nil {
		t.Fatal("a condition never met: no error")
	}
}

// TestClock: a stopped clock moves only when told; a running one keeps
// the wall clock's pace, shifted.
func TestClock(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	c := StoppedClock(at)
	if c.Now() != at {
		t.Fatalf("stopped clock at %v, want %v", c.Now(), at)
	}
	c.Advance(time.Hour)
	if c.Now() != at.Add(time.Hour) {
		t.Fatalf("advanced to %v", c.Now())
	}
	c.Set(at)
	if c.Now() != at {
		t.Fatalf("set to %v", c.Now())
	}
	r := RunningClock()
	before := time.Now().UTC().Truncate(time.Millisecond)
	r.Advance(24 * time.Hour)
	if got := r.Now(); got.Before(before.Add(24*time.Hour)) || got.After(time.Now().UTC().Add(24*time.Hour)) {
		t.Fatalf("running clock moved a day reads %v (wall %v)", got, before)
	}
}
