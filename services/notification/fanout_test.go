package notification_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/notification/internal/fanout"
)

// at is a time of the test week, for the fan-out's clock.
func at(day, hour int) time.Time { return time.Date(2026, 11, 23+day, hour, 30, 0, 0, time.UTC) } // day 0: a Monday
func (e *env) request(t *testing.T, r events.NotificationRequest) {
	t.Helper()
	if err := e.bus.Publish(context.Background(), events.NotificationRequestSubject, r.ID+"-"+time.Now().String(), r); err != nil {
		t.Fatal(err)
	}
}

// dispatched waits until the plugin got n dispatches and returns them by
// channel data's webhook_url; it fails on more.
func (e *env) dispatched(t *testing.T, n int) map[string]M {
	t.Helper()
	testkit.Eventually(t, waitBound, fmt.Sprintf("%d dispatches", n), func() bool { return len(e.plugin.Calls(dispatchMethod)) >= n })
	e.settled(t) // no more than n: the fan-out and the dispatcher are done with what they took
	calls := e.plugin.Calls(dispatchMethod)
	if len(calls) != n {
		var urls []string
		for _, c := range calls {
			urls = append(urls, c.Request["channel_data"].(M)["webhook_url"].(string))
		}
		sort.Strings(urls)
		t.Fatalf("%d dispatches, want %d: %v", len(calls), n, urls)
	}
	out := map[string]M{}
	for _, c := range calls {
		out[c.Request["channel_data"].(M)["webhook_url"].(string)] = c.Request
	}
	return out
}

// settled waits until the fan-out and the dispatcher have acknowledged
// every message of the notification stream: all that the requests sent so
// far lead to (dispatches, mails, inbox entries) has happened, so what the
// test reads then is final. It is the positive side of "nothing more".
func (e *env) settled(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	// Requests first: what they lead to is on the stream before they are
	// acknowledged.
	for _, name := range []string{events.NotificationRequestConsumer, events.NotificationConsumer} {
		testkit.Eventually(t, waitBound, name+" acknowledged everything", func() bool {
			c, err := e.bus.JS.Consumer(ctx, events.NotificationStream, name)
			if err != nil {
				return false
			}
			info, err := c.Info(ctx)
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0
		})
	}
}

func (e *env) mails(t *testing.T) []events.Mail {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	s, err := e.bus.JS.Stream(ctx, events.MailStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Mail
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		var mail events.Mail
		if err := json.Unmarshal(m.Data, &mail); err != nil {
			t.Fatal(err)
		}
		out = append(out, mail)
	}
	return out
}

