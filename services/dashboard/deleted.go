package dashboard

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/dashboard/internal/projectdashboard"
)

// cleanup is the dashboard service's share of identity's deletes
// (events.ConsumeDeletions), each dashboard with its versions: a
// deleted user's PRIVATE dashboards (a PUBLIC one has no user_id), a
// deleted workspace's or project's dashboards.
// DeadLettersCollection keeps the messages its consumers gave up on
// (events.DeadRecords).
const DeadLettersCollection = "dashboard_dead_letters"

func cleanup(db *mongo.Database) events.Cleanup {
	return func(ctx context.Context, d events.Deleted) error {
		return store.DeleteOwned(ctx, db.Collection(projectdashboard.DashboardsCollection), d.Owner(),
			store.Child{Coll: db.Collection(projectdashboard.VersionsCollection), Field: "project_dashboard_id"})
	}
}
