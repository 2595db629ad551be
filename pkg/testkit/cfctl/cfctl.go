// Package cfctl is a test client that calls Nubes' gRPC as upstream's
// cfctl does: it knows no Nubes type, finds services through reflection
// v1alpha, builds each request from JSON as a dynamic message and sends
// the token in metadata `token`. The devstack and the container suites
// use it.
//
// It must not import Nubes' own packages: what it proves is that a
// client with nothing but reflection gets through.
package cfctl

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	alphapb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Client calls a gRPC server the way cfctl does: it knows no type
// of the server, lists and resolves services through reflection v1alpha,
// builds each request from JSON as a dynamic message and sends the token
// in metadata `token`.
type Client struct {
	t     testing.TB
	Conn  *grpc.ClientConn // for calls the helpers do not make (health, reflection v1)
	files *protoregistry.Files
	seen  map[string]bool
	refl  alphapb.ServerReflection_ServerReflectionInfoClient
}

// Dial connects to addr; the connection closes when the test ends.
func Dial(t testing.TB, addr string) *Client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := alphapb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &Client{t: t, Conn: conn, files: new(protoregistry.Files), seen: map[string]bool{}, refl: stream}
}

func (c *Client) ask(req *alphapb.ServerReflectionRequest) *alphapb.ServerReflectionResponse {
	c.t.Helper()
	if err := c.refl.Send(req); err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.refl.Recv()
	if err != nil {
		c.t.Fatal(err)
	}
	if e := resp.GetErrorResponse(); e != nil {
		c.t.Fatalf("reflection: %v: %s", req, e.GetErrorMessage())
	}
	return resp
}

// Services lists the server's services.
func (c *Client) Services() []string {
	resp := c.ask(&alphapb.ServerReflectionRequest{MessageRequest: &alphapb.ServerReflectionRequest_ListServices{}})
	var out []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		out = append(out, s.GetName())
	}
	return out
}

// addFiles registers files sent by reflection, asking for any missing
// dependency by name.
func (c *Client) addFiles(raw [][]byte) {
	c.t.Helper()
	pending := map[string]*descriptorpb.FileDescriptorProto{}
	for _, b := range raw {
		fd := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(b, fd); err != nil {
			c.t.Fatal(err)
		}
		pending[fd.GetName()] = fd
	}
	var add func(name string)
	add = func(name string) {
		if c.seen[name] {
			return
		}
		fd, ok := pending[name]
		if !ok {
			resp := c.ask(&alphapb.ServerReflectionRequest{MessageRequest: &alphapb.ServerReflectionRequest_FileByFilename{FileByFilename: name}})
			c.addFiles(resp.GetFileDescriptorResponse().GetFileDescriptorProto())
			return
		}
		for _, dep := range fd.GetDependency() {
			add(dep)
		}
		f, err := protodesc.NewFile(fd, c.files)
		if err != nil {
			c.t.Fatalf("%s: %v", name, err)
		}
		if err := c.files.RegisterFile(f); err != nil {
			c.t.Fatal(err)
		}
		c.seen[name] = true
	}
	for name := range pending {
		add(name)
	}
}

// Resolve finds a service by its full name.
func (c *Client) Resolve(service string) protoreflect.ServiceDescriptor {
	c.t.Helper()
	if d, err := c.files.FindDescriptorByName(protoreflect.FullName(service)); err == nil {
		return d.(protoreflect.ServiceDescriptor)
	}
	resp := c.ask(&alphapb.ServerReflectionRequest{MessageRequest: &alphapb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: service}})
	c.addFiles(resp.GetFileDescriptorResponse().GetFileDescriptorProto())
	d, err := c.files.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		c.t.Fatalf("resolve %s: %v", service, err)
	}
	return d.(protoreflect.ServiceDescriptor)
}

// Call invokes service/method with a request built from JSON and returns
// the answer as JSON, or the call's status.
func (c *Client) Call(token, service, method, body string) (string, *status.Status) {
	c.t.Helper()
	sd := c.Resolve(service)
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		c.t.Fatalf("%s has no method %s", service, method)
	}
	in := dynamicpb.NewMessage(md.Input())
	if err := protojson.Unmarshal([]byte(body), in); err != nil {
		c.t.Fatalf("%s/%s: request %s: %v", service, method, body, err)
	}
	out := dynamicpb.NewMessage(md.Output())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "token", token)
	}
	if err := c.Conn.Invoke(ctx, "/"+service+"/"+method, in, out); err != nil {
		return "", status.Convert(err)
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(out)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b), nil
}

// OK calls and wants success, with each of want in the compacted JSON answer.
func (c *Client) OK(token, service, method, body string, want ...string) string {
	c.t.Helper()
	out, st := c.Call(token, service, method, body)
	if st != nil {
		c.t.Fatalf("%s/%s %s: %v %s", service, method, body, st.Code(), st.Message())
	}
	compact := strings.ReplaceAll(out, " ", "")
	for _, w := range want {
		if !strings.Contains(compact, w) {
			c.t.Errorf("%s/%s answered %s, want %s in it", service, method, out, w)
		}
	}
	return out
}

// Fails calls and wants the status code and a message starting with prefix
// (upstream's ERROR_CODE: message).
func (c *Client) Fails(token, service, method, body string, code codes.Code, prefix string) {
	c.t.Helper()
	out, st := c.Call(token, service, method, body)
	if st == nil {
		c.t.Fatalf("%s/%s %s answered %s, want %v", service, method, body, out, code)
	}
	if st.Code() != code || !strings.HasPrefix(st.Message(), prefix) {
		c.t.Errorf("%s/%s %s: %v %q, want %v %q...", service, method, body, st.Code(), st.Message(), code, prefix)
	}
}

// Message finds a message by its full name.
func (c *Client) Message(name string) protoreflect.MessageDescriptor {
	c.t.Helper()
	if d, err := c.files.FindDescriptorByName(protoreflect.FullName(name)); err == nil {
		return d.(protoreflect.MessageDescriptor)
	}
	resp := c.ask(&alphapb.ServerReflectionRequest{MessageRequest: &alphapb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: name}})
	c.addFiles(resp.GetFileDescriptorResponse().GetFileDescriptorProto())
	d, err := c.files.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		c.t.Fatalf("resolve %s: %v", name, err)
	}
	return d.(protoreflect.MessageDescriptor)
}
