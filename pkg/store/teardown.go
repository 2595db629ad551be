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
//  3. the record is deleted, last.
//
// A teardown that fails half-way leaves the mark: the record stays out of
// every read, and a retry of the delete finds the marked record and
// finishes the work (it answers 404 only once the record is gone).
//
// The mark must survive the record's other writers. FerretDB applies an
// update by reading the document and writing it back whole by _id, so an
// update that read the record just before the mark writes it back
// without it, even one that $sets other fields only. Every write to such
// a record therefore goes through Change or Live, which hold Lock (the
// lease the mark is written under), read the record again inside it and
// refuse a marked one; so does every create of a child (a collector's
// job), which otherwise lands after the children were deleted.
//
// A lease can be lost while its holder still runs: a holder starved past
// the TTL (a loaded machine, a stalled store) writes after the delete
// took the lease over and wrote the mark, and erases it as above. So the
// writes made under Lock (the mark, the $set of Change and Live, and
// Live's child creates) go through Fence, which refuses (503) unless the lease is held well
// beyond the write and ends the write before the lease can end. The
// children and the record are deleted after the mark, outside the lease:
// every writer refuses a marked record, so none can follow them.
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
	// A concurrent retry may have deleted it already: the work is done.
	if _, err := t.Records.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
		return nil, Wrap(err)
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
// fn writes through w only: w.Set $sets fields of the record, w.Do runs
// a child's create; each is fenced as Change's write is, so a holder
// starved past the lease's TTL creates no child after the delete's mark
// (its children step would miss it) and writes nothing over the mark.
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
		return fn(ctx, doc)
	})
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
		return errs.Down("The store", fmt.Errorf("injected fault: deleting from %s", c.Name()))
	}
	_, err := c.DeleteMany(ctx, filter)
	return Wrap(err)
}

var childFaults sync.Map // collection name -> struct{}

// FailChildDeletes makes every DeleteChildren on the collection named
// name fail (503) until restore is called: for tests of a delete that
// fails half-way.
func FailChildDeletes(name string) (restore func()) {
	childFaults.Store(name, struct{}{})
	return func() { childFaults.Delete(name) }
}
