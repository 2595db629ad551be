package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

// Teardown deletes a record with children, MongoDB's way: with no
// multi-document transaction, the record itself says that its delete has
// begun, and each step changes one document atomically.
//
//  1. the record is marked (tenancy.MarkField, one $set): from then on
//     GetFor, GetToChange, SearchFor, Scope, stat.RunFor, analyze.RunFor
//     and GetLive leave it out (its resource declares Tenancy.Marks), and
//     Change and Writes.Set refuse it (their filter asks for no mark);
//  2. its children are deleted (Children, each step safe to run again);
//  3. the record is deleted.
//
// A teardown that fails half-way leaves the record (marked): it stays
// out of every read, and a retry of the delete finds it and finishes the
// work (it answers 404 only once the record is gone).
//
// A child is created through Live: it checks the record live, inserts
// the child (Writes.Create), then checks the record again, and removes
// its own child and answers 404 if the record was marked or gone (or
// deleted and created again) meanwhile. That is enough on MongoDB's
// promise alone: a second check that finds the record live and unmarked
// came before the mark, so the insert did too, and step 2, after the
// mark, deletes the child; a second check that does not find it removes
// the child itself. A $set of other fields never drops the mark (only a
// whole-document replace would: no writer of a torn-down record replaces
// it). The one child left behind is one whose own removal failed (the
// store down at that moment): the create answers 503 then.
type Teardown[T any] struct {
	Records  *mongo.Collection
	Resource query.Resource // its Tenancy.Marks must be set
	Key      string         // the id's name in a 404 ("collector_id")
	// Check refuses a record the caller may not delete beyond the
	// tenancy rule (a private dashboard of another user); optional.
	Check func(doc *T) error
	// Children deletes the record's children; it runs again on a retry.
	Children func(ctx context.Context, doc *T) error
}

// Delete deletes the record id that p may change, and its children, and
// returns the record as it was loaded.
func (t Teardown[T]) Delete(ctx context.Context, p *auth.Principal, id string) (*T, error) {
	if err := t.declared(); err != nil {
		return nil, err
	}
	doc, rec, err := loadFor[T](ctx, t.Records, t.Resource, p, t.Key, id, finish)
	if err != nil {
		return nil, err
	}
	if t.Check != nil {
		if err := t.Check(doc); err != nil {
			return nil, err
		}
	}
	if !rec.Marked {
		res, err := t.Records.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: tenancy.MarkField, Value: true}}}})
		if err != nil {
			return nil, Wrap(err)
		}
		if res.MatchedCount == 0 {
			return nil, errs.NotFound(t.Key, id)
		}
	}
	if t.Children != nil {
		if err := t.Children(ctx, doc); err != nil {
			return nil, err
		}
	}
	// A concurrent retry may have deleted it already: the work is done.
	if _, err := t.Records.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
		return nil, Wrap(err)
	}
	return doc, nil
}

func (t Teardown[T]) declared() error {
	if !t.Resource.Tenancy.Marks {
		return fmt.Errorf("teardown of %s: the resource declares no marks", t.Records.Name())
	}
	return nil
}

// Change is the update of a record that p may change (a marked one is
// 404, as for GetToChange): fn edits the record as stored, and what it
// changed is written only if nobody wrote the record since it was read
// (store.Change: a compare-and-set on its version, fn run again on the
// record as the other writer left it). fn may refuse (its error is
// returned); no change means no write. fn may run more than once, so it
// only edits. The mark is never written: only Delete writes it. It
// returns the record as written.
func (t Teardown[T]) Change(ctx context.Context, p *auth.Principal, id string, fn func(ctx context.Context, doc *T) error, stamp ...bson.E) (*T, error) {
	if err := t.declared(); err != nil {
		return nil, err
	}
	if _, _, err := loadFor[T](ctx, t.Records, t.Resource, p, t.Key, id, change); err != nil {
		return nil, err
	}
	ch, err := Change(ctx, t.Records, t.Key, id, func(doc *T) error { return fn(ctx, doc) }, stamp...)
	return ch.After, err
}

// Live runs fn on the record as stored, unless its delete has begun (404,
// as GetLive): the service's own writes that go by no caller (a
// worker's, a scheduler's) and the creates of the record's children. fn
// writes the record through w.Set and creates children through
// w.Create; after fn, Live checks the record again when fn created any,
// and undoes those creates and answers 404 if the record is no longer
// the live one fn saw.
func (t Teardown[T]) Live(ctx context.Context, id string, fn func(ctx context.Context, doc *T, w *Writes[T]) error) error {
	if err := t.declared(); err != nil {
		return err
	}
	raw, doc, err := t.live(ctx, id)
	if err != nil {
		return err
	}
	w := &Writes[T]{t: t, id: id, born: born(raw)}
	err = fn(ctx, doc, w)
	if len(w.undo) == 0 {
		return err
	}
	// The check and the undo run even when the caller has gone: a child
	// that outlived its record would stay for good.
	ctx = context.WithoutCancel(ctx)
	raw, _, cerr := t.live(ctx, id)
	if cerr == nil && !bytes.Equal(born(raw), w.born) {
		cerr = errs.NotFound(t.Key, id) // deleted and created again
	}
	if !errs.Is(cerr, errs.NotFoundCode) {
		// Live (a later delete's step 2 takes the children), or unknown:
		// the store did not answer (503).
		if err != nil {
			return err
		}
		return cerr
	}
	// Its delete began: the creates go.
	for _, undo := range slices.Backward(w.undo) {
		if uerr := undo(ctx); uerr != nil {
			// The child may outlive its record: said, never hidden.
			return errs.Down("the undo of a create in "+id, uerr)
		}
	}
	if err != nil {
		return err
	}
	return cerr
}

