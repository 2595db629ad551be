// Package grpcapi serves every declared operation over gRPC as well, the
// way upstream's own clients (cfctl, spacectl, python-core's client, the
// REST gateway) call them: /spaceone.api.<service>.<version>.<Resource>/<verb>,
// request and response messages built at start-up from the operations'
// declarations (Describe), server reflection v1 and v1alpha for clients
// that know no Nubes type, and the gRPC health service.
//
// A call is turned into the operation's JSON body (jsonwire.FromMessage) and run through the same
// path as an HTTP call (server.Server.Invoke: authentication from metadata
// `token`, access, scope, strict decoding, validation, the handler); an
// error becomes the gRPC status of its HTTP status with the message
// `ERROR_CODE: message`, as python-core reads it.
package grpcapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionalphapb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/grpcapi/jsonwire"
	"github.com/nubes-io/nubes/pkg/server"
)

// Limits of a connection and a call. A request's JSON body has HTTP's
// bound (server.MaxBody, else ERROR_REQUEST_TOO_LARGE); grpc-go refuses a
// message over twice that before reading it (protobuf is smaller than its
// JSON for the same data, so no request within HTTP's bound meets it).
// Answers may be as large as HTTP's.
const (
	MaxRecvMsgSize       = 2 * server.MaxBody
	MaxConcurrentStreams = 100
	// DefaultCallTimeout bounds one call, as the HTTP write timeout
	// bounds one answer.
	DefaultCallTimeout = server.DefaultWriteTimeout
	// A connection with no call for this long is closed, as HTTP's idle
	// keep-alive connection is.
	DefaultIdle = server.DefaultIdleTimeout
	// Pings: the server pings an idle connection every keepaliveTime and
	// drops it when no answer comes within keepaliveTimeout; a client may
	// ping every minPingInterval at most (python grpc pings every 2 min
	// at most by default).
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
	minPingInterval  = 10 * time.Second
	// streamWorkers serve calls on goroutines kept between calls, whose
	// stacks have grown already (a goroutine per call grows its stack on
	// each); past them a call gets its own goroutine, as without workers.
	streamWorkers = 32
)

// Options configure a Server.
type Options struct {
	// CallTimeout bounds each call (zero: DefaultCallTimeout).
	CallTimeout time.Duration
	// Idle closes a connection without calls after this long (zero: DefaultIdle).
	Idle time.Duration
	// DrainDelay is how long health answers NOT_SERVING before the server
	// stops taking calls; ShutdownTimeout how long calls under way then
	// get (zero: 20 s). The HTTP server's are the same settings.
	DrainDelay, ShutdownTimeout time.Duration
	// ReadyEvery is how often health asks the HTTP server's readiness
	// check (the store): NOT_SERVING while it fails, as /readyz answers
	// 503 (zero: DefaultReadyEvery).
	ReadyEvery time.Duration
}

// DefaultReadyEvery is how often health follows readiness by default.
const DefaultReadyEvery = 5 * time.Second

// Server is the gRPC face of one HTTP server's operations.
type Server struct {
	http   *server.Server
	desc   *Descriptors
	grpc   *grpc.Server
	health *health.Server
	opts   Options
	log    *slog.Logger
	drain  func(time.Duration) // time.Sleep; a test ends the drain itself
}

