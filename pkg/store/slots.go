package store

import (
	"context"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Slots is a bounded counter that is exact under concurrency on MongoDB
// and on FerretDB 1.24, whose $inc and conditional updates read then write
// and lose updates under load. Each count is the insert of a new _id
// ("<key>#<n>"), which both stores do atomically; a slot expires after its
// ttl, so the counter is a sliding window (failed logins, code attempts).
type Slots struct {
	C   *mongo.Collection
	Max int
	TTL time.Duration
}

type slotDoc struct {
	ID        string    `bson:"_id"`
	ExpiresAt time.Time `bson:"expires_at"`
}

func (s Slots) ids(key string) bson.A {
	ids := make(bson.A, s.Max)
	for i := range s.Max {
		ids[i] = key + "#" + strconv.Itoa(i+1)
	}
	return ids
}

// Used is the number of live slots of key.
func (s Slots) Used(ctx context.Context, key string) (int, error) {
	cur, err := s.C.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: s.ids(key)}}}})
	if err != nil {
		return 0, Wrap(err)
	}
	var docs []slotDoc
	if err := cur.All(ctx, &docs); err != nil {
		return 0, Wrap(err)
	}
	n, now := 0, time.Now()
	for _, d := range docs {
		if now.Before(d.ExpiresAt) {
			n++
		}
	}
	return n, nil
}

// Take counts one more for key and reports whether a slot was free.
// Expired slots are freed first.
func (s Slots) Take(ctx context.Context, key string) (bool, error) {
	now := time.Now()
	if _, err := s.C.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: s.ids(key)}}},
		{Key: "expires_at", Value: bson.D{{Key: "$lte", Value: now}}}}); err != nil {
		return false, Wrap(err)
	}
	for _, id := range s.ids(key) {
		_, err := s.C.InsertOne(ctx, slotDoc{ID: id.(string), ExpiresAt: now.Add(s.TTL)})
		if err == nil {
			return true, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return false, Wrap(err)
		}
	}
	return false, nil
}

// Reset frees every slot of key.
func (s Slots) Reset(ctx context.Context, key string) error {
	_, err := s.C.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: s.ids(key)}}}})
	return Wrap(err)
}
