package notification_test

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
)

var protocolID = regexp.MustCompile(`^protocol-[0-9a-f]{12}$`)

type protocolList struct {
	Results    []Protocol `json:"results"`
	TotalCount int        `json:"total_count"`
}

// TestInternalProtocol: each domain gets one built-in INTERNAL protocol on
// its first read, even when reads race; it is read-only but for enable and
// disable; an event naming it is recorded as skipped.
func TestInternalProtocol(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() { e.adminA.Call(base+"list", M{}).OK(nil) })
	}
	wg.Wait()
	if n := e.countWhere(t, protocols, bson.D{{Key: "protocol_type", Value: "INTERNAL"}}); n != 1 {
		t.Fatalf("%d INTERNAL protocols after concurrent first lists, want 1", n)
	}
	var l protocolList
	e.userA.Call(base+"list", M{"protocol_type": "INTERNAL"}).OK(&l)
	if l.TotalCount != 1 {
		t.Fatalf("list INTERNAL: %+v", l)
	}
	in := l.Results[0]
	if !protocolID.MatchString(in.ProtocolID) || in.Name != "Nubes User" || in.State != "ENABLED" || in.ResourceType != "identity.User" ||
		in.DomainID != "domain-a" || !reflect.DeepEqual(in.Capability, M{"supported_schema": []any{"nubes_user"}}) ||
		in.PluginInfo.Metadata["data_type"] != "PLAIN_TEXT" || in.PluginInfo.PluginID != "" {
		t.Errorf("built-in protocol %+v", in)
	}
	// get creates domain b's (another id), and neither domain reads the other's.
	var inB Protocol
	e.create(t, e.adminB, emailProtocol("B mail"))
	e.adminB.Call(base+"list", M{"protocol_type": "INTERNAL"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].ProtocolID == in.ProtocolID {
		t.Fatalf("domain b's built-in protocol: %+v", l)
	}
	e.adminB.Call(base+"get", M{"protocol_id": l.Results[0].ProtocolID}).OK(&inB)
	e.adminA.Call(base+"get", M{"protocol_id": inB.ProtocolID}).Fails(404, errs.NotFoundCode)
	e.adminB.Call(base+"get", M{"protocol_id": in.ProtocolID}).Fails(404, errs.NotFoundCode)

	before := e.raw(t, protocols, in.ProtocolID)
	e.adminA.Call(base+"update", M{"protocol_id": in.ProtocolID, "name": "Me"}).Fails(400, errs.NotAllowedUpdateProtocolType)
	e.adminA.Call(base+"update-plugin", M{"protocol_id": in.ProtocolID, "domain_id": "domain-a", "options": M{"a": 1}}).Fails(400, errs.NotAllowedUpdateProtocolType)
	e.adminA.Call(base+"delete", M{"protocol_id": in.ProtocolID}).Fails(400, errs.NotAllowedUpdateProtocolType)
	if after := e.raw(t, protocols, in.ProtocolID); !reflect.DeepEqual(before, after) {
		t.Errorf("the built-in protocol changed: %v -> %v", before, after)
	}
	if n := len(e.plugin.Calls(initMethod)); n != 1 { // B mail's only
		t.Errorf("%d init calls", n)
	}
	// Its name is taken in the domain.
	e.adminA.Call(base+"create", emailProtocol("Nubes User")).Fails(409, errs.SaveUniqueValues)

	var p Protocol
	e.adminA.Call(base+"disable", M{"protocol_id": in.ProtocolID}).OK(&p)
	if p.State != "DISABLED" {
		t.Errorf("disable: %+v", p)
	}
	e.adminA.Call(base+"enable", M{"protocol_id": in.ProtocolID}).OK(&p)
	if p.State != "ENABLED" {
		t.Errorf("enable: %+v", p)
	}

	// An event of the built-in protocol without an e-mail address has
	// nothing to deliver (inboxes are filled by the fan-out): skipped.
	noMail := event("i-1", in.ProtocolID)
	noMail.ChannelData = M{"users": []any{"ulla"}}
	e.publish(t, "i-1", noMail)
	if rec := e.outcome(t, "i-1"); rec["outcome"] != "SKIPPED" || !strings.Contains(rec["reason"].(string), "INTERNAL") {
		t.Fatalf("outcome %v", rec)
	}
	// With one (an e-mail user channel), the mailer gets it.
	e.publish(t, "i-2", event("i-2", in.ProtocolID))
	if rec := e.outcome(t, "i-2"); rec["outcome"] != "SENT" {
		t.Fatalf("outcome %v", rec)
	}
	if m := e.mails(t); len(m) != 1 || m[0].To != "ops@example.com" || m[0].ID != "mail-i-2" || m[0].Data["title"] != "Disk full" {
		t.Fatalf("mails %+v", m)
	}
	if n := len(e.plugin.Calls(dispatchMethod)); n != 0 {
		t.Errorf("%d dispatch calls", n)
	}
	if sent, _, skipped := e.usage(t, in.ProtocolID, [3]int{1, 0, 1}); skipped != 1 || sent != 1 {
		t.Errorf("sent %d skipped %d, want 1 1", sent, skipped)
	}
}

