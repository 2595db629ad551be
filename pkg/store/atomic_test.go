package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// The kit's atomic writes, raced by 40 callers over two clients (two
// replicas): each of them exact.

func twoClients(t *testing.T, name string) [2]*mongo.Collection {
	t.Helper()
	db := testkit.Get().Database(t)
	other, err := store.Connect(context.Background(), testkit.Get().Mongo.URI, store.Options{MaxPoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Disconnect(context.Background()) })
	return [2]*mongo.Collection{db.Collection(name), other.Database(db.Name()).Collection(name)}
}

func raceN(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() { <-start; fn(i) })
	}
	close(start)
	wg.Wait()
}

func TestNextIsUniqueAndIncreasing(t *testing.T) {
	t.Parallel()
	cs := twoClients(t, "counters")
	ctx := context.Background()
	var mu sync.Mutex
	got := map[int64]bool{}
	raceN(40, func(i int) {
		n, err := store.Next(ctx, cs[i%2], "alert-number#d1")
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if got[n] {
			t.Errorf("number %d given twice", n)
		}
		got[n] = true
	})
	for n := int64(1); n <= 40; n++ {
		if !got[n] {
			t.Fatalf("number %d never given: %v", n, got)
		}
	}
	if n, err := store.Next(ctx, cs[0], "alert-number#d2"); err != nil || n != 1 {
		t.Fatalf("another counter starts at %d, %v", n, err)
	}
}

// NextN's blocks, taken side by side with single numbers, never overlap
// and leave no number between them.
func TestNextNTakesABlock(t *testing.T) {
	t.Parallel()
	cs := twoClients(t, "counters")
	ctx := context.Background()
	var mu sync.Mutex
	got := map[int64]int{}
	raceN(20, func(i int) {
		k := int64(1 + i%3)
		last, err := store.NextN(ctx, cs[i%2], "alert-number#d1", k)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for n := last - k + 1; n <= last; n++ {
			got[n]++
		}
	})
	total := 0
	for i := range 20 {
		total += 1 + i%3
	}
	for n := int64(1); n <= int64(total); n++ {
		if got[n] != 1 {
			t.Fatalf("number %d given %d times (want once): %v", n, got[n], got)
		}
	}
}

func TestIncCountsEvery(t *testing.T) {
	t.Parallel()
	cs := twoClients(t, "posts")
	ctx := context.Background()
	if _, err := cs[0].InsertOne(ctx, bson.D{{Key: "_id", Value: "p"}}); err != nil {
		t.Fatal(err)
	}
	raceN(40, func(i int) {
		if err := store.Inc(ctx, cs[i%2], "p", "views", 1); err != nil {
			t.Error(err)
		}
	})
	var doc struct{ Views int64 }
	if err := cs[0].FindOne(ctx, bson.D{{Key: "_id", Value: "p"}}).Decode(&doc); err != nil || doc.Views != 40 {
		t.Fatalf("views = %d after 40 $inc (%v)", doc.Views, err)
	}
	if err := store.Inc(ctx, cs[0], "gone", "views", 1); err != nil {
		t.Fatal(err)
	}
	if n, _ := cs[0].CountDocuments(ctx, bson.D{{Key: "_id", Value: "gone"}}); n != 0 {
		t.Fatal("Inc of a missing document created it")
	}
}

func TestInsertOnceHasOneWinner(t *testing.T) {
	t.Parallel()
	cs := twoClients(t, "records")
	var won atomic.Int32
	raceN(40, func(i int) {
		ok, err := store.InsertOnce(context.Background(), cs[i%2], bson.D{{Key: "_id", Value: "r"}, {Key: "by", Value: i}})
		if err != nil {
			t.Error(err)
		}
		if ok {
			won.Add(1)
		}
	})
	if won.Load() != 1 {
		t.Fatalf("%d inserts of one _id won", won.Load())
	}
}

type account struct {
	ID      string `bson:"_id"`
	Balance int64  `bson:"balance"`
	Version int64  `bson:"version"`
}

