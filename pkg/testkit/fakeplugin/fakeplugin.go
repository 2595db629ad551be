// Package fakeplugin serves fake plugins of every kind (inventory collector,
// monitoring webhook and data source, cost-analysis data source,
// notification protocol) over real gRPC with server reflection, for tests
// and the test plugin image. Their descriptors are built in Go with the
// upstream proto package, service and method names, in two variants
// numbered differently; their answers are scripted per method: results,
// streams, failures as "ERROR_X: message" statuses, delays, a stream broken
// halfway, a plugin that never answers.
//
// It must not be used by services at run time: it is a test double.
package fakeplugin

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	rv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	rv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Reflection says which reflection services a fake serves.
type Reflection int

const (
	ReflectBoth    Reflection = iota // v1 and v1alpha, as grpc-go's reflection.Register
	ReflectV1Alpha                   // v1alpha only, as the upstream Python plugins
	ReflectNone                      // none: a plugin the name-based client cannot use
)

// Options of a fake plugin.
type Options struct {
	Variant    Variant
	Reflection Reflection
	// Addr to listen on; default 127.0.0.1:0.
	Addr string
	// TLS, when set, serves grpc+ssl.
	TLS *tls.Config
	// Services limits the services served to these full names (e.g.
	// "spaceone.api.inventory.plugin.Collector"); empty serves every kind.
	Services []string
}

// Reply is one scripted answer of a method.
type Reply struct {
	// Result is the unary reply, by proto field name (nil: empty reply).
	Result map[string]any `json:"result,omitempty"`
	// Stream are the messages a server-streaming method sends, in order.
	Stream []map[string]any `json:"stream,omitempty"`
	// Err is returned after the Stream messages (a stream broken halfway
	// when there are some); see Fail.
	Err error `json:"-"`
	// Delay is waited before answering (before the first message).
	Delay time.Duration `json:"-"`
	// Gate, when set, is waited on after Delay before a unary answer: the
	// test decides when the plugin answers. A stream with Cut waits on it
	// after its messages, before the cut: the test cuts once the caller
	// has them (else the cut follows 50 ms after, which a loaded machine
	// may not deliver them in).
	Gate <-chan struct{} `json:"-"`
	// Interval is waited between stream messages.
	Interval time.Duration `json:"-"`
	// Hang never answers (after the Stream messages) until the caller
	// gives up.
	Hang bool `json:"hang,omitempty"`
	// Cut closes every connection of the plugin after the Stream messages,
	// as a plugin process that dies does.
	Cut bool `json:"cut,omitempty"`

	// built are Result and Stream as messages of the method, made once
	// by Script: a bench then measures its caller, not this conversion.
	// Nil when the method is not known to the registry (converted at
	// each call, as before).
	built       *dynamicpb.Message
	builtStream []*dynamicpb.Message
	buildErr    error
}

// Fail is a plugin's failure as upstream plugins send it: the gRPC status
// code of the error class and the details "ERROR_CODE: message".
func Fail(code codes.Code, errorCode, message string) error {
	return status.Error(code, errorCode+": "+message)
}

// Call is one request a fake received.
type Call struct {
	Method   string              `json:"method"` // "pkg.Service/method"
	Request  map[string]any      `json:"request"`
	Metadata map[string][]string `json:"metadata"`
	// Cancelled: the caller gave up before the fake finished answering.
	Cancelled bool `json:"cancelled"`
}

// Server is a running fake plugin.
type Server struct {
	// Addr is host:port; Endpoint is grpc://Addr (grpc+ssl:// with TLS).
	Addr     string
	Endpoint string

	reg   *protoregistry.Files
	grpc  *grpc.Server
	ln    *trackingListener
	mu    sync.Mutex
	plans map[string][]Reply
	calls []Call
	// dropped counts the calls Reset forgot, so a call's number stays
	// its own after a Reset (a stream of an earlier test may end later).
	dropped int
	done    chan struct{}
}

