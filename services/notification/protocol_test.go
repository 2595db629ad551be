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
	t.Parallel()
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
	if !reflect.DeepEqual(p.Capability, M{"supported_schema": []any{"email_smtp", "email_api"}}) {
		t.Errorf("capability %v: want the repository plugin's supported_schema", p.Capability)
	}
	if !strings.HasPrefix(p.PluginInfo.SecretID, "secret-") || len(p.PluginInfo.SecretID) != len("secret-")+12 || p.PluginInfo.Schema != "email_smtp" {
		t.Errorf("secret_id %q schema %q", p.PluginInfo.SecretID, p.PluginInfo.Schema)
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
	q := e.create(t, e.adminA, M{"name": "plain", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol", "version": "1.1.0", "upgrade_mode": "MANUAL"}})
	if q.PluginInfo.SecretID != "" || q.PluginInfo.Schema != "" || q.PluginInfo.Version != "1.1.0" || q.PluginInfo.UpgradeMode != "MANUAL" ||
		q.ResourceType != "identity.Project" || e.raw(t, protocols, q.ProtocolID)["sealed"] != nil {
		t.Errorf("protocol without secret %+v", q)
	}
	// Strings are trimmed, as upstream does.
	r := e.create(t, e.adminA, M{"name": "  Slack  ", "plugin_info": M{"plugin_id": " plugin-email-noti-protocol "}})
	if r.Name != "Slack" || r.PluginInfo.PluginID != "plugin-email-noti-protocol" {
		t.Errorf("not trimmed: %+v", r)
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
	t.Parallel()
	e := setup(t)
	long := strings.Repeat("n", 256)
	email := func(extra M) M {
		pi := M{"plugin_id": "plugin-email-noti-protocol"}
		for k, v := range extra {
			pi[k] = v
		}
		return M{"name": "n", "plugin_info": pi}
	}
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
		{"unknown field", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}, "colour": "red"}, 400, errs.InvalidParameter},
		{"unknown field in plugin_info", email(M{"colour": "red"}), 400, errs.InvalidParameter},
		// The spec's CreateProtocolRequest has no resource_type and no client sends one.
		{"resource_type", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}, "resource_type": "identity.User"}, 400, errs.InvalidParameter},
		{"domain_id", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}, "domain_id": "domain-a"}, 400, errs.InvalidParameter},
		{"blank name", M{"name": "   ", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}}, 400, errs.RequiredParameter},
		{"name not a string", M{"name": 7, "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}}, 400, errs.InvalidParameterType},
		{"plugin_info not an object", M{"name": "n", "plugin_info": "plugin-email-noti-protocol"}, 400, errs.InvalidParameterType},
		{"tags not an object", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}, "tags": []any{"a"}}, 400, errs.InvalidParameterType},
		{"options not an object", email(M{"options": "x"}), 400, errs.InvalidParameterType},
		{"bad upgrade_mode", email(M{"upgrade_mode": "NEVER"}), 400, errs.InvalidParameter},
		{"MANUAL without version", email(M{"upgrade_mode": "MANUAL"}), 400, errs.RequiredParameter},
		{"unknown version", email(M{"version": "9.9.9"}), 400, errs.InvalidParameter},
		{"secret_data without schema", email(M{"secret_data": M{"k": "v"}}), 400, errs.RequiredParameter},
		{"schema without secret_data", email(M{"schema": "email_smtp"}), 400, errs.InvalidParameter},
		{"schema the plugin does not support", email(M{"secret_data": M{"k": "v"}, "schema": "slack_webhook"}), 400, errs.InvalidParameter},
		{"secret_id by reference", email(M{"secret_id": "secret-0123456789ab"}), 400, errs.InvalidParameter},
		{"secret_data not an object", email(M{"secret_data": "x", "schema": "email_smtp"}), 400, errs.InvalidParameterType},
		{"plugin not in the repository", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-nope"}}, 404, errs.NotFoundCode},
		{"plugin of another kind", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-grafana-mon-webhook"}}, 404, errs.NotFoundCode},
		{"plugin DISABLED in the repository", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-disabled-protocol"}}, 400, errs.InvalidParameter},
		{"plugin without supported_schema", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-no-schema-protocol"}}, 400, errs.WrongPluginSettings},
		{"plugin unreachable", M{"name": "n", "plugin_info": M{"plugin_id": "plugin-unreachable"}}, 503, errs.GRPCConnection},
		{"body not an object", []any{1}, 400, errs.JSONFormat},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fails(t, e.adminA.Call(base+"create", tc.body), tc.status, tc.code)
			if n := e.count(t, protocols); n != 0 {
				t.Fatalf("%d protocols stored", n)
			}
			if tc.status != 503 { // refused before the plugin is called
				if n := len(e.plugin.Calls(initMethod)); n != 0 {
					t.Fatalf("the plugin was initialised for a refused request (%d calls)", n)
				}
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
	t.Parallel()
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
	e.adminA.Call(base+"update-plugin", M{"protocol_id": p.ProtocolID, "domain_id": "domain-a", "version": "1.1.0", "options": M{"smtp_port": 587}}).OK(&u)
	if u.PluginInfo.Version != "1.1.0" || !reflect.DeepEqual(u.PluginInfo.Options, M{"smtp_port": 587.0}) || u.PluginInfo.Metadata["data_type"] != "SECRET" {
		t.Errorf("update_plugin: %+v", u.PluginInfo)
	}
	if n := len(e.plugin.Calls(initMethod)); n != 2 {
		t.Errorf("init called %d times, want 2", n)
	}
	before := e.raw(t, protocols, p.ProtocolID)["plugin_info"]
	e.adminA.Call(base+"update-plugin", M{"protocol_id": p.ProtocolID, "domain_id": "domain-a", "version": "7.0.0"}).Fails(400, errs.InvalidParameter)
	e.plugin.Script(initMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.Internal, "ERROR_UNKNOWN", "boom")})
	e.adminA.Call(base+"update-plugin", M{"protocol_id": p.ProtocolID, "domain_id": "domain-a", "options": M{"smtp_port": 25}}).Fails(502, errs.PluginFailed)
	if after := e.raw(t, protocols, p.ProtocolID)["plugin_info"]; !reflect.DeepEqual(before, after) {
		t.Errorf("a refused update_plugin changed the protocol: %v -> %v", before, after)
	}
	e.memberA1.Call(base+"update-plugin", M{"protocol_id": p.ProtocolID, "domain_id": "domain-a"}).Fails(403, errs.PermissionDenied)

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
	t.Parallel()
	e := setup(t)
	a := e.create(t, e.adminA, emailProtocol("A mail"))
	b := e.create(t, e.adminB, emailProtocol("B mail"))
	for _, op := range []string{"get", "update", "update-plugin", "enable", "disable", "delete"} {
		e.adminB.Call(base+op, M{"protocol_id": a.ProtocolID, "domain_id": "domain-b"}).Fails(404, errs.NotFoundCode)
		// Naming the other domain does not reach it either.
		e.adminB.Call(base+op, M{"protocol_id": a.ProtocolID, "domain_id": "domain-a"}).Fails(404, errs.NotFoundCode)
	}
	if raw := e.raw(t, protocols, a.ProtocolID); raw["name"] != "A mail" || raw["state"] != "ENABLED" {
		t.Errorf("domain b changed a's protocol: %v", raw)
	}
	e.adminB.Call(base+"list", M{"domain_id": "domain-a"}).Fails(404, errs.NotFoundCode)
	e.adminB.Call(base+"stat", M{"domain_id": "domain-a", "query": M{"aggregate": []any{M{"count": M{"name": "n"}}}}}).Fails(404, errs.NotFoundCode)
	var l struct {
		Results    []Protocol `json:"results"`
		TotalCount int        `json:"total_count"`
	}
	e.adminB.Call(base+"list", M{"protocol_type": "EXTERNAL"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].ProtocolID != b.ProtocolID {
		t.Errorf("domain b lists %+v", l)
	}
	e.adminB.Call(base+"list", M{}).OK(&l)
	if l.TotalCount != 2 { // b's and b's built-in one
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
	if res, _ := st["results"].([]any); len(res) != 1 || res[0].(map[string]any)["n"] != 2.0 {
		t.Errorf("stat counts %v, want 2 (domain a's and its built-in one)", st)
	}
	e.adminA.Call(base+"stat", M{}).Fails(400, errs.RequiredParameter)

	// delete removes the protocol and its sealed secret.
	e.adminA.Call(base+"delete", M{"protocol_id": a.ProtocolID}).OK(nil)
	e.adminA.Call(base+"get", M{"protocol_id": a.ProtocolID}).Fails(404, errs.NotFoundCode)
	e.adminA.Call(base+"delete", M{"protocol_id": a.ProtocolID}).Fails(404, errs.NotFoundCode)
	if n := e.external(t); n != 1 {
		t.Errorf("%d protocols left, want b's only", n)
	}
}
