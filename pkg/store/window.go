package store

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Window is a bounded counter over a window of time: at most Max takes
// of a key count from the first take until TTL after it, then the count
// starts again (failed logins, code attempts, a refresh token spent).
// Each key is one document, {n, expires_at}, changed by conditional
// $inc and $set only: exact under concurrency wherever one document
// changes atomically.
type Window struct {
	C   *mongo.Collection
	Max int
	TTL time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

type windowDoc struct {
	ID        string    `bson:"_id"`
	N         int       `bson:"n"`
	ExpiresAt time.Time `bson:"expires_at"`
}

func (w Window) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func windowID(key string) string { return "window:" + key }

// Take counts one more for key and reports whether it fit under Max.
func (w Window) Take(ctx context.Context, key string) (bool, error) {
	id := windowID(key)
	for range 3 {
		now := w.now().UTC()
		// Room in the window under way.
		res, err := w.C.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "expires_at", Value: bson.D{{Key: "$gt", Value: now}}},
			{Key: "n", Value: bson.D{{Key: "$lt", Value: w.Max}}}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
		if err != nil || res.MatchedCount == 1 {
			return err == nil, Wrap(err)
		}
		// The window has ended: this take begins the next one.
		res, err = w.C.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "expires_at", Value: bson.D{{Key: "$lte", Value: now}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: 1}, {Key: "expires_at", Value: now.Add(w.TTL)}}}})
		if err != nil || res.MatchedCount == 1 {
			return err == nil && w.Max > 0, Wrap(err)
		}
		// No window yet.
		ok, err := InsertOnce(ctx, w.C, windowDoc{ID: id, N: 1, ExpiresAt: now.Add(w.TTL)})
		if err != nil || ok {
			return ok && w.Max > 0, err
		}
		// Full, or another take created or restarted it in between.
		if n, err := w.Used(ctx, key); err != nil || n >= w.Max {
			return false, err
		}
	}
	return false, nil
}

// Used is how many takes of key count now.
func (w Window) Used(ctx context.Context, key string) (int, error) {
	var doc windowDoc
	err := w.C.FindOne(ctx, bson.D{{Key: "_id", Value: windowID(key)}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, Wrap(err)
	}
	if !doc.ExpiresAt.After(w.now()) {
		return 0, nil
	}
	return doc.N, nil
}

// Reset ends key's window: the next take counts from one.
func (w Window) Reset(ctx context.Context, key string) error {
	_, err := w.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: windowID(key)}})
	return Wrap(err)
}
