package grpcapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/nubes-io/nubes/pkg/analyze"
	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/grpcapi/jsonwire"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/wire"
)

type thingReq struct {
	ThingID string        `json:"thing_id" v:"required,max=10"`
	Size    int64         `json:"size"`
	Hold    bool          `json:"hold"`
	Enabled *bool         `json:"enabled"`
	Fail    string        `json:"fail"`
	Blob    string        `json:"blob"`
	Tags    freeform.Flat `json:"tags"`
}

type base struct {
	DomainID string `json:"domain_id"`
	Hidden   string `json:"hidden"`
}

type thing struct {
	base
	ThingID   string         `json:"thing_id"`
	Size      int64          `json:"size"`
	Enabled   *bool          `json:"enabled"`
	Hidden    int            `json:"hidden"` // hides base's
	Tags      freeform.Flat  `json:"tags"`
	Data      map[string]any `json:"data"`
	Any       any            `json:"any"`
	Grid      [][]string     `json:"grid"`
	Items     []any          `json:"items"`
	Parts     []part         `json:"parts"`
	CreatedAt wire.Time      `json:"created_at"`
	Secret    string         `json:"-"`
	Caller    string         `json:"caller"`
}

type part struct {
	Name string `json:"name"`
}

type listReq struct {
	Query query.Query `json:"query"`
}

type noFields struct{}

type statReq struct {
	Query *stat.Query `json:"query" v:"required"`
}

type analyzeReq struct {
	Query *analyze.TimeSeriesQuery `json:"query" v:"required"`
}

// narrowQuery is a list query narrower than upstream's (repository's).
type narrowQuery struct {
	Keyword string      `json:"keyword"`
	Page    *query.Page `json:"page"`
}

// seen is what the handlers of the query routes decoded, as JSON.
var seen atomic.Value

// holds lets a test keep a call under way: the handler signals held and
// waits for release.
type holds struct{ held, release chan struct{} }

