package projectdash

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
)

// locks serialize the writers of one dashboard across every replica.
//
// Why not a compare-and-set on the dashboard's version: FerretDB 1.24
// runs a conditional update as a read, then a write of the whole
// document, so two updates filtered on the same version may both match
// and the later write erases the earlier. The insert of a new _id is
// atomic on MongoDB and on FerretDB, so a lock is a document keyed by the
// dashboard id. The version snapshots are keyed the same way (one _id per
// version), so even a writer that outlived its lock can never take a
// version number another writer holds.
type locks struct {
	c    *mongo.Collection
	ttl  time.Duration // a lock older than this was left by a crashed writer
	wait time.Duration // how long a writer waits for a busy dashboard
}

type lockDoc struct {
	ID        string    `bson:"_id"`
	Owner     string    `bson:"owner"`
	ExpiresAt time.Time `bson:"expires_at"`
}

// with runs fn while holding the lock of dashboard id. A dashboard that
// stays busy longer than l.wait answers 503 (retry later).
func (l locks) with(ctx context.Context, id string, fn func() error) error {
	owner, err := l.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer l.release(ctx, id, owner)
	return fn()
}

func (l locks) acquire(ctx context.Context, id string) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	owner := hex.EncodeToString(b[:])
	deadline := time.Now().Add(l.wait)
	pause := time.Millisecond
	for {
		_, err := l.c.InsertOne(ctx, lockDoc{ID: id, Owner: owner, ExpiresAt: time.Now().Add(l.ttl)})
		if err == nil {
			return owner, nil
		}
		if !isDuplicate(err) {
			return "", store.Wrap(err)
		}
		if err := l.breakStale(ctx, id); err != nil {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", errs.Down("The dashboard", fmt.Errorf("dashboard %s stayed locked for %s", id, l.wait))
		}
		// Jittered, growing pauses: waiting writers do not retry in step.
		select {
		case <-ctx.Done():
			return "", errs.Down("The dashboard", ctx.Err())
		case <-time.After(pause + time.Duration(mrand.Int64N(int64(pause)))):
		}
		pause = min(2*pause, 40*time.Millisecond)
	}
}

// breakStale removes the lock of id when its holder let it expire.
func (l locks) breakStale(ctx context.Context, id string) error {
	var cur lockDoc
	err := l.c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&cur)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	if err != nil {
		return store.Wrap(err)
	}
	if time.Now().Before(cur.ExpiresAt) {
		return nil
	}
	_, err = l.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "owner", Value: cur.Owner}})
	return store.Wrap(err)
}

// release drops the lock if this writer still holds it, even when the
// request's context is already cancelled.
func (l locks) release(ctx context.Context, id, owner string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = l.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "owner", Value: owner}})
}

// isDuplicate reports a unique key conflict on MongoDB or FerretDB.
func isDuplicate(err error) bool {
	e, ok := errs.As(store.Wrap(err))
	return ok && e.Code == errs.SaveUniqueValues
}