// TestInternalNameTaken: a protocol of the domain already named like the
// built-in one keeps its name; no INTERNAL protocol is added (upstream).
func TestInternalNameTaken(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := e.create(t, e.adminA, emailProtocol("Nubes User"))
	var l protocolList
	e.adminA.Call(base+"list", M{}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].ProtocolID != p.ProtocolID || l.Results[0].ProtocolType != "EXTERNAL" {
		t.Errorf("list %+v", l)
	}
}

// TestUniqueNames: a name is unique in its domain, on create and update;
// nothing is stored or changed by a refused request.
func TestUniqueNames(t *testing.T) {
	t.Parallel()
	e := setup(t)
	mail := e.create(t, e.adminA, emailProtocol("Mail"))
	e.adminA.Call(base+"create", emailProtocol("Mail")).Fails(409, errs.SaveUniqueValues)
	e.adminA.Call(base+"create", emailProtocol("  Mail ")).Fails(409, errs.SaveUniqueValues)
	if n := e.external(t); n != 1 {
		t.Fatalf("%d protocols stored", n)
	}
	if n := len(e.plugin.Calls(initMethod)); n != 1 {
		t.Errorf("the plugin was initialised for a duplicate (%d init calls)", n)
	}
	e.create(t, e.adminB, emailProtocol("Mail")) // another domain may
	slack := e.create(t, e.adminA, emailProtocol("Slack"))
	before := e.raw(t, protocols, slack.ProtocolID)
	e.adminA.Call(base+"update", M{"protocol_id": slack.ProtocolID, "name": "Mail", "tags": M{"x": "y"}}).Fails(409, errs.SaveUniqueValues)
	if after := e.raw(t, protocols, slack.ProtocolID); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused rename changed the protocol: %v -> %v", before, after)
	}
	var u Protocol
	e.adminA.Call(base+"update", M{"protocol_id": mail.ProtocolID, "name": "Mail"}).OK(&u) // its own name
	if u.Name != "Mail" || !reflect.DeepEqual(u.Tags, M{"team": "ops"}) {
		t.Errorf("update to its own name: %+v", u)
	}

	// Concurrent creates of one name: the unique index keeps one.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { e.adminA.Call(base+"create", emailProtocol("Pager")) })
	}
	wg.Wait()
	if n := e.countWhere(t, protocols, bson.D{{Key: "name", Value: "Pager"}}); n != 1 {
		t.Errorf("%d protocols named Pager", n)
	}
}