// New describes the operations of srv and builds their gRPC server, with
// reflection and health.
func New(srv *server.Server, opts Options) (*Server, error) {
	desc, err := Describe(srv.Routes())
	if err != nil {
		return nil, err
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.Idle <= 0 {
		opts.Idle = DefaultIdle
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 20 * time.Second
	}
	if opts.ReadyEvery <= 0 {
		opts.ReadyEvery = DefaultReadyEvery
	}
	s := &Server{http: srv, desc: desc, opts: opts, log: srv.Log(), health: health.NewServer(), drain: time.Sleep}
	s.grpc = grpc.NewServer(
		grpc.ForceServerCodecV2(newCodec()),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.ConnectionTimeout(server.DefaultReadHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: opts.Idle, Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
	)
	services := map[string]*grpc.ServiceDesc{}
	var order []string
	for _, m := range desc.Methods {
		sd := services[m.Service]
		if sd == nil {
			fd, _ := desc.Files.FindDescriptorByName(protoreflect.FullName(m.Service))
			file := ""
			if fd != nil {
				file = fd.ParentFile().Path()
			}
			sd = &grpc.ServiceDesc{ServiceName: m.Service, HandlerType: (*any)(nil), Metadata: file}
			services[m.Service] = sd
			order = append(order, m.Service)
		}
		sd.Methods = append(sd.Methods, grpc.MethodDesc{MethodName: m.Name, Handler: s.handler(m)})
	}
	for _, name := range order {
		s.grpc.RegisterService(services[name], struct{}{})
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	ropts := reflection.ServerOptions{Services: s.grpc, DescriptorResolver: resolver{desc.Files}}
	reflectionpb.RegisterServerReflectionServer(s.grpc, reflection.NewServerV1(ropts))
	reflectionalphapb.RegisterServerReflectionServer(s.grpc, reflection.NewServer(ropts))
	return s, nil
}

// Descriptors are the generated files and methods (tests read them).
func (s *Server) Descriptors() *Descriptors { return s.desc }

// resolver finds the generated files first, then the linked-in ones
// (health and reflection themselves).
type resolver struct{ files *protoregistry.Files }

var _ protodesc.Resolver = resolver{}

func (r resolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if fd, err := r.files.FindFileByPath(path); err == nil {
		return fd, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (r resolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.files.FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}

// Run serves on ln until ctx is done, then stops gracefully: health
// answers NOT_SERVING, the drain delay passes, calls under way finish (at
// most ShutdownTimeout), the rest are cut.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(ln) }()
	s.log.Info("serving gRPC", "addr", ln.Addr().String(), "services", len(s.grpc.GetServiceInfo()))
	rctx, stopReady := context.WithCancel(ctx)
	readyDone := make(chan struct{})
	go func() { defer close(readyDone); s.followReady(rctx) }()
	defer func() { stopReady(); <-readyDone }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopReady()
	<-readyDone
	s.health.Shutdown()
	s.drain(s.opts.DrainDelay)
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.opts.ShutdownTimeout):
		s.log.Warn("gRPC calls cut at shutdown")
		s.grpc.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// followReady sets every service's health from the HTTP server's
// readiness check until ctx is done, so a load balancer or client that
// asks health stops sending calls that would fail on the store.
func (s *Server) followReady(ctx context.Context) {
	t := time.NewTicker(s.opts.ReadyEvery)
	defer t.Stop()
	serving := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, min(s.opts.ReadyEvery, 5*time.Second))
		err := s.http.Ready(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if now := err == nil; now != serving {
			serving = now
			st := healthpb.HealthCheckResponse_SERVING
			if !serving {
				st = healthpb.HealthCheckResponse_NOT_SERVING
				s.log.Warn("gRPC health NOT_SERVING: the readiness check fails", "error", err.Error())
			}
			s.health.SetServingStatus("", st)
			for name := range s.grpc.GetServiceInfo() {
				s.health.SetServingStatus(name, st)
			}
		}
	}
}

// handler runs one method: the request message as the operation's JSON
// body, the call through the HTTP server's Invoke, the answer's JSON as
// the response message.
func (s *Server) handler(m Method) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	label := m.Route.Meta().Path
	return func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		start := time.Now()
		var raw wireRequest
		if err := dec(&raw); err != nil {
			return nil, status.Error(codes.InvalidArgument, errs.JSONFormat+": The request message could not be read.")
		}
		body, ok := request(m, raw)
		if !ok {
			return nil, status.Error(codes.InvalidArgument, errs.JSONFormat+": The request message could not be read.")
		}
		out, err := s.call(ctx, m, body)
		code := http.StatusOK
		if err != nil {
			code = server.Status(err)
		}
		s.http.Observe(label, code, time.Since(start))
		if err != nil {
			return nil, s.statusOf(ctx, m, err)
		}
		return out, nil
	}
}

// request is the operation's JSON body of a request's wire form: read
// straight from it (jsonwire.FromWire), or, for input a client's encoder
// does not write, through the message proto.Unmarshal makes of it. ok is
// false for a message that cannot be read.
func request(m Method, raw []byte) (body []byte, ok bool) {
	if body, ok := jsonwire.FromWire(raw, m.In); ok {
		return body, true
	}
	in := dynamicpb.NewMessage(m.In)
	if err := proto.Unmarshal(raw, in); err != nil {
		return nil, false
	}
	body, err := jsonwire.FromMessage(in)
	return body, err == nil
}

func (s *Server) call(ctx context.Context, m Method, body []byte) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	if len(body) > server.MaxBody {
		return nil, errs.New(errs.RequestTooLarge, "The request body is larger than %d bytes.", server.MaxBody)
	}
	bearer, source := credentials(ctx)
	resp, _, err := s.http.Invoke(ctx, m.Route, bearer, source, body)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("grpcapi: encode the answer of %s: %w", m.FullMethod(), err)
	}
	return answer(m, raw)
}

