package inventory

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// cleanup is inventory's share of identity's deletes
// (events.ConsumeDeletions): a deleted workspace's collectors with their
// jobs and job tasks (as a collector's delete takes them), the jobs and
// tasks left in it, its cloud services, cloud service types and regions;
// a deleted project's cloud services. A user owns nothing here.
func cleanup(db *mongo.Database) events.Cleanup {
	c := db.Collection
	return func(ctx context.Context, d events.Deleted) error {
		owner := d.Owner()
		var names []string
		switch d.Kind {
		case events.DeletedWorkspace:
			if err := store.DeleteOwned(ctx, c(core.CollectorsCollection), owner,
				store.Child{Coll: c(core.JobTasksCollection), Field: "collector_id"}, store.Child{Coll: c(core.JobsCollection), Field: "collector_id"}); err != nil {
				return err
			}
			names = []string{core.JobTasksCollection, core.JobsCollection, core.CloudServicesCollection, core.CloudServiceTypesCollection, core.RegionsCollection}
		case events.DeletedProject:
			names = []string{core.CloudServicesCollection}
		}
		for _, name := range names {
			if err := store.DeleteOwned(ctx, c(name), owner); err != nil {
				return err
			}
		}
		return nil
	}
}
