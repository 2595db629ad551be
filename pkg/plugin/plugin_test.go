package plugin_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

type M = map[string]any

func newClient(t *testing.T, opts plugin.Options) *plugin.Client {
	t.Helper()
	c, err := plugin.New(nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fast is a policy with short timeouts so failing tests end quickly.
var fast = plugin.Options{ReadyTimeout: time.Second, CallTimeout: 2 * time.Second, RetryDelay: 10 * time.Millisecond}

// wantErr checks status and code of a call's error.
func wantErr(t *testing.T, err error, status int, code string) *errs.Error {
	t.Helper()
	e, ok := errs.As(err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *errs.Error", err, err)
	}
	if e.Status() != status || e.Code != code {
		t.Fatalf("got %d %s (%s), want %d %s", e.Status(), e.Code, e.Message, status, code)
	}
	return e
}

func lastRequest(t *testing.T, s *fakeplugin.Server, m plugin.Method) M {
	t.Helper()
	calls := s.Calls(string(m))
	if len(calls) == 0 {
		t.Fatalf("%s was not called", m)
	}
	return calls[len(calls)-1].Request
}

func eq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got  %#v\n want %#v", what, got, want)
	}
}

// TestEveryKindOnBothVariants calls every method of every kind on a plugin
// numbered as upstream and on one numbered differently (an older or newer
// build): requests must arrive by name and replies read back by name on
// both. A client encoding by fixed field numbers fails on the skewed one.
func TestEveryKindOnBothVariants(t *testing.T) {
	t.Parallel()
	up, _ := fakeplugin.Registry(fakeplugin.Upstream)
	sk, _ := fakeplugin.Registry(fakeplugin.Skewed)
	num := func(r interface {
		FindDescriptorByName(protoreflect.FullName) (protoreflect.Descriptor, error)
	}, msg, field string) protoreflect.FieldNumber {
		d, err := r.FindDescriptorByName(protoreflect.FullName(msg))
		if err != nil {
			t.Fatal(err)
		}
		return d.(protoreflect.MessageDescriptor).Fields().ByName(protoreflect.Name(field)).Number()
	}
	if num(up, "spaceone.api.inventory.plugin.VerifyRequest", "options") == num(sk, "spaceone.api.inventory.plugin.VerifyRequest", "options") {
		t.Fatal("the variants number fields the same: the skew test would prove nothing")
	}

	for _, v := range []fakeplugin.Variant{fakeplugin.Upstream, fakeplugin.Skewed} {
		t.Run(v.String(), func(t *testing.T) {
			s := fakeplugin.Start(t, fakeplugin.Options{Variant: v})
			c := newClient(t, fast)
			ctx := context.Background()
			tg := c.At(s.Endpoint)

			// inventory collector
			s.Script(string(plugin.CollectorInit), fakeplugin.Reply{Result: M{"metadata": M{"concurrency": 2, "supported_resource_type": []any{"inventory.CloudService"}}}})
			col := plugin.Collector{Target: tg}
			md, err := col.Init(ctx, M{"region": "eu"})
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "init metadata", md, M{"concurrency": 2.0, "supported_resource_type": []any{"inventory.CloudService"}})
			eq(t, "init request", lastRequest(t, s, plugin.CollectorInit), M{"options": M{"region": "eu"}})
			if got := s.Calls(string(plugin.CollectorInit))[0].Metadata["token"]; len(got) != 1 || got[0] != "NO_TOKEN" {
				t.Errorf("token metadata %v, want NO_TOKEN", got)
			}
			if err := col.Verify(ctx, nil, nil); err != nil {
				t.Fatal(err)
			}
			eq(t, "verify request (empty Structs sent, not absent)", lastRequest(t, s, plugin.CollectorVerify), M{"options": M{}, "secret_data": M{}})
			s.Script(string(plugin.CollectorGetTasks), fakeplugin.Reply{Result: M{"tasks": []any{M{"task_options": M{"region": "a"}}, M{}}}})
			tasks, err := col.GetTasks(ctx, M{"o": 1}, M{"k": "s"})
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "tasks", tasks, []M{{"region": "a"}, {}})
			eq(t, "get_tasks request", lastRequest(t, s, plugin.CollectorGetTasks), M{"options": M{"o": 1.0}, "secret_data": M{"k": "s"}})
			s.Script(string(plugin.CollectorCollect), fakeplugin.Reply{Stream: []map[string]any{
				{"state": "SUCCESS", "resource_type": "inventory.CloudService", "match_rules": M{"1": []any{"name"}}, "resource": M{"name": "vm-1"}},
				{"state": "FAILURE", "message": "no access", "resource_type": "inventory.ErrorResource"},
			}})
			var got []M
			err = col.Collect(ctx, plugin.CollectRequest{Options: M{}, SecretData: M{"k": "s"}}, func(r M) error { got = append(got, r); return nil })
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "collected", got, []M{
				{"state": "SUCCESS", "resource_type": "inventory.CloudService", "match_rules": M{"1": []any{"name"}}, "resource": M{"name": "vm-1"}},
				{"state": "FAILURE", "message": "no access", "resource_type": "inventory.ErrorResource"},
			})
			eq(t, "collect request (filter sent empty, no task_options)", lastRequest(t, s, plugin.CollectorCollect),
				M{"options": M{}, "secret_data": M{"k": "s"}, "filter": M{}})
			_ = col.Collect(ctx, plugin.CollectRequest{TaskOptions: M{"region": "a"}}, func(M) error { return nil })
			eq(t, "collect request with task_options", lastRequest(t, s, plugin.CollectorCollect),
				M{"options": M{}, "secret_data": M{}, "filter": M{}, "task_options": M{"region": "a"}})

			// monitoring webhook
			wh := plugin.Webhook{Target: tg}
			s.Script(string(plugin.WebhookInit), fakeplugin.Reply{Result: M{"metadata": M{"k": "v"}}})
			if md, err := wh.Init(ctx, nil); err != nil || !reflect.DeepEqual(md, M{"k": "v"}) {
				t.Fatalf("webhook init %v %v", md, err)
			}
			if err := wh.Verify(ctx, M{"a": true}); err != nil {
				t.Fatal(err)
			}
			eq(t, "webhook verify request", lastRequest(t, s, plugin.WebhookVerify), M{"options": M{"a": true}})
			event := M{"event_key": "k1", "event_type": "ALERT", "title": "CPU", "severity": "CRITICAL", "occurred_at": "2026-01-01T00:00:00Z",
				"resource": M{"name": "vm-1"}, "resources": []any{"vm-1"}}
			s.Script(string(plugin.EventParse), fakeplugin.Reply{Result: M{"results": []any{event}}})
			events, err := wh.Parse(ctx, nil, M{"alert": "x"})
			if err != nil {
				t.Fatal(err)
			}
			if v == fakeplugin.Skewed { // an older build has no resources field
				delete(event, "resources")
			}
			eq(t, "events", events, []M{event})
			eq(t, "parse request", lastRequest(t, s, plugin.EventParse), M{"options": M{}, "data": M{"alert": "x"}})

			// monitoring data source
			mds := plugin.MonitoringDataSource{Target: tg}
			if _, err := mds.Init(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if err := mds.Verify(ctx, nil, M{"key": "x"}, "aws_access_key"); err != nil {
				t.Fatal(err)
			}
			eq(t, "ds verify request", lastRequest(t, s, plugin.MonitoringDataSourceVerify), M{"options": M{}, "secret_data": M{"key": "x"}, "schema": "aws_access_key"})
			s.Script(string(plugin.MetricList), fakeplugin.Reply{Result: M{"metrics": []any{M{"key": "cpu", "name": "CPU", "unit": M{"y": "%"}}}}})
			ml, err := mds.ListMetrics(ctx, M{"query": M{"resource_id": "r"}})
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "metrics", ml, M{"metrics": []any{M{"key": "cpu", "name": "CPU", "unit": M{"y": "%"}}}})
			s.Script(string(plugin.MetricGetData), fakeplugin.Reply{Result: M{"labels": []any{"t1"}, "values": M{"r": []any{1.5}}}})
			mdata, err := mds.GetMetricData(ctx, M{"metric": "cpu", "period": 60, "stat": "AVERAGE"})
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "metric data", mdata, M{"labels": []any{"t1"}, "values": M{"r": []any{1.5}}})
			eq(t, "metric data request", lastRequest(t, s, plugin.MetricGetData), M{"options": M{}, "secret_data": M{}, "metric": "cpu", "period": 60.0, "stat": "AVERAGE"})
			s.Script(string(plugin.LogList), fakeplugin.Reply{Stream: []map[string]any{{"results": []any{M{"l": 1}}}, {"results": []any{M{"l": 2}}}}})
			var logs []M
			if err := mds.ListLogs(ctx, M{"limit": 10, "sort": M{"key": "t", "desc": true}}, func(r []M) error { logs = append(logs, r...); return nil }); err != nil {
				t.Fatal(err)
			}
			eq(t, "logs", logs, []M{{"l": 1.0}, {"l": 2.0}})

			// cost-analysis data source
			cds := plugin.CostDataSource{Target: tg}
			s.Script(string(plugin.CostDataSourceInit), fakeplugin.Reply{Result: M{"metadata": M{"currency": "USD"}}})
			if md, err := cds.Init(ctx, M{"secret_type": "MANUAL"}, "domain-1"); err != nil || md["currency"] != "USD" {
				t.Fatalf("cost init %v %v", md, err)
			}
			wantInit := M{"options": M{"secret_type": "MANUAL"}, "domain_id": "domain-1"}
			if v == fakeplugin.Skewed { // a build before domain_id: dropped, not refused
				delete(wantInit, "domain_id")
			}
			eq(t, "cost init request", lastRequest(t, s, plugin.CostDataSourceInit), wantInit)
			if err := cds.Verify(ctx, nil, nil, "", "domain-1"); err != nil {
				t.Fatal(err)
			}
			s.Script(string(plugin.CostGetTasks), fakeplugin.Reply{Result: M{"tasks": []any{M{"task_options": M{"start": "2026-01"}}},
				"changed": []any{M{"start": "2026-01"}}, "synced_accounts": []any{M{"account_id": "a1"}}}})
			tr, err := cds.GetTasks(ctx, plugin.CostTasksRequest{Start: "2026-01-01", DomainID: "domain-1", LinkedAccounts: []M{{"account_id": "a1"}}})
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "cost tasks", tr["synced_accounts"], []any{M{"account_id": "a1"}})
			s.Script(string(plugin.CostGetLinkedAccounts), fakeplugin.Reply{Result: M{"results": []any{M{"account_id": "a1", "name": "A"}}}})
			if acc, err := cds.GetLinkedAccounts(ctx, nil, nil, "", "domain-1"); err != nil || len(acc) != 1 || acc[0]["name"] != "A" {
				t.Fatalf("linked accounts %v %v", acc, err)
			}
			s.Script(string(plugin.CostGetData), fakeplugin.Reply{Stream: []map[string]any{
				{"results": []any{M{"cost": 1.5, "usage_quantity": 2, "billed_date": "2026-01-02", "tags": M{"team": "x"}}}},
				{"results": []any{M{"cost": 0.25, "billed_date": "2026-01-03"}}},
			}})
			var costs []M
			if err := cds.GetData(ctx, plugin.CostDataRequest{DomainID: "domain-1"}, func(r []M) error { costs = append(costs, r...); return nil }); err != nil {
				t.Fatal(err)
			}
			eq(t, "costs", costs, []M{{"cost": 1.5, "usage_quantity": 2.0, "billed_date": "2026-01-02", "tags": M{"team": "x"}}, {"cost": 0.25, "billed_date": "2026-01-03"}})
			wantData := M{"options": M{}, "secret_data": M{}, "task_options": M{}, "domain_id": "domain-1"}
			if v == fakeplugin.Skewed {
				delete(wantData, "domain_id")
			}
			eq(t, "get_data request (task_options sent empty)", lastRequest(t, s, plugin.CostGetData), wantData)

			// notification protocol
			p := plugin.Protocol{Target: tg}
			s.Script(string(plugin.ProtocolInit), fakeplugin.Reply{Result: M{"metadata": M{"data_type": "PLAIN_TEXT", "data": M{"schema": M{"type": "object"}}}}})
			if md, err := p.Init(ctx, nil); err != nil || md["data_type"] != "PLAIN_TEXT" {
				t.Fatalf("protocol init %v %v", md, err)
			}
			if err := p.Verify(ctx, nil, M{"token": "x"}); err != nil {
				t.Fatal(err)
			}
			if err := p.Dispatch(ctx, plugin.DispatchRequest{Message: M{"title": "hello"}, NotificationType: "INFO", ChannelData: M{"email": "a@b.c"}}); err != nil {
				t.Fatal(err)
			}
			eq(t, "dispatch request (enum by name, Structs present)", lastRequest(t, s, plugin.NotificationDispatch),
				M{"options": M{}, "message": M{"title": "hello"}, "notification_type": "INFO", "secret_data": M{}, "channel_data": M{"email": "a@b.c"}})
		})
	}
}