// TestUpdatePluginModes: without a version an AUTO protocol takes the
// newest one and a MANUAL one keeps its own; options {} clears them.
func TestUpdatePluginModes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	auto := e.create(t, e.adminA, M{"name": "auto", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol", "version": "1.1.0", "options": M{"a": 1}}})
	manual := e.create(t, e.adminA, M{"name": "manual", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol", "version": "1.1.0", "upgrade_mode": "MANUAL"}})
	var u Protocol
	e.adminA.Call(base+"update-plugin", M{"protocol_id": auto.ProtocolID, "domain_id": "domain-a", "options": M{}}).OK(&u)
	if u.PluginInfo.Version != "1.2.0" || len(u.PluginInfo.Options) != 0 {
		t.Errorf("AUTO: %+v", u.PluginInfo)
	}
	e.adminA.Call(base+"update-plugin", M{"protocol_id": manual.ProtocolID, "domain_id": "domain-a"}).OK(&u)
	if u.PluginInfo.Version != "1.1.0" || u.PluginInfo.UpgradeMode != "MANUAL" {
		t.Errorf("MANUAL: %+v", u.PluginInfo)
	}
	if n := len(e.plugin.Calls(initMethod)); n != 4 {
		t.Errorf("%d init calls, want 4 (two creates, two update_plugin)", n)
	}
}

// TestBadInput: every operation refuses malformed requests with 400 and
// its code, an unknown protocol with 404, and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := e.create(t, e.adminA, emailProtocol("Mail"))
	id := p.ProtocolID
	type tc struct {
		name   string
		body   any
		status int
		code   string
	}
	common := func(extra M) []tc {
		with := func(m M) M {
			out := M{}
			for k, v := range extra {
				out[k] = v
			}
			for k, v := range m {
				out[k] = v
			}
			return out
		}
		return []tc{
			{"no protocol_id", with(M{}), 400, errs.RequiredParameter},
			{"blank protocol_id", with(M{"protocol_id": "  "}), 400, errs.RequiredParameter},
			{"protocol_id not a string", with(M{"protocol_id": 12}), 400, errs.InvalidParameterType},
			{"unknown field", with(M{"protocol_id": id, "colour": "red"}), 400, errs.InvalidParameter},
			{"domain_id not a string", with(M{"protocol_id": id, "domain_id": true}), 400, errs.InvalidParameterType},
			{"unknown protocol", with(M{"protocol_id": "protocol-000000000000"}), 404, errs.NotFoundCode},
			{"not a JSON object", "protocol_id", 400, errs.JSONFormat},
		}
	}
	ops := map[string][]tc{
		"get":     common(nil),
		"enable":  common(nil),
		"disable": common(nil),
		"delete":  common(nil),
		"update": append(common(nil),
			tc{"name over 255", M{"protocol_id": id, "name": strings.Repeat("x", 256)}, 400, errs.InvalidParameter},
			tc{"name not a string", M{"protocol_id": id, "name": 1}, 400, errs.InvalidParameterType},
			tc{"tags not an object", M{"protocol_id": id, "tags": "x"}, 400, errs.InvalidParameterType},
			tc{"plugin_info", M{"protocol_id": id, "plugin_info": M{}}, 400, errs.InvalidParameter},
			tc{"state", M{"protocol_id": id, "state": "DISABLED"}, 400, errs.InvalidParameter},
		),
		"update-plugin": append(common(M{"domain_id": "domain-a"}),
			tc{"no domain_id", M{"protocol_id": id}, 400, errs.RequiredParameter},
			tc{"another domain_id", M{"protocol_id": id, "domain_id": "domain-b"}, 404, errs.NotFoundCode},
			tc{"options not an object", M{"protocol_id": id, "domain_id": "domain-a", "options": []any{}}, 400, errs.InvalidParameterType},
			tc{"version not a string", M{"protocol_id": id, "domain_id": "domain-a", "version": 1.2}, 400, errs.InvalidParameterType},
			tc{"version over 255", M{"protocol_id": id, "domain_id": "domain-a", "version": strings.Repeat("1", 256)}, 400, errs.InvalidParameter},
			tc{"unknown version", M{"protocol_id": id, "domain_id": "domain-a", "version": "0.0.1"}, 400, errs.InvalidParameter},
			tc{"upgrade_mode", M{"protocol_id": id, "domain_id": "domain-a", "upgrade_mode": "MANUAL"}, 400, errs.InvalidParameter},
		),
		"list": {
			{"bad state", M{"state": "PAUSED"}, 400, errs.InvalidParameter},
			{"bad protocol_type", M{"protocol_type": "BOTH"}, 400, errs.InvalidParameter},
			{"bad resource_type", M{"resource_type": "identity.Domain"}, 400, errs.InvalidParameter},
			{"unknown field", M{"colour": "red"}, 400, errs.InvalidParameter},
			{"query not an object", M{"query": "x"}, 400, errs.InvalidParameterType},
			{"unknown query member", M{"query": M{"size": 3}}, 400, errs.InvalidParameter},
			{"bad filter operator", M{"query": M{"filter": []any{M{"k": "name", "v": "x", "o": "like"}}}}, 400, errs.DBQuery},
			{"not a JSON object", []any{}, 400, errs.JSONFormat},
		},
		"stat": {
			{"no query", M{}, 400, errs.RequiredParameter},
			{"query not an object", M{"query": 1}, 400, errs.InvalidParameterType},
			{"unknown query member", M{"query": M{"count_only": true}}, 400, errs.InvalidParameter},
			{"unknown field", M{"query": M{"aggregate": []any{M{"count": M{"name": "n"}}}}, "colour": "red"}, 400, errs.InvalidParameter},
		},
	}
	before := e.raw(t, protocols, id)
	for op, cases := range ops {
		for _, c := range cases {
			t.Run(op+"/"+c.name, func(t *testing.T) {
				r := e.adminA.Call(base+op, c.body)
				if c.code == errs.InvalidParameter && r.Status == 400 && strings.Contains(string(r.Body), errs.InvalidParameterType) {
					t.Fatalf("%s: %s", c.name, r.Body) // a wrong type has its own code
				}
				fails(t, r, c.status, c.code)
				if n := e.external(t); n != 1 {
					t.Fatalf("%d protocols stored", n)
				}
				if after := e.raw(t, protocols, id); !reflect.DeepEqual(before, after) {
					t.Fatalf("a refused %s changed the protocol: %v -> %v", op, before, after)
				}
			})
		}
	}
	if n := len(e.plugin.Calls(initMethod)); n != 1 {
		t.Errorf("%d init calls: a refused update_plugin reached the plugin", n)
	}
	// The protocol is still served.
	e.adminA.Call(base+"get", M{"protocol_id": id}).OK(nil)
}

// fails is Response.Fails reporting to t (a subtest), not to the test
// that made the client.
func fails(t *testing.T, r *testkit.Response, status int, code string) {
	t.Helper()
	var body struct {
		Detail struct{ Code, Message string } `json:"detail"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || r.Status != status || body.Detail.Code != code || body.Detail.Message == "" {
		t.Fatalf("%s: got %d %s, want %d %s", r.Path, r.Status, r.Body, status, code)
	}
}
