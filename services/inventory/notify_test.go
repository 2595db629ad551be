package inventory_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// notifications are the notification requests on NATS (relayed from
// inventory's outbox), waiting up to wait for at least want of them.
func (s *stack) notifications(want int, wait time.Duration) []events.NotificationRequest {
	s.t.Helper()
	ctx := context.Background()
	bus, err := events.Connect(ctx, s.nats.URL(), "notify-reader", slog.New(slog.DiscardHandler))
	if err != nil {
		s.t.Fatal(err)
	}
	defer bus.Close()
	var out []events.NotificationRequest
	// Fewer than want at the bound is the caller's to judge.
	_ = testkit.Within(wait, func() bool {
		out = out[:0]
		if st, err := bus.JS.Stream(ctx, events.NotificationStream); err == nil {
			info, _ := st.Info(ctx)
			for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
				m, err := st.GetMsg(ctx, seq)
				if err != nil || m.Subject != events.NotificationRequestSubject {
					continue
				}
				var r events.NotificationRequest
				if err := json.Unmarshal(m.Data, &r); err != nil {
					s.t.Fatal(err)
				}
				out = append(out, r)
			}
		}
		return len(out) >= want
	})
	return out
}

// checkFailureNotice: one request for the failed job, to the domain's
// admins, as the contract wants it.
func checkFailureNotice(t *testing.T, got []events.NotificationRequest, jobID, domainID string) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("%d notification requests, want 1: %+v", len(got), got)
	}
	r := got[0]
	if r.ID != "failed-"+jobID || r.DomainID != domainID || !r.DomainAdmins || r.Topic != "inventory.Job" || r.NotificationType != "ERROR" ||
		r.Message.Title == "" || r.Message.Description == "" || r.Check() != nil {
		t.Fatalf("notification request %+v", r)
	}
}
