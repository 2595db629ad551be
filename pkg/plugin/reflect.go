package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The reflection service under its two names. v1alpha carries the same
// messages as v1 (the wire format is identical), so one set of types reads
// both; upstream plugins serve only v1alpha.
const (
	reflectV1      = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	reflectV1Alpha = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
)

var reflectStream = &grpc.StreamDesc{StreamName: "ServerReflectionInfo", ServerStreams: true, ClientStreams: true}

// descriptors are the services a plugin serves, by full name.
type descriptors struct {
	services map[protoreflect.FullName]protoreflect.ServiceDescriptor
}

// method finds "pkg.Service/method".
func (d *descriptors) method(m Method) protoreflect.MethodDescriptor {
	svc, name, _ := strings.Cut(string(m), "/")
	sd, ok := d.services[protoreflect.FullName(svc)]
	if !ok {
		return nil
	}
	return sd.Methods().ByName(protoreflect.Name(name))
}

// ready waits until the connection is ready, at most ReadyTimeout.
func (c *Client) ready(ctx context.Context, cn *conn) error {
	s := cn.cc.GetState()
	if s == connectivity.Ready {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	if s == connectivity.TransientFailure {
		// The caller asks now: try now rather than after the backoff.
		cn.cc.ResetConnectBackoff()
	}
	for {
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			cn.cc.Connect()
		case connectivity.Shutdown:
			return errors.New("connection closed")
		}
		if !cn.cc.WaitForStateChange(rctx, s) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("not ready within %s (state %s)", c.opts.ReadyTimeout, s)
		}
		s = cn.cc.GetState()
	}
}

// methodDesc returns the descriptor of m as the plugin serves it, reading
// the plugin's descriptors again when they are stale or lack m (the plugin
// may have been replaced by another version at the same address).
func (c *Client) methodDesc(ctx context.Context, cn *conn, m Method) (protoreflect.MethodDescriptor, error) {
	cn.mu.Lock()
	d, at := cn.desc, cn.descAt
	cn.mu.Unlock()
	if d != nil && time.Since(at) < c.opts.DescriptorTTL {
		if md := d.method(m); md != nil {
			return md, nil
		}
	}
	cn.fetchMu.Lock()
	defer cn.fetchMu.Unlock()
	cn.mu.Lock()
	if cn.desc != nil && cn.descAt.After(at) { // another caller just read them
		d = cn.desc
		cn.mu.Unlock()
		if md := d.method(m); md != nil {
			return md, nil
		}
		return nil, nil
	}
	cn.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	d, err := fetchDescriptors(rctx, cn.cc)
	if err != nil {
		return nil, err
	}
	cn.mu.Lock()
	cn.desc, cn.descAt = d, time.Now()
	cn.mu.Unlock()
	return d.method(m), nil // nil: the plugin does not serve m
}

// fetchDescriptors reads the plugin's services and their files through
// reflection v1, or v1alpha when v1 is not served.
func fetchDescriptors(ctx context.Context, cc *grpc.ClientConn) (*descriptors, error) {
	d, err := fetchWith(ctx, cc, reflectV1)
	if status.Code(err) == codes.Unimplemented {
		d, err = fetchWith(ctx, cc, reflectV1Alpha)
	}
	return d, err
}

// reflectErr marks a plugin whose reflection answers make no sense.
type reflectErr struct{ msg string }

func (e *reflectErr) Error() string { return e.msg }

func fetchWith(ctx context.Context, cc *grpc.ClientConn, method string) (*descriptors, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cc.NewStream(sctx, reflectStream, method)
	if err != nil {
		return nil, err
	}
	ask := func(req *rpb.ServerReflectionRequest) (*rpb.ServerReflectionResponse, error) {
		if err := st.SendMsg(req); err != nil {
			if errors.Is(err, io.EOF) { // the real error comes with RecvMsg
				resp := new(rpb.ServerReflectionResponse)
				return nil, st.RecvMsg(resp)
			}
			return nil, err
		}
		resp := new(rpb.ServerReflectionResponse)
		if err := st.RecvMsg(resp); err != nil {
			return nil, err
		}
		if e := resp.GetErrorResponse(); e != nil {
			return nil, status.Error(codes.Code(e.GetErrorCode()), e.GetErrorMessage())
		}
		return resp, nil
	}
	resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		if !strings.HasPrefix(s.GetName(), "grpc.") { // reflection, health
			names = append(names, s.GetName())
		}
	}
	files := map[string]*descriptorpb.FileDescriptorProto{}
	add := func(resp *rpb.ServerReflectionResponse) error {
		for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fd := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(raw, fd); err != nil {
				return &reflectErr{"bad file descriptor: " + err.Error()}
			}
			files[fd.GetName()] = fd
		}
		return nil
	}
	for _, n := range names {
		resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: n}})
		if err != nil {
			return nil, err
		}
		if err := add(resp); err != nil {
			return nil, err
		}
	}
	// Servers usually send the dependencies along; ask for any missing,
	// and take well-known files from the local registry when the plugin
	// does not serve them.
	for range 64 {
		missing := ""
		for _, fd := range files {
			for _, dep := range fd.GetDependency() {
				if _, ok := files[dep]; !ok {
					missing = dep
					break
				}
			}
			if missing != "" {
				break
			}
		}
		if missing == "" {
			break
		}
		resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: missing}})
		if err == nil {
			err = add(resp)
		}
		if _, ok := files[missing]; !ok {
			local, lerr := protoregistry.GlobalFiles.FindFileByPath(missing)
			if lerr != nil {
				return nil, &reflectErr{fmt.Sprintf("the plugin does not serve %s (%v)", missing, err)}
			}
			files[missing] = protodesc.ToFileDescriptorProto(local)
		}
	}
	_ = st.CloseSend()
	set := &descriptorpb.FileDescriptorSet{}
	for _, fd := range files {
		set.File = append(set.File, fd)
	}
	reg, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, &reflectErr{"the plugin's descriptors do not resolve: " + err.Error()}
	}
	d := &descriptors{services: map[protoreflect.FullName]protoreflect.ServiceDescriptor{}}
	for _, n := range names {
		desc, err := reg.FindDescriptorByName(protoreflect.FullName(n))
		if err != nil {
			continue
		}
		if sd, ok := desc.(protoreflect.ServiceDescriptor); ok {
			d.services[sd.FullName()] = sd
		}
	}
	return d, nil
}
