package store

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

// The one way to do each of the writes that must not interleave, each
// relying on nothing but MongoDB's promise that one document changes
// atomically (the embedded store keeps it: pkg/devinfra/serialwrites):
//
//	Next       an atomic counter: findOneAndUpdate with $inc, upserted
//	           (NextN: n values in one)
//	Change     read, edit the typed value, write what changed if nobody
//	           wrote since (a version); effects follow from before/after
//	InsertOnce an upsert-once record: the first insert of an _id wins
//	Inc        an atomic $inc of a count

// VersionField is the field Change compares and bumps on every write it
// makes; a document that never had it is at version 0.
const VersionField = "version"

// Next adds one to the counter id of c (created at 0) and returns its
// new value: unique and increasing across every caller.
func Next(ctx context.Context, c *mongo.Collection, id string) (int64, error) {
	return NextN(ctx, c, id, 1)
}

// NextN takes n values of the counter id at once, in one increment, and
// returns the last: the caller's are last-n+1 to last.
func NextN(ctx context.Context, c *mongo.Collection, id string, n int64) (int64, error) {
	var doc struct {
		N int64 `bson:"n"`
	}
	// MongoDB may refuse one of two upserts racing to create the counter
	// (duplicate key); the second try finds it.
	for try := 0; ; try++ {
		err := c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: n}}}},
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&doc)
		if mongo.IsDuplicateKeyError(err) && try < 2 {
			continue
		}
		if err != nil {
			return 0, Wrap(err)
		}
		return doc.N, nil
	}
}

// Inc adds by to the numeric field of the document id (a missing field
// counts from 0); a missing document is left missing.
func Inc(ctx context.Context, c *mongo.Collection, id, field string, by int64) error {
	_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$inc", Value: bson.D{{Key: field, Value: by}}}})
	return Wrap(err)
}

// InsertOnce inserts doc unless a document with its _id exists, and
// reports whether this call inserted it.
func InsertOnce(ctx context.Context, c *mongo.Collection, doc any) (bool, error) {
	_, err := c.InsertOne(ctx, doc)
	if mongo.IsDuplicateKeyError(err) {
		return false, nil
	}
	if err != nil {
		return false, Wrap(err)
	}
	return true, nil
}

// Upsert sets set on the document id of c and, when there is none,
// inserts doc's other fields with it: one write of one document, so a
// worker that makes the same record twice (a rerun, a racing replica)
// changes it in place. doc's fields named in set are taken from set. A
// duplicate key on the insert of a racing upsert is tried once more
// (then it is an update); a duplicate key of another unique index is
// answered. The error is the driver's, unwrapped, so that the caller can
// tell that one (mongo.IsDuplicateKeyError) before it Wraps.
func Upsert(ctx context.Context, c *mongo.Collection, id string, set bson.D, doc any) error {
	raw, err := bson.Marshal(doc)
	if err != nil {
		return err
	}
	var all bson.D
	if err := bson.Unmarshal(raw, &all); err != nil {
		return err
	}
	named := map[string]bool{"_id": true}
	for _, e := range set {
		named[e.Key] = true
	}
	onInsert := bson.D{}
	for _, e := range all {
		if !named[e.Key] {
			onInsert = append(onInsert, e)
		}
	}
	update := bson.D{{Key: "$set", Value: set}, {Key: "$setOnInsert", Value: onInsert}}
	for try := 0; ; try++ {
		_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update, options.UpdateOne().SetUpsert(true))
		if mongo.IsDuplicateKeyError(err) && try < 1 {
			continue
		}
		return err
	}
}

// ErrConflict is what Change gives up with after maxChangeTries: the
// document kept being written by others between its read and its write.
var ErrConflict = errors.New("the record kept being changed by other requests")

// maxChangeTries bounds Change's read-decide-write rounds; each lost
// round means another writer won, so the bound is only reached under a
// storm of writes to one record.
const maxChangeTries = 50

// Changed is a document before and after a Change: effects that follow
// a change (a mail, the next step of a pipeline) are decided from the
// two, after the write, never inside fn.
type Changed[T any] struct {
	Before, After *T
	// Wrote is false when fn changed nothing: no write was made.
	Wrote bool
}

// Change runs fn on the document id as stored; fn edits the typed value
// and nothing else (it may run more than once, each time on a fresh
// read) and may refuse with an error. The kit writes what fn changed:
// each top-level field whose value differs from the read ($set, $unset
// for one fn emptied away), together with stamp's fields when there is
// a change (an updated_at), only if the document was not written since
// it was read (VersionField, bumped by the write); otherwise it reads
// again and runs fn again. A missing document, or one whose delete has
// begun (a mark of store.Teardown), is 404 (key = id). The mark and the
// version are never written by fn.
func Change[T any](ctx context.Context, c *mongo.Collection, key, id string, fn func(doc *T) error, stamp ...bson.E) (Changed[T], error) {
	return ChangeBy(ctx, c, VersionField, key, id, fn, stamp...)
}

// ChangeBy is Change comparing and bumping versionField instead of
// VersionField: for a record whose version is an API field of its own
// (a dashboard's content number), the writes are counted apart.
func ChangeBy[T any](ctx context.Context, c *mongo.Collection, versionField, key, id string, fn func(doc *T) error, stamp ...bson.E) (Changed[T], error) {
	for try := 0; try < maxChangeTries; try++ {
		doc, raw, err := getLive[T](ctx, c, key, id)
		if err != nil {
			return Changed[T]{}, err
		}
		var before T
		if err := bson.Unmarshal(raw, &before); err != nil {
			return Changed[T]{}, err
		}
		if err := fn(doc); err != nil {
			return Changed[T]{}, err
		}
		update, err := diff(&before, doc, versionField)
		if err != nil {
			return Changed[T]{}, err
		}
		if len(update) == 0 {
			return Changed[T]{Before: &before, After: doc}, nil
		}
		update = withStamp(update, stamp)
		update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: versionField, Value: int64(1)}}})
		var out T
		err = c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: id}, versionAt(versionField, versionOf(raw, versionField)), {Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}},
			update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&out)
		if errors.Is(err, mongo.ErrNoDocuments) {
			// Another write came first (or a delete began): decide again
			// from what it left, after a pause that grows with the tries.
			if err := Pause(ctx, try); err != nil {
				return Changed[T]{}, err
			}
			continue
		}
		if err != nil {
			return Changed[T]{}, Wrap(err)
		}
		return Changed[T]{Before: &before, After: &out, Wrote: true}, nil
	}
	return Changed[T]{}, errs.Down("the record "+id, ErrConflict)
}

func versionOf(raw bson.Raw, field string) int64 {
	v, err := raw.LookupErr(field)
	if err != nil {
		return 0
	}
	n, _ := v.AsInt64OK()
	return n
}

// versionAt selects the document whose field is at version v; version 0
// is also a document that has no version yet.
func versionAt(field string, v int64) bson.E {
	if v == 0 {
		return bson.E{Key: field, Value: bson.D{{Key: "$in", Value: bson.A{nil, int64(0), int32(0)}}}}
	}
	return bson.E{Key: field, Value: v}
}

// Pause waits a little before another try of a lost race, so that
// writers of one record stop colliding: half a millisecond a try, 10 ms
// at most; none before the first.
func Pause(ctx context.Context, try int) error {
	if try == 0 {
		return ctx.Err()
	}
	return Sleep(ctx, time.Duration(min(try, 20))*time.Millisecond/2)
}

// Sleep waits d, or less when ctx is done first (its error then).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
