package testkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestCallQueued: CallQueued repeats the 503 a lease's Take gives after
// its wait (read from lease.Take itself) and no other answer: a store's
// 503 and Fence's 503 come back at the first call.
func TestCallQueued(t *testing.T) {
	locks := testkit.Get().Database(t).Collection("locks")
	held, err := lease.Take(t.Context(), locks, "k", time.Minute, 0)
	if err != nil || held == nil {
		t.Fatal(held, err)
	}
	_, waited := lease.Take(t.Context(), locks, "k", time.Minute, 0)
	var fence *errs.Error
	func() {
		err := lease.Run(t.Context(), locks, "f", time.Second, time.Minute, func(ctx context.Context) error {
			_, _, err := lease.Fence(ctx, time.Hour) // never held that long
			return err
		})
		fence, _ = errs.As(err)
	}()
	lockWait, _ := errs.As(waited)
	if lockWait == nil || fence == nil {
		t.Fatalf("take %v, fence %v", waited, fence)
	}
	store := errs.Down("The store", errors.New("timeout"))
	for _, c := range []struct {
		name  string
		first *errs.Error
		calls int
	}{
		{"lease wait", lockWait, 3},
		{"fence", fence, 1},
		{"store", store, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				if calls < 3 { // the first two calls answer the error
					w.WriteHeader(http.StatusServiceUnavailable)
					_ = json.NewEncoder(w).Encode(map[string]any{"detail": map[string]string{"code": c.first.Code, "message": c.first.Message}})
					return
				}
				_, _ = w.Write([]byte("{}"))
			})
			r := testkit.NewClient(t, h).CallQueued("/x", nil)
			if calls != c.calls {
				t.Fatalf("%d calls, want %d (last answer %d %s)", calls, c.calls, r.Status, r.Body)
			}
		})
	}
}