// New starts a fake plugin serving on opts.Addr.
func New(opts Options) (*Server, error) {
	reg, err := Registry(opts.Variant)
	if err != nil {
		return nil, err
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	var so []grpc.ServerOption
	scheme := "grpc://"
	if opts.TLS != nil {
		so = append(so, grpc.Creds(credentials.NewTLS(opts.TLS)))
		scheme = "grpc+ssl://"
	}
	s := &Server{Addr: ln.Addr().String(), reg: reg, grpc: grpc.NewServer(so...), ln: &trackingListener{Listener: ln},
		plans: map[string][]Reply{}, done: make(chan struct{})}
	s.Endpoint = scheme + s.Addr
	reg.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			if len(opts.Services) > 0 && !contains(opts.Services, string(sd.FullName())) {
				continue
			}
			s.grpc.RegisterService(s.serviceDesc(sd), s)
		}
		return true
	})
	ro := reflection.ServerOptions{Services: s.grpc, DescriptorResolver: reg}
	switch opts.Reflection {
	case ReflectBoth:
		rv1.RegisterServerReflectionServer(s.grpc, reflection.NewServerV1(ro))
		rv1alpha.RegisterServerReflectionServer(s.grpc, reflection.NewServer(ro))
	case ReflectV1Alpha:
		rv1alpha.RegisterServerReflectionServer(s.grpc, reflection.NewServer(ro))
	}
	go func() {
		defer close(s.done)
		_ = s.grpc.Serve(s.ln)
	}()
	return s, nil
}

// Start starts a fake plugin for a test and stops it when the test ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Stop stops the fake at once (calls in flight fail).
func (s *Server) Stop() {
	s.grpc.Stop()
	<-s.done
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// Script sets the answers of method ("pkg.Service/method"): each call takes
// the next reply, the last one repeats. No script: an empty reply (no
// message for a stream).
func (s *Server) Script(method string, replies ...Reply) {
	method = strings.TrimPrefix(method, "/")
	replies = slices.Clone(replies)
	if md := s.method(method); md != nil {
		for i := range replies {
			replies[i].build(md)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plans[method] = replies
}

// method is the descriptor of "pkg.Service/name", nil if unknown.
func (s *Server) method(full string) protoreflect.MethodDescriptor {
	svc, name, ok := strings.Cut(full, "/")
	if !ok {
		return nil
	}
	d, err := s.reg.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	return sd.Methods().ByName(protoreflect.Name(name))
}

// build converts the scripted maps into md's reply messages; a map that
// does not fit keeps its error for the call to report (a stream's after
// the messages before it).
func (r *Reply) build(md protoreflect.MethodDescriptor) {
	if md.IsStreamingServer() {
		for _, m := range r.Stream {
			msg := dynamicpb.NewMessage(md.Output())
			if err := fromMap(m, msg); err != nil {
				r.buildErr = err
				return
			}
			r.builtStream = append(r.builtStream, msg)
		}
		return
	}
	msg := dynamicpb.NewMessage(md.Output())
	if err := fromMap(r.Result, msg); err != nil {
		r.buildErr = err
		return
	}
	r.built = msg
}

// Calls are the requests received so far for method ("" for all).
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == strings.TrimPrefix(method, "/") {
			out = append(out, c)
		}
	}
	return out
}

// Reset forgets the scripts and the calls.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plans = map[string][]Reply{}
	s.dropped += len(s.calls)
	s.calls = nil
}

// Cut closes every open connection of the plugin, as a dying process does.
func (s *Server) Cut() { s.ln.closeAll() }

func (s *Server) next(method string, req map[string]any, md map[string][]string) (Reply, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{Method: method, Request: req, Metadata: md})
	idx := s.dropped + len(s.calls) - 1
	plan := s.plans[method]
	if len(plan) == 0 {
		return Reply{}, idx
	}
	r := plan[0]
	if len(plan) > 1 {
		s.plans[method] = plan[1:]
	}
	return r, idx
}

func (s *Server) cancelled(idx int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := idx - s.dropped; i >= 0 { // a call Reset forgot stays forgotten
		s.calls[i].Cancelled = true
	}
}

// handlerAny is the handler type of the dynamic services: any value.
type handlerAny interface{}

func (s *Server) serviceDesc(sd protoreflect.ServiceDescriptor) *grpc.ServiceDesc {
	desc := &grpc.ServiceDesc{ServiceName: string(sd.FullName()), HandlerType: (*handlerAny)(nil), Metadata: sd.ParentFile().Path()}
	for i := range sd.Methods().Len() {
		md := sd.Methods().Get(i)
		full := string(sd.FullName()) + "/" + string(md.Name())
		if md.IsStreamingServer() {
			desc.Streams = append(desc.Streams, grpc.StreamDesc{StreamName: string(md.Name()), ServerStreams: true,
				Handler: func(_ any, stream grpc.ServerStream) error { return s.serveStream(full, md, stream) }})
			continue
		}
		desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: string(md.Name()),
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				return s.serveUnary(ctx, full, md, dec)
			}})
	}
	return desc
}