// TestNotificationRequest: a request picks the project's ENABLED channels
// of its level that subscribe to its topic (or to all) and are inside
// their schedule window (test clock); the built-in protocol's channel
// reaches its users (inbox entry, their user channels: e-mail through the
// mailer); a SECRET channel's data reaches the plugin unsealed; the
// message is upstream's; a request delivered again adds nothing.
func TestNotificationRequest(t *testing.T) {
	t.Parallel()
	clk := testkit.StoppedClock(time.Time{})
	clk.Set(at(0, 10)) // Monday 10:30 UTC
	e := setupWith(t, options{bus: true, now: clk.Now})
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	secret := e.protocolWith(t, "secret hooks", "SECRET")
	builtin := e.builtin(t, e.adminA)
	e.plugin.Reset()
	mk := func(body M) string {
		body["project_id"] = "project-1"
		return e.ownerA1.Call(pcBase+"create", body).OK(nil).JSON()["project_channel_id"].(string)
	}
	hook := func(u string) M { return M{"webhook_url": "https://hooks.example.com/" + u} }
	mk(M{"protocol_id": plain, "name": "lv1", "data": hook("lv1")})
	mk(M{"protocol_id": plain, "name": "alerts", "data": hook("alerts"), "notification_level": "LV3", "is_subscribe": true, "subscriptions": []string{"monitoring.Alert"}})
	mk(M{"protocol_id": secret, "name": "office", "data": hook("office-hunter2"), "notification_level": "LV3", "is_scheduled": true,
		"schedule": M{"day_of_week": []string{"MON"}, "start_hour": 9, "end_hour": 17}})
	off := mk(M{"protocol_id": plain, "name": "off", "data": hook("off"), "notification_level": "LV3"})
	e.ownerA1.Call(pcBase+"disable", M{"project_channel_id": off}).OK(nil)
	mk(M{"protocol_id": builtin, "name": "people", "data": M{"users": []string{"ulla"}}, "notification_level": "LV3"})
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": plain, "name": "other project", "data": hook("p2"), "notification_level": "LV3", "project_id": "project-2"}).OK(nil)
	e.userA.Call(ucBase+"create", M{"protocol_id": builtin, "name": "mail", "data": M{"email": "ulla@example.com"}}).OK(nil)
	e.userA.Call(ucBase+"create", M{"protocol_id": plain, "name": "jobs", "data": hook("ulla-jobs"), "is_subscribe": true, "subscriptions": []string{"inventory.Job"}}).OK(nil)

	req := events.NotificationRequest{ID: "alert-0123456789ab-step-1", DomainID: "domain-a", ProjectID: "project-1", Topic: "monitoring.Alert",
		NotificationType: "ERROR", Level: "LV3", Message: events.NotificationMessage{Title: "[Alerting] disk full", Description: "vm-1 at 99%",
			Link: "https://console.example.com/alert/1", OccurredAt: "2026-11-23T10:29:00.000Z",
			Tags:      []events.MessageTag{{Key: "Alert Number", Value: "#1"}, {Key: "Urgency", Value: "HIGH"}},
			Callbacks: []events.MessageCallback{{Label: "Acknowledge", URL: "https://nubes.example.com/monitoring/v1/domain/domain-a/alert/alert-0123456789ab/k/ACKNOWLEDGED"}}}}
	e.request(t, req)
	got := e.dispatched(t, 2)
	wantMsg := M{"title": "[Alerting] disk full", "description": "vm-1 at 99%", "link": "https://console.example.com/alert/1", "occurred_at": "2026-11-23T10:29:00.000Z",
		"tags":      []any{M{"key": "Alert Number", "value": "#1"}, M{"key": "Urgency", "value": "HIGH"}},
		"callbacks": []any{M{"label": "Acknowledge", "url": req.Message.Callbacks[0].URL}}}
	alerts := got["https://hooks.example.com/alerts"]
	if alerts == nil || got["https://hooks.example.com/office-hunter2"] == nil {
		t.Fatalf("dispatched to %v", got)
	}
	// The dispatch request exactly as plugin-protocols.md gives it.
	if want := (M{"options": M{}, "secret_data": M{}, "notification_type": "ERROR", "message": wantMsg, "channel_data": hook("alerts")}); !reflect.DeepEqual(alerts, want) {
		t.Fatalf("dispatch request\n got  %v\n want %v", alerts, want)
	}
	// ulla: one inbox entry, her e-mail channel through the mailer; her
	// inventory.Job channel does not take monitoring.Alert.
	if n := e.countWhere(t, "notification_inbox", nil); n != 1 {
		t.Fatalf("%d inbox entries", n)
	}
	var mails []events.Mail
	testkit.Eventually(t, waitBound, "a mail", func() bool { mails = e.mails(t); return len(mails) != 0 })
	if len(mails) != 1 || mails[0].To != "ulla@example.com" || mails[0].Template != events.MailNotification || mails[0].Data["title"] != "[Alerting] disk full" ||
		mails[0].Secret == nil || mails[0].Data["callback_url"] != "" || mails[0].Data["link"] != "" {
		t.Fatalf("mails %+v", mails)
	}

	// Delivered again: nothing more.
	e.request(t, req)
	e.dispatched(t, 2)
	if n := e.countWhere(t, "notification_inbox", nil); n != 1 {
		t.Fatalf("%d inbox entries after a redelivery", n)
	}

	// Monday 20:30: the office channel's window is closed.
	clk.Set(at(0, 20))
	req2 := req
	req2.ID = "alert-0123456789ab-step-2"
	e.request(t, req2)
	got = e.dispatched(t, 3)
	// Level ALL, another topic: every channel that takes the topic.
	req3 := req
	req3.ID, req3.Level, req3.Topic = "job-1-failed", "ALL", "inventory.Job"
	clk.Set(at(0, 12))
	e.request(t, req3)
	got = e.dispatched(t, 6) // lv1, office (in window again), ulla-jobs
	for _, u := range []string{"lv1", "office-hunter2", "ulla-jobs"} {
		if got["https://hooks.example.com/"+u] == nil {
			t.Fatalf("%s not dispatched: %v", u, got)
		}
	}
	if n := e.countWhere(t, "notification_inbox", nil); n != 3 {
		t.Fatalf("%d inbox entries", n)
	}
}

