package core

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/store"
)

// Claims decide, across replicas, who holds a name: one record per
// key, {_id: key, owner, updated_at}, taken by the insert of its _id
// (only one of racing takers inserts it), taken over by a
// compare-and-set on the owner read, released by a delete conditional
// on the owner. Each is one atomic write of one document, on MongoDB as
// on the embedded store. A change that must not interleave with another
// across several documents (a scope's default and its policies' flags)
// runs under a lease (Lock) in this collection.
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

// Set makes owner the holder of key whoever held it. Callers serialize
// Set and the reads it must not interleave with under Lock.
func (c Claims) Set(ctx context.Context, key, owner string) error {
	_, err := c.C.ReplaceOne(ctx, bson.D{{Key: "_id", Value: claimID(key)}}, claim{ID: claimID(key), Key: key, Owner: owner, UpdatedAt: time.Now().UTC()},
		options.Replace().SetUpsert(true))
	return store.Wrap(err)
}

// Lock runs fn holding the lease of key (lease.Run): at most one holder
// across replicas, renewed while fn runs; a holder that dies frees it
// after LockTTL. A lease because what fn keeps in step spans several
// documents, which MongoDB changes atomically only one at a time.
func (c Claims) Lock(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	return lease.Run(ctx, c.C, "lock#"+key, LockTTL, LockWait, fn)
}

// Lease bounds of Lock.
const (
	LockTTL  = 15 * time.Second
	LockWait = 30 * time.Second
)