// TestChangeLosesNoWrite: 40 read-edit-writes of one document, each
// adding its own amount (1 to 40) to what it read, all land; fn's refusal and a
// missing or marked document write nothing; an edit that changes nothing
// writes nothing.
func TestChangeLosesNoWrite(t *testing.T) {
	t.Parallel()
	cs := twoClients(t, "accounts")
	ctx := context.Background()
	if _, err := cs[0].InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "balance", Value: int64(0)}}); err != nil {
		t.Fatal(err)
	}
	raceN(40, func(i int) {
		_, err := store.Change(ctx, cs[i%2], "account_id", "a", func(a *account) error {
			a.Balance += int64(i + 1)
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})
	out, err := store.Change(ctx, cs[0], "account_id", "a", func(a *account) error { return nil })
	if err != nil || out.Wrote || out.After.Balance != 40*41/2 || out.After.Version != 40 {
		t.Fatalf("balance %d version %d (wrote %v) after 40 changes, want %d and 40 (%v)", out.After.Balance, out.After.Version, out.Wrote, 40*41/2, err)
	}
	ch, err := store.Change(ctx, cs[0], "account_id", "a", func(a *account) error { a.Balance++; return nil })
	if err != nil || !ch.Wrote || ch.Before.Balance != 40*41/2 || ch.After.Balance != 40*41/2+1 || ch.After.Version != 41 {
		t.Fatalf("before %+v after %+v wrote %v (%v)", ch.Before, ch.After, ch.Wrote, err)
	}
	refused := errs.Invalid("balance", "refused")
	if _, err := store.Change(ctx, cs[0], "account_id", "a", func(a *account) error {
		a.Balance = -1
		return refused
	}); err != refused {
		t.Fatalf("refusal = %v", err)
	}
	if _, err := store.Change(ctx, cs[0], "account_id", "nope", func(a *account) error { a.Balance = 1; return nil }); !errs.Is(err, errs.NotFoundCode) {
		t.Fatalf("missing = %v", err)
	}
	if _, err := cs[0].UpdateByID(ctx, "a", bson.D{{Key: "$set", Value: bson.D{{Key: tenancy.MarkField, Value: true}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Change(ctx, cs[0], "account_id", "a", func(a *account) error { a.Balance = 0; return nil }); !errs.Is(err, errs.NotFoundCode) {
		t.Fatalf("marked = %v", err)
	}
	var doc account
	if err := cs[0].FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&doc); err != nil || doc.Balance != 40*41/2+1 {
		t.Fatalf("a refused or marked change wrote: %+v %v", doc, err)
	}
}

func TestWindowExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	cs := twoClients(t, "windows")
	ctx := context.Background()
	var won atomic.Int32
	raceN(50, func(i int) {
		ok, err := store.Window{C: cs[i%2], Max: 10, TTL: time.Minute}.Take(ctx, "user-1")
		if err != nil {
			t.Error(err)
		}
		if ok {
			won.Add(1)
		}
	})
	w := store.Window{C: cs[0], Max: 10, TTL: time.Minute}
	if won.Load() != 10 {
		t.Fatalf("%d takes won, want 10", won.Load())
	}
	if n, _ := w.Used(ctx, "user-1"); n != 10 {
		t.Fatalf("used = %d", n)
	}
	if n, _ := w.Used(ctx, "user-2"); n != 0 {
		t.Fatalf("another key used = %d", n)
	}
	if err := w.Reset(ctx, "user-1"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := w.Take(ctx, "user-1"); !ok {
		t.Fatal("no take after reset")
	}
}

func TestWindowEnds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	w := store.Window{C: testkit.Get().Database(t).Collection("windows"), Max: 2, TTL: time.Minute, Now: clock}
	ctx := context.Background()
	for range 2 {
		if ok, err := w.Take(ctx, "k"); !ok || err != nil {
			t.Fatalf("take refused: %v", err)
		}
	}
	now = now.Add(59 * time.Second)
	if ok, _ := w.Take(ctx, "k"); ok {
		t.Fatal("a third take of two within the window")
	}
	now = now.Add(time.Second)
	if n, _ := w.Used(ctx, "k"); n != 0 {
		t.Fatalf("an ended window still counts %d", n)
	}
	for i := range 2 {
		if ok, _ := w.Take(ctx, "k"); !ok {
			t.Fatalf("take %d of the next window refused", i+1)
		}
	}
	if ok, _ := w.Take(ctx, "k"); ok {
		t.Fatal("a third take of two in the next window")
	}
}

// TestUpsertMakesOneDocument: 40 racing upserts of one _id make one
// document, whose inserted fields are one caller's and whose set fields
// the last writer's; a later upsert changes only what it sets.
func TestUpsertMakesOneDocument(t *testing.T) {
	cs := twoClients(t, "upserts")
	ctx := context.Background()
	raceN(40, func(i int) {
		doc := bson.D{{Key: "_id", Value: "u"}, {Key: "name", Value: "first"}, {Key: "made_by", Value: i}}
		if err := store.Upsert(ctx, cs[i%2], "u", bson.D{{Key: "seen", Value: i}}, doc); err != nil {
			t.Error(err)
		}
	})
	if n, err := cs[0].CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Fatalf("%d documents (%v)", n, err)
	}
	var got struct {
		Name   string `bson:"name"`
		MadeBy int    `bson:"made_by"`
		Seen   *int   `bson:"seen"`
	}
	if err := store.Upsert(ctx, cs[0], "u", bson.D{{Key: "name", Value: "renamed"}}, bson.D{{Key: "name", Value: "x"}, {Key: "made_by", Value: -1}}); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].FindOne(ctx, bson.D{{Key: "_id", Value: "u"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Name != "renamed" || got.MadeBy < 0 || got.Seen == nil {
		t.Fatalf("document %+v", got)
	}
}
