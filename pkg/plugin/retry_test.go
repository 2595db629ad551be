package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/plugin"
)

// answered is a plugin's own answer with a gRPC status, as a call returns it.
func answered(c codes.Code, code string) error {
	return &errs.Error{Code: errs.PluginFailed, Message: "Plugin p failed", Cause: &plugin.Failure{Plugin: "p", Status: c, Code: code}}
}

// TestRetryable is the one table of what every service tries again.
func TestRetryable(t *testing.T) {
	timedOut := errs.New(errs.GRPCTimeout, "The call to plugin p was cancelled or timed out.")
	cancelled := errs.New(errs.GRPCTimeout, "The call to plugin p was cancelled or timed out.")
	cancelled.Cause = context.Canceled
	for _, tt := range []struct {
		name      string
		err       error
		retryable bool
		timedOut  bool
	}{
		{"unreachable (connection refused, no route)", errs.New(errs.GRPCConnection, "Plugin p cannot be reached"), true, false},
		{"no answer in time", timedOut, true, true},
		{"the caller gave up", cancelled, false, true},
		{"the plugin answers UNAVAILABLE", answered(codes.Unavailable, ""), true, false},
		{"the plugin answers UNAVAILABLE with its code", answered(codes.Unavailable, "ERROR_AWS_THROTTLING"), true, false},
		{"the plugin answers DEADLINE_EXCEEDED", answered(codes.DeadlineExceeded, "ERROR_X"), true, true},
		{"the plugin refuses the request", answered(codes.InvalidArgument, "ERROR_INVALID_OPTIONS"), false, false},
		{"the plugin refuses the credentials", answered(codes.PermissionDenied, "ERROR_AUTH"), false, false},
		{"the plugin fails", answered(codes.Internal, "ERROR_UNKNOWN"), false, false},
		{"the plugin's reply is too large", answered(codes.ResourceExhausted, ""), false, false},
		{"the plugin does not serve the method", answered(codes.Unimplemented, ""), false, false},
		{"no endpoint configured", errs.New(errs.NoPluginEndpoint, "no endpoint"), false, false},
		{"HTTP 502 passed through", errs.Passthrough(http.StatusBadGateway, "ERROR_X", "bad gateway"), true, false},
		{"HTTP 503: the store is down", errs.Down("The store", errors.New("no server")), true, false},
		{"HTTP 504 passed through", errs.Passthrough(http.StatusGatewayTimeout, "ERROR_X", "gateway timeout"), true, false},
		{"HTTP 500: a bug", errs.New(errs.Unknown, "bug"), false, false},
		{"HTTP 400", errs.Invalid("options", "bad"), false, false},
		{"HTTP 404", errs.NotFound("plugin_id", "p"), false, false},
		{"raw UNAVAILABLE", status.Error(codes.Unavailable, "connection refused"), true, false},
		{"raw DEADLINE_EXCEEDED", status.Error(codes.DeadlineExceeded, "deadline"), true, true},
		{"raw INTERNAL", status.Error(codes.Internal, "boom"), false, false},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true, false},
		{"connection reset, wrapped", fmt.Errorf("read: %w", syscall.ECONNRESET), true, false},
		{"no answer at all (a reply that does not decode)", errors.New("decoding the reply"), true, false},
		{"the caller's cancellation", context.Canceled, false, false},
		{"ERROR_PLUGIN without the plugin's answer", errs.New(errs.PluginFailed, "x"), false, false},
		{"no error", nil, false, false},
	} {
		if got := plugin.Retryable(tt.err); got != tt.retryable {
			t.Errorf("%s: Retryable = %v, want %v", tt.name, got, tt.retryable)
		}
		if got := plugin.TimedOut(tt.err); got != tt.timedOut {
			t.Errorf("%s: TimedOut = %v, want %v", tt.name, got, tt.timedOut)
		}
	}
}

// A policy tries a retryable failure while tries remain, and spaces the
// tries by doubling waits, bounded, jittered within its fraction.
func TestPolicy(t *testing.T) {
	p := plugin.Policy{Attempts: 3, Base: 100 * time.Millisecond, Max: 300 * time.Millisecond, Jitter: 0.2}
	down := errs.New(errs.GRPCConnection, "down")
	refused := answered(codes.InvalidArgument, "ERROR_X")
	for _, tt := range []struct {
		attempt int
		err     error
		again   bool
	}{{1, down, true}, {2, down, true}, {3, down, false}, {1, refused, false}, {1, nil, false}} {
		if got := p.Again(tt.attempt, tt.err); got != tt.again {
			t.Errorf("Again(%d, %v) = %v, want %v", tt.attempt, tt.err, got, tt.again)
		}
	}
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 300 * time.Millisecond, 9: 300 * time.Millisecond} {
		lo, hi := time.Duration(float64(want)*0.8), time.Duration(float64(want)*1.2)
		spread := map[time.Duration]bool{}
		for range 200 {
			d := p.Delay(attempt)
			if d < lo || d > hi {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", attempt, d, lo, hi)
			}
			spread[d] = true
		}
		if len(spread) < 2 {
			t.Errorf("Delay(%d) never varies: no jitter", attempt)
		}
	}
	if d := (plugin.Policy{Base: 50 * time.Millisecond}).Delay(4); d != 400*time.Millisecond {
		t.Errorf("without Max or Jitter: %s, want 400ms", d)
	}
	if (plugin.Policy{}).Again(1, down) {
		t.Error("a policy of no attempts tries again")
	}
	if d := plugin.DefaultPolicy.Delay(1); d < 80*time.Millisecond || d > 120*time.Millisecond {
		t.Errorf("DefaultPolicy's first wait %s, want 100ms ±20%%", d)
	}
}
