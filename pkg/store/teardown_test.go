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
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/lease"
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
	td := store.Teardown[placed]{Records: parents, Resource: r, Key: "parent_id", Lock: leased(db), Fence: fenced,
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
	if _, err := (store.Teardown[placed]{Records: parents, Resource: query.Resource{Tenancy: tenancy.InWorkspace}, Key: "parent_id", Lock: leased(db), Fence: fenced}).Delete(ctx, admin, "p2"); err == nil {
		t.Fatal("a teardown without marks ran")
	}
	// Nor one without a lock to mark under.
	if _, err := (store.Teardown[placed]{Records: parents, Resource: r, Key: "parent_id", Fence: fenced}).Delete(ctx, admin, "p2"); err == nil {
		t.Fatal("a teardown without a lock ran")
	}
	// Nor one without a fence for the writes under its lock.
	if _, err := (store.Teardown[placed]{Records: parents, Resource: r, Key: "parent_id", Lock: leased(db)}).Delete(ctx, admin, "p2"); err == nil {
		t.Fatal("a teardown without a fence ran")
	}
	if count("parents", bson.D{{Key: "_id", Value: "p2"}, {Key: tenancy.MarkField, Value: true}}) != 0 {
		t.Fatal("a refused teardown marked p2")
	}
}

// leased is a Teardown's Lock on the record's lease in db's "locks".
func leased(db *mongo.Database) func(ctx context.Context, id string, fn func(ctx context.Context) error) error {
	return func(ctx context.Context, id string, fn func(ctx context.Context) error) error {
		return lease.Run(ctx, db.Collection("locks"), "rec:"+id, 10*time.Second, 30*time.Second, fn)
	}
}

// fenced is leased's Fence: a renew period of its 10 s TTL.
var fenced = lease.Fencer(10 * time.Second / 3)

// unfenced is mutexes' Fence: a lock inside one process is never lost
// while its holder runs.
func unfenced(ctx context.Context) (context.Context, context.CancelFunc, error) {
	return ctx, func() {}, nil
}

// mutexes is a Teardown's Lock inside one process (the racing test's:
// what it checks is what Teardown does under a lock, and a lease
// serialises a dozen writers a round slowly on a loaded machine).
func mutexes() func(ctx context.Context, id string, fn func(ctx context.Context) error) error {
	var locks sync.Map
	return func(ctx context.Context, id string, fn func(ctx context.Context) error) error {
		mu, _ := locks.LoadOrStore(id, &sync.Mutex{})
		mu.(*sync.Mutex).Lock()
		defer mu.(*sync.Mutex).Unlock()
		return fn(ctx)
	}
}

// named is a record with a field that updates change.
type named struct {
	ID     string `bson:"_id"`
	Domain string `bson:"domain_id"`
	Name   string `bson:"name"`
}