func routes(h ...holds) []api.Route {
	get := func(ctx context.Context, p *auth.Principal, r *thingReq) (*thing, error) {
		if r.Hold {
			h[0].held <- struct{}{}
			select {
			case <-h[0].release:
			case <-ctx.Done(): // cut at the stop
				return nil, errs.Down("The call", ctx.Err())
			}
		}
		switch r.Fail {
		case "bug":
			return nil, errors.New("secret internal detail")
		case "down":
			return nil, errs.Down("The store", errors.New("refused"))
		case "missing":
			return nil, errs.NotFound("thing_id", r.ThingID)
		}
		return &thing{base: base{DomainID: p.DomainID, Hidden: "x"}, ThingID: r.ThingID, Size: r.Size, Enabled: r.Enabled, Hidden: 3,
			Tags: r.Tags, Data: map[string]any{"a.b": 1.5}, Any: []any{"x", 1.0}, Grid: [][]string{{"a"}}, Items: []any{true},
			Parts: []part{{"p"}}, CreatedAt: wire.T(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), Caller: p.UserID}, nil
	}
	return []api.Route{
		api.Op[thingReq, thing]{Path: "/svc/v1/thing/get", Access: auth.Roles(auth.DomainAdmin), Handle: get},
		api.Op[thingReq, thing]{Path: "/svc/v2/thing-kind/get-more", Access: auth.Roles(auth.DomainAdmin), Handle: get},
		api.Op[listReq, api.List[thing]]{Path: "/svc/v1/thing/list", Access: auth.Roles(auth.DomainAdmin),
			Handle: func(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[thing], error) {
				return &api.List[thing]{Results: []thing{{ThingID: r.Query.Keyword}}, TotalCount: int64(len(r.Query.Filter))}, nil
			}},
		api.Op[statReq, map[string]any]{Path: "/svc/v1/thing/stat", Access: auth.Roles(auth.DomainAdmin),
			Handle: func(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
				raw, _ := json.Marshal(r.Query)
				seen.Store(string(raw))
				return &map[string]any{"results": []any{map[string]any{"n": 1}}}, nil
			}},
		api.Op[analyzeReq, map[string]any]{Path: "/svc/v1/thing/analyze", Access: auth.Roles(auth.DomainAdmin),
			Handle: func(ctx context.Context, p *auth.Principal, r *analyzeReq) (*map[string]any, error) {
				raw, _ := json.Marshal(r.Query)
				seen.Store(string(raw))
				return &map[string]any{"results": []any{}, "more": false}, nil
			}},
		// board v1 Board is a resource whose upstream protos take core v1.
		api.Op[listReq, api.List[thing]]{Path: "/board/v1/board/list", Access: auth.Roles(auth.DomainAdmin),
			Handle: func(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[thing], error) {
				raw, _ := json.Marshal(r.Query.Sort)
				seen.Store(string(raw))
				return &api.List[thing]{}, nil
			}},
		api.Op[statReq, map[string]any]{Path: "/board/v1/board/stat", Access: auth.Roles(auth.DomainAdmin),
			Handle: func(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
				raw, _ := json.Marshal(r.Query)
				seen.Store(string(raw))
				return &map[string]any{"results": []any{}}, nil
			}},
		api.Op[struct {
			Query *narrowQuery `json:"query"`
		}, api.Empty]{Path: "/svc/v1/thing/narrow", Access: auth.Roles(auth.DomainAdmin),
			Handle: func(ctx context.Context, p *auth.Principal, r *struct {
				Query *narrowQuery `json:"query"`
			}) (*api.Empty, error) {
				return &api.Empty{}, nil
			}},
		// Upstream's package is not the path's.
		api.Op[noFields, api.Empty]{Path: "/svc/v1/thing/elsewhere", Service: "spaceone.api.svc_other.v1.Thing", Access: auth.Public(),
			Handle: func(context.Context, *auth.Principal, *noFields) (*api.Empty, error) { return &api.Empty{}, nil }},
		api.Op[noFields, api.Empty]{Path: "/svc/v1/thing/ping", Access: auth.Public(),
			Handle: func(context.Context, *auth.Principal, *noFields) (*api.Empty, error) { return &api.Empty{}, nil }},
		api.Op[noFields, api.Empty]{Path: "/svc/thing/unversioned", Access: auth.Public(),
			Handle: func(context.Context, *auth.Principal, *noFields) (*api.Empty, error) { return &api.Empty{}, nil }},
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct{ path, pkg, service, method string }{
		{"/identity/v2/user/create", "spaceone.api.identity.v2", "spaceone.api.identity.v2.User", "create"},
		{"/identity/v2/api-key/create", "spaceone.api.identity.v2", "spaceone.api.identity.v2.APIKey", "create"},
		{"/identity/v2/user-profile/get-workspaces", "spaceone.api.identity.v2", "spaceone.api.identity.v2.UserProfile", "get_workspaces"},
		{"/cost-analysis/v1/data-source-rule/change-order", "spaceone.api.cost_analysis.v1", "spaceone.api.cost_analysis.v1.DataSourceRule", "change_order"},
		{"/inventory/v1/collector/update-plugin", "spaceone.api.inventory.v1", "spaceone.api.inventory.v1.Collector", "update_plugin"},
		{"/board/post/list", "", "", ""},
		{"/board/v1/post", "", "", ""},
	} {
		pkg, svc, m, ok := Names(c.path)
		if pkg != c.pkg || svc != c.service || m != c.method || ok != (c.pkg != "") {
			t.Errorf("Names(%s) = %s %s %s %v", c.path, pkg, svc, m, ok)
		}
	}
}

// TestDescribe checks the messages built from Go types: members as
// encoding/json writes them, free maps as Struct, any as Value, lists of
// lists as ListValue, times as strings, pointers to scalars optional, the
// list query as upstream's, Empty where nothing is sent or answered.
func TestDescribe(t *testing.T) {
	d, err := Describe(routes())
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Skipped) != 1 || d.Skipped[0] != "/svc/thing/unversioned" {
		t.Errorf("skipped %v", d.Skipped)
	}
	byName := map[string]Method{}
	for _, m := range d.Methods {
		byName[m.FullMethod()] = m
	}
	get := byName["/spaceone.api.svc.v1.Thing/get"]
	if get.Route == nil || byName["/spaceone.api.svc.v2.ThingKind/get_more"].Route == nil {
		t.Fatalf("methods %v", byName)
	}
	if get.In.FullName() != "spaceone.api.svc.v1.GetThingRequest" || get.Out.FullName() != "spaceone.api.svc.v1.ThingInfo" {
		t.Errorf("get: %s -> %s", get.In.FullName(), get.Out.FullName())
	}
	kind := func(md protoreflect.MessageDescriptor, name string) string {
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return "absent"
		}
		k := fd.Kind().String()
		if fd.Message() != nil {
			k = string(fd.Message().FullName())
		}
		if fd.IsList() {
			k = "repeated " + k
		}
		if fd.HasOptionalKeyword() {
			k = "optional " + k
		}
		return k
	}
	for _, c := range []struct {
		md          protoreflect.MessageDescriptor
		field, want string
	}{
		{get.In, "thing_id", "string"}, {get.In, "size", "int64"}, {get.In, "hold", "bool"},
		{get.In, "enabled", "optional bool"}, {get.In, "tags", "google.protobuf.Struct"},
		{get.Out, "domain_id", "string"}, {get.Out, "hidden", "int32"}, {get.Out, "secret", "absent"}, {get.Out, "Secret", "absent"},
		{get.Out, "data", "google.protobuf.Struct"}, {get.Out, "any", "google.protobuf.Value"},
		{get.Out, "grid", "repeated google.protobuf.ListValue"}, {get.Out, "items", "google.protobuf.ListValue"},
		{get.Out, "parts", "repeated spaceone.api.svc.v1.Part"}, {get.Out, "created_at", "string"},
		{byName["/spaceone.api.svc.v1.Thing/list"].In, "query", "spaceone.api.core.v2.Query"},
		{byName["/spaceone.api.svc.v1.Thing/list"].Out, "results", "repeated spaceone.api.svc.v1.ThingInfo"},
		{byName["/spaceone.api.svc.v1.Thing/list"].Out, "total_count", "int32"},
		{byName["/spaceone.api.svc.v1.Thing/stat"].In, "query", "spaceone.api.core.v2.StatisticsQuery"},
		{byName["/spaceone.api.svc.v1.Thing/analyze"].In, "query", "spaceone.api.core.v2.TimeSeriesAnalyzeQuery"},
		{byName["/spaceone.api.svc.v1.Thing/narrow"].In, "query", "spaceone.api.core.v2.Query"},
		{byName["/spaceone.api.board.v1.Board/list"].In, "query", "spaceone.api.core.v1.Query"},
		{byName["/spaceone.api.board.v1.Board/stat"].In, "query", "spaceone.api.core.v1.StatisticsQuery"},
	} {
		if got := kind(c.md, c.field); got != c.want {
			t.Errorf("%s.%s is %s, want %s", c.md.FullName(), c.field, got, c.want)
		}
	}
	if byName["/spaceone.api.svc_other.v1.Thing/elsewhere"].Route == nil || byName["/spaceone.api.svc.v1.Thing/elsewhere"].Route != nil {
		t.Error("the declared service is not the method's")
	}
	ping := byName["/spaceone.api.svc.v1.Thing/ping"]
	if ping.In.FullName() != "google.protobuf.Empty" || ping.Out.FullName() != "google.protobuf.Empty" {
		t.Errorf("ping: %s -> %s", ping.In.FullName(), ping.Out.FullName())
	}
}

