package costanalysis

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/datasourcerule"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/job"
)

// cleanup is cost-analysis' share of a deleted workspace
// (events.ConsumeDeletions): its data sources go as a deregister takes
// them (marked first, so no sync starts; their jobs cancelled and
// forgotten with their tasks and costs; their rules), then whatever else
// the workspace owned: the rules, jobs, tasks and costs other data
// sources (the domain's) keep in it. A project or a user owns nothing
// here that outlives its workspace: a project's cost rows stay with
// their data source, as upstream keeps them.
func cleanup(db *mongo.Database, jobs *job.Jobs, rules *datasourcerule.Rules) events.Cleanup {
	return func(ctx context.Context, d events.Deleted) error {
		if d.Kind != events.DeletedWorkspace {
			return nil
		}
		owner := d.Owner()
		sources := db.Collection(core.DataSourcesCollection)
		if _, err := sources.UpdateMany(ctx, owner, bson.D{{Key: "$set", Value: bson.D{{Key: tenancy.MarkField, Value: true}}}}); err != nil {
			return store.Wrap(err)
		}
		cur, err := sources.Find(ctx, owner, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			return store.Wrap(err)
		}
		var ids []struct {
			ID string `bson:"_id"`
		}
		if err := cur.All(ctx, &ids); err != nil {
			return store.Wrap(err)
		}
		for _, ds := range ids {
			if err := jobs.Forget(ctx, ds.ID); err != nil {
				return err
			}
			if err := rules.DeleteAll(ctx, ds.ID); err != nil {
				return err
			}
			if _, err := sources.DeleteOne(ctx, bson.D{{Key: "_id", Value: ds.ID}}); err != nil {
				return store.Wrap(err)
			}
		}
		for _, name := range []string{core.RulesCollection, core.TasksCollection, core.JobsCollection, core.CostsCollection} {
			if err := store.DeleteOwned(ctx, db.Collection(name), owner); err != nil {
				return err
			}
		}
		return nil
	}
}