// TestNotificationRequestSkipsGoneProtocols: a channel whose protocol's
// delete has begun, or whose protocol id names another domain's
// protocol (a record left inconsistent), gets no dispatch; the channels
// beside it do.
func TestNotificationRequestSkipsGoneProtocols(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	live := e.protocolWith(t, "live", "PLAIN_TEXT")
	going := e.protocolWith(t, "going", "PLAIN_TEXT")
	e.plugin.Script(initMethod, fakeplugin.Reply{Result: M{"metadata": M{"data_type": "PLAIN_TEXT", "data": M{"schema": webhookSchema}}}})
	foreign := e.create(t, e.adminB, M{"name": "theirs", "plugin_info": M{"plugin_id": "plugin-email-noti-protocol"}}).ProtocolID
	e.plugin.Reset()
	mk := func(protocolID, name string) string {
		return e.ownerA1.Call(pcBase+"create", M{"project_id": "project-1", "protocol_id": protocolID, "name": name,
			"data": M{"webhook_url": "https://hooks.example.com/" + name}}).OK(nil).JSON()["project_channel_id"].(string)
	}
	mk(live, "live")
	mk(going, "going")
	other := mk(live, "other")
	ctx := context.Background()
	// Its delete begun (store.Teardown's mark), not finished.
	if _, err := e.db.Collection("notification_protocols").UpdateOne(ctx, bson.D{{Key: "_id", Value: going}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "deleting", Value: true}}}}); err != nil {
		t.Fatal(err)
	}
	// A channel record naming domain-b's protocol.
	if _, err := e.db.Collection("notification_project_channels").UpdateOne(ctx, bson.D{{Key: "_id", Value: other}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "protocol_id", Value: foreign}}}}); err != nil {
		t.Fatal(err)
	}
	e.request(t, events.NotificationRequest{ID: "gone-protocols-1", DomainID: "domain-a", ProjectID: "project-1", Topic: "monitoring.Alert",
		NotificationType: "ERROR", Level: "ALL", Message: events.NotificationMessage{Title: "[Alerting] disk full"}})
	if got := e.dispatched(t, 1); got["https://hooks.example.com/live"] == nil {
		t.Fatalf("dispatched to %v", got)
	}
}

// TestNotificationRequestRetried: a channel's plugin that is down is
// retried by the dispatcher, and the delivery counts once.
func TestNotificationRequestRetried(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	e.plugin.Reset()
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": plain, "name": "c", "data": M{"webhook_url": "https://hooks.example.com/c"}, "project_id": "project-1"}).OK(nil)
	down := fakeplugin.Reply{Err: status.Error(codes.Unavailable, "down")}
	e.plugin.Script(dispatchMethod, down, fakeplugin.Reply{})
	e.request(t, events.NotificationRequest{ID: "req-retry", DomainID: "domain-a", ProjectID: "project-1", Topic: "t", Message: events.NotificationMessage{Title: "x"}})
	e.dispatched(t, 2)
	if sent, failed, skipped := e.usage(t, plain, [3]int{1, 0, 0}); sent != 1 || failed != 0 || skipped != 0 {
		t.Fatalf("usage %d %d %d", sent, failed, skipped)
	}
}