// TestRequestFields: fields the plugin's descriptor lacks are dropped, a
// value that cannot fit the descriptor is a 400, and the typed helpers
// refuse what the plugins' SDK would.
func TestRequestFields(t *testing.T) {
	t.Parallel()
	s := fakeplugin.Start(t, fakeplugin.Options{})
	c := newClient(t, fast)
	ctx := context.Background()
	if _, err := c.At(s.Endpoint).Invoke(ctx, plugin.CollectorInit, M{"options": M{"a": 1}, "domain_id": "d", "bogus": []any{1}}); err != nil {
		t.Fatal(err)
	}
	eq(t, "unknown fields dropped", lastRequest(t, s, plugin.CollectorInit), M{"options": M{"a": 1.0}})
	// camelCase names are accepted, as upstream's ParseDict does.
	if _, err := c.At(s.Endpoint).Invoke(ctx, plugin.CollectorVerify, M{"secretData": M{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	eq(t, "json name", lastRequest(t, s, plugin.CollectorVerify), M{"options": M{}, "secret_data": M{"k": "v"}})
	// An enum name the plugin does not know is dropped like an unknown field.
	if _, err := c.At(s.Endpoint).Invoke(ctx, plugin.NotificationDispatch, M{"notification_type": "LOUD", "message": M{"title": "t"}}); err != nil {
		t.Fatal(err)
	}
	eq(t, "unknown enum name", lastRequest(t, s, plugin.NotificationDispatch), M{"options": M{}, "secret_data": M{}, "message": M{"title": "t"}, "channel_data": M{}})
	before := len(s.Calls(""))
	_, err := c.At(s.Endpoint).Invoke(ctx, plugin.NotificationDispatch, M{"options": "not an object"})
	wantErr(t, err, http.StatusBadRequest, errs.InvalidParameter)
	err = plugin.Protocol{Target: c.At(s.Endpoint)}.Dispatch(ctx, plugin.DispatchRequest{NotificationType: "NOTIFICATION_TYPE_NONE"})
	wantErr(t, err, http.StatusBadRequest, errs.InvalidParameter)
	_, err = plugin.CostDataSource{Target: c.At(s.Endpoint)}.Init(ctx, nil, "")
	wantErr(t, err, http.StatusBadRequest, errs.RequiredParameter)
	if n := len(s.Calls("")); n != before {
		t.Errorf("refused requests reached the plugin: %d calls", n-before)
	}
}

// TestReflectionVersions: an upstream (Python) plugin serves only
// reflection v1alpha; one without reflection cannot be called by name.
func TestReflectionVersions(t *testing.T) {
	t.Parallel()
	c := newClient(t, fast)
	ctx := context.Background()
	alpha := fakeplugin.Start(t, fakeplugin.Options{Reflection: fakeplugin.ReflectV1Alpha})
	alpha.Script(string(plugin.CollectorInit), fakeplugin.Reply{Result: M{"metadata": M{"v": "alpha"}}})
	md, err := plugin.Collector{Target: c.At(alpha.Endpoint)}.Init(ctx, nil)
	if err != nil || md["v"] != "alpha" {
		t.Fatalf("v1alpha plugin: %v %v", md, err)
	}
	none := fakeplugin.Start(t, fakeplugin.Options{Reflection: fakeplugin.ReflectNone})
	_, err = plugin.Collector{Target: c.At(none.Endpoint)}.Init(ctx, nil)
	e := wantErr(t, err, http.StatusBadGateway, errs.PluginFailed)
	if !strings.Contains(e.Message, "reflection") {
		t.Errorf("message %q does not say reflection is missing", e.Message)
	}
	if len(none.Calls("")) != 0 {
		t.Error("a plugin without reflection was called")
	}
}

// TestErrorMapping: the plugin's "ERROR_X: message" is kept; the status
// follows the plugin's gRPC status; never a 500.
func TestErrorMapping(t *testing.T) {
	t.Parallel()
	s := fakeplugin.Start(t, fakeplugin.Options{})
	opts := fast
	opts.Retries = -1
	c := newClient(t, opts)
	cases := []struct {
		name     string
		err      error
		status   int
		code     string
		plugCode string
		plugMsg  string
	}{
		{"invalid argument", fakeplugin.Fail(codes.InvalidArgument, "ERROR_REQUIRED_PARAMETER", "Required parameter. (key = secret_data)"),
			400, errs.PluginFailed, "ERROR_REQUIRED_PARAMETER", "Required parameter. (key = secret_data)"},
		{"unauthenticated", fakeplugin.Fail(codes.Unauthenticated, "ERROR_AUTHENTICATE_FAILURE", "bad key"), 400, errs.PluginFailed, "ERROR_AUTHENTICATE_FAILURE", "bad key"},
		{"permission denied", fakeplugin.Fail(codes.PermissionDenied, "ERROR_PERMISSION_DENIED", "no"), 400, errs.PluginFailed, "ERROR_PERMISSION_DENIED", "no"},
		{"internal", fakeplugin.Fail(codes.Internal, "ERROR_UNKNOWN", "KeyError: 'x'"), 502, errs.PluginFailed, "ERROR_UNKNOWN", "KeyError: 'x'"},
		{"unknown status without code", status.Error(codes.Unknown, "panic"), 502, errs.PluginFailed, "", "panic"},
		{"plugin says unavailable", fakeplugin.Fail(codes.Unavailable, "ERROR_AWS_THROTTLED", "slow down"), 503, errs.PluginFailed, "ERROR_AWS_THROTTLED", "slow down"},
		{"transport unavailable", status.Error(codes.Unavailable, "connection refused"), 503, errs.GRPCConnection, "", ""},
		{"deadline", status.Error(codes.DeadlineExceeded, "late"), 503, errs.GRPCTimeout, "", ""},
		{"unimplemented", status.Error(codes.Unimplemented, "method collect not implemented"), 400, errs.PluginFailed, "", "method collect not implemented"},
		{"message with colon but no code", status.Error(codes.Internal, "boom: bad"), 502, errs.PluginFailed, "", "boom: bad"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s.Script(string(plugin.CollectorVerify), fakeplugin.Reply{Err: tc.err})
			err := plugin.Collector{Target: c.At(s.Endpoint)}.Verify(context.Background(), nil, nil)
			e := wantErr(t, err, tc.status, tc.code)
			if tc.code != errs.PluginFailed {
				return
			}
			f, ok := plugin.FailureOf(err)
			if !ok {
				t.Fatal("no plugin.Failure in the error")
			}
			if f.Code != tc.plugCode || f.Message != tc.plugMsg || f.Method != plugin.CollectorVerify {
				t.Errorf("failure %+v", f)
			}
			if tc.plugCode != "" && !strings.Contains(e.Message, tc.plugCode+": "+tc.plugMsg) {
				t.Errorf("message %q does not keep %q", e.Message, tc.plugCode+": "+tc.plugMsg)
			}
		})
	}
}

// TestRetries: UNAVAILABLE and DEADLINE_EXCEEDED are tried three times in
// all; other failures once.
func TestRetries(t *testing.T) {
	t.Parallel()
	s := fakeplugin.Start(t, fakeplugin.Options{})
	c := newClient(t, fast)
	ctx := context.Background()
	col := plugin.Collector{Target: c.At(s.Endpoint)}
	down := fakeplugin.Reply{Err: status.Error(codes.Unavailable, "down")}

	s.Script(string(plugin.CollectorVerify), down)
	wantErr(t, col.Verify(ctx, nil, nil), http.StatusServiceUnavailable, errs.GRPCConnection)
	if n := len(s.Calls(string(plugin.CollectorVerify))); n != 3 {
		t.Errorf("UNAVAILABLE tried %d times, want 3", n)
	}

	s.Reset()
	s.Script(string(plugin.CollectorVerify), down, down, fakeplugin.Reply{})
	if err := col.Verify(ctx, nil, nil); err != nil {
		t.Fatalf("third try should succeed: %v", err)
	}
	if n := len(s.Calls(string(plugin.CollectorVerify))); n != 3 {
		t.Errorf("%d tries, want 3", n)
	}

	s.Reset()
	s.Script(string(plugin.CollectorVerify), fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_X", "no")})
	wantErr(t, col.Verify(ctx, nil, nil), http.StatusBadRequest, errs.PluginFailed)
	if n := len(s.Calls(string(plugin.CollectorVerify))); n != 1 {
		t.Errorf("INVALID_ARGUMENT tried %d times, want 1", n)
	}

	// A stream is tried again only before its first message.
	s.Reset()
	s.Script(string(plugin.CollectorCollect), down, fakeplugin.Reply{Stream: []map[string]any{{"state": "SUCCESS"}}})
	n := 0
	if err := col.Collect(ctx, plugin.CollectRequest{}, func(M) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("stream retried before its first message: %d messages, %v", n, err)
	}
	if k := len(s.Calls(string(plugin.CollectorCollect))); k != 2 {
		t.Errorf("stream tried %d times, want 2", k)
	}

	opts := fast
	opts.Retries = -1
	none := newClient(t, opts)
	s.Reset()
	s.Script(string(plugin.CollectorVerify), down)
	wantErr(t, plugin.Collector{Target: none.At(s.Endpoint)}.Verify(ctx, nil, nil), http.StatusServiceUnavailable, errs.GRPCConnection)
	if n := len(s.Calls(string(plugin.CollectorVerify))); n != 1 {
		t.Errorf("Retries -1: %d tries, want 1", n)
	}
}

// TestNeverAHang: a plugin that never answers ends in the configured
// timeout (three tries), an address that accepts TCP but never speaks gRPC
// in the ready timeout; a stream has no deadline but its context.
func TestNeverAHang(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fakeplugin.Start(t, fakeplugin.Options{})
	// Timeouts of a second: shorter ones end tries before they reach the
	// fake on a loaded machine, and the fake then counts fewer.
	opts := plugin.Options{ReadyTimeout: time.Second, CallTimeout: time.Second, RetryDelay: time.Millisecond}
	c := newClient(t, opts)
	col := plugin.Collector{Target: c.At(s.Endpoint)}

	s.Script(string(plugin.CollectorInit), fakeplugin.Reply{Hang: true})
	start := time.Now()
	_, err := col.Init(ctx, nil)
	wantErr(t, err, http.StatusServiceUnavailable, errs.GRPCTimeout)
	// At least three tries of 200 ms; the upper bound tells a hang from a
	// loaded machine, not a speed.
	if d := time.Since(start); d < 3*time.Second || d > time.Minute {
		t.Errorf("three tries of 1 s took %s", d)
	}
	if n := len(s.Calls(string(plugin.CollectorInit))); n != 3 {
		t.Errorf("DEADLINE_EXCEEDED tried %d times, want 3", n)
	}

	// A slow answer within the timeout is fine (a timeout far above the
	// delay: 150 ms of margin is not one on a loaded machine).
	s.Script(string(plugin.CollectorInit), fakeplugin.Reply{Delay: 50 * time.Millisecond, Result: M{"metadata": M{"ok": true}}})
	slowOpts := opts
	slowOpts.CallTimeout = 30 * time.Second
	if md, err := (plugin.Collector{Target: newClient(t, slowOpts).At(s.Endpoint)}).Init(ctx, nil); err != nil || md["ok"] != true {
		t.Fatalf("slow init: %v %v", md, err)
	}

	// Streams have no deadline: a first message later than CallTimeout arrives.
	s.Script(string(plugin.CollectorCollect), fakeplugin.Reply{Delay: 1500 * time.Millisecond, Stream: []map[string]any{{"state": "SUCCESS"}}})
	n := 0
	if err := col.Collect(ctx, plugin.CollectRequest{}, func(M) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("slow stream: %d messages, %v", n, err)
	}

	// A listener that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	start = time.Now()
	_, err = plugin.Collector{Target: c.At("grpc://" + ln.Addr().String())}.Init(ctx, nil)
	wantErr(t, err, http.StatusServiceUnavailable, errs.GRPCConnection)
	if d := time.Since(start); d > time.Minute {
		t.Errorf("a mute endpoint took %s, want about the 1 s ready timeout (a hang)", d)
	}

	// Nothing listening.
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := dead.Addr().String()
	dead.Close()
	_, err = plugin.Collector{Target: c.At("grpc://" + addr)}.Init(ctx, nil)
	wantErr(t, err, http.StatusServiceUnavailable, errs.GRPCConnection)

	// The caller's own deadline ends a call at once.
	s.Script(string(plugin.CollectorVerify), fakeplugin.Reply{Hang: true})
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	tries := len(s.Calls(string(plugin.CollectorVerify)))
	err = col.Verify(cctx, nil, nil)
	wantErr(t, err, http.StatusServiceUnavailable, errs.GRPCTimeout)
	if n := len(s.Calls(string(plugin.CollectorVerify))) - tries; n > 1 {
		t.Errorf("a call whose context ended was tried %d times, want once at most", n)
	}
}

// TestStreamCancelAndBreak: a stream ends when its context is cancelled;
// a stream broken halfway reports the plugin's error after the messages
// sent, and is not tried again.
func TestStreamCancelAndBreak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fakeplugin.Start(t, fakeplugin.Options{})
	c := newClient(t, fast)
	col := plugin.Collector{Target: c.At(s.Endpoint)}
	one := map[string]any{"state": "SUCCESS", "resource": M{"name": "a"}}

	// Cancelled by its context after the first message; the plugin would
	// hang forever.
	s.Script(string(plugin.CollectorCollect), fakeplugin.Reply{Stream: []map[string]any{one}, Hang: true})
	cctx, cancel := context.WithCancel(ctx)
	n := 0
	err := col.Collect(cctx, plugin.CollectRequest{}, func(M) error {
		n++
		cancel() // the plugin hangs after this message: the cancel ends the wait for the next
		return nil
	})
	wantErr(t, err, http.StatusServiceUnavailable, errs.GRPCTimeout)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
	if n != 1 { // the cancel, not a call timeout, ended it: the error wraps context.Canceled
		t.Errorf("%d messages", n)
	}
	if testkit.Within(time.Minute, func() bool { return s.Calls(string(plugin.CollectorCollect))[0].Cancelled }) != nil {
		t.Error("the plugin never saw the cancellation")
	}

	// The callback's error stops the stream and comes back as is.
	s.Reset()
	s.Script(string(plugin.CollectorCollect), fakeplugin.Reply{Stream: []map[string]any{one, one, one}})
	stop := errors.New("enough")
	n = 0
	if err := col.Collect(ctx, plugin.CollectRequest{}, func(M) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("callback error: %v after %d messages", err, n)
	}

	// Broken halfway by the plugin's error.
	s.Reset()
	s.Script(string(plugin.CollectorCollect), fakeplugin.Reply{Stream: []map[string]any{one, one},
		Err: fakeplugin.Fail(codes.Unavailable, "ERROR_AWS_THROTTLING", "Rate exceeded")})
	n = 0
	err = col.Collect(ctx, plugin.CollectRequest{}, func(M) error { n++; return nil })
	e := wantErr(t, err, http.StatusServiceUnavailable, errs.PluginFailed)
	if n != 2 || !strings.Contains(e.Message, "ERROR_AWS_THROTTLING: Rate exceeded") {
		t.Errorf("%d messages, %q", n, e.Message)
	}
	if k := len(s.Calls(string(plugin.CollectorCollect))); k != 1 {
		t.Errorf("a stream broken after messages was tried %d times, want 1", k)
	}

	// Broken halfway by the plugin process dying.
	s.Reset()
	// The cut comes once both messages reached the caller: a cut before
	// any would rightly be tried again.
	received := make(chan struct{})
	s.Script(string(plugin.CollectorCollect), fakeplugin.Reply{Stream: []map[string]any{one, one}, Cut: true, Gate: received})
	n = 0
	err = col.Collect(ctx, plugin.CollectRequest{}, func(M) error {
		if n++; n == 2 {
			close(received)
		}
		return nil
	})
	wantErr(t, err, http.StatusServiceUnavailable, errs.GRPCConnection)
	if n != 2 {
		t.Errorf("%d messages before the cut, want 2", n)
	}
	if k := len(s.Calls(string(plugin.CollectorCollect))); k != 1 {
		t.Errorf("a cut stream was tried %d times, want 1", k)
	}
	// The client reconnects afterwards.
	if err := col.Verify(ctx, nil, nil); err != nil {
		t.Fatalf("after the cut: %v", err)
	}
}

// TestReceiveLimit: replies over the configured receive limit fail as the
// plugin's failure; the default limit (256 MiB) takes them.
func TestReceiveLimit(t *testing.T) {
	t.Parallel()
	s := fakeplugin.Start(t, fakeplugin.Options{})
	big := strings.Repeat("x", 64<<10)
	s.Script(string(plugin.CollectorInit), fakeplugin.Reply{Result: M{"metadata": M{"big": big}}})
	opts := fast
	opts.MaxRecvBytes = 16 << 10
	small := newClient(t, opts)
	_, err := plugin.Collector{Target: small.At(s.Endpoint)}.Init(context.Background(), nil)
	e := wantErr(t, err, http.StatusBadGateway, errs.PluginFailed)
	if !strings.Contains(e.Message, "too large") {
		t.Errorf("message %q", e.Message)
	}
	md, err := plugin.Collector{Target: newClient(t, fast).At(s.Endpoint)}.Init(context.Background(), nil)
	if err != nil || md["big"] != big {
		t.Fatalf("default limit: %v", err)
	}
}

// TestUnsupportedAndRefresh: a method the plugin does not serve is a 400
// marked Unsupported; when a new build at the same address serves it,
// the descriptors are read again.
func TestUnsupportedAndRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	only := fakeplugin.Start(t, fakeplugin.Options{Services: []string{"spaceone.api.inventory.plugin.Collector"}})
	c := newClient(t, fast)
	col := plugin.Collector{Target: c.At(only.Endpoint)}
	if _, err := col.Init(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_, err := col.GetTasks(ctx, nil, nil)
	wantErr(t, err, http.StatusBadRequest, errs.PluginFailed)
	if f, ok := plugin.FailureOf(err); !ok || !f.Unsupported {
		t.Fatalf("not marked unsupported: %+v", f)
	}
	// The same address now serves a build with the Job service.
	only.Stop()
	full, err := fakeplugin.New(fakeplugin.Options{Addr: only.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Stop()
	full.Script(string(plugin.CollectorGetTasks), fakeplugin.Reply{Result: M{"tasks": []any{M{"task_options": M{"n": 1}}}}})
	tasks, err := col.GetTasks(ctx, nil, nil)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("after the upgrade: %v %v", tasks, err)
	}
}

// TestEndpoints: plugin_id@version wins over plugin_id, keys match without
// case, an unknown plugin is a 503 naming it, bad endpoints are refused
// at start.
func TestEndpoints(t *testing.T) {
	t.Setenv("NUBES_PLUGIN_ENDPOINTS", "plugin-a=grpc://127.0.0.1:50051, Plugin-B@1.2.0=grpc+ssl://host:443,plugin-b=grpc://b:50051")
	var cfg config.Base
	if err := config.Load(&cfg, config.BaseDefaults()); err != nil {
		t.Fatal(err)
	}
	c, err := plugin.New(cfg.PluginEndpoints, plugin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ id, version, want string }{
		{"plugin-a", "", "grpc://127.0.0.1:50051"},
		{"plugin-a", "9.9.9", "grpc://127.0.0.1:50051"},
		{"plugin-b", "1.2.0", "grpc+ssl://host:443"},
		{"plugin-B", "1.2.0", "grpc+ssl://host:443"},
		{"plugin-b", "1.3.0", "grpc://b:50051"},
	}
	for _, tc := range cases {
		if got, err := c.Endpoint(tc.id, tc.version); err != nil || got != tc.want {
			t.Errorf("%s@%s: %q %v, want %q", tc.id, tc.version, got, err, tc.want)
		}
	}
	_, err = c.Endpoint("plugin-x", "1.0")
	e := wantErr(t, err, http.StatusServiceUnavailable, errs.NoPluginEndpoint)
	if !strings.Contains(e.Message, "plugin-x@1.0") {
		t.Errorf("message %q does not name the plugin", e.Message)
	}
	_, err = c.Plugin("plugin-x", "").Invoke(context.Background(), plugin.CollectorInit, nil)
	wantErr(t, err, http.StatusServiceUnavailable, errs.NoPluginEndpoint)
	var nilClient *plugin.Client
	_, err = nilClient.Endpoint("plugin-a", "")
	wantErr(t, err, http.StatusServiceUnavailable, errs.NoPluginEndpoint)

	for _, bad := range []string{"http://h:1", "grpc://h", "grpc://h:1/path", "h:1", "grpc://:1"} {
		if _, err := plugin.New(map[string]string{"p": bad}, plugin.Options{}); err == nil {
			t.Errorf("endpoint %q accepted", bad)
		}
	}
	_, err = c.At("tcp://x:1").Invoke(context.Background(), plugin.CollectorInit, nil)
	wantErr(t, err, http.StatusServiceUnavailable, errs.NoPluginEndpoint)
}

// TestTLS: grpc+ssl endpoints speak TLS.
func TestTLS(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)
	s := fakeplugin.Start(t, fakeplugin.Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	if !strings.HasPrefix(s.Endpoint, "grpc+ssl://") {
		t.Fatalf("endpoint %s", s.Endpoint)
	}
	opts := fast
	opts.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c, err := plugin.New(map[string]string{"tls-plugin": s.Endpoint}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := (plugin.Collector{Target: c.Plugin("tls-plugin", "1.0")}).Verify(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	// Cleartext against a TLS plugin does not connect.
	plain := newClient(t, plugin.Options{ReadyTimeout: 300 * time.Millisecond, Retries: -1})
	err = plugin.Collector{Target: plain.At("grpc://" + s.Addr)}.Verify(context.Background(), nil, nil)
	if e, ok := errs.As(err); !ok || e.Status() != http.StatusServiceUnavailable {
		t.Fatalf("cleartext to TLS: %v", err)
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fake plugin"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
