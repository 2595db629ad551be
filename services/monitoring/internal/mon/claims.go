package mon

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

// Claims are records keyed by _id that decide, across replicas and on
// FerretDB 1.24 as on MongoDB, what a unique index or a transaction would
// decide elsewhere: who holds a name, which policy is a scope's default.
// Only the insert of a new _id and a delete by _id are atomic on both
// stores (docs/decisions.md "Storage"), so a name is taken by inserting
// its claim, and a change that must not interleave with another (the
// default of a scope) runs under a lease (Lock) in this collection.
type Claims struct{ C *mongo.Collection }

// StaleClaim is how old a claim must be before its owner's absence frees
// it: a request that died between taking a name and storing its record
// must not hold the name for ever, and a live one stores within seconds.
const StaleClaim = time.Minute

type claim struct {
	ID        string    `bson:"_id"`
	Owner     string    `bson:"owner"`
	UpdatedAt time.Time `bson:"updated_at"`
}

// Take claims key for owner. It reports false when another owner holds
// it. exists tells whether a holder's record is still there: a stale claim
// of a vanished owner is taken over.
func (c Claims) Take(ctx context.Context, key, owner string, exists func(ctx context.Context, owner string) (bool, error)) (bool, error) {
	for range 2 {
		_, err := c.C.InsertOne(ctx, claim{ID: key, Owner: owner, UpdatedAt: time.Now().UTC()})
		if err == nil {
			return true, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return false, store.Wrap(err)
		}
		held, err := c.Get(ctx, key)
		if err != nil || held == nil {
			if err != nil {
				return false, err
			}
			continue // released meanwhile
		}
		if held.Owner == owner {
			return true, nil
		}
		if time.Since(held.UpdatedAt) < StaleClaim {
			return false, nil
		}
		live, err := exists(ctx, held.Owner)
		if err != nil || live {
			return false, err
		}
		if _, err := c.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: key}}); err != nil {
			return false, store.Wrap(err)
		}
	}
	return false, nil
}

// Get returns the claim of key, nil when there is none.
func (c Claims) Get(ctx context.Context, key string) (*claim, error) {
	var cl claim
	err := c.C.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&cl)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &cl, nil
}

// Owner returns who holds key, "" for nobody.
func (c Claims) Owner(ctx context.Context, key string) (string, error) {
	cl, err := c.Get(ctx, key)
	if err != nil || cl == nil {
		return "", err
	}
	return cl.Owner, nil
}

// Release frees key if owner holds it.
func (c Claims) Release(ctx context.Context, key, owner string) error {
	cl, err := c.Get(ctx, key)
	if err != nil || cl == nil || cl.Owner != owner {
		return err
	}
	_, err = c.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: key}})
	return store.Wrap(err)
}

// Set makes owner the holder of key whoever held it. Callers serialize
// Set and the reads it must not interleave with under Lock: a replace by
// _id is not atomic against a concurrent one on FerretDB.
func (c Claims) Set(ctx context.Context, key, owner string) error {
	_, err := c.C.ReplaceOne(ctx, bson.D{{Key: "_id", Value: key}}, claim{ID: key, Owner: owner, UpdatedAt: time.Now().UTC()},
		options.Replace().SetUpsert(true))
	return store.Wrap(err)
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
