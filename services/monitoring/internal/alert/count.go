package alert

import (
	"context"
	"errors"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Event is what an event counted on an alert writes there.
type Event struct {
	ID          string
	Description string
	OccurredAt  wire.Time
}

// Counted says what Count did.
type Counted int

const (
	CountedNow    Counted = iota // the event counts on the alert now
	CountedBefore                // an earlier try of it counted
	Closed                       // the alert takes no more events (resolved, deleted, being deleted)
)

// Count counts an event on the alert id in one conditional update: the
// alert's description, last event and count, the event's id appended to
// AppliedEvents, the version bumped; unless the alert is resolved or
// being deleted, or counted the event already. Many events of one key
// count at once without a retry: each is its own atomic update.
func (as *Alerts) Count(ctx context.Context, id string, ev Event) (Counted, error) {
	counted, err := as.count(ctx, id, []Event{ev})
	if err != nil || counted {
		return CountedNow, err
	}
	a, err := as.Load(ctx, id)
	switch {
	case errs.Is(err, errs.NotFoundCode):
		return Closed, nil
	case err != nil:
		return Closed, err
	case slices.Contains(a.AppliedEvents, ev.ID):
		return CountedBefore, nil
	}
	return Closed, nil
}

// CountMany counts the events evs, in their order, on the alert id in
// one conditional update, as Count does one: the last one's description
// and time stay. False (and nothing written) when the alert takes no
// more events or counted one of them already: the caller counts them
// one by one (Count), which tells which.
func (as *Alerts) CountMany(ctx context.Context, id string, evs []Event) (bool, error) {
	if len(evs) == 0 {
		return true, nil
	}
	return as.count(ctx, id, evs)
}

func (as *Alerts) count(ctx context.Context, id string, evs []Event) (bool, error) {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	last := evs[len(evs)-1]
	var out Alert
	err := as.c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: id}, {Key: "state", Value: bson.D{{Key: "$ne", Value: Resolved}}},
		{Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}, {Key: "applied_events", Value: bson.D{{Key: "$nin", Value: ids}}}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "description", Value: last.Description}, {Key: "last_event_id", Value: last.ID},
				{Key: "last_event_at", Value: last.OccurredAt}, {Key: "updated_at", Value: wire.T(as.clock.Now())}}},
			{Key: "$inc", Value: bson.D{{Key: "event_count", Value: int64(len(evs))}, {Key: store.VersionField, Value: int64(1)}}},
			{Key: "$push", Value: bson.D{{Key: "applied_events", Value: bson.D{{Key: "$each", Value: ids}}}}},
		}, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&out)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, store.Wrap(err)
	}
	// Trim the oldest ids now and then ($pullAll of the ones read: an id
	// appended meanwhile stays).
	if n := len(out.AppliedEvents); n > 2*RecentEvents {
		_, err := as.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$pullAll", Value: bson.D{{Key: "applied_events", Value: out.AppliedEvents[:n-RecentEvents]}}}})
		if err != nil {
			as.log.Warn("alert's applied events not trimmed; the next count tries again", "alert_id", id, "error", err.Error())
		}
	}
	return true, nil
}
