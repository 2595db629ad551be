package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Slots is a bounded counter that is exact under concurrency on MongoDB
// and on FerretDB 1.24, whose $inc, conditional updates and filtered
// deletes read, then write by _id, and so lose or undo each other's
// writes under load. It follows pkg/lease's insert-only pattern: slot i
// of a key is a series of records <key>#<i>#<epoch>; a take reads the
// latest record of each slot and, for one that expired or was reset,
// inserts the next epoch, which of any number of racing takers only one
// inserts (the insert of a new _id is atomic on both stores). The latest
// record of a slot is never deleted or changed, so a live slot cannot be
// freed by a stale delete; a slot expires after TTL, so the counter is a
// sliding window (failed logins, code attempts).
type Slots struct {
	C   *mongo.Collection
	Max int
	TTL time.Duration
}

// slotRec is one take (or reset) of a slot. Other documents may share the
// collection: slot records carry the field slots.
type slotRec struct {
	ID        string    `bson:"_id"`
	Key       string    `bson:"slots"`
	Slot      int       `bson:"slot"`
	Epoch     int64     `bson:"epoch"`
	ExpiresAt time.Time `bson:"expires_at"`
	Reset     bool      `bson:"reset,omitempty"`
}

// The padding makes _id order epoch order within a slot.
func slotPrefix(key string, slot int) string { return fmt.Sprintf("%s#%04d#", key, slot) }
func slotID(key string, slot int, epoch int64) string {
	return fmt.Sprintf("%s%019d", slotPrefix(key, slot), epoch)
}

// slotRange selects records whose _id starts with prefix (':' follows
// the digits); the slots field drops keys that merely start with key.
func slotRange(key, prefix string) bson.D {
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: prefix}, {Key: "$lt", Value: prefix + ":"}}}, {Key: "slots", Value: key}}
}

func (r *slotRec) live(now time.Time) bool { return r != nil && !r.Reset && now.Before(r.ExpiresAt) }

// latest returns the latest record of each slot of key (index 0 is slot
// 1), nil for a slot never taken.
func (s Slots) latest(ctx context.Context, key string) ([]*slotRec, error) {
	cur, err := s.C.Find(ctx, slotRange(key, key+"#"))
	if err != nil {
		return nil, Wrap(err)
	}
	var recs []slotRec
	if err := cur.All(ctx, &recs); err != nil {
		return nil, Wrap(err)
	}
	out := make([]*slotRec, s.Max)
	for i := range recs {
		r := &recs[i]
		if r.Slot < 1 || r.Slot > s.Max {
			continue // a slot of a larger Max earlier: ignored
		}
		if p := out[r.Slot-1]; p == nil || r.Epoch > p.Epoch {
			out[r.Slot-1] = r
		}
	}
	return out, nil
}

// latestOf returns the latest record of one slot.
func (s Slots) latestOf(ctx context.Context, key string, slot int) (*slotRec, error) {
	var r slotRec
	err := s.C.FindOne(ctx, slotRange(key, slotPrefix(key, slot)), options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}})).Decode(&r)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, Wrap(err)
	}
	return &r, nil
}

// Used is the number of live slots of key.
func (s Slots) Used(ctx context.Context, key string) (int, error) {
	recs, err := s.latest(ctx, key)
	if err != nil {
		return 0, err
	}
	n, now := 0, time.Now()
	for _, r := range recs {
		if r.live(now) {
			n++
		}
	}
	return n, nil
}

// next inserts the record after cur (the latest read) of slot and
// reports whether it is now the slot's latest. A duplicate means another
// take or reset wrote that epoch first. A taker that read before an older
// record was purged may insert a purged epoch: reading again it finds a
// later record, and did not take the slot.
func (s Slots) next(ctx context.Context, key string, slot int, cur *slotRec, rec slotRec) (bool, error) {
	rec.Key, rec.Slot, rec.Epoch = key, slot, 1
	if cur != nil {
		rec.Epoch = cur.Epoch + 1
	}
	rec.ID = slotID(key, slot, rec.Epoch)
	_, err := s.C.InsertOne(ctx, rec)
	if mongo.IsDuplicateKeyError(err) {
		return false, nil
	}
	if err != nil {
		return false, Wrap(err)
	}
	after, err := s.latestOf(ctx, key, slot)
	if err != nil {
		return false, err
	}
	if after == nil || after.Epoch != rec.Epoch {
		// Never the latest: no one else reads or writes it.
		_, _ = s.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: rec.ID}})
		return false, nil
	}
	// The record before is no longer needed, and is not the latest: by
	// _id alone (a delete that races a stale re-insert removes at worst
	// a record that never counted, as above).
	if rec.Epoch > 1 {
		_, _ = s.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: slotID(key, slot, rec.Epoch-1)}})
	}
	return true, nil
}

// Take counts one more for key and reports whether a slot was free (an
// expired or reset one counts as free).
func (s Slots) Take(ctx context.Context, key string) (bool, error) {
	// Twice: a slot that a reset wrote first is free all the same, and is
	// found free on a second read.
	for range 2 {
		recs, err := s.latest(ctx, key)
		if err != nil {
			return false, err
		}
		lost := false
		for i, cur := range recs {
			now := time.Now()
			if cur.live(now) {
				continue
			}
			ok, err := s.next(ctx, key, i+1, cur, slotRec{ExpiresAt: now.Add(s.TTL).UTC()})
			if ok || err != nil {
				return ok, err
			}
			lost = true
		}
		if !lost {
			break
		}
	}
	return false, nil
}

// Reset frees every slot of key: it writes a reset record after each
// live slot's latest. A take that wins a slot against the reset counts
// as taken after it.
func (s Slots) Reset(ctx context.Context, key string) error {
	recs, err := s.latest(ctx, key)
	if err != nil {
		return err
	}
	now := time.Now()
	for i, cur := range recs {
		if !cur.live(now) {
			continue
		}
		if _, err := s.next(ctx, key, i+1, cur, slotRec{ExpiresAt: now.UTC(), Reset: true}); err != nil {
			return err
		}
	}
	return nil
}
