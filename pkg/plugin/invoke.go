package plugin

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Method is a plugin method as "<proto package>.<Service>/<method>", its
// wire path without the leading slash.
type Method string

// short is "Service.method", the upstream core's name of the method.
func (m Method) short() string {
	svc, name, _ := strings.Cut(string(m), "/")
	if i := strings.LastIndex(svc, "."); i >= 0 {
		svc = svc[i+1:]
	}
	return svc + "." + name
}

// outgoing adds the metadata the upstream core sends its plugins: the
// literal token NO_TOKEN (plugins run without authentication).
func outgoing(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "token", "NO_TOKEN")
}

// prepare finds the connection and the method descriptor and builds the
// request.
func (t *Target) prepare(ctx context.Context, m Method, req map[string]any) (*conn, protoreflect.MethodDescriptor, *dynamicpb.Message, error) {
	if t.err != nil {
		return nil, nil, nil, t.err
	}
	cn, err := t.c.conn(t.endpoint)
	if err != nil {
		return nil, nil, nil, errs.New(errs.NoPluginEndpoint, "Plugin endpoint %q of %s is not valid: %v", t.endpoint, t.name, err)
	}
	if err := t.c.ready(ctx, cn); err != nil {
		if ctx.Err() != nil {
			return nil, nil, nil, t.failed(m, ctx.Err())
		}
		e := errs.New(errs.GRPCConnection, "Plugin %s cannot be reached, retry later.", t.name)
		e.Cause = err
		return nil, nil, nil, e
	}
	md, err := t.c.methodDesc(ctx, cn, m)
	if err != nil {
		var re *reflectErr
		switch {
		case errors.As(err, &re):
			return nil, nil, nil, pluginError(&Failure{Plugin: t.name, Method: m, Status: codes.Internal, Message: re.msg})
		case status.Code(err) == codes.Unimplemented:
			return nil, nil, nil, pluginError(&Failure{Plugin: t.name, Method: m, Status: codes.Internal,
				Message: "the plugin does not serve gRPC server reflection"})
		}
		return nil, nil, nil, err // transport errors: retried by the caller
	}
	if md == nil {
		return nil, nil, nil, t.unsupported(m)
	}
	if md.IsStreamingClient() {
		return nil, nil, nil, t.unsupported(m)
	}
	msg, err := encodeRequest(md, m, req)
	if err != nil {
		return nil, nil, nil, errs.New(errs.InvalidParameter, "Invalid request to plugin %s (%s): %v", t.name, m.short(), err)
	}
	return cn, md, msg, nil
}

// Invoke calls a unary method and returns its reply as a map. Each try has
// the CallTimeout deadline; a Retryable failure is tried again Retries
// times (the client's Policy).
func (t *Target) Invoke(ctx context.Context, m Method, req map[string]any) (map[string]any, error) {
	var err error
	for try := 0; ; try++ {
		var out map[string]any
		out, err = t.invokeOnce(ctx, m, req)
		if err == nil {
			return out, nil
		}
		if !t.retryThisCall(try+1, err) || ctx.Err() != nil {
			break
		}
		t.c.opts.Log.Debug("plugin call retried", "plugin", t.name, "method", string(m), "try", try+1, "error", err)
		if !sleep(ctx, t.c.policy.Delay(try+1)) {
			break
		}
	}
	return nil, t.failed(m, callerGaveUp(ctx, err))
}

// retryThisCall: the client's policy inside one call, over the plugin's
// gRPC answers only. An error prepare already mapped is its verdict on
// this call (a connection not ready within ReadyTimeout was waited for;
// an unsupported method stays so), and a reply that does not decode
// decodes no better the second time; the caller may try later
// (Retryable).
func (t *Target) retryThisCall(attempt int, err error) bool {
	if _, answered := status.FromError(err); !answered {
		return false
	}
	return t.c.policy.Again(attempt, err)
}

// callerGaveUp reports the caller's cancellation or deadline as such (the
// error then wraps context.Canceled or context.DeadlineExceeded).
func callerGaveUp(ctx context.Context, err error) error {
	if _, ok := errs.As(err); !ok && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (t *Target) invokeOnce(ctx context.Context, m Method, req map[string]any) (map[string]any, error) {
	cn, md, msg, err := t.prepare(ctx, m, req)
	if err != nil {
		return nil, err
	}
	if md.IsStreamingServer() {
		return nil, t.unsupported(m)
	}
	cctx, cancel := context.WithTimeout(outgoing(ctx), t.c.opts.CallTimeout)
	defer cancel()
	resp := dynamicpb.NewMessage(md.Output())
	if err := cn.cc.Invoke(cctx, "/"+string(m), msg, resp); err != nil {
		t.afterError(cn, err)
		return nil, err
	}
	return decodeReply(resp)
}

// Stream calls a server-streaming method and hands each message to fn in
// order. The stream has no deadline: ctx cancels it. UNAVAILABLE and
// DEADLINE_EXCEEDED before the first message are tried again; once a
// message has been handed over, a failure ends the call (fn must not see
// messages twice). An error from fn cancels the stream and is returned
// as is.
func (t *Target) Stream(ctx context.Context, m Method, req map[string]any, fn func(map[string]any) error) error {
	var err error
	for try := 0; ; try++ {
		var got bool
		got, err = t.streamOnce(ctx, m, req, fn)
		if err == nil {
			return nil
		}
		var fe *fnError
		if errors.As(err, &fe) {
			return fe.err
		}
		if got || !t.retryThisCall(try+1, err) || ctx.Err() != nil {
			break
		}
		t.c.opts.Log.Debug("plugin stream retried", "plugin", t.name, "method", string(m), "try", try+1, "error", err)
		if !sleep(ctx, t.c.policy.Delay(try+1)) {
			break
		}
	}
	return t.failed(m, callerGaveUp(ctx, err))
}

// fnError carries the callback's own error through the stream loop.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }

func (t *Target) streamOnce(ctx context.Context, m Method, req map[string]any, fn func(map[string]any) error) (got bool, err error) {
	cn, md, msg, err := t.prepare(ctx, m, req)
	if err != nil {
		return false, err
	}
	if !md.IsStreamingServer() {
		return false, t.unsupported(m)
	}
	sctx, cancel := context.WithCancel(outgoing(ctx))
	defer cancel()
	st, err := cn.cc.NewStream(sctx, &grpc.StreamDesc{StreamName: string(md.Name()), ServerStreams: true}, "/"+string(m))
	if err != nil {
		t.afterError(cn, err)
		return false, err
	}
	if err := st.SendMsg(msg); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	if err := st.CloseSend(); err != nil {
		return false, err
	}
	for {
		resp := dynamicpb.NewMessage(md.Output())
		if err := st.RecvMsg(resp); err != nil {
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			t.afterError(cn, err)
			return got, err
		}
		got = true
		out, err := decodeReply(resp)
		if err != nil {
			return got, err
		}
		if err := fn(out); err != nil {
			return got, &fnError{err}
		}
	}
}

// afterError forgets the descriptors when the plugin may have changed: it
// went away, or says it does not serve a method its descriptors listed.
func (t *Target) afterError(cn *conn, err error) {
	switch status.Code(err) {
	case codes.Unavailable, codes.Unimplemented:
		cn.forgetDescriptors()
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
