package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

// Teardown deletes a record with children, mark first. FerretDB has no
// multi-document transaction, so the record itself says that its delete
// has begun:
//
//  1. the record is marked (tenancy.MarkField): from then on GetFor,
//     GetToChange, SearchFor, Scope, stat.RunFor, analyze.RunFor and
//     GetLive leave it out (its resource declares Tenancy.Marks), so no
//     service writes the filter itself;
//  2. its children are deleted (Children, each step safe to run again);
//  3. under Lock, Children runs once more and the record is deleted
//     last, by a fenced write.
//
// A teardown that fails half-way leaves the record (marked): it stays
// out of every read, and a retry of the delete finds it and finishes the
// work (it answers 404 only once the record is gone).
//
// Every create of a child goes through Live, which holds Lock, reads the
// record inside it and refuses a marked or missing one. Step 3 makes
// that enough even when the mark is lost: FerretDB applies an update by
// reading the document and writing it back whole by _id, so any writer
// of the record that read it just before the mark (one that $sets other
// fields only, outside Change and Live) writes it back without the mark,
// and a Live create then finds the record live after step 2. Such a
// create is serialised by Lock with step 3: before it (and step 3's
// Children deletes the child) or after it (no record: 404). The record
// is deleted under the same holding as that last Children, so a failure
// there leaves the record for a retry, never a child without one. (A
// second pass after the record's delete would leave the child for good
// when it failed: the retry answers 404.) A lost mark costs only
// visibility: the record shows again in reads until the delete, or its
// retry, ends. Writers that go through Change and Live keep the mark
// (they read the record again under Lock), so a resource whose writers
// all do never shows a marked record.
//
// A lease can be lost while its holder still runs: a holder starved past
// the TTL (a loaded machine, a stalled store) writes after the delete
// took the lease over. So the writes made under Lock (the mark, the
// record's delete, the $set of Change and Live, Live's child creates)
// go through Fence, which refuses (503) unless the lease is held well
// beyond the write and ends the write before the lease can end; and the
// context Change's and Live's fn get is fenced the same way for as long
// as fn runs (fenced), so a write fn makes on it directly, not through
// Writes, lands while the lease is held or not at all. fn must not write
// on a context of its own (its caller's): only the fenced one. Step 3's
// Children runs on the lease's context unfenced: a late child delete
// deletes a child of a record being deleted, and the record's delete,
// fenced, is refused then, so a retry runs it again.
type Teardown[T any] struct {
	Records  *mongo.Collection
	Resource query.Resource // its Tenancy.Marks must be set
	Key      string         // the id's name in a 404 ("collector_id")
	// Check refuses a record the caller may not delete beyond the
	// tenancy rule (a private dashboard of another user); optional.
	Check func(doc *T) error
	// Lock runs fn holding the record's lease (pkg/lease, a lease per
	// record id): the mark is written under it, and so is every Change
	// and Live. Required.
	Lock func(ctx context.Context, id string, fn func(ctx context.Context) error) error
	// Fence guards each write made under Lock (lease.Fencer): it answers
	// 503 unless the lease held in ctx lasts beyond the write, and
	// returns the context to write with, ended before the lease can be
	// lost. Required.
	Fence func(ctx context.Context) (context.Context, context.CancelFunc, error)
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
		if err := t.mark(ctx, id); err != nil {
			return nil, err
		}
	}
	if t.Children != nil {
		if err := t.Children(ctx, doc); err != nil {
			return nil, err
		}
	}
	if err := t.Lock(ctx, id, func(ctx context.Context) error {
		// Children created by a Live that found the record unmarked (its
		// mark written over) since the pass above: none after this one.
		if t.Children != nil {
			if err := t.Children(ctx, doc); err != nil {
				return err
			}
		}
		ctx, cancel, err := t.Fence(ctx)
		if err != nil {
			return err
		}
		defer cancel()
		// A concurrent retry may have deleted it already: the work is done.
		_, err = t.Records.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
		return Wrap(err)
	}); err != nil {
		return nil, err
	}
	return doc, nil
}

func (t Teardown[T]) mark(ctx context.Context, id string) error {
	set := func(ctx context.Context) error {
		ctx, cancel, err := t.Fence(ctx)
		if err != nil {
			return err
		}
		defer cancel()
		res, err := t.Records.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: tenancy.MarkField, Value: true}}}})
		if err != nil {
			return Wrap(err)
		}
		if res.MatchedCount == 0 {
			return errs.NotFound(t.Key, id)
		}
		return nil
	}
	return t.Lock(ctx, id, set)
}

func (t Teardown[T]) declared() error {
	if !t.Resource.Tenancy.Marks {
		return fmt.Errorf("teardown of %s: the resource declares no marks", t.Records.Name())
	}
	if t.Lock == nil {
		return fmt.Errorf("teardown of %s: no lock to write the mark under", t.Records.Name())
	}
	if t.Fence == nil {
		return fmt.Errorf("teardown of %s: no fence for the writes under its lock", t.Records.Name())
	}
	return nil
}

