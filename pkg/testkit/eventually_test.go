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