// TestTeardownRacingChanges: updates racing a delete that fails after
// its mark never write the record back without the mark (FerretDB writes
// an update back whole, so an update that read the record before the
// mark would drop it): in every round the record stays marked and out of
// GetFor, each update either landed before the mark or answered 404, and
// the retry finishes. Writers that skip Change (a plain $set after a
// GetToChange) fail this within a few rounds.
func TestTeardownRacingChanges(t *testing.T) {
	ctx := context.Background()
	db := testkit.Get().Database(t)
	records := db.Collection("records")
	r := query.Resource{Tenancy: tenancy.InDomain.WithMarks()}
	admin := &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}
	td := store.Teardown[named]{Records: records, Resource: r, Key: "record_id", Lock: mutexes(), Fence: unfenced,
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
					_, err := td.Change(ctx, admin, id, func(_ context.Context, doc *named) (bson.D, error) {
						return bson.D{{Key: "name", Value: fmt.Sprintf("w%d-%d", w, i)}}, nil
					})
					if code(err) == http.StatusNotFound {
						return
					}
					// A lock waited out or a fence refused: nothing
					// written, as a client told to retry later sees.
					if code(err) == http.StatusServiceUnavailable {
						continue
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

// TestTeardownStarvedHolder: a Change whose holder was starved past its
// lease's TTL (no renewals, its context not ended: lease.Starve) after
// it loaded the record, while the delete took the lease over and wrote
// the mark, refuses its write (503, nothing written) instead of landing
// after the later holder's; the record stays marked, with its old name.
// Without the fence on Change's write the update answers 200.
func TestTeardownStarvedHolder(t *testing.T) {
	ctx := context.Background()
	s := newStarved(t)
	td, records, admin := s.td, s.records, s.admin
	proceed := make(chan struct{})
	changed := s.holding(t, func(held func()) error {
		_, err := td.Change(ctx, admin, "s1", func(_ context.Context, doc *named) (bson.D, error) {
			held()
			<-proceed
			return bson.D{{Key: "name", Value: "late"}}, nil
		})
		return err
	})
	// The holder's claim expires (nothing renews it); the delete takes
	// the lease over, marks the record and fails on its children.
	s.starve(t)
	// Only the child step's 503 says the mark was written: a delete that
	// timed out before its mark (a starved store) is tried again.
	undo := store.FailChildDeletes("toys")
	for try := 1; ; try++ {
		_, err := td.Delete(ctx, admin, "s1")
		if errors.Is(err, store.ErrChildDeleteFault) {
			break
		}
		if code(err) != http.StatusServiceUnavailable || try == 5 {
			t.Fatalf("delete with a failing child (try %d): %v, want 503 from the child step", try, err)
		}
		t.Logf("delete (try %d): %v; again", try, err)
	}
	undo()
	close(proceed)
	if err := <-changed; code(err) != http.StatusServiceUnavailable || !errors.Is(err, lease.ErrLost) {
		t.Fatalf("the starved holder's update: %v, want 503 (lease lost)", err)
	}
	var doc bson.M
	if err := records.FindOne(ctx, bson.D{{Key: "_id", Value: "s1"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc[tenancy.MarkField] != true || doc["name"] != "old" {
		t.Fatalf("after the starved holder: %v, want marked and named old", doc)
	}
}

// TestTeardownStarvedLiveCreate: a child create under Live whose holder
// was starved past its lease's TTL (lease.Starve) after it found the
// parent live, while the delete took the lease over, marked the parent,
// deleted its children and the parent, is refused (503, nothing
// created) instead of leaving a child of a deleted parent. With the
// create unfenced (Writes.Do running it on Live's context) the child
// lands.
func TestTeardownStarvedLiveCreate(t *testing.T) {
	ctx := context.Background()
	s := newStarved(t)
	td, toys, admin := s.td, s.toys, s.admin
	proceed := make(chan struct{})
	created := s.holding(t, func(held func()) error {
		return td.Live(ctx, "s1", func(_ context.Context, doc *named, w store.Writes[named]) error {
			held()
			<-proceed
			return w.Do(func(ctx context.Context) error {
				_, err := toys.InsertOne(ctx, bson.D{{Key: "_id", Value: "late"}, {Key: "parent", Value: doc.ID}})
				return store.Wrap(err)
			})
		})
	})
	s.starve(t)
	deleteRetried(t, td, admin, "s1")
	close(proceed)
	if err := <-created; code(err) != http.StatusServiceUnavailable || !errors.Is(err, lease.ErrLost) {
		t.Fatalf("the starved holder's child create: %v, want 503 (lease lost)", err)
	}
	if n, err := toys.CountDocuments(ctx, bson.D{{Key: "parent", Value: "s1"}}); err != nil || n != 0 {
		t.Fatalf("children of the deleted parent: %d %v, want none", n, err)
	}
}

// starved is the starved-holder tests' fixture: record s1 of domain d1
// under a Teardown whose lease (locks, "rec:<id>") has a 3 s TTL, its
// children in toys.
type starved struct {
	db            *mongo.Database
	records, toys *mongo.Collection
	td            store.Teardown[named]
	admin         *auth.Principal
}

const starvedTTL = 3 * time.Second

func newStarved(t *testing.T) starved {
	t.Helper()
	db := testkit.Get().Database(t)
	s := starved{db: db, records: db.Collection("records"), toys: db.Collection("toys"),
		admin: &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}}
	s.td = store.Teardown[named]{Records: s.records, Resource: query.Resource{Tenancy: tenancy.InDomain.WithMarks()}, Key: "record_id",
		Lock: func(ctx context.Context, id string, fn func(ctx context.Context) error) error {
			return lease.Run(ctx, db.Collection("locks"), "rec:"+id, starvedTTL, time.Minute, fn)
		},
		Fence: lease.Fencer(starvedTTL / 3),
		Children: func(ctx context.Context, doc *named) error {
			return store.DeleteChildren(ctx, s.toys, bson.D{{Key: "parent", Value: doc.ID}})
		}}
	if _, err := s.records.InsertOne(context.Background(), named{ID: "s1", Domain: "d1", Name: "old"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// starve stops the renewals of s1's lease (lease.Starve, undone when the
// test ends) and waits until its claim has expired, its holder still
// running.
func (s starved) starve(t *testing.T) {
	t.Helper()
	t.Cleanup(lease.Starve("rec:s1"))
	for {
		held, err := lease.Held(context.Background(), s.db.Collection("locks"), "rec:s1")
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holding runs call (a Live or Change of s1 whose fn calls held first)
// in a goroutine and returns once its fn holds the lease; call's answer
// comes on the channel. A call refused 503 before its fn ran (a loaded
// store timing out the lease's take or the record's read) is made again,
// as a client told to retry would: waiting for the fn alone hung the
// test for good when that happened (two loops stalled so at load 10-20;
// a goroutine dump showed the test waiting for the fn, the call gone).
func (s starved) holding(t *testing.T, call func(held func()) error) <-chan error {
	t.Helper()
	loaded := make(chan struct{})
	answer := make(chan error, 1)
	go func() {
		for {
			var reached atomic.Bool
			err := call(func() { reached.Store(true); close(loaded) })
			if reached.Load() || code(err) != http.StatusServiceUnavailable {
				answer <- err
				return
			}
		}
	}()
	select {
	case <-loaded:
		return answer
	case err := <-answer:
		t.Fatalf("the holder answered before its fn ran: %v", err)
		return nil
	}
}

func code(err error) int {
	if e, ok := errs.As(err); ok {
		return e.Status()
	}
	return 0
}
