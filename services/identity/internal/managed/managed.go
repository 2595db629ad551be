// Package managed keeps the records identity ships in every domain
// (upstream's managed providers and schemas) present in a domain's
// collection: each read of such a resource calls Sync first, which
// inserts the missing records and replaces those of an older version, at
// most once per Interval per domain and process, as upstream syncs its
// managed YAML lazily on list.
package managed

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Interval is how long a domain's managed records are taken as present
// after a sync (upstream: 300 s).
const Interval = 300 * time.Second

// Record is one managed record as stored: its _id, its version and the
// whole document (without created_at and updated_at, which Sync sets).
type Record struct {
	ID      string
	Version string
	Doc     bson.M
}

// Catalog is the managed records of one collection.
type Catalog struct {
	Coll    *mongo.Collection
	Records func(domainID string) []Record
	mu      sync.Mutex
	synced  map[string]time.Time
}

// Sync makes the domain's managed records present and current. Each write
// is one atomic operation on one document: an insert of a missing _id
// (a concurrent insert of the same is a duplicate, which is fine) or a
// replace conditional on the version read (compare-and-set), so two
// replicas syncing at once leave the same records.
func (c *Catalog) Sync(ctx context.Context, domainID string) error {
	c.mu.Lock()
	if t, ok := c.synced[domainID]; ok && time.Since(t) < Interval {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	recs := c.Records(domainID)
	ids := bson.A{}
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	cur, err := c.Coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "version", Value: 1}}))
	if err != nil {
		return store.Wrap(err)
	}
	var have []struct {
		ID      string `bson:"_id"`
		Version string `bson:"version"`
	}
	if err := cur.All(ctx, &have); err != nil {
		return store.Wrap(err)
	}
	stored := map[string]string{}
	for _, h := range have {
		stored[h.ID] = h.Version
	}
	now := wire.T(wire.Now())
	for _, r := range recs {
		doc := bson.M{}
		for k, v := range r.Doc {
			doc[k] = v
		}
		doc["_id"], doc["version"], doc["updated_at"] = r.ID, r.Version, now
		v, ok := stored[r.ID]
		switch {
		case !ok:
			doc["created_at"] = now
			if _, err := c.Coll.InsertOne(ctx, doc); err != nil && !mongo.IsDuplicateKeyError(err) {
				return store.Wrap(err)
			}
		case v != r.Version:
			var old struct {
				CreatedAt wire.Time `bson:"created_at"`
			}
			if err := c.Coll.FindOne(ctx, bson.D{{Key: "_id", Value: r.ID}}).Decode(&old); err == nil {
				doc["created_at"] = old.CreatedAt
			}
			if _, err := c.Coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: r.ID}, {Key: "version", Value: v}}, doc); err != nil {
				return store.Wrap(err)
			}
		}
	}
	c.mu.Lock()
	if c.synced == nil {
		c.synced = map[string]time.Time{}
	}
	c.synced[domainID] = time.Now()
	c.mu.Unlock()
	return nil
}
