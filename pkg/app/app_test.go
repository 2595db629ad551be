package app

import (
	"context"
	"errors"
	"testing"
	"time"
)

// ended reports whether ctx ended within d.
func ended(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(d):
		return false
	}
}

func TestAfterStop(t *testing.T) {
	t.Run("the stop does not cut it before grace", func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		actx, cancel := AfterStop(ctx, time.Hour)
		defer cancel()
		stop()
		if ended(actx, 200*time.Millisecond) {
			t.Fatalf("ended with the stop: %v", actx.Err())
		}
	})
	t.Run("grace after the stop it ends", func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		actx, cancel := AfterStop(ctx, 10*time.Millisecond)
		defer cancel()
		if ended(actx, 50*time.Millisecond) {
			t.Fatalf("ended before the stop: %v", actx.Err())
		}
		stop()
		if !ended(actx, 10*time.Second) || !errors.Is(actx.Err(), context.Canceled) {
			t.Fatalf("not ended after the stop's grace: %v", actx.Err())
		}
	})
	t.Run("cancel ends it and forgets the stop", func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		actx, cancel := AfterStop(ctx, time.Hour)
		cancel()
		if !ended(actx, 10*time.Second) {
			t.Fatal("not ended by cancel")
		}
	})
}