// TestNotificationCreateAndPush: upstream's create and push, for services
// only; bad input is 400 and dispatches nothing.
func TestNotificationCreateAndPush(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	e.plugin.Reset()
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": plain, "name": "c", "data": M{"webhook_url": "https://hooks.example.com/c"}, "project_id": "project-1",
		"notification_level": "LV2"}).OK(nil)
	const nb = "/notification/v1/notification/"
	e.adminA.Call(nb+"create", M{"resource_type": "identity.Project", "resource_id": "project-1", "topic": "t", "message": M{"title": "x"}}).Fails(403, "ERROR_PERMISSION_DENIED")
	for name, body := range map[string]M{
		"no title":      {"resource_type": "identity.Project", "resource_id": "project-1", "topic": "t", "message": M{"description": "x"}},
		"unknown key":   {"resource_type": "identity.Project", "resource_id": "project-1", "topic": "t", "message": M{"title": "x", "colour": "red"}},
		"bad type":      {"resource_type": "identity.Project", "resource_id": "project-1", "topic": "t", "message": M{"title": "x"}, "notification_type": "NONE"},
		"bad level":     {"resource_type": "identity.Project", "resource_id": "project-1", "topic": "t", "message": M{"title": "x"}, "notification_level": "LV11"},
		"bad resource":  {"resource_type": "identity.Workspace", "resource_id": "w", "topic": "t", "message": M{"title": "x"}},
		"missing topic": {"resource_type": "identity.Project", "resource_id": "project-1", "message": M{"title": "x"}},
	} {
		r := e.system.Call(nb+"create", body)
		if r.Status != 400 {
			t.Fatalf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	e.system.Call(nb+"create", M{"resource_type": "identity.Project", "resource_id": "project-1", "topic": "t", "message": M{"title": "x"}, "notification_level": "LV2",
		"domain_id": "domain-a"}).OK(nil)
	e.dispatched(t, 1)
	e.system.Call(nb+"push", M{"protocol_id": plain, "data": M{"webhook_url": "https://hooks.example.com/push"}, "message": M{"title": "pushed"}, "domain_id": "domain-a"}).OK(nil)
	got := e.dispatched(t, 2)
	if got["https://hooks.example.com/push"]["message"].(M)["title"] != "pushed" {
		t.Fatalf("push %v", got)
	}
	if n := e.countWhere(t, "notification_inbox", nil); n != 0 {
		t.Fatalf("%d inbox entries for project channels and a push", n)
	}
}

// TestNotificationDomainAdmins: a notice for the domain's admins (a
// failed job's) reaches every ENABLED user identity binds to DOMAIN_ADMIN
// in that domain, asked with the service credential: an inbox entry
// each, their user channels, and the mailer at identity's address for an
// admin without a channel; a user of another role or domain, or a
// disabled admin, gets nothing. Through the stream and notification/create.
func TestNotificationDomainAdmins(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	e.plugin.Reset()
	type binding struct{ user, role, domain string }
	bindings := []binding{{"alice", "DOMAIN_ADMIN", "domain-a"}, {"dora", "DOMAIN_ADMIN", "domain-a"}, {"erin", "DOMAIN_ADMIN", "domain-a"},
		{"olga", "WORKSPACE_OWNER", "domain-a"}, {"bob", "DOMAIN_ADMIN", "domain-b"}, {"frank", "DOMAIN_ADMIN", "domain-a"}}
	users := map[string][2]string{"alice": {"alice@a.example.com", "ENABLED"}, "dora": {"dora@a.example.com", "ENABLED"},
		"erin": {"erin@a.example.com", "DISABLED"}, "olga": {"olga@a.example.com", "ENABLED"}, "bob": {"bob@b.example.com", "ENABLED"},
		"frank": {"frank@a.example.com", "ENABLED"}} // frank's address is not verified: he is not mailed
	service := func(p *auth.Principal) error {
		if !p.IsService() {
			return errs.Forbidden()
		}
		return nil
	}
	e.identity.Handle(fanout.RoleBindingListPath, func(p *auth.Principal, req map[string]any) (any, error) {
		if err := service(p); err != nil {
			return nil, err
		}
		var out []M
		for _, b := range bindings {
			if b.domain == testkit.Str(req, "domain_id") && (testkit.Str(req, "role_type") == "" || b.role == testkit.Str(req, "role_type")) {
				out = append(out, M{"role_binding_id": "rb-" + b.user, "user_id": b.user, "role_type": b.role, "domain_id": b.domain})
			}
		}
		return M{"results": out, "total_count": len(out)}, nil
	}).Handle(fanout.UserListPath, func(p *auth.Principal, req map[string]any) (any, error) {
		if err := service(p); err != nil {
			return nil, err
		}
		var out []M
		for _, b := range bindings {
			u := users[b.user]
			if b.domain == testkit.Str(req, "domain_id") && (testkit.Str(req, "state") == "" || u[1] == testkit.Str(req, "state")) {
				out = append(out, M{"user_id": b.user, "email": u[0], "state": u[1], "domain_id": b.domain, "email_verified": b.user != "frank"})
			}
		}
		return M{"results": out, "total_count": len(out)}, nil
	})
	// alice chose a channel of her own; dora has none.
	alice := e.ownerA1.For(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	alice.Call(ucBase+"create", M{"protocol_id": plain, "name": "mine", "data": M{"webhook_url": "https://hooks.example.com/alice"}}).OK(nil)

	failed := events.NotificationRequest{ID: "job-0123456789ab-failed", DomainID: "domain-a", DomainAdmins: true, Topic: "inventory.Job",
		NotificationType: events.NotifyError, Message: events.NotificationMessage{Title: "Collection failed"}}
	e.request(t, failed)
	if got := e.dispatched(t, 1); got["https://hooks.example.com/alice"] == nil {
		t.Fatalf("dispatched %v", got)
	}
	mailsTo := func(n int) []string {
		t.Helper()
		var to []string
		// Fewer than n at the bound: the caller's comparison says so.
		_ = testkit.Within(waitBound, func() bool { return len(e.mails(t)) >= n })
		e.settled(t) // no more than n
		for _, m := range e.mails(t) {
			if m.Data["title"] != "Collection failed" {
				t.Fatalf("mail %+v", m)
			}
			to = append(to, m.To)
		}
		sort.Strings(to)
		return to
	}
	if to := mailsTo(1); !reflect.DeepEqual(to, []string{"dora@a.example.com"}) {
		t.Fatalf("mailed %v", to)
	}
	var inbox []string
	cur, err := e.db.Collection("notification_inbox").Find(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.M
	if err := cur.All(context.Background(), &docs); err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		inbox = append(inbox, d["user_id"].(string))
	}
	sort.Strings(inbox)
	if !reflect.DeepEqual(inbox, []string{"alice", "dora", "frank"}) {
		t.Fatalf("inbox of %v", inbox)
	}
	// Delivered again: nothing more.
	e.request(t, failed)
	e.dispatched(t, 1)
	if to := mailsTo(1); len(to) != 1 {
		t.Fatalf("mailed %v after a redelivery", to)
	}
	// upstream's notification/create for identity.Domain: the same path.
	e.system.Call("/notification/v1/notification/create", M{"resource_type": "identity.Domain", "resource_id": "domain-a", "topic": "cost_analysis.Job",
		"message": M{"title": "Collection failed"}, "domain_id": "domain-a"}).OK(nil)
	e.dispatched(t, 2)
	if to := mailsTo(2); !reflect.DeepEqual(to, []string{"dora@a.example.com", "dora@a.example.com"}) {
		t.Fatalf("mailed %v", to)
	}
}

// TestNotificationRequestDeadLettered: a request that cannot be handled
// is never lost. One that keeps failing (identity answering 503 for a
// DomainAdmins request) is tried MaxDeliver (5) times, then ends on the
// dead-letter stream with the request and in notification_requests as
// DEAD; one that breaks the contract, or does not decode, ends there at
// once. Republishing the dead letter's request once the cause is gone
// notifies.
func TestNotificationRequestDeadLettered(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	e.plugin.Reset()
	var calls atomic.Int64
	down := true
	var mu sync.Mutex
	e.identity.Handle(fanout.RoleBindingListPath, func(p *auth.Principal, req map[string]any) (any, error) {
		calls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if down {
			return nil, errs.Down("identity's store", errors.New("test: down"))
		}
		return M{"results": []M{{"role_binding_id": "rb-dora", "user_id": "dora", "role_type": "DOMAIN_ADMIN", "domain_id": "domain-a"}}, "total_count": 1}, nil
	}).Handle(fanout.UserListPath, func(p *auth.Principal, req map[string]any) (any, error) {
		return M{"results": []M{{"user_id": "dora", "email": "dora@a.example.com", "email_verified": true, "state": "ENABLED", "domain_id": "domain-a"}}, "total_count": 1}, nil
	})
	dora := e.ownerA1.For(auth.Principal{DomainID: "domain-a", UserID: "dora", Role: auth.DomainAdmin})
	dora.Call(ucBase+"create", M{"protocol_id": plain, "name": "mine", "data": M{"webhook_url": "https://hooks.example.com/dora"}}).OK(nil)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := e.bus.JS.CreateOrUpdateConsumer(ctx, events.NotificationDeadStream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	next := func() events.DeadNotification {
		t.Helper()
		m, err := cons.Next(jetstream.FetchMaxWait(waitBound))
		if err != nil {
			t.Fatalf("no dead letter: %v", err)
		}
		_ = m.Ack()
		var d events.DeadNotification
		if err := json.Unmarshal(m.Data(), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// The record follows the dead letter's publish.
	record := func(id string) bson.M {
		t.Helper()
		testkit.Eventually(t, waitBound, "the record of "+id, func() bool {
			return e.countWhere(t, "notification_requests", bson.D{{Key: "_id", Value: id}}) == 1
		})
		return e.raw(t, "notification_requests", id)
	}

	failing := events.NotificationRequest{ID: "job-0123456789ab-dead", DomainID: "domain-a", DomainAdmins: true, Topic: "inventory.Job",
		NotificationType: events.NotifyError, Message: events.NotificationMessage{Title: "Collection failed"}}
	e.request(t, failing)
	d := next()
	if d.Request == nil || d.Request.ID != failing.ID || d.Deliveries != 5 || d.Reason == "" {
		t.Fatalf("dead letter %+v: want the request after 5 deliveries", d)
	}
	if rec := record(failing.ID); rec["outcome"] != "DEAD" || rec["deliveries"] != int32(5) || rec["domain_id"] != "domain-a" {
		t.Fatalf("record %v", rec)
	}
	if n := calls.Load(); n < 5 {
		t.Errorf("identity asked %d times, want at least 5 (one per delivery)", n)
	}

	// Breaking the contract (published past Outbox.Notify): dead at once.
	bad := events.NotificationRequest{ID: "req-no-title", DomainID: "domain-a", ProjectID: "project-1", Topic: "t"}
	e.request(t, bad)
	if d := next(); d.Request == nil || d.Request.ID != bad.ID || d.Deliveries != 1 {
		t.Fatalf("dead letter %+v: want the request at its first delivery", d)
	}
	if rec := record(bad.ID); rec["outcome"] != "DEAD" || rec["deliveries"] != int32(1) {
		t.Fatalf("record %v", rec)
	}
	// Not JSON: dead at once, the payload kept as received.
	if err := e.bus.Publish(ctx, events.NotificationRequestSubject, "req-raw", json.RawMessage(`"not a request"`)); err != nil {
		t.Fatal(err)
	}
	if d := next(); d.Request != nil || d.Raw != `"not a request"` {
		t.Fatalf("dead letter %+v: want the raw payload", d)
	}
	dead := func() int64 {
		return e.countWhere(t, "notification_requests", bson.D{{Key: "outcome", Value: "DEAD"}, {Key: "_id", Value: bson.D{{Key: "$regex", Value: "^seq-"}}}})
	}
	testkit.Eventually(t, waitBound, "a DEAD record of the seq- requests", func() bool { return dead() != 0 })
	if n := e.countWhere(t, "notification_requests", bson.D{{Key: "outcome", Value: "DEAD"}}); n != 3 {
		t.Errorf("%d DEAD records, want 3", n)
	}
	if n := len(e.plugin.Calls(dispatchMethod)); n != 0 {
		t.Fatalf("%d dispatches of requests that were not handled", n)
	}

	// The operator's replay: identity is back, the dead request is
	// published again (a new message id) and notifies.
	mu.Lock()
	down = false
	mu.Unlock()
	if err := e.bus.Publish(ctx, events.NotificationRequestSubject, "replay-"+d.Request.ID, *d.Request); err != nil {
		t.Fatal(err)
	}
	if got := e.dispatched(t, 1); got["https://hooks.example.com/dora"] == nil {
		t.Fatalf("dispatched %v", got)
	}
}
