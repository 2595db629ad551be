package store_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestTeardownMarkKeptBySets: plain $sets of other fields (the writers of
// a record that go by neither Change nor Live: a login, a profile edit)
// racing a delete that fails after its mark never drop the mark, so the
// record stays out of every read until the retry finishes it. It holds
// on MongoDB's promise alone (one document changes atomically); on
// FerretDB without pkg/devinfra/serialwrites a $set wrote the document
// back as it read it, and the lease design of this teardown existed for
// that.
func TestTeardownMarkKeptBySets(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	ctx := context.Background()
	db := testkit.Get().Database(t)
	records := db.Collection("records")
	r := query.Resource{Tenancy: tenancy.InDomain.WithMarks()}
	admin := &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}
	td := store.Teardown[named]{Records: records, Resource: r, Key: "record_id",
		Children: func(ctx context.Context, doc *named) error {
			return store.DeleteChildren(ctx, db.Collection("toys"), bson.D{{Key: "parent", Value: doc.ID}})
		}}
	const rounds, writers = 10, 4
	for round := range rounds {
		id := fmt.Sprintf("r%d", round)
		if _, err := records.InsertOne(ctx, named{ID: id, Domain: "d1", Name: "new"}); err != nil {
			t.Fatal(err)
		}
		restore := store.FailChildDeletes("toys")
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range writers {
			wg.Go(func() {
				<-start
				for i := range 5 {
					if _, err := records.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
						bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: fmt.Sprintf("w%d-%d", w, i)}}}}); err != nil {
						t.Errorf("round %d: $set: %v", round, err)
						return
					}
				}
			})
		}
		close(start)
		if _, err := td.Delete(ctx, admin, id); code(err) != http.StatusServiceUnavailable {
			t.Fatalf("round %d: delete with a failing child: %v, want 503", round, err)
		}
		wg.Wait()
		restore()
		if _, err := store.GetFor[named](ctx, records, r, admin, "record_id", id); code(err) != http.StatusNotFound {
			t.Fatalf("round %d: the record shows after its mark (a $set dropped it): %v", round, err)
		}
		if _, err := td.Delete(ctx, admin, id); err != nil {
			t.Fatalf("round %d: retry: %v", round, err)
		}
	}
	if n, err := records.CountDocuments(ctx, bson.D{}); err != nil || n != 0 {
		t.Fatalf("records left: %d %v", n, err)
	}
}

// TestTeardownRacingLiveCreates: child creates through Live race a
// delete while a writer keeps $setting the record's other fields; after
// every round no child of the deleted record is left, the record is
// gone, and every create that answered no error was made while the
// record was live (its child deleted by the delete's children step).
func TestTeardownRacingLiveCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.Get().Database(t)
	records, toys := db.Collection("records"), db.Collection("toys")
	r := query.Resource{Tenancy: tenancy.InDomain.WithMarks()}
	admin := &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}
	td := store.Teardown[named]{Records: records, Resource: r, Key: "record_id",
		Children: func(ctx context.Context, doc *named) error {
			return store.DeleteChildren(ctx, toys, bson.D{{Key: "parent", Value: doc.ID}})
		}}
	const rounds, creators = 10, 3
	var created, refused atomic.Int64
	for round := range rounds {
		id := fmt.Sprintf("r%d", round)
		if _, err := records.InsertOne(ctx, named{ID: id, Domain: "d1", Name: "old"}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for c := range creators {
			wg.Go(func() {
				for i := 0; ; i++ {
					child := fmt.Sprintf("%s-%d-%d", id, c, i)
					err := td.Live(ctx, id, func(ctx context.Context, doc *named, w *store.Writes[named]) error {
						return w.Create(ctx, func(ctx context.Context) error {
							_, err := toys.InsertOne(ctx, bson.D{{Key: "_id", Value: child}, {Key: "parent", Value: doc.ID}})
							return store.Wrap(err)
						}, func(ctx context.Context) error {
							_, err := toys.DeleteOne(ctx, bson.D{{Key: "_id", Value: child}})
							return err
						})
					})
					if code(err) == http.StatusNotFound {
						refused.Add(1)
						return
					}
					if err != nil {
						t.Errorf("round %d: create: %v", round, err)
						return
					}
					created.Add(1)
				}
			})
		}
		wg.Go(func() { // a writer of other fields
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := records.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: fmt.Sprint(i)}}}}); err != nil {
					t.Errorf("round %d: $set: %v", round, err)
					return
				}
			}
		})
		time.Sleep(20 * time.Millisecond)
		_, err := td.Delete(ctx, admin, id)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: delete: %v", round, err)
		}
		if n, err := toys.CountDocuments(ctx, bson.D{{Key: "parent", Value: id}}); err != nil || n != 0 {
			t.Fatalf("round %d: children of the deleted record: %d %v, want none", round, n, err)
		}
		if n, err := records.CountDocuments(ctx, bson.D{{Key: "_id", Value: id}}); err != nil || n != 0 {
			t.Fatalf("round %d: the record is left: %d %v", round, n, err)
		}
	}
	if created.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("created %d, refused %d: the race was not run", created.Load(), refused.Load())
	}
}
