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
type Teardown[T any] struct {
	Records  *mongo.Collection
	Resource query.Resource // its Tenancy.Marks must be set
	Key      string         // the id's name in a 404 ("collector_id")
	// Check refuses a record the caller may not delete beyond the
	// tenancy rule (a private dashboard of another user); optional.
	Check func(doc *T) error
	// Lock holds, while the mark is written, the lease the record's other
	// writers hold while they write: FerretDB writes an update back whole,
	// so a concurrent writer that read the record before the mark would
	// drop it. Optional.
	Lock func(ctx context.Context, id string, fn func(ctx context.Context) error) error
	// Children deletes the record's children; it runs again on a retry.
	Children func(ctx context.Context, doc *T) error
}

// Delete deletes the record id that p may change, and its children, and
// returns the record as it was loaded.
func (t Teardown[T]) Delete(ctx context.Context, p *auth.Principal, id string) (*T, error) {
	if !t.Resource.Tenancy.Marks {
		return nil, fmt.Errorf("teardown of %s: the resource declares no marks", t.Records.Name())
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
	if t.Lock == nil {
		return set(ctx)
	}
	return t.Lock(ctx, id, set)
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
