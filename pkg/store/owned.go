package store

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Child is a collection whose documents name their parent's _id in
// Field (a dashboard's versions: project_dashboard_id).
type Child struct {
	Coll  *mongo.Collection
	Field string
}

// ownedBatch bounds the ids one pass of DeleteOwned reads.
const ownedBatch = 500

// DeleteOwned deletes the documents of c that owner selects (a deleted
// workspace's: domain_id and workspace_id) with their children, a page
// at a time: the children of a page first, then the page itself, so a
// run cut short leaves only parents whose children may remain, and a
// second run finishes it. It is safe to run again and again (a
// deletion delivered twice). Every delete goes through DeleteChildren.
func DeleteOwned(ctx context.Context, c *mongo.Collection, owner bson.D, children ...Child) error {
	if len(children) == 0 {
		return DeleteChildren(ctx, c, owner)
	}
	for {
		cur, err := c.Find(ctx, owner, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetLimit(ownedBatch))
		if err != nil {
			return Wrap(err)
		}
		var page []struct {
			ID any `bson:"_id"`
		}
		if err := cur.All(ctx, &page); err != nil {
			return Wrap(err)
		}
		if len(page) == 0 {
			return nil
		}
		ids := make([]any, len(page))
		for i, d := range page {
			ids[i] = d.ID
		}
		in := bson.D{{Key: "$in", Value: ids}}
		for _, ch := range children {
			if err := DeleteChildren(ctx, ch.Coll, bson.D{{Key: ch.Field, Value: in}}); err != nil {
				return err
			}
		}
		if err := DeleteChildren(ctx, c, bson.D{{Key: "_id", Value: in}}); err != nil {
			return err
		}
		if len(page) < ownedBatch {
			return nil
		}
	}
}
