package costanalysis_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// notifications are the notification requests relayed to NATS from the
// service's outbox, once at least want are there (or after wait).
func (e *env) notifications(t *testing.T, want int, wait time.Duration) map[string]events.NotificationRequest {
	t.Helper()
	ctx := t.Context()
	var out map[string]events.NotificationRequest
	// Fewer than want at the bound is the caller's to judge.
	_ = testkit.Within(wait, func() bool {
		out = map[string]events.NotificationRequest{}
		if st, err := e.bus.JS.Stream(ctx, events.NotificationStream); err == nil {
			info, _ := st.Info(ctx)
			for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
				m, err := st.GetMsg(ctx, seq)
				if err != nil || m.Subject != events.NotificationRequestSubject {
					continue
				}
				var r events.NotificationRequest
				if err := json.Unmarshal(m.Data, &r); err != nil {
					t.Fatal(err)
				}
				if _, dup := out[r.ID]; dup {
					t.Fatalf("request %s published twice", r.ID)
				}
				out[r.ID] = r
			}
		}
		return len(out) >= want
	})
	return out
}
