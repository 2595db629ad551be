package notification_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

const (
	pcBase      = "/notification/v1/project-channel/"
	ucBase      = "/notification/v1/user-channel/"
	pcColl      = "notification_project_channels"
	ucColl      = "notification_user_channels"
	webhookJSON = "https://hooks.example.com/T1"
)

// ProjectChannel is a project channel as a client reads it.
type ProjectChannel struct {
	ProjectChannelID  string   `json:"project_channel_id"`
	Name              string   `json:"name"`
	State             string   `json:"state"`
	Data              M        `json:"data"`
	IsSubscribe       bool     `json:"is_subscribe"`
	Subscriptions     []string `json:"subscriptions"`
	NotificationLevel string   `json:"notification_level"`
	IsScheduled       bool     `json:"is_scheduled"`
	Schedule          *struct {
		DayOfWeek []string `json:"day_of_week"`
		StartHour int      `json:"start_hour"`
		EndHour   int      `json:"end_hour"`
	} `json:"schedule"`
	Tags        M      `json:"tags"`
	ProtocolID  string `json:"protocol_id"`
	SecretID    string `json:"secret_id"`
	ProjectID   string `json:"project_id"`
	WorkspaceID string `json:"workspace_id"`
	DomainID    string `json:"domain_id"`
}

// UserChannel is a user channel as a client reads it.
type UserChannel struct {
	UserChannelID string `json:"user_channel_id"`
	Name          string `json:"name"`
	State         string `json:"state"`
	Data          M      `json:"data"`
	ProtocolID    string `json:"protocol_id"`
	UserSecretID  string `json:"user_secret_id"`
	UserID        string `json:"user_id"`
	DomainID      string `json:"domain_id"`
}

// webhookSchema is what the fake protocol plugin declares of channel
// data: a webhook URL.
var webhookSchema = M{"type": "object", "required": []any{"webhook_url"}, "properties": M{"webhook_url": M{"type": "string", "minLength": 8}}}