func TestFromMessage(t *testing.T) {
	d, err := Describe(routes())
	if err != nil {
		t.Fatal(err)
	}
	in := d.Methods[0].In
	for _, c := range []struct{ in, want string }{
		{`{}`, `{}`},
		{`{"thingId": "a", "size": "9007199254740993"}`, `{"thing_id":"a","size":9007199254740993}`},
		{`{"enabled": false, "hold": false}`, `{"enabled":false}`},
		{`{"tags": {"a.b": [1, "x", null]}}`, `{"tags":{"a.b":[1,"x",null]}}`},
	} {
		m := dynamicpb.NewMessage(in)
		if err := protojson.Unmarshal([]byte(c.in), m); err != nil {
			t.Fatal(err)
		}
		got, err := jsonwire.FromMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		// Members come in any order (dynamicpb ranges at random); numbers
		// compare as written.
		var g, w any
		dg, dw := json.NewDecoder(bytes.NewReader(got)), json.NewDecoder(strings.NewReader(c.want))
		dg.UseNumber()
		dw.UseNumber()
		if dg.Decode(&g) != nil || dw.Decode(&w) != nil || !reflect.DeepEqual(g, w) {
			t.Errorf("FromMessage(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

type fixture struct {
	http   *server.Server
	grpc   *Server
	conn   *grpc.ClientConn
	signer *auth.Signer
	stop   context.CancelFunc
	done   chan error
}

func start(t testing.TB, drain time.Duration, h ...holds) *fixture {
	t.Helper()
	return startWith(t, func(_ *server.Options, o *Options) { o.DrainDelay = drain }, h...)
}

// startWith is start with the servers' options set.
func startWith(t testing.TB, set func(*server.Options, *Options), h ...holds) *fixture {
	t.Helper()
	signer, err := auth.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(auth.JWKSOf(signer))
	if err != nil {
		t.Fatal(err)
	}
	so, o := server.Options{Name: "test", Logger: slog.New(slog.NewTextHandler(testLog{t}, nil)), Auth: v}, Options{ShutdownTimeout: 5 * time.Second}
	set(&so, &o)
	hs, err := server.New(so, routes(h...)...)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(hs, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &fixture{http: hs, grpc: g, signer: signer, stop: cancel, done: make(chan error, 1)}
	go func() { f.done <- g.Run(ctx, ln) }()
	f.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.conn.Close()
		cancel()
		<-f.done
	})
	return f
}

func (f *fixture) token(t testing.TB, p auth.Principal) string {
	t.Helper()
	tok, err := f.signer.Issue(p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (f *fixture) method(t testing.TB, full string) Method {
	t.Helper()
	for _, m := range f.grpc.Descriptors().Methods {
		if m.FullMethod() == full {
			return m
		}
	}
	t.Fatalf("no method %s", full)
	return Method{}
}

// call sends body (JSON) to a method with token in metadata key.
func (f *fixture) call(t *testing.T, key, token, full, body string) (map[string]any, error) {
	t.Helper()
	m := f.method(t, full)
	in, out := dynamicpb.NewMessage(m.In), dynamicpb.NewMessage(m.Out)
	if err := protojson.Unmarshal([]byte(body), in); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, key, token)
	}
	if err := f.conn.Invoke(ctx, full, in, out); err != nil {
		return nil, err
	}
	raw, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(out)
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v, nil
}

func TestCallsAndErrors(t *testing.T) {
	f := start(t, 0)
	admin := f.token(t, auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	member := f.token(t, auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "ws-1"})
	other, _ := auth.GenerateSigner()
	forged, _ := other.Issue(auth.Principal{DomainID: "domain-a", UserID: "eve", Role: auth.DomainAdmin}, time.Hour)

	got, err := f.call(t, "token", admin, "/spaceone.api.svc.v1.Thing/get", `{"thing_id": " t1 ", "size": 5, "enabled": false, "tags": {"a.b": "c"}}`)
	if err != nil {
		t.Fatal(err)
	}
	// Trimmed by the same validation as HTTP's, tenancy from the token.
	if got["thing_id"] != "t1" || got["size"] != "5" || got["enabled"] != false || got["domain_id"] != "domain-a" || got["hidden"] != 3.0 ||
		got["caller"] != "alice" || got["created_at"] != "2026-01-02T03:04:05.000Z" || got["tags"].(map[string]any)["a.b"] != "c" {
		t.Errorf("get = %v", got)
	}
	if _, err := f.call(t, "authorization", "Bearer "+admin, "/spaceone.api.svc.v2.ThingKind/get_more", `{"thing_id": "t"}`); err != nil {
		t.Errorf("authorization header: %v", err)
	}
	l, err := f.call(t, "token", admin, "/spaceone.api.svc.v1.Thing/list", `{"query": {"filter": [{"k": "a", "v": 1, "o": "eq"}, {"key": "b", "value": "x", "operator": "in"}], "keyword": "kw", "page": {"limit": 2}, "sort": [{"key": "a"}]}}`)
	if err != nil || l["total_count"] != 2.0 || l["results"].([]any)[0].(map[string]any)["thing_id"] != "kw" {
		t.Errorf("list = %v %v", l, err)
	}
	if _, err := f.call(t, "", "", "/spaceone.api.svc.v1.Thing/ping", `{}`); err != nil {
		t.Errorf("public ping: %v", err)
	}

	for _, c := range []struct {
		name, token, body string
		code              codes.Code
		prefix            string
	}{
		{"no token", "", `{"thing_id": "t"}`, codes.Unauthenticated, "ERROR_AUTHENTICATE_FAILURE: "},
		{"forged", forged, `{"thing_id": "t"}`, codes.Unauthenticated, "ERROR_AUTHENTICATE_FAILURE: "},
		{"role", member, `{"thing_id": "t"}`, codes.PermissionDenied, "ERROR_PERMISSION_DENIED: "},
		{"required", admin, `{}`, codes.InvalidArgument, "ERROR_REQUIRED_PARAMETER: "},
		{"limit", admin, `{"thing_id": "01234567890"}`, codes.InvalidArgument, "ERROR_INVALID_PARAMETER: "},
		{"not found", admin, `{"thing_id": "t", "fail": "missing"}`, codes.NotFound, "ERROR_NOT_FOUND: "},
		{"down", admin, `{"thing_id": "t", "fail": "down"}`, codes.Unavailable, "ERROR_"},
		{"bug", admin, `{"thing_id": "t", "fail": "bug"}`, codes.Internal, "ERROR_UNKNOWN: Internal error. (request_id = "},
		{"over HTTP's bound", admin, `{"thing_id": "t", "blob": "` + strings.Repeat("x", server.MaxBody) + `"}`, codes.ResourceExhausted, "ERROR_REQUEST_TOO_LARGE: "},
		{"over the message bound", admin, `{"thing_id": "t", "blob": "` + strings.Repeat("x", MaxRecvMsgSize) + `"}`, codes.ResourceExhausted, ""},
	} {
		_, err := f.call(t, "token", c.token, "/spaceone.api.svc.v1.Thing/get", c.body)
		st := status.Convert(err)
		if err == nil || st.Code() != c.code || !strings.HasPrefix(st.Message(), c.prefix) || strings.Contains(st.Message(), "secret internal") {
			t.Errorf("%s: %v %q, want %v %q", c.name, st.Code(), st.Message(), c.code, c.prefix)
		}
	}
}

// TestQueries: the statistics and analyze queries are upstream's
// messages; the JSON upstream's clients send (aliases, every stage, a
// project's operands, v1's sort object) reaches the handler as it does
// over HTTP, and what neither takes is refused.
func TestQueries(t *testing.T) {
	f := start(t, 0)
	admin := f.token(t, auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	viaHTTP := func(path, body string) string {
		t.Helper()
		seen.Store("")
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		f.http.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("HTTP %s: %d %s", path, rec.Code, rec.Body)
		}
		return seen.Load().(string)
	}
	for _, c := range []struct{ path, full, body string }{
		{"/svc/v1/thing/stat", "/spaceone.api.svc.v1.Thing/stat", `{"query": {"filter": [{"k": "a", "v": 1, "o": "eq"}], "filter_or": [{"key": "b", "value": ["x"], "operator": "in"}],
			"aggregate": [{"unwind": {"path": "items", "filter": [{"k": "items.n", "v": 2, "o": "eq"}]}},
			{"group": {"keys": [{"k": "a", "n": "a"}, {"key": "created_at", "name": "d", "date_format": "%Y"}], "fields": [{"n": "c", "o": "count"}, {"k": "x", "n": "xs", "o": "push", "fields": [{"k": "y", "n": "y"}]}, {"key": "z", "name": "zs", "operator": "sum", "conditions": [{"k": "q", "v": true, "o": "eq"}]}]}},
			{"sort": [{"key": "c", "desc": true}]}, {"project": {"fields": [{"n": "s", "o": "add", "fields": ["c", 1, {"o": "multiply", "f": ["c", 2.5]}]}, {"k": "a", "n": "a"}], "exclude_keys": true}},
			{"count": {"name": "total"}}, {"limit": 3}, {"skip": 1}], "page": {"start": 1, "limit": 5}, "keyword": "kw"}}`},
		{"/svc/v1/thing/stat", "/spaceone.api.svc.v1.Thing/stat", `{"query": {"distinct": "a"}}`},
		{"/svc/v1/thing/analyze", "/spaceone.api.svc.v1.Thing/analyze", `{"query": {"granularity": "MONTHLY", "start": "2026-01", "end": "2026-03", "group_by": ["a", {"key": "b.c", "name": "c"}],
			"field_group": ["date"], "filter": [{"k": "a", "v": "x", "o": "eq"}], "page": {"limit": 2}, "sort": [{"key": "n", "desc": true}],
			"fields": {"n": {"operator": "sum", "key": "cost"}}, "select": {"n": "n", "m": {"operator": "add", "fields": ["n", 1]}}, "keyword": "k"}}`},
		{"/board/v1/board/list", "/spaceone.api.board.v1.Board/list", `{"query": {"sort": {"key": "name", "desc": true, "keys": [{"key": "b"}]}}}`},
		{"/board/v1/board/stat", "/spaceone.api.board.v1.Board/stat", `{"query": {"aggregate": [{"unwind": {"path": "tags"}}, {"sort": {"key": "n", "desc": true}}, {"group": {"keys": [{"k": "a", "n": "a"}]}}]}}`},
	} {
		want := viaHTTP(c.path, c.body)
		seen.Store("")
		if _, err := f.call(t, "token", admin, c.full, c.body); err != nil {
			t.Fatalf("%s: %v", c.full, err)
		}
		if got := seen.Load().(string); got != want || want == "" {
			t.Errorf("%s decoded\n%s\nover gRPC, over HTTP\n%s", c.full, got, want)
		}
	}
	// Refused alike: two stages in one element, a limit below zero.
	for _, body := range []string{`{"query": {"aggregate": [{"limit": -1}]}}`} {
		_, err := f.call(t, "token", admin, "/spaceone.api.svc.v1.Thing/stat", body)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "ERROR_") {
			t.Errorf("%s: %v", body, err)
		}
	}
	m := f.method(t, "/spaceone.api.svc.v1.Thing/stat")
	if err := protojson.Unmarshal([]byte(`{"query": {"aggregate": [{"limit": 1, "skip": 2}]}}`), dynamicpb.NewMessage(m.In)); err == nil {
		t.Error("two stages in one aggregate element are accepted by the message")
	}
	_, err := f.call(t, "token", admin, "/spaceone.api.svc.v1.Thing/narrow", `{"query": {"keyword": "a", "filter": [{"k": "a", "v": 1, "o": "eq"}]}}`)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "ERROR_INVALID_PARAMETER: ") {
		t.Errorf("a filter the narrow query does not take: %v", err)
	}
}

func TestCode(t *testing.T) {
	for status, want := range map[int]codes.Code{400: codes.InvalidArgument, 401: codes.Unauthenticated, 403: codes.PermissionDenied,
		404: codes.NotFound, 409: codes.AlreadyExists, 413: codes.ResourceExhausted, 429: codes.ResourceExhausted, 501: codes.Unimplemented,
		503: codes.Unavailable, 500: codes.Internal, 504: codes.DeadlineExceeded, 422: codes.FailedPrecondition} {
		if got := Code(status); got != want {
			t.Errorf("Code(%d) = %v, want %v", status, got, want)
		}
	}
}

// TestGracefulStop: at the stop, health answers NOT_SERVING while the
// drain lasts, a call under way finishes, then the server is gone.
func TestGracefulStop(t *testing.T) {
	h := holds{make(chan struct{}, 1), make(chan struct{})}
	f := start(t, 300*time.Millisecond, h)
	// The drain lasts until the test has seen NOT_SERVING, not 300 ms of
	// wall time a stalled machine can spend before the first health check.
	drained, drainAsked := make(chan struct{}), make(chan time.Duration, 1)
	f.grpc.drain = func(d time.Duration) { drainAsked <- d; <-drained }
	t.Cleanup(func() { // a failed test ends the drain for the fixture's cleanup
		select {
		case <-drained:
		default:
			close(drained)
		}
	})
	admin := f.token(t, auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	hc := healthpb.NewHealthClient(f.conn)
	if r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "spaceone.api.svc.v1.Thing"}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v %v", r, err)
	}
	var finished atomic.Bool
	callDone := make(chan error, 1)
	go func() {
		_, err := f.call(t, "token", admin, "/spaceone.api.svc.v1.Thing/get", `{"thing_id": "t", "hold": true}`)
		finished.Store(err == nil)
		callDone <- err
	}()
	<-h.held
	f.stop()
	var (
		r   *healthpb.HealthCheckResponse
		err error
	)
	if testkit.Within(5*time.Second, func() bool {
		r, err = hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	}) != nil {
		t.Fatalf("health still %v %v", r, err)
	}
	if d := <-drainAsked; d != 300*time.Millisecond {
		t.Fatalf("drained %v, want the DrainDelay set, 300ms", d)
	}
	close(drained)
	close(h.release)
	if err := <-callDone; err != nil || !finished.Load() {
		t.Fatalf("call under way: %v", err)
	}
	if err := <-f.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	f.done <- nil // for the cleanup
}

