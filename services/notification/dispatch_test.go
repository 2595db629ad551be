package notification_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

const dispatches = "notification_dispatches"

func (e *env) publish(t *testing.T, msgID string, ev events.NotificationDispatch) {
	t.Helper()
	if err := e.bus.Publish(context.Background(), events.NotificationDispatchSubject, msgID, ev); err != nil {
		t.Fatal(err)
	}
}

// outcome waits for the recorded outcome of an event.
func (e *env) outcome(t *testing.T, id string) bson.M {
	t.Helper()
	var m bson.M
	testkit.Eventually(t, waitBound, "an outcome recorded for "+id, func() bool {
		return e.db.Collection(dispatches).FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&m) == nil
	})
	return m
}

// usage reads a protocol's counters once they are want (the dispatcher
// counts just after it records the outcome), or as they are after
// waitBound.
func (e *env) usage(t *testing.T, id string, want [3]int) (sent, failed, skipped int) {
	t.Helper()
	var got [3]int
	// Other counters at the bound are the caller's to judge.
	_ = testkit.Within(waitBound, func() bool {
		var p Protocol
		e.adminA.Call(base+"get", M{"protocol_id": id}).OK(&p)
		got = [3]int{p.Usage.Sent, p.Usage.Failed, p.Usage.Skipped}
		return got == want
	})
	return got[0], got[1], got[2]
}

func event(id, protocolID string) events.NotificationDispatch {
	return events.NotificationDispatch{ID: id, DomainID: "domain-a", ProtocolID: protocolID, NotificationType: "ERROR",
		Message: M{"title": "Disk full", "description": "vm-1"}, ChannelData: M{"email": "ops@example.com"}}
}

// TestDispatch: an event reaches the protocol's plugin with the secret
// data unsealed; the same event again is not dispatched twice; a DISABLED
// protocol dispatches nothing.
func TestDispatch(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	p := e.create(t, e.adminA, emailProtocol("E-mail"))

	e.publish(t, "n-1", event("n-1", p.ProtocolID))
	if rec := e.outcome(t, "n-1"); rec["outcome"] != "SENT" {
		t.Fatalf("outcome %v", rec)
	}
	calls := e.plugin.Calls(dispatchMethod)
	if len(calls) != 1 {
		t.Fatalf("%d dispatch calls", len(calls))
	}
	want := M{"options": M{"smtp_host": "mail.example.com"}, "secret_data": M{"smtp_password": "hunter2-secret"},
		"notification_type": "ERROR", "message": M{"title": "Disk full", "description": "vm-1"}, "channel_data": M{"email": "ops@example.com"}}
	if !reflect.DeepEqual(calls[0].Request, want) {
		t.Errorf("dispatch request\n got  %v\n want %v", calls[0].Request, want)
	}

	// The same event published again (another message id, so the stream
	// keeps it) is acknowledged without a second dispatch.
	e.publish(t, "n-1-again", event("n-1", p.ProtocolID))
	e.publish(t, "n-2", event("n-2", p.ProtocolID))
	e.outcome(t, "n-2")
	if n := len(e.plugin.Calls(dispatchMethod)); n != 2 {
		t.Errorf("%d dispatch calls for two distinct events, want 2", n)
	}

	// Disabled: skipped, nothing dispatched.
	e.adminA.Call(base+"disable", M{"protocol_id": p.ProtocolID}).OK(nil)
	e.publish(t, "n-3", event("n-3", p.ProtocolID))
	if rec := e.outcome(t, "n-3"); rec["outcome"] != "SKIPPED" {
		t.Fatalf("outcome %v", rec)
	}
	if n := len(e.plugin.Calls(dispatchMethod)); n != 2 {
		t.Errorf("a disabled protocol dispatched: %d calls", n)
	}
	// Another domain's event naming the protocol is not dispatched.
	other := event("n-4", p.ProtocolID)
	other.DomainID = "domain-b"
	e.adminA.Call(base+"enable", M{"protocol_id": p.ProtocolID}).OK(nil)
	e.publish(t, "n-4", other)
	if rec := e.outcome(t, "n-4"); rec["outcome"] != "SKIPPED" {
		t.Fatalf("outcome %v", rec)
	}
	if sent, failed, skipped := e.usage(t, p.ProtocolID, [3]int{2, 0, 1}); sent != 2 || failed != 0 || skipped != 1 {
		t.Errorf("usage sent %d failed %d skipped %d, want 2 0 1", sent, failed, skipped)
	}
}