// protocolWith creates a protocol whose plugin answers init with
// data_type and the webhook schema.
func (e *env) protocolWith(t *testing.T, name, dataType string) string {
	t.Helper()
	e.plugin.Script(initMethod, fakeplugin.Reply{Result: M{"metadata": M{"data_type": dataType, "data": M{"schema": webhookSchema}}}})
	return e.create(t, e.adminA, M{"name": name, "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}}).ProtocolID
}

// builtin is the domain's built-in protocol (created on the first read).
func (e *env) builtin(t *testing.T, c *testkit.Client) string {
	t.Helper()
	var l struct{ Results []Protocol }
	c.Call(base+"list", M{"protocol_type": "INTERNAL"}).OK(&l)
	if len(l.Results) != 1 {
		t.Fatalf("built-in protocols: %+v", l.Results)
	}
	return l.Results[0].ProtocolID
}

func TestProjectChannelCreate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	var c ProjectChannel
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": plain, "name": "ops", "data": M{"webhook_url": webhookJSON}, "project_id": "project-1",
		"tags": M{"team": "ops"}}).OK(&c)
	if !strings.HasPrefix(c.ProjectChannelID, "project-ch-") || c.State != "ENABLED" || c.NotificationLevel != "LV1" || c.IsSubscribe ||
		len(c.Subscriptions) != 0 || c.Subscriptions == nil || c.IsScheduled || c.Schedule != nil || c.Data["webhook_url"] != webhookJSON ||
		c.WorkspaceID != "workspace-1" || c.DomainID != "domain-a" || c.SecretID != "" {
		t.Fatalf("channel %+v", c)
	}
	// LV10 is a level a channel takes (the spec's escalation rules reach it).
	var hi ProjectChannel
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": plain, "name": "pager", "data": M{"webhook_url": webhookJSON}, "project_id": "project-1",
		"notification_level": "LV10", "is_subscribe": true, "subscriptions": []string{"monitoring.Alert", "monitoring.Alert"},
		"is_scheduled": true, "schedule": M{"day_of_week": []string{"MON", "FRI"}, "start_hour": 22, "end_hour": 6}}).OK(&hi)
	if hi.NotificationLevel != "LV10" || len(hi.Subscriptions) != 1 || hi.Schedule == nil || hi.Schedule.StartHour != 22 {
		t.Fatalf("channel %+v", hi)
	}
	// is_subscribe false drops the subscriptions; is_scheduled false the schedule.
	var lo ProjectChannel
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": plain, "name": "quiet", "data": M{"webhook_url": webhookJSON}, "project_id": "project-1",
		"subscriptions": []string{"x"}, "schedule": M{"day_of_week": []string{"MON"}, "end_hour": 3}}).OK(&lo)
	if len(lo.Subscriptions) != 0 || lo.Schedule != nil {
		t.Fatalf("channel %+v", lo)
	}

	other := e.adminB.Call(base+"create", M{"name": "b", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}}).OK(nil).JSON()["protocol_id"].(string)
	disabled := e.protocolWith(t, "off", "PLAIN_TEXT")
	e.adminA.Call(base+"disable", M{"protocol_id": disabled}).OK(nil)
	good := func(edit func(M)) M {
		b := M{"protocol_id": plain, "name": "n", "data": M{"webhook_url": webhookJSON}, "project_id": "project-1"}
		edit(b)
		return b
	}
	before := e.count(t, pcColl)
	for _, tc := range []struct {
		name   string
		c      *testkit.Client
		body   M
		status int
		code   string
	}{
		{"no name", e.ownerA1, good(func(b M) { delete(b, "name") }), 400, errs.RequiredParameter},
		{"no data", e.ownerA1, good(func(b M) { delete(b, "data") }), 400, errs.RequiredParameter},
		{"no project", e.ownerA1, good(func(b M) { delete(b, "project_id") }), 400, errs.RequiredParameter},
		{"data off the schema", e.ownerA1, good(func(b M) { b["data"] = M{"webhook": "x"} }), 400, errs.InvalidParameter},
		{"level LV11", e.ownerA1, good(func(b M) { b["notification_level"] = "LV11" }), 400, errs.InvalidParameter},
		{"unknown field", e.ownerA1, good(func(b M) { b["secret_id"] = "secret-x" }), 400, errs.InvalidParameter},
		{"scheduled without schedule", e.ownerA1, good(func(b M) { b["is_scheduled"] = true }), 400, errs.RequiredParameter},
		{"no days", e.ownerA1, good(func(b M) { b["is_scheduled"], b["schedule"] = true, M{"start_hour": 1, "end_hour": 2} }), 400, errs.InvalidParameter},
		{"unknown day", e.ownerA1, good(func(b M) { b["is_scheduled"], b["schedule"] = true, M{"day_of_week": []string{"FUN"}, "end_hour": 2} }), 400, errs.InvalidParameter},
		{"start = end", e.ownerA1, good(func(b M) {
			b["is_scheduled"], b["schedule"] = true, M{"day_of_week": []string{"MON"}, "start_hour": 5, "end_hour": 5}
		}), 400, errs.InvalidParameter},
		{"end 26", e.ownerA1, good(func(b M) { b["is_scheduled"], b["schedule"] = true, M{"day_of_week": []string{"MON"}, "end_hour": 26} }), 400, errs.InvalidParameter},
		{"start 25", e.ownerA1, good(func(b M) {
			b["is_scheduled"], b["schedule"] = true, M{"day_of_week": []string{"MON"}, "start_hour": 25, "end_hour": 2}
		}), 400, errs.InvalidParameter},
		{"empty topic", e.ownerA1, good(func(b M) { b["is_subscribe"], b["subscriptions"] = true, []string{""} }), 400, errs.InvalidParameter},
		{"disabled protocol", e.ownerA1, good(func(b M) { b["protocol_id"] = disabled }), 400, errs.ProtocolDisabled},
		{"another domain's protocol", e.ownerA1, good(func(b M) { b["protocol_id"] = other }), 404, errs.NotFoundCode},
		{"another workspace's project", e.ownerA1, good(func(b M) { b["project_id"] = "project-9" }), 404, errs.NotFoundCode},
		{"another domain's project", e.ownerA1, good(func(b M) { b["project_id"] = "project-b" }), 404, errs.NotFoundCode},
		{"member outside the project", e.anon.For(auth.Principal{DomainID: "domain-a", UserID: "m2", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1",
			Projects: []string{"project-2"}}), good(func(M) {}), 403, errs.PermissionDenied},
		{"plain user", e.userA, good(func(M) {}), 403, errs.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Call(pcBase+"create", tc.body).Fails(tc.status, tc.code)
			if n := e.count(t, pcColl); n != before {
				t.Fatalf("%d channels stored, %d before", n, before)
			}
		})
	}
	// A member in the project creates there.
	e.anon.For(auth.Principal{DomainID: "domain-a", UserID: "m1", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1", Projects: []string{"project-1"}}).
		Call(pcBase+"create", good(func(M) {})).OK(nil)
}

// A SECRET protocol's channel data is sealed to the channel: the record
// and every answer keep {} and a secret_id, no query reads the sealed
// field, and the dispatch gets the data back (dispatch_test).
func TestProjectChannelSecretData(t *testing.T) {
	t.Parallel()
	e := setup(t)
	secret := e.protocolWith(t, "secret hooks", "SECRET")
	var c ProjectChannel
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": secret, "name": "s", "data": M{"webhook_url": "https://hooks.example.com/hunter2-token"},
		"project_id": "project-1"}).OK(&c)
	if len(c.Data) != 0 || !strings.HasPrefix(c.SecretID, "secret-") {
		t.Fatalf("channel %+v", c)
	}
	raw := e.raw(t, pcColl, c.ProjectChannelID)
	if raw["sealed"] == nil || strings.Contains(toString(t, raw), "hunter2") {
		t.Fatalf("stored %v", raw)
	}
	for _, body := range [][]byte{e.ownerA1.Call(pcBase+"get", M{"project_channel_id": c.ProjectChannelID}).OK(nil).Body,
		e.ownerA1.Call(pcBase+"list", M{}).OK(nil).Body} {
		if strings.Contains(string(body), "hunter2") || strings.Contains(string(body), "sealed") {
			t.Fatalf("secret in an answer: %s", body)
		}
	}
	// data off the schema on update: 400, nothing changed.
	e.ownerA1.Call(pcBase+"update", M{"project_channel_id": c.ProjectChannelID, "data": M{"nope": 1}}).Fails(400, errs.InvalidParameter)
	if after := e.raw(t, pcColl, c.ProjectChannelID); !reflect.DeepEqual(after, raw) {
		t.Fatalf("a refused update changed the record")
	}
	testkit.SecretOracle(t, e.ownerA1, testkit.Oracle{List: pcBase + "list", Stat: pcBase + "stat", Secret: "sealed", Probe: "sealed.data",
		Right: "x", Wrong: "y"})
}