// TestHealthFollowsReadiness: while the HTTP server's readiness check
// fails (the store down), health answers NOT_SERVING for the server and
// its services; SERVING again once it passes.
func TestHealthFollowsReadiness(t *testing.T) {
	var down atomic.Bool
	f := startWith(t, func(so *server.Options, o *Options) {
		so.Ready = func(context.Context) error {
			if down.Load() {
				return errors.New("store down")
			}
			return nil
		}
		o.ReadyEvery = 10 * time.Millisecond
	})
	hc := healthpb.NewHealthClient(f.conn)
	status := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	until := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		if testkit.Within(10*time.Second, func() bool {
			return status("") == want && status("spaceone.api.svc.v1.Thing") == want
		}) != nil {
			t.Fatalf("health %v, want %v", status(""), want)
		}
	}
	until(healthpb.HealthCheckResponse_SERVING)
	down.Store(true)
	until(healthpb.HealthCheckResponse_NOT_SERVING)
	down.Store(false)
	until(healthpb.HealthCheckResponse_SERVING)
}

// testLog writes the servers' log lines to the test's log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Helper()
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestStreamBound: the server tells each connection, in its HTTP/2
// SETTINGS, that it takes at most MaxConcurrentStreams calls at once, so
// a client queues the rest (read from the wire, as a client reads it).
func TestStreamBound(t *testing.T) {
	f := start(t, 0)
	conn, err := net.Dial("tcp", f.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// The client preface and an empty SETTINGS frame.
	if _, err := conn.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	for {
		var head [9]byte
		if _, err := io.ReadFull(conn, head[:]); err != nil {
			t.Fatal(err)
		}
		n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(conn, payload); err != nil {
			t.Fatal(err)
		}
		if head[3] != 4 || head[4]&1 != 0 { // not SETTINGS, or its ACK
			continue
		}
		for i := 0; i+6 <= len(payload); i += 6 {
			if id := binary.BigEndian.Uint16(payload[i:]); id == 3 { // SETTINGS_MAX_CONCURRENT_STREAMS
				if v := binary.BigEndian.Uint32(payload[i+2:]); v != MaxConcurrentStreams {
					t.Fatalf("max concurrent streams %d, want %d", v, MaxConcurrentStreams)
				}
				return
			}
		}
		t.Fatalf("the server's SETTINGS name no stream bound: % x", payload)
	}
}

// TestStopCutsLateCalls: a call still under way when ShutdownTimeout
// has passed after the drain is cut (UNAVAILABLE), and Run returns.
func TestStopCutsLateCalls(t *testing.T) {
	h := holds{make(chan struct{}, 1), make(chan struct{})}
	defer close(h.release)
	f := startWith(t, func(_ *server.Options, o *Options) { o.ShutdownTimeout = 100 * time.Millisecond }, h)
	admin := f.token(t, auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	callDone := make(chan error, 1)
	go func() {
		_, err := f.call(t, "token", admin, "/spaceone.api.svc.v1.Thing/get", `{"thing_id": "t", "hold": true}`)
		callDone <- err
	}()
	<-h.held
	f.stop()
	if err := <-f.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	f.done <- nil // for the cleanup
	if st := status.Convert(<-callDone); st.Code() != codes.Unavailable {
		t.Fatalf("a call cut at the stop: %v %s", st.Code(), st.Message())
	}
}
