package ratelimit

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/errs"
)

func TestAllow(t *testing.T) {
	l := New(2, 3) // 2 per second, bursts of 3
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := l.Allow("a", now); !ok {
			t.Fatalf("burst call %d refused", i)
		}
	}
	ok, wait := l.Allow("a", now)
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("4th call: %v, wait %s", ok, wait)
	}
	if ok, _ := l.Allow("b", now); !ok {
		t.Fatal("another key shares the bucket")
	}
	if ok, _ := l.Allow("a", now.Add(500*time.Millisecond)); !ok {
		t.Fatal("a token did not come back after 1/rate")
	}
	if ok, _ := l.Allow("a", now.Add(500*time.Millisecond)); ok {
		t.Fatal("two tokens from half a second")
	}
	if ok, _ := l.Allow("a", now); ok {
		t.Fatal("a clock going back gave tokens")
	}
	if ok, _ := New(0, 0).Allow("x", now); !ok {
		t.Fatal("rate 0 means no limit")
	}
}

func TestChargeMakesADebt(t *testing.T) {
	l := New(10, 5)
	now := time.Unix(1000, 0)
	if ok, _ := l.Allow("w", now); !ok {
		t.Fatal("first call refused")
	}
	l.Charge("w", 24, now) // 4 left, minus 24: a debt of 20
	ok, wait := l.Allow("w", now)
	if ok || wait != 2100*time.Millisecond {
		t.Fatalf("in debt: %v, wait %s (want 2.1s: 21 tokens at 10/s)", ok, wait)
	}
	if ok, _ := l.Allow("w", now.Add(2*time.Second)); ok {
		t.Fatal("allowed before the debt was paid")
	}
	if ok, _ := l.Allow("w", now.Add(2100*time.Millisecond)); !ok {
		t.Fatal("refused once the debt was paid")
	}
}

func TestReadyTakesNothing(t *testing.T) {
	l := New(1, 2)
	now := time.Unix(1000, 0)
	for range 10 {
		if ok, _ := l.Ready("src", now); !ok {
			t.Fatal("Ready spent a token")
		}
	}
	l.Charge("src", 2, now)
	if ok, wait := l.Ready("src", now); ok || wait != time.Second {
		t.Fatalf("after two failures: %v, wait %s", ok, wait)
	}
}

func TestGuardChargesRefusalsOnly(t *testing.T) {
	l := New(1, 3)
	now := time.Unix(1000, 0)
	calls := 0
	ok := func() error { calls++; return nil }
	denied := func() error { calls++; return errs.New(errs.PermissionDenied, "no") }
	down := func() error { calls++; return errs.New(errs.Unavailable, "down") }
	for range 10 {
		if err := l.Guard(httptest.NewRecorder(), "a", now, ok); err != nil {
			t.Fatal(err)
		}
		if err := l.Guard(httptest.NewRecorder(), "a", now, down); !errs.Is(err, errs.Unavailable) {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := l.Guard(httptest.NewRecorder(), "a", now, denied); !errs.Is(err, errs.PermissionDenied) {
			t.Fatal(err)
		}
	}
	calls = 0
	w := httptest.NewRecorder()
	if err := l.Guard(w, "a", now, ok); !errs.Is(err, errs.TooManyRequests) || calls != 0 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("after 3 refusals: %v, %d calls, Retry-After %q", err, calls, w.Header().Get("Retry-After"))
	}
	if err := l.Guard(httptest.NewRecorder(), "b", now, ok); err != nil {
		t.Fatal("another source is refused:", err)
	}
	if err := l.Guard(httptest.NewRecorder(), "a", now.Add(time.Second), ok); err != nil {
		t.Fatal("a token did not come back:", err)
	}
}
