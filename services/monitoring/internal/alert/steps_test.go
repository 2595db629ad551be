package alert

import (
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/wire"
)

func TestBegin(t *testing.T) {
	now := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	start := &Start{Level: "LV2", Minutes: 10}
	highOnly := &Start{Level: "LV2", Minutes: 10, HighOnly: true}
	at := wire.T(now.Add(-time.Hour))
	cases := []struct {
		name       string
		state      string
		urgency    string
		ttl        int32
		escalated  *wire.Time
		start      *Start
		wantNotice string // "" : none
		wantStep   int32
		wantTTL    int32
		wantLook   bool
	}{
		{"open alert: step 1 of the first rule", Triggered, High, 2, nil, start, "notify-alert-1-r2-s1", 1, 2, true},
		{"not escalating: nothing begun", Triggered, High, 2, nil, nil, "", 0, 2, false},
		{"LOW of a HIGH_ONLY project: ends", Triggered, Low, 2, nil, highOnly, "", 0, 0, false},
		{"HIGH of a HIGH_ONLY project: step 1", Triggered, High, 1, nil, highOnly, "notify-alert-1-r1-s1", 1, 1, true},
		{"ERROR: announced once, no next look", Error, Low, 1, nil, highOnly, "notify-alert-1-r1-s1", 1, 1, false},
		{"no rounds: nothing", Triggered, High, 0, nil, start, "", 0, 0, false},
		{"escalated already: nothing", Triggered, High, 2, &at, start, "", 0, 2, false},
		{"resolved: nothing", Resolved, High, 2, nil, start, "", 0, 2, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := &Alert{AlertID: "alert-1", State: c.state, Urgency: c.urgency, EscalationTTL: c.ttl, EscalatedAt: c.escalated}
			a.Begin(c.start, now)
			switch {
			case c.wantNotice == "" && a.Notice != nil:
				t.Fatalf("notice %+v", a.Notice)
			case c.wantNotice != "" && (a.Notice == nil || a.Notice.ID != c.wantNotice || a.Notice.Level != "LV2"):
				t.Fatalf("notice %+v, want %s at LV2", a.Notice, c.wantNotice)
			case a.EscalationStep != c.wantStep || a.EscalationTTL != c.wantTTL:
				t.Fatalf("step %d ttl %d, want %d %d", a.EscalationStep, a.EscalationTTL, c.wantStep, c.wantTTL)
			case c.wantLook != (a.EscalateAt != nil):
				t.Fatalf("next look %v", a.EscalateAt)
			case c.wantLook && !a.EscalateAt.Equal(now.Add(10*time.Minute+time.Millisecond)):
				t.Fatalf("next look at %v", a.EscalateAt)
			case c.wantNotice != "" && (a.EscalatedAt == nil || !a.EscalatedAt.Equal(now)):
				t.Fatalf("escalated at %v", a.EscalatedAt)
			}
		})
	}
}