// Change is the update of a record that p may change: under Lock it
// loads the record again (a marked one is 404, as for GetToChange), asks
// fn for the fields to $set and writes them, and returns the record as
// stored afterwards. fn sees the record as the last writer left it and
// may refuse (its error is returned); no field set means no write. The
// mark is never among the fields: only Delete writes it.
func (t Teardown[T]) Change(ctx context.Context, p *auth.Principal, id string, fn func(ctx context.Context, doc *T) (bson.D, error)) (*T, error) {
	var out *T
	err := t.under(ctx, id, func(ctx context.Context) (*T, error) {
		doc, _, err := loadFor[T](ctx, t.Records, t.Resource, p, t.Key, id, change)
		return doc, err
	}, func(ctx context.Context, doc *T) error {
		set, err := fn(ctx, doc)
		if err != nil {
			return err
		}
		out, err = t.set(ctx, id, doc, set)
		return err
	})
	return out, err
}

// Live runs fn under Lock on the record as stored, unless its delete has
// begun (404, as GetLive): the service's own writes that go by no caller
// (a worker's, a scheduler's) and the creates of the record's children.
// fn writes through w (w.Set $sets fields of the record, w.Do runs a
// child's create, each fenced as Change's write is) or on the context it
// is given, which is fenced for as long as fn runs; never on another. A
// holder starved past the lease's TTL so creates no child after the
// delete's last Children (it would outlive the record) and writes
// nothing over the mark.
func (t Teardown[T]) Live(ctx context.Context, id string, fn func(ctx context.Context, doc *T, w Writes[T]) error) error {
	return t.under(ctx, id, func(ctx context.Context) (*T, error) {
		return GetLive[T](ctx, t.Records, t.Key, id)
	}, func(ctx context.Context, doc *T) error {
		return fn(ctx, doc, Writes[T]{t: t, ctx: ctx, id: id, doc: doc})
	})
}

// Writes are the writes of a Live's fn, each made through the
// Teardown's Fence under the record's lease.
type Writes[T any] struct {
	t   Teardown[T]
	ctx context.Context
	id  string
	doc *T
}

// Set $sets fields of the record and returns it as stored afterwards.
func (w Writes[T]) Set(fields bson.D) (*T, error) { return w.t.set(w.ctx, w.id, w.doc, fields) }

// Do runs write (a child's create, or several bounded writes) with the
// fenced context it is given, which ends before the lease can be lost:
// 503 (nothing run) unless the lease is held beyond it.
func (w Writes[T]) Do(write func(ctx context.Context) error) error {
	ctx, cancel, err := w.t.Fence(w.ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return write(ctx)
}

func (t Teardown[T]) under(ctx context.Context, id string, load func(ctx context.Context) (*T, error), fn func(ctx context.Context, doc *T) error) error {
	if err := t.declared(); err != nil {
		return err
	}
	// Refused early, without waiting for the lease, when already marked
	// or out of reach; decided again under it.
	if _, err := load(ctx); err != nil {
		return err
	}
	return t.Lock(ctx, id, func(ctx context.Context) error {
		doc, err := load(ctx)
		if err != nil {
			return err
		}
		return t.fenced(ctx, func(ctx context.Context) error { return fn(ctx, doc) })
	})
}

// fenced runs fn with a context whose every write is fenced as Fence's
// are: it starts from a window Fence grants and, each time that window
// ends, asks Fence for the next; at the first refusal (or the lease's
// context ending) it ends, with Fence's error as its cause. So fn's
// context lives only while the lease is held (a write on it lands then,
// or not at all) but is not cut at one window's length while the lease
// is renewed: fn may call a plugin or another service on it.
func (t Teardown[T]) fenced(ctx context.Context, fn func(ctx context.Context) error) error {
	window, cancel, err := t.Fence(ctx)
	if err != nil {
		return err
	}
	fctx, end := context.WithCancelCause(ctx)
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-done:
				cancel()
				return
			case <-window.Done():
			}
			cancel()
			if ctx.Err() != nil {
				end(context.Cause(ctx))
				return
			}
			next, nextCancel, refused := t.Fence(ctx)
			if refused != nil {
				end(refused)
				return
			}
			window, cancel = next, nextCancel
		}
	}()
	err = fn(fctx)
	close(done)
	<-watched
	end(nil)
	return err
}

func (t Teardown[T]) set(ctx context.Context, id string, doc *T, fields bson.D) (*T, error) {
	if len(fields) == 0 {
		return doc, nil
	}
	for _, f := range fields {
		if f.Key == tenancy.MarkField {
			return nil, fmt.Errorf("update of %s: only the delete writes %s", t.Records.Name(), tenancy.MarkField)
		}
	}
	ctx, cancel, err := t.Fence(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	return SetByID[T](ctx, t.Records, t.Key, id, fields)
}

// GetLive is Get for a service's own reads that go by no caller (a
// worker, an ingest URL, a parent checked on a child's create): a record
// whose delete has begun answers 404, as a missing one.
func GetLive[T any](ctx context.Context, c *mongo.Collection, key, id string) (*T, error) {
	raw, err := c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && tenancy.IsMarked(raw)) {
		return nil, errs.NotFound(key, id)
	}
	if err != nil {
		return nil, Wrap(err)
	}
	var doc T
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return &doc, nil
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