func (s *Server) receive(ctx context.Context, full string, md protoreflect.MethodDescriptor, dec func(any) error) (Reply, int, error) {
	req := dynamicpb.NewMessage(md.Input())
	if err := dec(req); err != nil {
		return Reply{}, 0, err
	}
	asMap, err := toMap(req)
	if err != nil {
		return Reply{}, 0, status.Error(codes.Internal, "ERROR_UNKNOWN: "+err.Error())
	}
	r, idx := s.next(full, asMap, incomingMetadata(ctx))
	return r, idx, nil
}

func (s *Server) serveUnary(ctx context.Context, full string, md protoreflect.MethodDescriptor, dec func(any) error) (any, error) {
	r, idx, err := s.receive(ctx, full, md, dec)
	if err != nil {
		return nil, err
	}
	if !wait(ctx, r.Delay) || !opened(ctx, r.Gate) || (r.Hang && !wait(ctx, -1)) {
		s.cancelled(idx)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if r.Cut {
		s.Cut()
	}
	if r.Err != nil {
		return nil, r.Err
	}
	if r.buildErr != nil {
		return nil, status.Error(codes.Internal, "ERROR_UNKNOWN: fakeplugin: bad scripted reply: "+r.buildErr.Error())
	}
	if r.built != nil {
		return r.built, nil // only read (marshalled) by the calls that share it
	}
	resp := dynamicpb.NewMessage(md.Output())
	if err := fromMap(r.Result, resp); err != nil {
		return nil, status.Error(codes.Internal, "ERROR_UNKNOWN: fakeplugin: bad scripted reply: "+err.Error())
	}
	return resp, nil
}

func (s *Server) serveStream(full string, md protoreflect.MethodDescriptor, stream grpc.ServerStream) error {
	ctx := stream.Context()
	r, idx, err := s.receive(ctx, full, md, stream.RecvMsg)
	if err != nil {
		return err
	}
	if !wait(ctx, r.Delay) {
		s.cancelled(idx)
		return ctx.Err()
	}
	for i, m := range r.Stream {
		if i > 0 && !wait(ctx, r.Interval) {
			s.cancelled(idx)
			return ctx.Err()
		}
		var resp *dynamicpb.Message
		switch {
		case i < len(r.builtStream):
			resp = r.builtStream[i]
		case r.buildErr != nil: // the messages before the bad one were sent
			return status.Error(codes.Internal, "ERROR_UNKNOWN: fakeplugin: bad scripted message: "+r.buildErr.Error())
		default:
			resp = dynamicpb.NewMessage(md.Output())
			if err := fromMap(m, resp); err != nil {
				return status.Error(codes.Internal, "ERROR_UNKNOWN: fakeplugin: bad scripted message: "+err.Error())
			}
		}
		if err := stream.SendMsg(resp); err != nil {
			s.cancelled(idx)
			return err
		}
	}
	if r.Cut {
		if r.Gate == nil {
			time.Sleep(50 * time.Millisecond) // let the messages sent reach the caller
		} else if !opened(ctx, r.Gate) {
			s.cancelled(idx)
			return ctx.Err()
		}
		s.Cut()
		return status.Error(codes.Unavailable, "cut")
	}
	if r.Hang && !wait(ctx, -1) {
		s.cancelled(idx)
		return ctx.Err()
	}
	return r.Err
}

// wait sleeps d (forever when negative) unless ctx ends first.
func wait(ctx context.Context, d time.Duration) bool {
	if d == 0 {
		return ctx.Err() == nil
	}
	var c <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		c = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-c:
		return true
	}
}

// toMap renders a request as the upstream plugins see it
// (MessageToDict(preserving_proto_field_name=True)).
func toMap(m protoreflect.ProtoMessage) (map[string]any, error) {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, json.Unmarshal(raw, &out)
}

// fromMap fills a reply from a scripted map. Fields the variant lacks are
// dropped, as a plugin of an older build never sends them.
func fromMap(src map[string]any, m protoreflect.ProtoMessage) error {
	if len(src) == 0 {
		return nil
	}
	raw, err := json.Marshal(src)
	if err != nil {
		return err
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(raw, m)
}

// trackingListener remembers accepted connections so Cut can close them.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

func incomingMetadata(ctx context.Context) map[string][]string {
	md, _ := metadata.FromIncomingContext(ctx)
	return md
}

// opened waits until gate is closed (at once when nil); false when ctx
// ends first.
func opened(ctx context.Context, gate <-chan struct{}) bool {
	if gate == nil {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-gate:
		return true
	}
}