func TestProjectChannelVerbs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	var c ProjectChannel
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": plain, "name": "ops", "data": M{"webhook_url": webhookJSON}, "project_id": "project-1"}).OK(&c)
	id := M{"project_channel_id": c.ProjectChannelID}
	with := func(extra M) M {
		b := M{"project_channel_id": c.ProjectChannelID}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	var got ProjectChannel
	e.ownerA1.Call(pcBase+"update", with(M{"name": "ops2", "notification_level": "LV7", "tags": M{"a": "b"}, "data": M{"webhook_url": webhookJSON + "/2"}})).OK(&got)
	if got.Name != "ops2" || got.NotificationLevel != "LV7" || got.Tags["a"] != "b" || got.Data["webhook_url"] != webhookJSON+"/2" {
		t.Fatalf("update %+v", got)
	}
	e.ownerA1.Call(pcBase+"update", with(M{"protocol_id": plain})).Fails(400, errs.InvalidParameter) // protocol fixed
	e.ownerA1.Call(pcBase+"set-schedule", with(M{"is_scheduled": true, "schedule": M{"day_of_week": []string{"SAT", "SUN"}, "start_hour": 0, "end_hour": 24}})).OK(&got)
	if !got.IsScheduled || got.Schedule == nil || len(got.Schedule.DayOfWeek) != 2 {
		t.Fatalf("set-schedule %+v", got)
	}
	e.ownerA1.Call(pcBase+"set-schedule", with(M{"is_scheduled": true, "schedule": M{"day_of_week": []string{"SAT"}, "start_hour": 3, "end_hour": 3}})).Fails(400, errs.InvalidParameter)
	e.ownerA1.Call(pcBase+"set-schedule", with(M{"is_scheduled": false})).OK(&got)
	if got.IsScheduled || got.Schedule != nil {
		t.Fatalf("unscheduled %+v", got)
	}
	e.ownerA1.Call(pcBase+"set-subscription", with(M{"is_subscribe": true, "subscriptions": []string{"inventory.Job"}})).OK(&got)
	if !got.IsSubscribe || len(got.Subscriptions) != 1 || got.Subscriptions[0] != "inventory.Job" {
		t.Fatalf("set-subscription %+v", got)
	}
	e.ownerA1.Call(pcBase+"disable", id).OK(&got)
	if got.State != "DISABLED" {
		t.Fatalf("disable %+v", got)
	}
	e.ownerA1.Call(pcBase+"enable", id).OK(&got)
	if got.State != "ENABLED" {
		t.Fatalf("enable %+v", got)
	}
	var l struct {
		Results    []ProjectChannel `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	e.adminA.Call(pcBase+"list", M{"notification_level": "LV7"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].ProjectChannelID != c.ProjectChannelID {
		t.Fatalf("list %+v", l)
	}
	e.ownerA1.Call(pcBase+"stat", M{"query": M{"aggregate": []any{M{"count": M{"name": "n"}}}}}).OK(nil)
	// The protocol stays while a channel uses it (upstream).
	e.adminA.Call(base+"delete", M{"protocol_id": plain}).Fails(400, errs.ExistResource)
	e.adminA.Call(base+"get", M{"protocol_id": plain}).OK(nil)
	e.ownerA1.Call(pcBase+"delete", id).OK(nil)
	e.ownerA1.Call(pcBase+"get", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.adminA.Call(base+"delete", M{"protocol_id": plain}).OK(nil)
	if n := e.count(t, pcColl); n != 0 {
		t.Fatalf("%d channels after delete", n)
	}
}

func TestProjectChannelTenancy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	var c ProjectChannel
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": plain, "name": "ops", "data": M{"webhook_url": webhookJSON}, "project_id": "project-1"}).OK(&c)
	id := M{"project_channel_id": c.ProjectChannelID}
	testkit.Tenancy{
		Handler: e.handler, Coll: e.db.Collection(pcColl), ID: c.ProjectChannelID, Domain: "domain-a", Workspace: "workspace-1", Project: "project-1",
		Get:  testkit.Req{Path: pcBase + "get", Body: id},
		List: testkit.Req{Path: pcBase + "list", Body: id},
		Stat: &testkit.Req{Path: pcBase + "stat", Body: M{"query": M{
			"filter":    []any{M{"k": "project_channel_id", "v": c.ProjectChannelID, "o": "eq"}},
			"aggregate": []any{M{"group": M{"keys": []any{M{"key": "name", "name": "n"}}}}}}}},
		Changes: []testkit.Req{
			{Path: pcBase + "update", Body: M{"project_channel_id": c.ProjectChannelID, "data": M{"webhook_url": "https://evil.example.com"}}},
			{Path: pcBase + "set-schedule", Body: M{"project_channel_id": c.ProjectChannelID, "is_scheduled": true, "schedule": M{"day_of_week": []string{"MON"}, "end_hour": 1}}},
			{Path: pcBase + "set-subscription", Body: M{"project_channel_id": c.ProjectChannelID, "is_subscribe": true, "subscriptions": []string{"x"}}},
			{Path: pcBase + "disable", Body: id},
			{Path: pcBase + "enable", Body: id},
			{Path: pcBase + "delete", Body: id},
		},
		Insider: auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"},
	}.Run(t)
}

func TestUserChannels(t *testing.T) {
	t.Parallel()
	e := setup(t)
	builtin := e.builtin(t, e.userA)
	secret := e.protocolWith(t, "secret hooks", "SECRET")
	var mail UserChannel
	e.userA.Call(ucBase+"create", M{"protocol_id": builtin, "name": "my mail", "data": M{"email": "ulla@example.com"}}).OK(&mail)
	if !strings.HasPrefix(mail.UserChannelID, "user-ch-") || mail.UserID != "ulla" || mail.Data["email"] != "ulla@example.com" {
		t.Fatalf("channel %+v", mail)
	}
	var hook UserChannel
	e.userA.Call(ucBase+"create", M{"protocol_id": secret, "name": "my hook", "data": M{"webhook_url": "https://hooks.example.com/hunter2"}}).OK(&hook)
	if len(hook.Data) != 0 || !strings.HasPrefix(hook.UserSecretID, "user-secret-") {
		t.Fatalf("channel %+v", hook)
	}
	if strings.Contains(toString(t, e.raw(t, ucColl, hook.UserChannelID)), "hunter2") {
		t.Fatal("user channel data stored in clear")
	}
	before := e.count(t, ucColl)
	for name, body := range map[string]M{
		"built-in without email":  {"protocol_id": builtin, "name": "x", "data": M{"users": []string{"u"}}},
		"built-in bad email":      {"protocol_id": builtin, "name": "x", "data": M{"email": "not an address"}},
		"plugin data off schema":  {"protocol_id": secret, "name": "x", "data": M{}},
		"level is not for users":  {"protocol_id": builtin, "name": "x", "data": M{"email": "a@b.example"}, "notification_level": "LV1"},
		"project is not for user": {"protocol_id": builtin, "name": "x", "data": M{"email": "a@b.example"}, "project_id": "project-1"},
	} {
		e.userA.Call(ucBase+"create", body).Fails(400, errs.InvalidParameter)
		if n := e.count(t, ucColl); n != before {
			t.Fatalf("%s: stored", name)
		}
	}
	var l struct {
		TotalCount int `json:"total_count"`
	}
	e.adminA.Call(ucBase+"list", M{}).OK(&l) // a domain admin lists only their own
	if l.TotalCount != 0 {
		t.Fatalf("the admin sees %d of ulla's channels", l.TotalCount)
	}
	id := M{"user_channel_id": mail.UserChannelID}
	testkit.Tenancy{
		Handler: e.handler, Coll: e.db.Collection(ucColl), ID: mail.UserChannelID, Domain: "domain-a",
		Get:  testkit.Req{Path: ucBase + "get", Body: id},
		List: testkit.Req{Path: ucBase + "list", Body: id},
		Stat: &testkit.Req{Path: ucBase + "stat", Body: M{"query": M{
			"filter":    []any{M{"k": "user_channel_id", "v": mail.UserChannelID, "o": "eq"}},
			"aggregate": []any{M{"group": M{"keys": []any{M{"key": "name", "name": "n"}}}}}}}},
		Changes: []testkit.Req{
			{Path: ucBase + "update", Body: M{"user_channel_id": mail.UserChannelID, "data": M{"email": "evil@example.com"}}},
			{Path: ucBase + "set-schedule", Body: M{"user_channel_id": mail.UserChannelID, "is_scheduled": true, "schedule": M{"day_of_week": []string{"MON"}, "end_hour": 1}}},
			{Path: ucBase + "set-subscription", Body: M{"user_channel_id": mail.UserChannelID, "is_subscribe": true, "subscriptions": []string{"x"}}},
			{Path: ucBase + "disable", Body: id},
			{Path: ucBase + "enable", Body: id},
			{Path: ucBase + "delete", Body: id},
		},
		Insider: auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User},
	}.Run(t)
	testkit.SecretOracle(t, e.userA, testkit.Oracle{List: ucBase + "list", Stat: ucBase + "stat", Secret: "sealed", Probe: "sealed.data", Right: "x", Wrong: "y"})
}
