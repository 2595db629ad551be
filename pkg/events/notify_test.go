package events_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestNotify: a usable request is published on NotificationRequestSubject
// (NotificationStream) with its id as Nats-Msg-Id, at once while NATS
// answers (nothing recorded) and once however often it is sent; an
// unusable one is refused and nothing is stored or published.
// TestPublishLater has NATS down.
func TestNotify(t *testing.T) {
	t.Parallel()
	bus := connect(t, testkit.StartNATS(t).URL())
	o := newOutbox(t, bus, "outbox_notify")
	ctx := context.Background()
	good := events.NotificationRequest{ID: "alert-0123456789ab-1", DomainID: "domain-1", ProjectID: "project-1", Topic: "monitoring.Alert",
		NotificationType: events.NotifyError, Level: "LV10", Message: events.NotificationMessage{Title: "[Alerting] disk full",
			Callbacks: []events.MessageCallback{{Label: "Acknowledge", URL: "https://nubes.example/ack"}}}}
	for name, bad := range map[string]func(r *events.NotificationRequest){
		"no id":      func(r *events.NotificationRequest) { r.ID = "" },
		"bad id":     func(r *events.NotificationRequest) { r.ID = "a b" },
		"no domain":  func(r *events.NotificationRequest) { r.DomainID = "" },
		"no target":  func(r *events.NotificationRequest) { r.ProjectID = "" },
		"no topic":   func(r *events.NotificationRequest) { r.Topic = "" },
		"bad type":   func(r *events.NotificationRequest) { r.NotificationType = "NONE" },
		"bad level":  func(r *events.NotificationRequest) { r.Level = "LV11" },
		"zero level": func(r *events.NotificationRequest) { r.Level = "LV0" },
		"no title":   func(r *events.NotificationRequest) { r.Message.Title = "" },
	} {
		r := good
		r.ID = "bad-" + good.ID
		bad(&r)
		if err := o.Notify(ctx, r); err == nil {
			t.Fatalf("%s: accepted", name)
		}
	}
	if n, err := o.Pending(ctx); err != nil || n != 0 {
		t.Fatalf("refused requests stored: %d %v", n, err)
	}
	for range 2 {
		if err := o.Notify(ctx, good); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := o.Pending(ctx); n != 0 {
		t.Fatalf("%d records of a request NATS took", n)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := bus.JS.Stream(cctx, events.NotificationStream)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(cctx, events.NotificationRequestSubject)
	if err != nil {
		t.Fatal(err)
	}
	var got events.NotificationRequest
	if err := json.Unmarshal(msg.Data, &got); err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get("Nats-Msg-Id") != good.ID || got.Message.Callbacks[0].URL != good.Message.Callbacks[0].URL || got.Level != "LV10" {
		t.Fatalf("published %s: %+v", msg.Header.Get("Nats-Msg-Id"), got)
	}
	info, _ := s.Info(cctx)
	if info.State.Msgs != 1 {
		t.Fatalf("%d messages in the stream", info.State.Msgs)
	}
}

// TestPublishLater: with NATS down, Notify records the request and the
// relay publishes it once NATS is back; a request sent again meanwhile is
// still one message. Nothing is lost on the way.
func TestPublishLater(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	bus := connect(t, n.URL())
	o := newOutbox(t, bus, "outbox_later")
	runRelay(t, o)
	ctx := context.Background()
	req := func(id string) events.NotificationRequest {
		return events.NotificationRequest{ID: id, DomainID: "domain-1", ProjectID: "project-1", Topic: "monitoring.Alert",
			NotificationType: events.NotifyError, Level: "LV1", Message: events.NotificationMessage{Title: "[Alerting] " + id}}
	}
	n.Stop()
	testkit.Eventually(t, patience, "bus disconnected", func() bool { return !bus.Connected() })
	for _, id := range []string{"notify-a", "notify-b", "notify-a"} {
		if err := o.Notify(ctx, req(id)); err != nil {
			t.Fatalf("notify %s with NATS down: %v", id, err)
		}
	}
	if got := pending(t, o); got != 2 {
		t.Fatalf("pending %d with NATS down, want 2", got)
	}
	n.Start()
	testkit.Eventually(t, patience, "outbox drained after NATS returned", func() bool { return pending(t, o) == 0 })
	if err := o.Notify(ctx, req("notify-a")); err != nil {
		t.Fatal(err)
	}
	if n := len(streamMsgs(t, bus, events.NotificationStream)); n != 2 {
		t.Fatalf("%d messages in the stream, want 2 (notify-a and notify-b once each)", n)
	}
}
