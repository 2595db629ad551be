package notification

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/notification/internal/core"
)

// cleanup is notification's share of identity's deletes
// (events.ConsumeDeletions): a user's channels and inbox go, and the
// user leaves every project channel's data.users (the built-in
// protocol's audience); a workspace's or a project's channels go. Each
// step is a delete or a $pull by owner keys, so a redelivery does
// nothing new.
func cleanup(db *mongo.Database) events.Cleanup {
	return func(ctx context.Context, d events.Deleted) error {
		owner := d.Owner()
		if d.Scoped() {
			return store.DeleteOwned(ctx, db.Collection(core.ProjectChannelsCollection), owner)
		}
		for _, c := range []string{core.UserChannelsCollection, core.InboxCollection} {
			if err := store.DeleteOwned(ctx, db.Collection(c), owner); err != nil {
				return err
			}
		}
		// The version moves, so a channel update that read the old users
		// decides again (store.Change) and cannot put the user back.
		_, err := db.Collection(core.ProjectChannelsCollection).UpdateMany(ctx,
			bson.D{{Key: "domain_id", Value: d.DomainID}, {Key: "data.users", Value: d.UserID}},
			bson.D{{Key: "$pull", Value: bson.D{{Key: "data.users", Value: d.UserID}}},
				{Key: "$inc", Value: bson.D{{Key: store.VersionField, Value: int64(1)}}}})
		return store.Wrap(err)
	}
}
