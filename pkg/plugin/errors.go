package plugin

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Failure is what a plugin answered, kept for callers that store it (a
// cost job task keeps the plugin's error_code, an inventory job task its
// message). It is the Cause of the *errs.Error a call returns; find it
// with FailureOf.
type Failure struct {
	Plugin  string     // plugin id or endpoint
	Method  Method     // the method called
	Status  codes.Code // gRPC status
	Code    string     // the plugin's ERROR_ code, "" when it gave none
	Message string     // the plugin's message (after "ERROR_X: ")
	// Unsupported: the plugin does not serve Method (a plugin of another
	// kind, or an older one).
	Unsupported bool
}

func (f *Failure) Error() string {
	if f.Code != "" {
		return f.Code + ": " + f.Message
	}
	return f.Message
}

// FailureOf returns the plugin's own answer inside err, if err is a failure
// the plugin reported (not one of reaching it).
func FailureOf(err error) (*Failure, bool) {
	var f *Failure
	ok := errors.As(err, &f)
	return f, ok
}

// splitDetails reads upstream's "ERROR_CODE: message" status text.
func splitDetails(s string) (code, msg string) {
	if strings.HasPrefix(s, "ERROR_") {
		if c, m, ok := strings.Cut(s, ":"); ok && !strings.ContainsAny(c, " \t\n") {
			return c, strings.TrimSpace(m)
		}
	}
	return "", s
}

// failed maps a failed plugin call to the error Nubes answers with.
//
//   - the plugin answered with an error: ERROR_PLUGIN, its code and message
//     kept in the message ("Plugin p failed: ERROR_X: message"); status 400
//     when the plugin refused what it was sent on the caller's behalf
//     (options, secret data: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//     FAILED_PRECONDITION, OUT_OF_RANGE, PERMISSION_DENIED, UNAUTHENTICATED,
//     UNIMPLEMENTED), 503 when it says it is unavailable, 502 for its own
//     failures (INTERNAL, UNKNOWN, a reply over the receive limit, ...);
//   - the plugin could not be reached: 503 ERROR_GRPC_CONNECTION;
//   - it did not answer in time, or the caller gave up: 503 ERROR_GRPC_TIMEOUT.
func (t *Target) failed(m Method, err error) error {
	if e, ok := errs.As(err); ok {
		return e
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		e := errs.New(errs.GRPCTimeout, "The call to plugin %s (%s) was cancelled or timed out.", t.name, m.short())
		e.Cause = err
		return e
	}
	st, ok := status.FromError(err)
	if !ok {
		return errs.Down("Plugin "+t.name, err)
	}
	code, msg := splitDetails(st.Message())
	switch {
	case st.Code() == codes.Unavailable && code == "":
		e := errs.New(errs.GRPCConnection, "Plugin %s cannot be reached, retry later.", t.name)
		e.Cause = err
		return e
	case st.Code() == codes.DeadlineExceeded && code == "":
		e := errs.New(errs.GRPCTimeout, "Plugin %s did not answer %s in time.", t.name, m.short())
		e.Cause = err
		return e
	case st.Code() == codes.Canceled && code == "":
		e := errs.New(errs.GRPCTimeout, "The call to plugin %s (%s) was cancelled.", t.name, m.short())
		e.Cause = err
		return e
	}
	f := &Failure{Plugin: t.name, Method: m, Status: st.Code(), Code: code, Message: msg,
		Unsupported: st.Code() == codes.Unimplemented && code == ""}
	if st.Code() == codes.ResourceExhausted && code == "" {
		f.Message = "reply too large: " + msg
	}
	return pluginError(f)
}

// pluginError is the client-visible error of a plugin's own failure.
func pluginError(f *Failure) error {
	httpStatus := http.StatusBadGateway
	switch f.Status {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition,
		codes.OutOfRange, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		httpStatus = http.StatusBadRequest
	case codes.Unavailable, codes.DeadlineExceeded:
		httpStatus = http.StatusServiceUnavailable
	}
	text := f.Message
	if f.Code != "" {
		text = f.Code + ": " + f.Message
	}
	e := errs.Passthrough(httpStatus, errs.PluginFailed, "Plugin "+f.Plugin+" failed ("+f.Method.short()+"): "+text)
	e.Cause = f
	return e
}

// unsupported is the error of a method the plugin does not serve.
func (t *Target) unsupported(m Method) error {
	return pluginError(&Failure{Plugin: t.name, Method: m, Status: codes.Unimplemented, Unsupported: true,
		Message: "the plugin does not serve " + string(m)})
}
