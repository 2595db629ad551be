package monitoring

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// cleanup is monitoring's share of identity's deletes
// (events.ConsumeDeletions): everything of a deleted workspace or
// project goes, by owner keys: its webhooks (with their kept bodies and
// request counters), its alerts (with their notes, events and open-alert
// records), the notes and events left in it (an alert moved away leaves
// none, but older ones may), its escalation policies and alert configs.
// A user owns nothing here (an alert's assignee is a name, not an
// ownership). The ingest URL is refused before this runs (core.Projects
// Live).
func cleanup(db *mongo.Database, counters *core.Counters) events.Cleanup {
	c := db.Collection
	return func(ctx context.Context, d events.Deleted) error {
		if !d.Scoped() {
			return nil
		}
		owner := d.Owner()
		steps := []func() error{
			func() error {
				return store.DeleteOwned(ctx, c(core.WebhooksCollection), owner,
					store.Child{Coll: c(core.PendingCollection), Field: "webhook_id"}, store.Child{Coll: counters.C, Field: "_id"})
			},
			func() error {
				return store.DeleteOwned(ctx, c(core.AlertsCollection), owner,
					store.Child{Coll: c(core.NotesCollection), Field: "alert_id"}, store.Child{Coll: c(core.EventsCollection), Field: "alert_id"},
					store.Child{Coll: c(core.ClaimsCollection), Field: "alert_id"})
			},
		}
		for _, name := range []string{core.NotesCollection, core.EventsCollection, core.PoliciesCollection, core.ConfigsCollection} {
			steps = append(steps, func() error { return store.DeleteOwned(ctx, c(name), owner) })
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		return nil
	}
}
