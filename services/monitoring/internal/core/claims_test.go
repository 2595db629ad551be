package core

import (
	"go.mongodb.org/mongo-driver/v2/bson"

	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestClaimsRacingTakers: owners on two clients race for one name. Each
// owner's record exists from before its take until it gives the name up:
// then it either releases the name, possibly after another owner took
// the stale claim over, or vanishes without releasing (a crashed
// request), so the next taker takes over. At no instant may two owners
// with records hold the name: a takeover that deleted a claim another
// taker just wrote, or a late release that freed the next owner's claim,
// lets a second one in.
func TestClaimsRacingTakers(t *testing.T) {
	t.Parallel()
	db := testkit.Get().Database(t)
	other, err := store.Connect(context.Background(), testkit.Get().Mongo.URI, store.Options{MaxPoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Disconnect(context.Background()) }()
	stale := 20 * time.Millisecond
	claims := []Claims{
		{C: db.Collection(ClaimsCollection), Stale: stale},
		{C: other.Database(db.Name()).Collection(ClaimsCollection), Stale: stale},
	}
	var mu sync.Mutex
	records := map[string]bool{} // owners whose record exists
	holding := map[string]bool{} // owners told they hold the name
	exists := func(_ context.Context, owner string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return records[owner], nil
	}
	const workers, rounds = 8, 6
	var wg sync.WaitGroup
	taken := 0
	for w := range workers {
		wg.Go(func() {
			c := claims[w%2]
			for r := range rounds {
				me := fmt.Sprintf("w%d-r%d", w, r)
				mu.Lock()
				records[me] = true
				mu.Unlock()
				ok, err := c.Take(context.Background(), "name", me, exists)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if !ok {
					delete(records, me)
					mu.Unlock()
					// Jitter: the interleavings are the thing under test.
					time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
					continue
				}
				for o := range holding {
					t.Errorf("%s took the name while %s held it", me, o)
				}
				holding[me] = true
				taken++
				mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // jitter, as above
				if owner, err := c.Owner(context.Background(), "name"); err != nil || owner != me {
					t.Errorf("%s holds, the claim says %q (%v)", me, owner, err)
				}
				mu.Lock()
				delete(holding, me)
				delete(records, me)
				mu.Unlock()
				if r%2 == 0 {
					// Released late: another may have taken the stale
					// claim over by now (Claims takes no clock: the real
					// age is what is tested).
					time.Sleep(stale)
					if err := c.Release(context.Background(), "name", me); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if taken < 2 {
		t.Fatalf("the name was taken %d times: no takeover raced", taken)
	}
	t.Logf("taken %d times", taken)
}

// TestClaimsTakeReleaseSet: a held name is refused to others, free again
// once released, taken over only when stale and its owner gone; Set
// replaces the holder; another key (even a prefix-sharing one) is its own.
func TestClaimsTakeReleaseSet(t *testing.T) {
	t.Parallel()
	c, ctx := Claims{C: testkit.Get().Database(t).Collection(ClaimsCollection), Stale: time.Hour}, context.Background()
	// The same claims, all stale at once.
	old := Claims{C: c.C, Stale: time.Nanosecond}
	gone := func(context.Context, string) (bool, error) { return false, nil }
	live := func(context.Context, string) (bool, error) { return true, nil }
	take := func(key, owner string, exists func(context.Context, string) (bool, error), cs ...Claims) bool {
		t.Helper()
		c := append(cs, c)[0]
		ok, err := c.Take(ctx, key, owner, exists)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	owner := func(key string) string {
		t.Helper()
		o, err := c.Owner(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if !take("n", "a", gone) || !take("n", "a", gone) {
		t.Fatal("a free name refused")
	}
	if take("n", "b", gone) {
		t.Fatal("a fresh claim taken over")
	}
	for _, k := range []string{"n#1", "n#", "nn"} {
		if !take(k, "b", live) || owner(k) != "b" {
			t.Fatalf("key %q not its own", k)
		}
	}
	if err := c.Release(ctx, "n", "b"); err != nil || owner("n") != "a" {
		t.Fatalf("another owner released the name: %v, owner %q", err, owner("n"))
	}
	if take("n", "b", live, old) {
		t.Fatal("a stale claim of a live owner taken over")
	}
	if !take("n", "b", gone, old) || owner("n") != "b" {
		t.Fatal("a stale claim of a vanished owner not taken over")
	}
	// a's late release leaves b's claim alone.
	if err := c.Release(ctx, "n", "a"); err != nil || owner("n") != "b" {
		t.Fatalf("a late release freed the next owner's claim: %v, owner %q", err, owner("n"))
	}
	if err := c.Release(ctx, "n", "b"); err != nil || owner("n") != "" {
		t.Fatalf("release: %v, owner %q", err, owner("n"))
	}
	if !take("n", "c", live) {
		t.Fatal("a released name refused")
	}
	if was, v, err := c.Set(ctx, "n", "d"); err != nil || owner("n") != "d" || was != "c" || v != 1 {
		t.Fatalf("set: %v, owner %q, was %q, version %d", err, owner("n"), was, v)
	}
	if was, v, err := c.Set(ctx, "n", "e"); err != nil || was != "d" || v != 2 {
		t.Fatalf("second set: %v, was %q, version %d", err, was, v)
	}
	// Revert gives it back only while the reverting owner holds it.
	if v, err := c.Revert(ctx, "n", "d", "c"); err != nil || v != 0 || owner("n") != "e" {
		t.Fatalf("a revert by a former owner: %v, version %d, owner %q", err, v, owner("n"))
	}
	if v, err := c.Revert(ctx, "n", "e", "d"); err != nil || v != 3 || owner("n") != "d" {
		t.Fatalf("revert: %v, version %d, owner %q", err, v, owner("n"))
	}
	if was, v, err := c.Set(ctx, "fresh", "x"); err != nil || was != "" || v != 1 {
		t.Fatalf("set of a new key: %v, was %q, version %d", err, was, v)
	}
	// One record a key.
	n, err := c.C.CountDocuments(ctx, bson.D{{Key: "claim", Value: "n"}})
	if err != nil || n != 1 {
		t.Fatalf("%d claims of n kept (%v)", n, err)
	}
}
