package testkit

import (
	"fmt"
	"testing"
	"time"
)

// Eventually polls cond until it holds, and fails the test with what if
// it does not within bound. The bound only ends a failing test: a passing
// one waits as long as cond takes and no longer, so nothing asserts how
// fast the machine is. The poll starts at a millisecond and backs off to
// 50 ms, so a condition met at once costs almost nothing.
func Eventually(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Within(bound, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Within is Eventually's wait for code that is not the test's goroutine
// (t.Fatal is only for that one): nil once cond holds, an error if it does
// not within bound.
func Within(bound time.Duration, cond func() bool) error {
	deadline := time.Now().Add(bound)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not reached within %v", bound)
		}
		time.Sleep(wait)
	}
	return nil
}
