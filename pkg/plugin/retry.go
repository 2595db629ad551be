package plugin

// The retry policy of plugin calls: one rule, in one place, for every
// service (docs/decisions.md "Issue 41").
//
// Retryable decides which failures are worth another try; Policy says
// how many tries and how long between them. The client applies the
// default policy inside each call (upstream's: two retries on
// UNAVAILABLE or DEADLINE_EXCEEDED); a service that tries again later,
// at the level of its own work (a kept webhook body, a cost task, an
// inventory sub-task), asks the same Retryable and builds its Policy
// from its own settings.

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Retryable reports whether a failed plugin call may pass when tried
// again:
//
//   - the plugin could not be reached (ERROR_GRPC_CONNECTION: connection
//     refused, no route, a TLS handshake that failed) or did not answer
//     in time (ERROR_GRPC_TIMEOUT);
//   - the plugin itself answered UNAVAILABLE or DEADLINE_EXCEEDED (its
//     cloud throttles or is down), with or without an ERROR_ code;
//   - a raw gRPC status UNAVAILABLE or DEADLINE_EXCEEDED, or an error
//     that is no answer at all (connection refused or reset), which the
//     client reports as the plugin unavailable;
//   - an answer passed through from elsewhere with HTTP status 502, 503
//     or 504 (the store, the broker, another service down).
//
// Never retried: the plugin's own refusal or failure (INVALID_ARGUMENT,
// PERMISSION_DENIED, INTERNAL, UNKNOWN, ...), a plugin with no endpoint
// configured (ERROR_NO_PLUGIN_ENDPOINT: no retry finds one), any other
// 4xx or 5xx, and the caller's own cancellation.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if f, ok := FailureOf(err); ok {
		return f.Status == codes.Unavailable || f.Status == codes.DeadlineExceeded
	}
	if e, ok := errs.As(err); ok {
		switch e.Code {
		case errs.GRPCConnection, errs.GRPCTimeout:
			return true
		case errs.NoPluginEndpoint, errs.PluginFailed:
			return false // no endpoint; or the plugin's own failure
		}
		switch e.Status() {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded
	}
	// Not an answer at all (a connection refused or reset, a reply that
	// does not decode): the client reports it as the plugin unavailable.
	return true
}

// TimedOut reports a retryable failure that is the plugin's silence (it
// did not answer in time) rather than its absence.
func TimedOut(err error) bool {
	if f, ok := FailureOf(err); ok {
		return f.Status == codes.DeadlineExceeded
	}
	if errs.Is(err, errs.GRPCTimeout) {
		return true
	}
	return status.Code(err) == codes.DeadlineExceeded
}

// Policy bounds the tries of one piece of work and spaces them: each wait
// doubles from Base up to Max, with Jitter (a fraction, ±) so retries of
// a burst spread out.
type Policy struct {
	Attempts  int           // tries in all, the first included (at least 1)
	Base, Max time.Duration // the first wait, and the longest
	Jitter    float64       // e.g. 0.2: each wait is drawn in ±20%
}

// DefaultPolicy is the client's inside one call: upstream's two retries,
// after 100 ms and 200 ms (±20%).
var DefaultPolicy = Policy{Attempts: 1 + DefaultRetries, Base: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}

// Again reports whether the work, after its attempt-th try (1 for the
// first) failed with err, is tried again: err is Retryable and tries
// remain.
func (p Policy) Again(attempt int, err error) bool {
	return Retryable(err) && attempt < max(p.Attempts, 1)
}

// Delay is the wait after the attempt-th try (1 for the first): Base
// doubled per try, at most Max (none when 0), jittered; never negative,
// never past Max·(1+Jitter).
func (p Policy) Delay(attempt int) time.Duration {
	d := p.Base
	for i := 1; i < min(attempt, 32) && (p.Max <= 0 || d < p.Max); i++ {
		d *= 2
	}
	if p.Max > 0 {
		d = min(d, p.Max)
	}
	if j := min(max(p.Jitter, 0), 1); j > 0 {
		d = time.Duration(float64(d) * (1 - j + 2*j*rand.Float64()))
	}
	return max(d, 0)
}
