package alert

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
)

// An escalation step is taken by a write of the alert that records it
// (step, escalated_at, the next look) with its notice; the escalation
// then records the notice in its outbox and clears it. The first step
// is taken by the alert's insert itself (Begin), as upstream notifies at
// creation: a new alert costs the escalation no read and no
// compare-and-set, only the notice's recording and its clearing.

// Start is what a new alert's first escalation step needs: the first
// rule of its policy and whether its project notifies HIGH alerts only.
// Nil in Policy: the service does not escalate, and nothing is begun.
type Start struct {
	Level    string
	Minutes  int32
	HighOnly bool
}

// StepID is the id of the request announcing a step: the same step of
// the same round is the same request.
func StepID(alertID string, ttl, step int32) string {
	return fmt.Sprintf("notify-%s-r%d-s%d", alertID, ttl, step)
}

// Begin takes the first step of a new alert, not stored yet, as the
// escalation would take it at once (escalation's decide): an ERROR
// alert is announced once; an open one takes step 1 of its first rule,
// unless its project notifies HIGH alerts only and it is LOW, which ends
// its escalation. A nil s begins nothing.
func (a *Alert) Begin(s *Start, now time.Time) {
	switch {
	case s == nil || a.EscalationTTL <= 0 || a.EscalatedAt != nil:
	case a.State == Error:
		a.AnnounceError(s.Level, now)
	case !a.Open():
	case s.HighOnly && a.Urgency == Low:
		a.EscalationTTL = 0
	default:
		a.TakeStep(1, a.EscalationTTL, s.Level, s.Minutes, now)
	}
}

// TakeStep records step of round ttl, at level, taken now, and the next
// look after its wait of minutes, with its notice.
func (a *Alert) TakeStep(step, ttl int32, level string, minutes int32, now time.Time) {
	at := wire.T(now)
	// A step is due only once now is after its time: the look is a
	// millisecond later, or a pass at that time would find nothing due.
	next := wire.T(now.Add(time.Duration(minutes)*time.Minute + time.Millisecond))
	a.EscalationStep, a.EscalationTTL, a.EscalatedAt, a.EscalateAt = step, ttl, &at, &next
	a.Notice = &Notice{ID: StepID(a.AlertID, ttl, step), Level: level}
}

// AnnounceError records the one announcement of an ERROR alert (upstream
// announces one at its creation), with its notice.
func (a *Alert) AnnounceError(level string, now time.Time) {
	at := wire.T(now)
	a.EscalationStep, a.EscalatedAt = 1, &at
	a.Notice = &Notice{ID: StepID(a.AlertID, a.EscalationTTL, 1), Level: level}
}

// ClearNotices clears the pending notices of alerts once recorded, in
// one command (one update by _id each); a newer step's notice stays.
func (as *Alerts) ClearNotices(ctx context.Context, alerts []*Alert) error {
	if len(alerts) == 0 {
		return nil
	}
	unset := bson.D{{Key: "$unset", Value: bson.D{{Key: "notice", Value: ""}}}}
	clears := make([]mongo.WriteModel, len(alerts))
	for i, a := range alerts {
		clears[i] = mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: a.ID}, {Key: "notice.id", Value: a.Notice.ID}}).SetUpdate(unset)
	}
	_, err := as.c.BulkWrite(ctx, clears, options.BulkWrite().SetOrdered(false))
	return store.Wrap(err)
}