// TestDispatchUnderWayAtStop: a dispatch under way when the replica
// stops (a rolling update's SIGTERM) is not cut: the dispatcher waits for
// the plugin's answer and records the outcome, so the event is not handed
// back and dispatched again by another replica (a page sent twice).
func TestDispatchUnderWayAtStop(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	p := e.create(t, e.adminA, emailProtocol("E-mail"))
	answer := make(chan struct{})
	e.plugin.Script(dispatchMethod, fakeplugin.Reply{Gate: answer})
	e.publish(t, "n-stop", event("n-stop", p.ProtocolID))
	testkit.Eventually(t, waitBound, "a dispatch at the plugin", func() bool { return len(e.plugin.Calls(dispatchMethod)) != 0 })
	e.stopWorkers()
	select {
	case <-e.workersStopped:
		t.Fatal("the stop cut the dispatch under way")
	case <-time.After(300 * time.Millisecond):
	}
	close(answer)
	select {
	case <-e.workersStopped:
	case <-time.After(waitBound):
		t.Fatal("the dispatcher did not stop after the plugin answered")
	}
	var rec bson.M
	if err := e.db.Collection(dispatches).FindOne(context.Background(), bson.D{{Key: "_id", Value: "n-stop"}}).Decode(&rec); err != nil || rec["outcome"] != "SENT" {
		t.Fatalf("outcome after the stop: %v %v, want SENT", rec, err)
	}
	if n := len(e.plugin.Calls(dispatchMethod)); n != 1 {
		t.Fatalf("%d dispatch calls, want 1", n)
	}
}

// TestDispatchFailures: a failure that may pass is retried with backoff; a
// refusal or the last failure goes to the dead letter, counted as failed.
func TestDispatchFailures(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	p := e.create(t, e.adminA, emailProtocol("E-mail"))
	dead := make(chan events.DeadNotification, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons, err := e.bus.JS.CreateOrUpdateConsumer(ctx, events.NotificationDeadStream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var d events.DeadNotification
		_ = json.Unmarshal(m.Data(), &d)
		_ = m.Ack()
		dead <- d
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()

	down := fakeplugin.Reply{Err: status.Error(codes.Unavailable, "down")}
	e.plugin.Script(dispatchMethod, down, down, fakeplugin.Reply{})
	e.publish(t, "f-1", event("f-1", p.ProtocolID))
	if rec := e.outcome(t, "f-1"); rec["outcome"] != "SENT" || rec["deliveries"] != int32(3) {
		t.Fatalf("outcome %v: want SENT on the third delivery", rec)
	}
	if n := len(e.plugin.Calls(dispatchMethod)); n != 3 {
		t.Errorf("%d dispatch calls, want 3", n)
	}

	// Always failing: dead after MaxDeliver (3) deliveries.
	e.plugin.Reset()
	e.plugin.Script(dispatchMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.Internal, "ERROR_SMTP", "relay refused")})
	e.publish(t, "f-2", event("f-2", p.ProtocolID))
	if rec := e.outcome(t, "f-2"); rec["outcome"] != "DEAD" {
		t.Fatalf("outcome %v", rec)
	}
	if n := len(e.plugin.Calls(dispatchMethod)); n != 3 {
		t.Errorf("%d dispatch calls before the dead letter, want 3", n)
	}
	select {
	case d := <-dead:
		if d.Notification.ID != "f-2" || d.Deliveries != 3 {
			t.Errorf("dead letter %+v", d)
		}
	case <-time.After(waitBound):
		t.Fatal("no dead letter")
	}

	// A refusal (bad channel data) is not retried.
	e.plugin.Reset()
	e.plugin.Script(dispatchMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.InvalidArgument, "ERROR_INVALID_PARAMETER", "email")})
	e.publish(t, "f-3", event("f-3", p.ProtocolID))
	if rec := e.outcome(t, "f-3"); rec["outcome"] != "DEAD" || rec["deliveries"] != int32(1) {
		t.Fatalf("outcome %v", rec)
	}
	if n := len(e.plugin.Calls(dispatchMethod)); n != 1 {
		t.Errorf("a refusal was tried %d times", n)
	}
	// A bad notification_type never reaches the plugin.
	bad := event("f-4", p.ProtocolID)
	bad.NotificationType = "NOTIFICATION_TYPE_NONE"
	e.publish(t, "f-4", bad)
	if rec := e.outcome(t, "f-4"); rec["outcome"] != "DEAD" {
		t.Fatalf("outcome %v", rec)
	}
	if n := len(e.plugin.Calls(dispatchMethod)); n != 1 {
		t.Errorf("a bad notification_type reached the plugin")
	}
	if sent, failed, _ := e.usage(t, p.ProtocolID, [3]int{1, 3, 0}); sent != 1 || failed != 3 {
		t.Errorf("usage sent %d failed %d, want 1 3", sent, failed)
	}
	for _, id := range []string{"f-3", "f-4"} {
		select {
		case d := <-dead:
			if d.Notification.ID != id {
				t.Errorf("dead letter %+v, want %s", d, id)
			}
		case <-time.After(waitBound):
			t.Fatalf("no dead letter for %s", id)
		}
	}
}
