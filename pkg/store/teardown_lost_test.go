package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestTeardownMarkLost: a writer that read the record before its mark
// writes it back without the mark between the mark and the children (as
// FerretDB writes back a plain $set: the whole document read before), and
// a child create through Live then finds the record live and lands after
// the children step. The delete still leaves no child: its last Children
// runs under the record's lease with the record's delete, so the create
// was either before it (deleted there) or after it (404). Without that
// last pass the child outlives its record.
func TestTeardownMarkLost(t *testing.T) {
	ctx := context.Background()
	db := testkit.Get().Database(t)
	records, toys := db.Collection("records"), db.Collection("toys")
	r := query.Resource{Tenancy: tenancy.InDomain.WithMarks()}
	admin := &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}
	stale := named{ID: "m1", Domain: "d1", Name: "old"}
	if _, err := records.InsertOne(ctx, stale); err != nil {
		t.Fatal(err)
	}
	var td store.Teardown[named]
	passes := 0
	td = store.Teardown[named]{Records: records, Resource: r, Key: "record_id", Lock: leased(db), Fence: fenced,
		Children: func(ctx context.Context, doc *named) error {
			if err := store.DeleteChildren(ctx, toys, bson.D{{Key: "parent", Value: doc.ID}}); err != nil {
				return err
			}
			if passes++; passes > 1 {
				return nil
			}
			// The stale writer lands: the mark is gone.
			if _, err := records.ReplaceOne(ctx, bson.D{{Key: "_id", Value: doc.ID}}, stale); err != nil {
				return err
			}
			if _, err := store.GetFor[named](ctx, records, r, admin, "record_id", doc.ID); err != nil {
				t.Fatalf("the record with its mark written over: %v, want it found (the test's premise)", err)
			}
			return td.Live(ctx, doc.ID, func(_ context.Context, doc *named, w store.Writes[named]) error {
				return w.Do(func(ctx context.Context) error {
					_, err := toys.InsertOne(ctx, bson.D{{Key: "_id", Value: "late"}, {Key: "parent", Value: doc.ID}})
					return store.Wrap(err)
				})
			})
		}}
	if _, err := td.Delete(ctx, admin, "m1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if n, err := toys.CountDocuments(ctx, bson.D{{Key: "parent", Value: "m1"}}); err != nil || n != 0 {
		t.Fatalf("children of the deleted record: %d %v, want none", n, err)
	}
	if n, err := records.CountDocuments(ctx, bson.D{}); err != nil || n != 0 {
		t.Fatalf("records left: %d %v", n, err)
	}
	if passes != 2 {
		t.Fatalf("children passes: %d, want 2", passes)
	}
}

// TestTeardownRacingLiveCreates: child creates through Live race a
// delete while a stale writer keeps writing the record back as it read
// it (dropping the mark, as a plain $set does on FerretDB); after every
// round no child of the deleted record is left, and the record is gone.
func TestTeardownRacingLiveCreates(t *testing.T) {
	ctx := context.Background()
	db := testkit.Get().Database(t)
	records, toys := db.Collection("records"), db.Collection("toys")
	r := query.Resource{Tenancy: tenancy.InDomain.WithMarks()}
	admin := &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}
	td := store.Teardown[named]{Records: records, Resource: r, Key: "record_id", Lock: mutexes(), Fence: unfenced,
		Children: func(ctx context.Context, doc *named) error {
			return store.DeleteChildren(ctx, toys, bson.D{{Key: "parent", Value: doc.ID}})
		}}
	const rounds, creators = 10, 3
	var created atomic.Int64
	for round := range rounds {
		id := fmt.Sprintf("r%d", round)
		stale := named{ID: id, Domain: "d1", Name: "old"}
		if _, err := records.InsertOne(ctx, stale); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for c := range creators {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					err := td.Live(ctx, id, func(_ context.Context, doc *named, w store.Writes[named]) error {
						return w.Do(func(ctx context.Context) error {
							_, err := toys.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("%s-%d-%d", id, c, i)}, {Key: "parent", Value: doc.ID}})
							return store.Wrap(err)
						})
					})
					if code(err) == http.StatusNotFound {
						select {
						case <-stop:
							return
						default: // the mark may come back unwritten
						}
						time.Sleep(time.Millisecond)
						continue
					}
					if err != nil {
						t.Errorf("round %d: create: %v", round, err)
						return
					}
					created.Add(1)
				}
			}()
		}
		wg.Add(1)
		go func() { // the stale writer: the record as first read, again and again
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := records.ReplaceOne(ctx, bson.D{{Key: "_id", Value: id}}, stale); err != nil {
					t.Errorf("round %d: stale write: %v", round, err)
					return
				}
			}
		}()
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
	if created.Load() == 0 {
		t.Fatal("no child was created: the race was not run")
	}
}

// TestTeardownStarvedLiveDirectWrite: a Live's fn that writes on the
// context it is given (not through Writes), after its holder was
// starved past the lease's TTL (lease.Starve) while the delete took the
// lease over and deleted the record and its children, writes nothing
// (its context ended with the fence's refusal). On the lease's own
// context, which a starved holder's Run does not end, the child lands.
func TestTeardownStarvedLiveDirectWrite(t *testing.T) {
	ctx := context.Background()
	s := newStarved(t)
	td, toys, admin := s.td, s.toys, s.admin
	proceed := make(chan struct{})
	created := s.holding(t, func(held func()) error {
		return td.Live(ctx, "s1", func(ctx context.Context, doc *named, _ store.Writes[named]) error {
			held()
			<-proceed
			_, err := toys.InsertOne(ctx, bson.D{{Key: "_id", Value: "late"}, {Key: "parent", Value: doc.ID}})
			return store.Wrap(err)
		})
	})
	s.starve(t)
	deleteRetried(t, td, admin, "s1")
	close(proceed)
	if err := <-created; err == nil {
		t.Fatal("the starved holder's direct write answered no error")
	} else if !errors.Is(err, lease.ErrLost) && !errors.Is(err, context.Canceled) {
		t.Logf("the starved holder's direct write: %v", err)
	}
	if n, err := toys.CountDocuments(ctx, bson.D{{Key: "parent", Value: "s1"}}); err != nil || n != 0 {
		t.Fatalf("children of the deleted parent: %d %v, want none", n, err)
	}
}

// deleteRetried deletes id, again after a 503, as a client told to retry
// later does: the record's delete is fenced with a third of a short test
// TTL, which a loaded store may not answer within (nothing is written
// then, and the retry finishes the work).
func deleteRetried(t *testing.T, td store.Teardown[named], p *auth.Principal, id string) {
	t.Helper()
	for try := 1; ; try++ {
		_, err := td.Delete(context.Background(), p, id)
		// After a 503, a 404: the cut delete landed after all.
		if err == nil || (try > 1 && code(err) == http.StatusNotFound) {
			return
		}
		if code(err) != http.StatusServiceUnavailable || try == 5 {
			t.Fatalf("delete (try %d): %v", try, err)
		}
		t.Logf("delete (try %d): %v; again", try, err)
	}
}
