package core

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/store"
)

// Claims decide, across replicas, who holds a name: one record per
// key, {_id: key, owner, updated_at}, taken by the insert of its _id
// (only one of racing takers inserts it), taken over by a
// compare-and-set on the owner read, released by a delete conditional
// on the owner. Each is one atomic write of one document, on MongoDB as
// on the embedded store. Set counts its changes (version), so records
// that follow a claim (a scope's default and its policies' flags) can
// refuse an older claim's numbers.
type Claims struct {
	C *mongo.Collection
	// Stale overrides StaleClaim (tests).
	Stale time.Duration
}

// StaleClaim is how old a claim must be before its owner's absence frees
// it: a request that died between taking a name and storing its record
// must not hold the name for ever, and a live one stores within seconds.
const StaleClaim = time.Minute

type claim struct {
	ID        string    `bson:"_id"`
	Key       string    `bson:"claim"`
	Owner     string    `bson:"owner"`
	UpdatedAt time.Time `bson:"updated_at"`
	Version   int64     `bson:"version"`
}

func claimID(key string) string { return "claim#" + key }

func (c Claims) stale() time.Duration {
	if c.Stale > 0 {
		return c.Stale
	}
	return StaleClaim
}

// Get returns the live claim of key, nil when there is none.
func (c Claims) Get(ctx context.Context, key string) (*claim, error) {
	var cl claim
	err := c.C.FindOne(ctx, bson.D{{Key: "_id", Value: claimID(key)}}).Decode(&cl)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &cl, nil
}

// Take claims key for owner. It reports false when another owner holds
// it. exists tells whether a holder's record is still there: a stale claim
// of a vanished owner is taken over.
func (c Claims) Take(ctx context.Context, key, owner string, exists func(ctx context.Context, owner string) (bool, error)) (bool, error) {
	for range 3 {
		ok, err := store.InsertOnce(ctx, c.C, claim{ID: claimID(key), Key: key, Owner: owner, UpdatedAt: time.Now().UTC()})
		if ok || err != nil {
			return ok, err
		}
		cur, err := c.Get(ctx, key)
		if err != nil {
			return false, err
		}
		if cur == nil {
			continue // released meanwhile
		}
		if cur.Owner == owner {
			return true, nil
		}
		if time.Since(cur.UpdatedAt) < c.stale() {
			return false, nil
		}
		if live, err := exists(ctx, cur.Owner); err != nil || live {
			return false, err
		}
		// Taken over from the owner read, unless another took it first.
		res, err := c.C.UpdateOne(ctx, bson.D{{Key: "_id", Value: cur.ID}, {Key: "owner", Value: cur.Owner}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: owner}, {Key: "updated_at", Value: time.Now().UTC()}}}})
		if err != nil {
			return false, store.Wrap(err)
		}
		return res.MatchedCount == 1, nil
	}
	return false, nil
}

// Owner returns who holds key, "" for nobody.
func (c Claims) Owner(ctx context.Context, key string) (string, error) {
	cl, err := c.Get(ctx, key)
	if err != nil || cl == nil {
		return "", err
	}
	return cl.Owner, nil
}

// Release frees key if owner holds it: a delete conditional on the
// owner, so a claim another took meanwhile stays.
func (c Claims) Release(ctx context.Context, key, owner string) error {
	_, err := c.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: claimID(key)}, {Key: "owner", Value: owner}})
	return store.Wrap(err)
}

// Set makes owner the holder of key whoever held it, in one atomic
// write that counts the change; it returns the holder before and the
// claim's new version.
func (c Claims) Set(ctx context.Context, key, owner string) (was string, version int64, err error) {
	for try := 0; ; try++ {
		var before claim
		err = c.C.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: claimID(key)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "claim", Value: key}, {Key: "owner", Value: owner}, {Key: "updated_at", Value: time.Now().UTC()}}},
				{Key: "$inc", Value: bson.D{{Key: "version", Value: int64(1)}}}},
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.Before)).Decode(&before)
		if mongo.IsDuplicateKeyError(err) && try < 2 {
			continue // two upserts raced to create it: the second try finds it
		}
		if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			return "", 0, store.Wrap(err)
		}
		return before.Owner, before.Version + 1, nil
	}
}

// Revert gives key back to was if owner still holds it (a Set whose
// reason vanished), counting the change; it reports the new version, 0
// when another holder came meanwhile.
func (c Claims) Revert(ctx context.Context, key, owner, was string) (int64, error) {
	var after claim
	err := c.C.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: claimID(key)}, {Key: "owner", Value: owner}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: was}, {Key: "updated_at", Value: time.Now().UTC()}}},
			{Key: "$inc", Value: bson.D{{Key: "version", Value: int64(1)}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&after)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	return after.Version, store.Wrap(err)
}
