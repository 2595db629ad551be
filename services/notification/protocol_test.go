package notification_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

const protocols = "notification_protocols"

func TestCreate(t *testing.T) {
	e := setup(t)
	p := e.create(t, e.adminA, emailProtocol("E-mail"))
	if !strings.HasPrefix(p.ProtocolID, "protocol-") || len(p.ProtocolID) != len("protocol-")+12 {
		t.Errorf("protocol_id %q", p.ProtocolID)
	}
	if p.State != "ENABLED" || p.ProtocolType != "EXTERNAL" || p.ResourceType != "identity.Project" || p.DomainID != "domain-a" {
		t.Errorf("protocol %+v", p)
	}
	if p.PluginInfo.Version != "1.2.0" || p.PluginInfo.UpgradeMode != "AUTO" {
		t.Errorf("plugin_info %+v: want the newest version, AUTO", p.PluginInfo)
	}
	if p.PluginInfo.Metadata["data_type"] != "PLAIN_TEXT" {
		t.Errorf("metadata %v: want the init answer", p.PluginInfo.Metadata)
	}
	if !reflect.DeepEqual(p.Capability, M{"supported_schema": []any{"email_smtp"}}) {
		t.Errorf("capability %v: want the repository plugin's", p.Capability)
	}
	if !strings.HasPrefix(p.PluginInfo.SecretID, "secret-") {
		t.Errorf("secret_id %q", p.PluginInfo.SecretID)
	}
	calls := e.plugin.Calls(initMethod)
	if len(calls) != 1 || !reflect.DeepEqual(calls[0].Request, M{"options": M{"smtp_host": "mail.example.com"}}) {
		t.Errorf("init calls %+v", calls)
	}
	// The secret data is sealed: never in a response, never in clear in the store.
	for _, body := range [][]byte{
		e.adminA.Call(base+"get", M{"protocol_id": p.ProtocolID}).OK(nil).Body,
		e.adminA.Call(base+"list", M{}).OK(nil).Body,
	} {
		if strings.Contains(string(body), "hunter2") || strings.Contains(string(body), "smtp_password") || strings.Contains(string(body), "sealed") {
			t.Errorf("secret data in a response: %s", body)
		}
	}
	raw := e.raw(t, protocols, p.ProtocolID)
	if raw["sealed"] == nil {
		t.Error("no sealed secret data stored")
	}
	if s := toString(t, raw); strings.Contains(s, "hunter2") || strings.Contains(s, "smtp_password") {
		t.Errorf("secret data stored in clear: %s", s)
	}
	// Without secret data there is no secret.
	q := e.create(t, e.adminA, M{"name": "plain", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol", "version": "1.1.0"}, "resource_type": "identity.User"})
	if q.PluginInfo.SecretID != "" || q.PluginInfo.Version != "1.1.0" || q.ResourceType != "identity.User" || e.raw(t, protocols, q.ProtocolID)["sealed"] != nil {
		t.Errorf("protocol without secret %+v", q)
	}
}

// toString renders a stored document as extended JSON.
func toString(t *testing.T, doc bson.M) string {
	t.Helper()
	raw, err := bson.MarshalExtJSON(doc, false, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestCreateRefused(t *testing.T) {
	e := setup(t)
	long := strings.Repeat("n", 256)
	cases := []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"no name", M{"plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}}, 400, errs.RequiredParameter},
		{"name over 255", M{"name": long, "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}}, 400, errs.InvalidParameter},
		{"no plugin_info", M{"name": "n"}, 400, errs.RequiredParameter},
		{"no plugin_id", M{"name": "n", "plugin_info": M{}}, 400, errs.RequiredParameter},
		{"unknown field", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}, "colour": "red"}, 400, ""},
		{"bad resource_type", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}, "resource_type": "identity.Domain"}, 400, errs.InvalidParameter},
		{"MANUAL without version", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol", "upgrade_mode": "MANUAL"}}, 400, errs.RequiredParameter},
		{"unknown version", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol", "version": "9.9.9"}}, 400, errs.InvalidParameter},
		{"plugin not in the repository", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-nope"}}, 400, "ERROR_NO_PLUGIN"},
		{"plugin of another kind", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-grafana-mon-webhook"}}, 404, errs.NotFoundCode},
		{"plugin unreachable", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-unreachable"}}, 503, errs.GRPCConnection},
		{"secret_data not an object", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol", "secret_data": "x"}}, 400, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.adminA.Call(base+"create", tc.body)
			if tc.code == "" {
				if r.Status != tc.status {
					t.Fatalf("status %d, want %d: %s", r.Status, tc.status, r.Body)
				}
			} else {
				r.Fails(tc.status, tc.code)
			}
			if n := e.count(t, protocols); n != 0 {
				t.Fatalf("%d protocols stored", n)
			}
		})
	}
	t.Run("plugin refuses init", func(t *testing.T) {
		e.plugin.Script(initMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_INVALID_OPTIONS", "smtp_host missing")})
		r := e.adminA.Call(base+"create", emailProtocol("x"))
		r.Fails(http.StatusBadRequest, errs.PluginFailed)
		if !strings.Contains(string(r.Body), "ERROR_INVALID_OPTIONS: smtp_host missing") {
			t.Errorf("plugin's error not kept: %s", r.Body)
		}
		if n := e.count(t, protocols); n != 0 {
			t.Fatalf("%d protocols stored", n)
		}
	})
	t.Run("callers", func(t *testing.T) {
		e.anon.Call(base+"create", emailProtocol("x")).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
		e.userA.Call(base+"create", emailProtocol("x")).Fails(http.StatusForbidden, errs.PermissionDenied)
		e.ownerA1.Call(base+"create", emailProtocol("x")).Fails(http.StatusForbidden, errs.PermissionDenied)
		if n := e.count(t, protocols); n != 0 {
			t.Fatalf("%d protocols stored", n)
		}
	})
}

func TestUpdateAndPlugin(t *testing.T) {
	e := setup(t)
	p := e.create(t, e.adminA, emailProtocol("E-mail"))
	id := M{"protocol_id": p.ProtocolID}

	var u Protocol
	e.adminA.Call(base+"update", M{"protocol_id": p.ProtocolID, "name": "Mail", "tags": M{"env": "prod"}}).OK(&u)
	if u.Name != "Mail" || !reflect.DeepEqual(u.Tags, M{"env": "prod"}) {
		t.Errorf("update: %+v (tags must be replaced whole)", u)
	}
	e.adminA.Call(base+"update", M{"protocol_id": p.ProtocolID, "name": strings.Repeat("x", 256)}).Fails(400, errs.InvalidParameter)
	e.adminA.Call(base+"update", M{"protocol_id": p.ProtocolID, "plugin_info": M{}}).Fails(400, errs.InvalidParameter)
	e.adminA.Call(base+"update", M{"protocol_id": "protocol-000000000000", "name": "x"}).Fails(404, errs.NotFoundCode)
	e.adminA.Call(base+"update", M{"name": "x"}).Fails(400, errs.RequiredParameter)

	// update_plugin: a version the repository knows, options replaced whole, init again.
	e.plugin.Script(initMethod, fakeplugin.Reply{Result: M{"metadata": M{"data_type": "SECRET"}}})
	e.adminA.Call(base+"update-plugin", M{"protocol_id": p.ProtocolID, "version": "1.1.0", "options": M{"smtp_port": 587}}).OK(&u)
	if u.PluginInfo.Version != "1.1.0" || !reflect.DeepEqual(u.PluginInfo.Options, M{"smtp_port": 587.0}) || u.PluginInfo.Metadata["data_type"] != "SECRET" {
		t.Errorf("update_plugin: %+v", u.PluginInfo)
	}
	if n := len(e.plugin.Calls(initMethod)); n != 2 {
		t.Errorf("init called %d times, want 2", n)
	}
	before := e.raw(t, protocols, p.ProtocolID)["plugin_info"]
	e.adminA.Call(base+"update-plugin", M{"protocol_id": p.ProtocolID, "version": "7.0.0"}).Fails(400, errs.InvalidParameter)
	e.plugin.Script(initMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.Internal, "ERROR_UNKNOWN", "boom")})
	e.adminA.Call(base+"update-plugin", M{"protocol_id": p.ProtocolID, "options": M{"smtp_port": 25}}).Fails(502, errs.PluginFailed)
	if after := e.raw(t, protocols, p.ProtocolID)["plugin_info"]; !reflect.DeepEqual(before, after) {
		t.Errorf("a refused update_plugin changed the protocol: %v -> %v", before, after)
	}
	e.memberA1.Call(base+"update-plugin", id).Fails(403, errs.PermissionDenied)

	// enable / disable, repeated harmlessly.
	for _, st := range []string{"disable", "disable", "enable", "enable"} {
		e.adminA.Call(base+st, id).OK(&u)
		if want := strings.ToUpper(st) + "D"; u.State != want {
			t.Errorf("%s: state %s", st, u.State)
		}
	}
	e.userA.Call(base+"disable", id).Fails(403, errs.PermissionDenied)
}

func TestDomainIsolationAndReads(t *testing.T) {
	e := setup(t)
	a := e.create(t, e.adminA, emailProtocol("A mail"))
	b := e.create(t, e.adminB, emailProtocol("B mail"))
	for _, op := range []string{"get", "update", "update-plugin", "enable", "disable", "delete"} {
		e.adminB.Call(base+op, M{"protocol_id": a.ProtocolID}).Fails(404, errs.NotFoundCode)
	}
	var l struct {
		Results    []Protocol `json:"results"`
		TotalCount int        `json:"total_count"`
	}
	e.adminB.Call(base+"list", M{}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].ProtocolID != b.ProtocolID {
		t.Errorf("domain b lists %+v", l)
	}
	// Every reader of domain a sees a's protocol.
	for name, c := range map[string]func() *Protocol{
		"user": func() *Protocol {
			var p Protocol
			e.userA.Call(base+"get", M{"protocol_id": a.ProtocolID}).OK(&p)
			return &p
		},
		"member": func() *Protocol {
			var p Protocol
			e.memberA1.Call(base+"get", M{"protocol_id": a.ProtocolID}).OK(&p)
			return &p
		},
	} {
		if p := c(); p.ProtocolID != a.ProtocolID {
			t.Errorf("%s reads %+v", name, p)
		}
	}
	e.adminA.Call(base+"list", M{"name": "A mail"}).OK(&l)
	if l.TotalCount != 1 {
		t.Errorf("list by name: %+v", l)
	}
	e.adminA.Call(base+"list", M{"query": M{"keyword": "mail"}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].ProtocolID != a.ProtocolID {
		t.Errorf("keyword list: %+v", l)
	}
	e.adminA.Call(base+"list", M{"state": "PAUSED"}).Fails(400, errs.InvalidParameter)
	st := e.adminA.Call(base+"stat", M{"query": M{"aggregate": []any{M{"count": M{"name": "n"}}}}}).OK(nil).JSON()
	if res, _ := st["results"].([]any); len(res) != 1 || res[0].(map[string]any)["n"] != 1.0 {
		t.Errorf("stat counts %v, want 1 (domain a only)", st)
	}
	e.adminA.Call(base+"stat", M{}).Fails(400, errs.RequiredParameter)

	// delete removes the protocol and its sealed secret.
	e.adminA.Call(base+"delete", M{"protocol_id": a.ProtocolID}).OK(nil)
	e.adminA.Call(base+"get", M{"protocol_id": a.ProtocolID}).Fails(404, errs.NotFoundCode)
	e.adminA.Call(base+"delete", M{"protocol_id": a.ProtocolID}).Fails(404, errs.NotFoundCode)
	if n := e.count(t, protocols); n != 1 {
		t.Errorf("%d protocols left, want b's only", n)
	}
}
