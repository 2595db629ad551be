package grpcapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/grpcapi/jsonwire"
)

// TestAnswerWire: an answer's JSON encoded straight into the wire form
// of the methods' messages is the message protojson.Unmarshal makes of
// it, and what protojson refuses is refused (every kind: jsonwire's test).
func TestAnswerWire(t *testing.T) {
	d, err := Describe(routes())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]protoreflect.MessageDescriptor{}
	for _, m := range d.Methods {
		out[m.FullMethod()] = m.Out
	}
	thing, list, stat, empty := out["/spaceone.api.svc.v1.Thing/get"], out["/spaceone.api.svc.v1.Thing/list"], out["/spaceone.api.svc.v1.Thing/stat"], out["/spaceone.api.svc.v1.Thing/ping"]
	cases := []struct {
		md   protoreflect.MessageDescriptor
		json string
	}{
		{thing, `{"domain_id":"domain-a","hidden":3,"thing_id":"t1","size":5,"enabled":false,"tags":{"a.b":"c"},"data":{"a.b":1.5},"any":["x",1],"grid":[["a"]],"items":[true],"parts":[{"name":"p"}],"created_at":"2026-01-02T03:04:05.000Z","caller":"alice"}`},
		{thing, `{"domain_id":"","hidden":0,"thing_id":"","size":0,"enabled":null,"tags":null,"data":null,"any":null,"grid":null,"items":null,"parts":null,"created_at":"","caller":""}`},
		{thing, `{"any":{"deep":{"er":[null,{"x":-0.0}]}},"grid":[[],["a","b"]],"items":[],"parts":[{},{"name":""}],"data":{}}`},
		{thing, ` { "thingId" : "camel \u00e9\"\\\/\b\f\n\r\t\ud83d\ude00 é" , "size" : "9007199254740993" , "hidden" : 1e2 } `},
		{thing, `{"size":1.5}`},
		{thing, `{"size":true}`},
		{thing, `{"hidden":2147483648}`},
		{thing, `{"unknown":1}`},
		{thing, `{"parts":[null]}`},
		{thing, `{"thing_id":1}`},
		{thing, `{"thing_id":"a"} x`},
		{thing, `null`},
		{thing, `{"thing_id":"a",}`},
		{list, `{"results":[{"thing_id":"a","size":1},{"thing_id":"b"}],"total_count":2}`},
		{list, `{"results":[],"total_count":0}`},
		{list, `{"results":null,"total_count":0}`},
		{stat, `{"results":[{"n":1,"s":"x","b":false,"z":null,"l":[1,"a",{"q":[]}],"o":{}}],"more":true}`},
		{stat, `{}`},
		{empty, `{}`},
		{empty, `{"x":1}`},
	}
	for _, c := range cases {
		want := dynamicpb.NewMessage(c.md)
		errWant := protojson.Unmarshal([]byte(c.json), want)
		b, err := jsonwire.Encode([]byte(c.json), c.md)
		if (err == nil) != (errWant == nil) {
			t.Errorf("%s: Encode %v, protojson %v", c.json, err, errWant)
			continue
		}
		if err != nil {
			t.Logf("refused alike: %s: %v", c.json, errWant)
			continue
		}
		got := dynamicpb.NewMessage(c.md)
		if err := proto.Unmarshal(b, got); err != nil {
			t.Fatalf("%s: %v", c.json, err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("%s:\nwire  %v\nproto %v", c.json, got, want)
		}
	}
}

// TestAnswersAsHTTP: over gRPC, each operation answers the message of
// the HTTP answer's JSON, call for call.
func TestAnswersAsHTTP(t *testing.T) {
	f := start(t, 0)
	admin := f.token(t, auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	for _, c := range []struct{ path, full, body string }{
		{"/svc/v1/thing/get", "/spaceone.api.svc.v1.Thing/get", `{"thing_id": "t1", "size": 5, "enabled": true, "tags": {"a": "b", "n": 1}}`},
		{"/svc/v1/thing/get", "/spaceone.api.svc.v1.Thing/get", `{"thing_id": "t2", "enabled": false}`},
		{"/svc/v1/thing/list", "/spaceone.api.svc.v1.Thing/list", `{"query": {"keyword": "kw", "filter": [{"k": "a", "v": 1, "o": "eq"}]}}`},
		{"/svc/v1/thing/stat", "/spaceone.api.svc.v1.Thing/stat", `{"query": {"distinct": "a"}}`},
		{"/svc/v1/thing/analyze", "/spaceone.api.svc.v1.Thing/analyze", `{"query": {"group_by": ["a"], "fields": {"n": {"operator": "count"}}}}`},
		{"/svc/v1/thing/ping", "/spaceone.api.svc.v1.Thing/ping", `{}`},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+admin)
		f.http.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.path, rec.Code, rec.Body)
		}
		m := f.method(t, c.full)
		want := dynamicpb.NewMessage(m.Out)
		if err := protojson.Unmarshal(rec.Body.Bytes(), want); err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		in, got := dynamicpb.NewMessage(m.In), dynamicpb.NewMessage(m.Out)
		if err := protojson.Unmarshal([]byte(c.body), in); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "token", admin), 10*time.Second)
		err := f.conn.Invoke(ctx, c.full, in, got)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", c.full, err)
		}
		if !proto.Equal(got, want) {
			w, _ := protojson.Marshal(want)
			g, _ := protojson.Marshal(got)
			t.Errorf("%s answers\n%s\nover gRPC, over HTTP\n%s", c.full, g, w)
		}
	}
}
