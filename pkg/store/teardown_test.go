package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestTeardown: a delete whose second child step fails leaves the record
// marked, out of GetFor, GetToChange, SearchFor, Scope and GetLive, its
// first children gone; the retry finishes (children and record gone);
// another domain's caller reaches neither the marked record nor its
// delete.
func TestTeardown(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	ctx := context.Background()
	db := testkit.Get().Database(t)
	parents, pets := db.Collection("parents"), db.Collection("pets")
	insert := func(c string, doc bson.D) {
		if _, err := db.Collection(c).InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	insert("parents", bson.D{{Key: "_id", Value: "p1"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w1"}})
	insert("parents", bson.D{{Key: "_id", Value: "p2"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w1"}})
	for _, c := range []string{"kids", "pets"} {
		insert(c, bson.D{{Key: "_id", Value: c + "1"}, {Key: "parent", Value: "p1"}})
		insert(c, bson.D{{Key: "_id", Value: c + "2"}, {Key: "parent", Value: "p2"}})
	}
	r := query.Resource{Tenancy: tenancy.InWorkspace.WithMarks()}
	admin := &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}
	stranger := &auth.Principal{DomainID: "d2", UserID: "x", Role: auth.DomainAdmin}
	td := store.Teardown[placed]{Records: parents, Resource: r, Key: "parent_id",
		Children: func(ctx context.Context, doc *placed) error {
			for _, c := range []string{"kids", "pets"} {
				if err := store.DeleteChildren(ctx, db.Collection(c), bson.D{{Key: "parent", Value: doc.ID}}); err != nil {
					return err
				}
			}
			return nil
		}}
	count := func(c string, f bson.D) int64 {
		n, err := db.Collection(c).CountDocuments(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	restore := store.FailChildDeletes(pets.Name())
	if _, err := td.Delete(ctx, admin, "p1"); code(err) != http.StatusServiceUnavailable {
		t.Fatalf("delete with a failing child step: %v, want 503", err)
	}
	restore()
	if n := count("kids", bson.D{{Key: "parent", Value: "p1"}}); n != 0 {
		t.Fatalf("kids of p1 after the first step: %d", n)
	}
	if n := count("pets", bson.D{{Key: "parent", Value: "p1"}}); n != 1 {
		t.Fatalf("pets of p1 after the failed step: %d", n)
	}
	if n := count("parents", bson.D{{Key: "_id", Value: "p1"}, {Key: tenancy.MarkField, Value: true}}); n != 1 {
		t.Fatal("p1 is not marked")
	}
	// Hidden from every read and change.
	if _, err := store.GetFor[placed](ctx, parents, r, admin, "parent_id", "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("GetFor of a marked record: %v", err)
	}
	if _, err := store.GetToChange[placed](ctx, parents, r, admin, "parent_id", "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("GetToChange of a marked record: %v", err)
	}
	if _, err := store.GetLive[placed](ctx, parents, "parent_id", "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("GetLive of a marked record: %v", err)
	}
	l, err := store.SearchFor[placed](ctx, parents, nil, r, admin)
	if err != nil || l.TotalCount != 1 || l.Results[0].ID != "p2" {
		t.Fatalf("SearchFor with a marked record: %+v %v", l, err)
	}
	// Another domain neither sees nor finishes it.
	if _, err := td.Delete(ctx, stranger, "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("another domain's delete: %v", err)
	}
	if n := count("pets", bson.D{{Key: "parent", Value: "p1"}}); n != 1 {
		t.Fatal("another domain's delete went on")
	}
	// The retry finishes; then the record is gone (404), p2 untouched.
	if _, err := td.Delete(ctx, admin, "p1"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if count("parents", bson.D{{Key: "_id", Value: "p1"}}) != 0 || count("pets", bson.D{{Key: "parent", Value: "p1"}}) != 0 {
		t.Fatal("the retry left the record or its children")
	}
	if _, err := td.Delete(ctx, admin, "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("delete of a finished record: %v", err)
	}
	if count("parents", bson.D{}) != 1 || count("kids", bson.D{}) != 1 || count("pets", bson.D{}) != 1 {
		t.Fatal("p2 or its children were touched")
	}
	// A resource that declares no marks cannot be torn down.
	if _, err := (store.Teardown[placed]{Records: parents, Resource: query.Resource{Tenancy: tenancy.InWorkspace}, Key: "parent_id"}).Delete(ctx, admin, "p2"); err == nil {
		t.Fatal("a teardown without marks ran")
	}
	if count("parents", bson.D{{Key: "_id", Value: "p2"}, {Key: tenancy.MarkField, Value: true}}) != 0 {
		t.Fatal("a refused teardown marked p2")
	}
}

// named is a record with a field that updates change.
type named struct {
	ID     string `bson:"_id"`
	Domain string `bson:"domain_id"`
	Name   string `bson:"name"`
	// CreatedAt tells one life of s1 from the next (store.BornField).
	CreatedAt string `bson:"created_at,omitempty"`
}

// TestTeardownRacingChanges: updates racing a delete that fails after
// its mark never write the record back without the mark: in every round
// the record stays marked and out of GetFor, each update either landed
// before the mark or answered 404, and the retry finishes.
func TestTeardownRacingChanges(t *testing.T) {
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
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range 3 {
					_, err := td.Change(ctx, admin, id, func(_ context.Context, doc *named) error {
						doc.Name = fmt.Sprintf("w%d-%d", w, i)
						return nil
					})
					if code(err) == http.StatusNotFound {
						return
					}
					if err != nil {
						t.Errorf("round %d: update: %v", round, err)
						return
					}
				}
			}()
		}
		close(start)
		if _, err := td.Delete(ctx, admin, id); code(err) != http.StatusServiceUnavailable {
			t.Fatalf("round %d: delete with a failing child: %v, want 503", round, err)
		}
		wg.Wait()
		restore()
		if _, err := store.GetFor[named](ctx, records, r, admin, "record_id", id); code(err) != http.StatusNotFound {
			t.Fatalf("round %d: the record shows after its mark (an update wrote it back without it): %v", round, err)
		}
		if _, err := td.Delete(ctx, admin, id); err != nil {
			t.Fatalf("round %d: retry: %v", round, err)
		}
	}
	if n, err := records.CountDocuments(ctx, bson.D{}); err != nil || n != 0 {
		t.Fatalf("records left: %d %v", n, err)
	}
}

// TestTeardownChangeReadBeforeMark: a Change that read the record before
// the delete marked it, and decides after, writes nothing and answers
// 404 (its compare-and-set on the version misses, and the record read
// again is marked); the record stays marked, with its old name. (Under
// the old lease design this was the starved holder's fenced write.)
func TestTeardownChangeReadBeforeMark(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	ctx := context.Background()
	td, records, toys, admin := fixture(t)
	read, proceed := make(chan struct{}), make(chan struct{})
	changed := make(chan error, 1)
	calls := 0
	go func() {
		_, err := td.Change(ctx, admin, "s1", func(_ context.Context, doc *named) error {
			if calls++; calls == 1 {
				close(read)
				<-proceed
			}
			doc.Name = "late"
			return nil
		})
		changed <- err
	}()
	<-read
	undo := store.FailChildDeletes(toys.Name())
	if _, err := td.Delete(ctx, admin, "s1"); !errors.Is(err, store.ErrChildDeleteFault) {
		t.Fatalf("delete with a failing child: %v, want 503 from the child step", err)
	}
	undo()
	close(proceed)
	if err := <-changed; code(err) != http.StatusNotFound {
		t.Fatalf("the change read before the mark: %v, want 404", err)
	}
	if calls != 1 {
		t.Fatalf("fn ran %d times, want once (the record read again is marked)", calls)
	}
	var doc bson.M
	if err := records.FindOne(ctx, bson.D{{Key: "_id", Value: "s1"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc[tenancy.MarkField] != true || doc["name"] != "old" {
		t.Fatalf("after the late change: %v, want marked and named old", doc)
	}
}

// TestTeardownLiveCreateAfterDelete: a child create under Live that
// found the parent live, then inserted after the delete had marked the
// parent, deleted its children and the parent, removes its own child
// and answers 404: no child outlives its record.
func TestTeardownLiveCreateAfterDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	td, _, toys, admin := fixture(t)
	err := liveCreatePaused(t, td, toys, func() {
		if _, err := td.Delete(ctx, admin, "s1"); err != nil {
			t.Fatalf("delete: %v", err)
		}
	})
	if code(err) != http.StatusNotFound {
		t.Fatalf("the late child create: %v, want 404", err)
	}
	if n, err := toys.CountDocuments(ctx, bson.D{{Key: "parent", Value: "s1"}}); err != nil || n != 0 {
		t.Fatalf("children of the deleted parent: %d %v, want none", n, err)
	}
}

// TestTeardownLiveCreateReborn: the same when the parent was deleted and
// created again under the same _id (a user of the same name) while the
// create ran: the new record inherits nothing.
func TestTeardownLiveCreateReborn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	td, records, toys, admin := fixture(t)
	err := liveCreatePaused(t, td, toys, func() {
		if _, err := td.Delete(ctx, admin, "s1"); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := records.InsertOne(ctx, named{ID: "s1", Domain: "d1", Name: "new", CreatedAt: "2026-12-02T00:00:00.000Z"}); err != nil {
			t.Fatal(err)
		}
	})
	if code(err) != http.StatusNotFound {
		t.Fatalf("the late child create: %v, want 404", err)
	}
	if n, err := toys.CountDocuments(ctx, bson.D{{Key: "parent", Value: "s1"}}); err != nil || n != 0 {
		t.Fatalf("children of the new record: %d %v, want none", n, err)
	}
}

// TestTeardownLiveCreateKept: a child created while the parent stays
// live is kept, and its create answers no error.
func TestTeardownLiveCreateKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	td, records, toys, _ := fixture(t)
	err := liveCreatePaused(t, td, toys, func() {
		if _, err := records.UpdateOne(ctx, bson.D{{Key: "_id", Value: "s1"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: "other"}}}}); err != nil {
			t.Fatal(err)
		}
	})
	if err != nil {
		t.Fatalf("child create: %v", err)
	}
	if n, err := toys.CountDocuments(ctx, bson.D{{Key: "parent", Value: "s1"}}); err != nil || n != 1 {
		t.Fatalf("children: %d %v, want 1", n, err)
	}
}

// liveCreatePaused creates the child "late" of s1 under Live, running
// meanwhile (after Live found s1 live, before the insert) and returns
// the create's answer.
func liveCreatePaused(t *testing.T, td store.Teardown[named], toys *mongo.Collection, meanwhile func()) error {
	t.Helper()
	ctx := context.Background()
	found, proceed := make(chan struct{}), make(chan struct{})
	created := make(chan error, 1)
	go func() {
		created <- td.Live(ctx, "s1", func(ctx context.Context, doc *named, w *store.Writes[named]) error {
			close(found)
			<-proceed
			return w.Create(ctx, func(ctx context.Context) error {
				_, err := toys.InsertOne(ctx, bson.D{{Key: "_id", Value: "late"}, {Key: "parent", Value: doc.ID}})
				return store.Wrap(err)
			}, func(ctx context.Context) error {
				_, err := toys.DeleteOne(ctx, bson.D{{Key: "_id", Value: "late"}})
				return err
			})
		})
	}()
	select {
	case <-found:
	case err := <-created:
		t.Fatalf("the create answered before its fn ran: %v", err)
	}
	meanwhile()
	close(proceed)
	return <-created
}

// fixture is record s1 of domain d1, named old, under a Teardown whose
// children are in toys.
func fixture(t *testing.T) (store.Teardown[named], *mongo.Collection, *mongo.Collection, *auth.Principal) {
	t.Helper()
	db := testkit.Get().Database(t)
	records, toys := db.Collection("records"), db.Collection("toys")
	td := store.Teardown[named]{Records: records, Resource: query.Resource{Tenancy: tenancy.InDomain.WithMarks()}, Key: "record_id",
		Children: func(ctx context.Context, doc *named) error {
			return store.DeleteChildren(ctx, toys, bson.D{{Key: "parent", Value: doc.ID}})
		}}
	if _, err := records.InsertOne(context.Background(), named{ID: "s1", Domain: "d1", Name: "old", CreatedAt: "2026-12-01T00:00:00.000Z"}); err != nil {
		t.Fatal(err)
	}
	return td, records, toys, &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}
}

func code(err error) int {
	if e, ok := errs.As(err); ok {
		return e.Status()
	}
	return 0
}