func (t Teardown[T]) live(ctx context.Context, id string) (bson.Raw, *T, error) {
	raw, err := t.Records.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && tenancy.IsMarked(raw)) {
		return nil, nil, errs.NotFound(t.Key, id)
	}
	if err != nil {
		return nil, nil, Wrap(err)
	}
	var doc T
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, nil, err
	}
	return raw, &doc, nil
}

// BornField tells one life of a record from the next under the same _id
// (a user deleted and created again): Live's second check asks for the
// value it first read.
const BornField = "created_at"

func born(raw bson.Raw) []byte {
	v, err := raw.LookupErr(BornField)
	if err != nil {
		return nil
	}
	return v.Value
}

func (t Teardown[T]) unmarked(set bson.D) error {
	for _, f := range set {
		if f.Key == tenancy.MarkField {
			return fmt.Errorf("update of %s: only the delete writes %s", t.Records.Name(), tenancy.MarkField)
		}
	}
	return nil
}

// Writes are the writes of a Live's fn.
type Writes[T any] struct {
	t    Teardown[T]
	id   string
	born []byte
	undo []func(ctx context.Context) error
}

// Set $sets fields of the record, unless its delete has begun (404), and
// returns it as stored afterwards. It bumps the record's version, so a
// Change that read the record before decides again.
func (w *Writes[T]) Set(ctx context.Context, fields bson.D) (*T, error) {
	if err := w.t.unmarked(fields); err != nil {
		return nil, err
	}
	var out T
	err := w.t.Records.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: w.id}, {Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}},
		bson.D{{Key: "$set", Value: fields}, {Key: "$inc", Value: bson.D{{Key: VersionField, Value: int64(1)}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&out)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errs.NotFound(w.t.Key, w.id)
	}
	if err != nil {
		return nil, Wrap(err)
	}
	return &out, nil
}

// Create runs create (a child's insert) and, once it succeeded,
// remembers undo (the delete of that child), which Live runs if the
// record's delete began meanwhile. undo must be safe to run when the
// child is gone already.
func (w *Writes[T]) Create(ctx context.Context, create, undo func(ctx context.Context) error) error {
	if err := create(ctx); err != nil {
		return err
	}
	w.undo = append(w.undo, undo)
	return nil
}

// GetLive is Get for a service's own reads that go by no caller (a
// worker, an ingest URL, a parent checked on a child's create): a record
// whose delete has begun answers 404, as a missing one.
func GetLive[T any](ctx context.Context, c *mongo.Collection, key, id string) (*T, error) {
	doc, _, err := getLive[T](ctx, c, key, id)
	return doc, err
}

// getLive is GetLive with the document as stored (Change reads its
// version there).
func getLive[T any](ctx context.Context, c *mongo.Collection, key, id string) (*T, bson.Raw, error) {
	raw, err := c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && tenancy.IsMarked(raw)) {
		return nil, nil, errs.NotFound(key, id)
	}
	if err != nil {
		return nil, nil, Wrap(err)
	}
	var doc T
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, nil, err
	}
	return &doc, raw, nil
}

// DeleteChildren deletes the documents of c that filter selects: a step
// of a Teardown's Children. Every child delete goes through it, so a test
// can make one fail (FailChildDeletes).
func DeleteChildren(ctx context.Context, c *mongo.Collection, filter bson.D) error {
	if _, ok := childFaults.Load(c.Name()); ok {
		return errs.Down("The store", fmt.Errorf("%w: deleting from %s", ErrChildDeleteFault, c.Name()))
	}
	_, err := c.DeleteMany(ctx, filter)
	return Wrap(err)
}

var childFaults sync.Map // collection name -> struct{}

// ErrChildDeleteFault is the cause of a child delete that
// FailChildDeletes failed, so a test can tell that 503 from a store
// timeout's.
var ErrChildDeleteFault = errors.New("injected fault")

// FailChildDeletes makes every DeleteChildren on the collection named
// name fail (503) until restore is called: for tests of a delete that
// fails half-way.
func FailChildDeletes(name string) (restore func()) {
	childFaults.Store(name, struct{}{})
	return func() { childFaults.Delete(name) }
}