// answer is the response message of the answer's JSON, in wire form
// (jsonwire.Encode), or as a dynamic message where the walker does not go.
func answer(m Method, raw []byte) (any, error) {
	b, err := jsonwire.Encode(raw, m.Out)
	if err == nil {
		return wireAnswer(b), nil
	}
	if !errors.Is(err, jsonwire.ErrUnsupported) {
		return nil, fmt.Errorf("grpcapi: the answer of %s does not fit %s: %w", m.FullMethod(), m.Out.FullName(), err)
	}
	out := dynamicpb.NewMessage(m.Out)
	if err := protojson.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("grpcapi: the answer of %s does not fit %s: %w", m.FullMethod(), m.Out.FullName(), err)
	}
	return out, nil
}

// credentials reads the caller's token from metadata `token`, as
// upstream's clients send it (or an `authorization: Bearer` header), and
// the peer's address. x_domain_id and x_workspace_id are not read: the
// tenancy is the token's.
func credentials(ctx context.Context) (bearer, source string) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("token"); len(v) > 0 {
		bearer = v[0]
	} else if v := md.Get("authorization"); len(v) > 0 && len(v[0]) > 7 && strings.EqualFold(v[0][:7], "bearer ") {
		bearer = v[0][7:]
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		source = p.Addr.String()
		if host, _, err := net.SplitHostPort(source); err == nil {
			source = host
		}
	}
	return bearer, source
}

// Code is the gRPC code of an HTTP status, as upstream's errors map.
func Code(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.AlreadyExists
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusNotImplemented:
		return codes.Unimplemented
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	}
	if httpStatus >= 400 && httpStatus < 500 {
		return codes.FailedPrecondition
	}
	return codes.Internal
}

// statusOf is the gRPC status of an operation's error, logged once as the
// HTTP server logs it; a bug's cause is never sent.
func (s *Server) statusOf(ctx context.Context, m Method, err error) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	log := s.log.With("request_id", id, "route", m.FullMethod())
	st := server.Status(err)
	e, ok := errs.As(err)
	if !ok {
		if ctx.Err() != nil {
			e, st = errs.New(errs.Unknown, "The call ended before its answer. (request_id = %s)", id), http.StatusGatewayTimeout
		} else {
			e = errs.New(errs.Unknown, "Internal error. (request_id = %s)", id)
		}
	}
	if st >= 500 && st != http.StatusNotImplemented {
		log.Error("request failed", "status", st, "code", e.Code, "error", err.Error())
	} else {
		log.Info("request refused", "status", st, "code", e.Code, "message", e.Message)
	}
	return status.Error(Code(st), e.Code+": "+e.Message)
}
