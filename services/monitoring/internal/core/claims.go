package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/store"
)

// Claims are records that decide, across replicas and on FerretDB 1.24
// as on MongoDB, what a unique index or a transaction would decide
// elsewhere: who holds a name, which policy is a scope's default. Only
// the insert of a new _id is atomic on both stores (FerretDB's filtered
// deletes and conditional updates read, then write by _id), so claims
// follow pkg/lease's insert-only pattern: a key's claims are records
// <key>#<epoch>; a take reads the latest and, when it is free (released,
// or stale with its owner gone), inserts the next epoch, which of any
// number of racing takers only one inserts. A claim is changed only by
// its owner (a release marks it) and the latest claim of a key is never
// deleted, so a release or a takeover can never free a name another
// owner just took. A change that must not interleave with another (the
// default of a scope) runs under a lease (Lock) in this collection.
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
	Epoch     int64     `bson:"epoch"`
	Owner     string    `bson:"owner"`
	UpdatedAt time.Time `bson:"updated_at"`
	Released  bool      `bson:"released,omitempty"`
}

// claimID pads the epoch so that _id order is epoch order.
func claimID(key string, epoch int64) string { return fmt.Sprintf("%s#%019d", key, epoch) }

// ofKey selects the claims of key: the _id range keeps the query on the
// _id index, the claim field drops keys that merely start with key.
func ofKey(key string) bson.D {
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: key + "#"}, {Key: "$lt", Value: key + "#:"}}}, {Key: "claim", Value: key}}
}

func (c Claims) stale() time.Duration {
	if c.Stale > 0 {
		return c.Stale
	}
	return StaleClaim
}

// latest returns the claim of key with the largest epoch, nil for none.
func (c Claims) latest(ctx context.Context, key string) (*claim, error) {
	var cl claim
	err := c.C.FindOne(ctx, ofKey(key), options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}})).Decode(&cl)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &cl, nil
}

// next makes owner the holder of key after cur, the latest claim read,
// and reports whether it did: false when another wrote that epoch
// first, or when this insert re-created a purged epoch (a later claim
// exists).
func (c Claims) next(ctx context.Context, key, owner string, cur *claim) (bool, error) {
	epoch := int64(1)
	if cur != nil {
		epoch = cur.Epoch + 1
	}
	id := claimID(key, epoch)
	_, err := c.C.InsertOne(ctx, claim{ID: id, Key: key, Epoch: epoch, Owner: owner, UpdatedAt: time.Now().UTC()})
	if mongo.IsDuplicateKeyError(err) {
		return false, nil
	}
	if err != nil {
		return false, store.Wrap(err)
	}
	after, err := c.latest(ctx, key)
	if err != nil {
		return false, err
	}
	if after == nil || after.Epoch != epoch {
		_, _ = c.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}) // never the latest: never read
		return false, nil
	}
	// The claim before is not the latest any more: by _id alone.
	if epoch > 1 {
		_, _ = c.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: claimID(key, epoch-1)}})
	}
	return true, nil
}

// Take claims key for owner. It reports false when another owner holds
// it. exists tells whether a holder's record is still there: a stale claim
// of a vanished owner is taken over.
func (c Claims) Take(ctx context.Context, key, owner string, exists func(ctx context.Context, owner string) (bool, error)) (bool, error) {
	for range 3 {
		cur, err := c.latest(ctx, key)
		if err != nil {
			return false, err
		}
		if cur != nil && !cur.Released {
			if cur.Owner == owner {
				return true, nil
			}
			if time.Since(cur.UpdatedAt) < c.stale() {
				return false, nil
			}
			if live, err := exists(ctx, cur.Owner); err != nil || live {
				return false, err
			}
		}
		ok, err := c.next(ctx, key, owner, cur)
		if ok || err != nil {
			return ok, err
		}
		// Another wrote first: read again (it may have released since).
	}
	return false, nil
}

// Get returns the live claim of key, nil when there is none.
func (c Claims) Get(ctx context.Context, key string) (*claim, error) {
	cl, err := c.latest(ctx, key)
	if err != nil || cl == nil || cl.Released {
		return nil, err
	}
	return cl, nil
}

// Owner returns who holds key, "" for nobody.
func (c Claims) Owner(ctx context.Context, key string) (string, error) {
	cl, err := c.Get(ctx, key)
	if err != nil || cl == nil {
		return "", err
	}
	return cl.Owner, nil
}

// Release frees key if owner holds it. It marks the owner's own claim (by
// _id, which only its owner writes): a claim someone took after it is a
// later record, which the release leaves alone.
func (c Claims) Release(ctx context.Context, key, owner string) error {
	cl, err := c.Get(ctx, key)
	if err != nil || cl == nil || cl.Owner != owner {
		return err
	}
	_, err = c.C.UpdateOne(ctx, bson.D{{Key: "_id", Value: cl.ID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "released", Value: true}}}})
	return store.Wrap(err)
}

// Set makes owner the holder of key whoever held it. Callers serialize
// Set and the reads it must not interleave with under Lock.
func (c Claims) Set(ctx context.Context, key, owner string) error {
	for range 3 {
		cur, err := c.latest(ctx, key)
		if err != nil {
			return err
		}
		if cur != nil && !cur.Released && cur.Owner == owner {
			return nil
		}
		if ok, err := c.next(ctx, key, owner, cur); ok || err != nil {
			return err
		}
	}
	return errs.Down("the claim "+key, errors.New("kept being written by another request"))
}

// Lock runs fn holding the lease of key (lease.Run): at most one holder
// across replicas, renewed while fn runs; a holder that dies frees it
// after LockTTL.
func (c Claims) Lock(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	return lease.Run(ctx, c.C, "lock#"+key, LockTTL, LockWait, fn)
}

// Lease bounds of Lock.
const (
	LockTTL  = 15 * time.Second
	LockWait = 30 * time.Second
)
