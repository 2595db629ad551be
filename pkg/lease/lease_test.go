package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// setClock makes c the package's clock for the rest of t (the tests run
// one at a time: the clock is package-wide).
func setClock(t *testing.T, c *testkit.Clock) {
	was := now
	now = c.Now
	t.Cleanup(func() { now = was })
}

func leases(t *testing.T) *mongo.Collection {
	return testkit.Get().Database(t).Collection("leases")
}

// hold is one holder's time with the lease: from its take returning to
// the earlier of its release being called and its deadline.
type hold struct {
	epoch      int64
	start, end time.Time
	who        string
}

// TestRacingHolders: holders on two clients race for one key; some
// release at once, some renew, some stall past their TTL and release
// late (after another took the key). In epoch order, every hold starts
// after the previous one ended: never two holders at once, and a late
// release never freed the lease of the holder after it.
func TestRacingHolders(t *testing.T) {
	db := testkit.Get().Database(t)
	other, err := store.Connect(context.Background(), testkit.Get().Mongo.URI, store.Options{MaxPoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Disconnect(context.Background()) }()
	colls := []*mongo.Collection{db.Collection("leases"), other.Database(db.Name()).Collection("leases")}

	const workers, rounds = 8, 4
	ttl := 150 * time.Millisecond
	var mu sync.Mutex
	var holds []hold
	var finished atomic.Int32 // workers through all their rounds
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			defer finished.Add(1)
			c := colls[w%2]
			for r := range rounds {
				l, err := Take(context.Background(), c, "k", ttl, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				start := time.Now()
				switch {
				case w < 3 && r == 0:
					// Stalls past its TTL, and releases late, once
					// another took the key. The stall is the wall
					// clock's: the other holders race it for real.
					time.Sleep(ttl)
					var err error
					if testkit.Within(time.Minute, func() bool {
						var cur *claim
						cur, err = latest(context.Background(), c, "k")
						// (When every other worker is done, no one will.)
						return err != nil || cur.Epoch > l.Epoch() || finished.Load() == workers-1
					}) != nil || err != nil {
						t.Error("waiting for a later epoch:", err)
						return
					}
				case w%3 == 1: // renews once
					if err := l.Renew(context.Background()); err != nil && !errors.Is(err, ErrLost) {
						t.Error(err)
					}
					fallthrough
				default:
					time.Sleep(5 * time.Millisecond) // the holder's work: holds overlap only if the lease lets them
				}
				end := time.Now()
				if d := l.Deadline(); d.Before(end) {
					end = d
				}
				// While held, no one released or changed this claim.
				// (A stalled holder's claim may be purged by now.)
				var mine claim
				err = c.FindOne(context.Background(), bson.D{{Key: "_id", Value: claimID("k", l.Epoch())}}).Decode(&mine)
				switch held := l.Check(0) == nil; {
				case err != nil && (held || !errors.Is(err, mongo.ErrNoDocuments)):
					t.Errorf("the claim of epoch %d: %v", l.Epoch(), err)
				case err == nil && mine.Released && held:
					t.Errorf("epoch %d was released by another holder", l.Epoch())
				}
				l.Release(context.Background())
				mu.Lock()
				holds = append(holds, hold{l.Epoch(), start, end, fmt.Sprintf("worker %d round %d", w, r)})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(holds) != workers*rounds {
		t.Fatalf("%d holds, want %d", len(holds), workers*rounds)
	}
	slices.SortFunc(holds, func(a, b hold) int { return int(a.epoch - b.epoch) })
	for i := 1; i < len(holds); i++ {
		prev, h := holds[i-1], holds[i]
		if h.epoch == prev.epoch {
			t.Fatalf("%s and %s both hold epoch %d", prev.who, h.who, h.epoch)
		}
		if h.start.Before(prev.end) {
			t.Fatalf("%s (epoch %d) took the lease %s before %s (epoch %d) let it go",
				h.who, h.epoch, prev.end.Sub(h.start), prev.who, prev.epoch)
		}
	}
}

func TestTakeReleaseEpochs(t *testing.T) {
	c, ctx := leases(t), context.Background()
	a, err := TryTake(ctx, c, "k", time.Minute)
	if err != nil || a == nil || a.Epoch() != 1 {
		t.Fatalf("first take: %v %v", a, err)
	}
	if b, err := TryTake(ctx, c, "k", time.Minute); b != nil || err != nil {
		t.Fatalf("a held key taken again: %v %v", b, err)
	}
	// Another key, even one that starts with this one, is its own.
	for _, k := range []string{"k#1", "k#", "kk", "k:"} {
		if o, err := TryTake(ctx, c, k, time.Minute); o == nil || err != nil || o.Epoch() != 1 {
			t.Fatalf("key %q: %v %v", k, o, err)
		}
	}
	if _, err := Take(ctx, c, "k", time.Minute, 30*time.Millisecond); !isDown(err) {
		t.Fatalf("waiting for a held key: %v, want 503", err)
	}
	a.Release(ctx)
	b, err := TryTake(ctx, c, "k", time.Minute)
	if err != nil || b == nil || b.Epoch() != 2 {
		t.Fatalf("after release: %v %v", b, err)
	}
	// A second release of the old holder frees nothing.
	a.Release(ctx)
	if o, _ := TryTake(ctx, c, "k", time.Minute); o != nil {
		t.Fatal("the old holder's release freed the new holder's lease")
	}
	if err := a.Renew(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("renew after release: %v", err)
	}
	// Earlier claims are purged; the latest stays, so epochs go on.
	if n := testkit.Count(t, c, bson.E{Key: "lease", Value: "k"}); n != 1 {
		t.Fatalf("%d claims of k kept, want 1", n)
	}
	b.Release(ctx)
	if o, _ := TryTake(ctx, c, "k", time.Minute); o == nil || o.Epoch() != 3 {
		t.Fatalf("third take: %v", o)
	}
}

func TestExpiredHolderLosesEverything(t *testing.T) {
	c, ctx := leases(t), context.Background()
	clock := testkit.RunningClock()
	setClock(t, clock)
	a, err := TryTake(ctx, c, "k", 50*time.Millisecond)
	if err != nil || a == nil {
		t.Fatal(a, err)
	}
	clock.Advance(60 * time.Millisecond)
	if err := a.Check(0); !errors.Is(err, ErrLost) {
		t.Fatalf("check past the deadline: %v", err)
	}
	b, err := TryTake(ctx, c, "k", time.Minute)
	if err != nil || b == nil || b.Epoch() != 2 {
		t.Fatalf("taking an expired lease: %v %v", b, err)
	}
	if err := a.Renew(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("renew of an expired lease: %v", err)
	}
	a.Release(ctx)
	if o, _ := TryTake(ctx, c, "k", time.Minute); o != nil {
		t.Fatal("the expired holder's release freed the new holder's lease")
	}
	if err := b.Check(time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestStaleTakerOfPurgedEpoch: a taker that read the key before a later
// take purged the epoch it is about to insert succeeds at the insert, and
// still does not hold.
func TestStaleTakerOfPurgedEpoch(t *testing.T) {
	c, ctx := leases(t), context.Background()
	stale, err := latest(ctx, c, "k") // nothing yet: it will insert epoch 1
	if err != nil || stale != nil {
		t.Fatal(stale, err)
	}
	a, _ := TryTake(ctx, c, "k", time.Minute)
	a.Release(ctx)
	b, _ := TryTake(ctx, c, "k", time.Minute) // purges epoch 1
	if b == nil || testkit.Count(t, c, bson.E{Key: "epoch", Value: 1}) != 0 {
		t.Fatal("epoch 1 not purged")
	}
	l, err := takeAfter(ctx, c, "k", time.Minute, stale)
	if err != nil || l != nil {
		t.Fatalf("a stale taker holds: %v %v", l, err)
	}
	if err := b.Check(time.Second); err != nil {
		t.Fatal(err)
	}
}

// purgedAfterTwoTakes takes and releases key k twice, then purges its
// claims as ended two hours ago, and returns what a stale taker read
// just before that purge: the latest claim, epoch 2.
func purgedAfterTwoTakes(t *testing.T, c *mongo.Collection) *claim {
	t.Helper()
	ctx := context.Background()
	for range 2 {
		l, err := TryTake(ctx, c, "k", time.Minute)
		if err != nil || l == nil {
			t.Fatal(l, err)
		}
		l.Release(ctx)
	}
	stale, err := latest(ctx, c, "k")
	if err != nil || stale == nil || stale.Epoch != 2 {
		t.Fatal(stale, err)
	}
	if _, err := c.UpdateMany(ctx, bson.D{},
		bson.D{{Key: "$set", Value: bson.D{{Key: "expires_at", Value: time.Now().Add(-2 * time.Hour)}}}}); err != nil {
		t.Fatal(err)
	}
	if err := Purge(ctx, c, time.Hour); err != nil {
		t.Fatal(err)
	}
	return stale
}

// heldAfterPurge is purgedAfterTwoTakes followed by a taker that read
// nothing and so takes the key again at epoch 1; it returns the stale
// read and that holder.
func heldAfterPurge(t *testing.T, c *mongo.Collection) (*claim, *Lease) {
	t.Helper()
	stale := purgedAfterTwoTakes(t, c)
	a, err := TryTake(context.Background(), c, "k", time.Minute)
	if err != nil || a == nil || a.Epoch() != 1 {
		t.Fatalf("the taker after the purge: %v %v, want epoch 1", a, err)
	}
	return stale, a
}

// TestTakerOfAPurgedLatestClaim: a taker that read a key's latest claim
// (long released) just before Purge deleted it inserts the next epoch
// after a second taker, who read nothing, took the key again at epoch 1.
// It must not hold beside that holder, and must leave no claim above
// epoch 1, where the next taker would find the key free.
func TestTakerOfAPurgedLatestClaim(t *testing.T) {
	c, ctx := leases(t), context.Background()
	stale, a := heldAfterPurge(t, c)
	b, err := takeAfter(ctx, c, "k", time.Minute, stale)
	if err != nil || b != nil {
		t.Fatalf("the taker of the purged claim holds beside epoch 1: %v %v", b, err)
	}
	next, err := TryTake(ctx, c, "k", time.Minute)
	if err != nil || next != nil {
		t.Fatalf("a third taker holds beside epoch 1: %v %v", next, err)
	}
	if err := a.Check(time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestTakerBelowAWithdrawnClaim: the other order of the race above. The
// taker that read nothing inserts epoch 1 and then finds the stale
// taker's claim above it; the stale taker then withdraws (its claim
// followed a purged one). Neither held, and the key must be free at once:
// an epoch 1 left live, with no holder, kept the key for its whole TTL
// (cost-analysis TestLocksPurged: the job's lease unavailable for 30 s,
// an hour's scheduled run lost).
func TestTakerBelowAWithdrawnClaim(t *testing.T) {
	c, ctx := leases(t), context.Background()
	purgedAfterTwoTakes(t, c)
	// The stale taker, who read epoch 2 before the purge, inserts epoch 3
	// right after this taker's insert of epoch 1.
	stale := claim{ID: claimID("k", 3), Key: "k", Epoch: 3, Owner: "stale", ExpiresAt: time.Now().Add(time.Minute).UTC()}
	restore := CutAfterInsert("k", func() {
		if _, err := c.InsertOne(ctx, stale); err != nil {
			t.Error(err)
		}
	})
	a, err := TryTake(ctx, c, "k", time.Minute)
	restore()
	if err != nil || a != nil {
		t.Fatalf("the taker below the stale claim: %v %v, want no hold", a, err)
	}
	// The stale taker finds epoch 2 gone and withdraws.
	if _, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: stale.ID}, {Key: "owner", Value: stale.Owner}}); err != nil {
		t.Fatal(err)
	}
	next, err := TryTake(ctx, c, "k", time.Minute)
	if err != nil || next == nil {
		t.Fatalf("the next taker: %v %v, want the key free at once", next, err)
	}
}

// TestCutTakerOfAPurgedLatestClaim: the stale taker of
// TestTakerOfAPurgedLatestClaim is cut right after its insert (its answer
// lost), so it abandons its claim instead of checking it. Marked
// released, that claim would be the latest above the live epoch 1, and
// the next taker would take the key beside its holder.
func TestCutTakerOfAPurgedLatestClaim(t *testing.T) {
	c, ctx := leases(t), context.Background()
	stale, a := heldAfterPurge(t, c)
	cut, cancel := context.WithCancel(ctx)
	restore := CutAfterInsert("k", cancel)
	b, err := takeAfter(cut, c, "k", time.Minute, stale)
	restore()
	if b != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut stale taker: %v %v, want context.Canceled", b, err)
	}
	next, err := TryTake(ctx, c, "k", time.Minute)
	if err != nil || next != nil {
		t.Fatalf("a taker holds beside epoch 1: %v %v", next, err)
	}
	if err := a.Check(time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestTwoStaleTakersOfPurgedClaims: two takers read before a purge, one
// the latest claim (epoch 2), one the claim before it (epoch 1); after
// the purge a third takes the key at epoch 1. The second stale taker
// inserts epoch 2 again, then the first inserts epoch 3: epoch 2 is
// there, but not the claim it followed, and it must not hold beside
// the holder of epoch 1.
func TestTwoStaleTakersOfPurgedClaims(t *testing.T) {
	c, ctx := leases(t), context.Background()
	stale, a := heldAfterPurge(t, c)
	// The second stale taker's insert of epoch 2 (it then finds epoch 1
	// is not the claim it followed, and withdraws; not yet).
	if _, err := c.InsertOne(ctx, claim{ID: claimID("k", 2), Key: "k", Epoch: 2, Owner: "stale", ExpiresAt: time.Now().Add(time.Minute).UTC()}); err != nil {
		t.Fatal(err)
	}
	b, err := takeAfter(ctx, c, "k", time.Minute, stale)
	if err != nil || b != nil {
		t.Fatalf("the first stale taker holds beside epoch 1: %v %v", b, err)
	}
	if err := a.Check(time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRacingTakersUnderPurge: takers race for one key on two clients
// while Purge deletes every ended claim at once, so takes keep meeting
// purged claims (the two races above, in any order). Never two holders,
// and the key is never kept by a claim no one holds: each take gets the
// key within a wait far below the TTL such a claim would keep it for.
func TestRacingTakersUnderPurge(t *testing.T) {
	db := testkit.Get().Database(t)
	other, err := store.Connect(context.Background(), testkit.Get().Mongo.URI, store.Options{MaxPoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Disconnect(context.Background()) }()
	colls := []*mongo.Collection{db.Collection("leases"), other.Database(db.Name()).Collection("leases")}
	ctx, stop := context.WithCancel(context.Background())
	var purges sync.WaitGroup
	purges.Go(func() {
		for ctx.Err() == nil {
			if err := Purge(ctx, colls[0], 0); err != nil && ctx.Err() == nil && !store.Busy(err) {
				t.Error(err)
			}
			time.Sleep(2 * time.Millisecond) // room for the store's one writer
		}
	})
	const workers, rounds = 4, 10
	var holders atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				l, err := Take(context.Background(), colls[w%2], "k", time.Hour, 20*time.Second)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				time.Sleep(time.Millisecond) // the holder's work, for a second holder to overlap
				holders.Add(-1)
				l.Release(context.Background())
			}
		})
	}
	wg.Wait()
	stop()
	purges.Wait()
}

// TestTakeWhileStoreBusy: a take the store refuses because SQLite was
// busy with another writer (FerretDB's "database is locked", which
// applied nothing) is taken again within the wait, not answered as an
// error (cost-analysis' cancel answered it 500); past the wait it is the
// store's 503.
func TestTakeWhileStoreBusy(t *testing.T) {
	c, ctx := leases(t), context.Background()
	busy := store.Wrap(mongo.CommandError{Code: 1, Name: "InternalError", Message: "database is locked (517)"})
	var refused atomic.Int32
	restore := FailTakes("k", func() error {
		if refused.Add(1) <= 3 {
			return busy
		}
		return nil
	})
	defer restore()
	l, err := Take(ctx, c, "k", time.Minute, time.Minute)
	if err != nil || l == nil {
		t.Fatalf("a take after 3 busy answers: %v %v", l, err)
	}
	l.Release(ctx)
	restoreBusy := FailTakes("busy", func() error { return busy })
	defer restoreBusy()
	if _, err := Take(ctx, c, "busy", time.Minute, 50*time.Millisecond); !errors.Is(err, busy) {
		t.Fatalf("a take busy past its wait: %v, want the store's error", err)
	}
}

// TestReleaseWhileStoreBusy: a release the store refuses busy (FerretDB
// over SQLite, nothing applied) is tried again, and the key is free at
// once; on the old release it stayed held until its TTL.
func TestReleaseWhileStoreBusy(t *testing.T) {
	c, ctx := leases(t), context.Background()
	busy := store.Wrap(mongo.CommandError{Code: 1, Name: "InternalError", Message: "database is locked (517)"})
	var refused atomic.Int32
	defer FailReleases("k", func() error {
		if refused.Add(1) <= 3 {
			return busy
		}
		return nil
	})()
	l, err := Take(ctx, c, "k", time.Hour, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	if n := refused.Load(); n != 4 {
		t.Fatalf("release tries: %d, want 4 (3 busy, then written)", n)
	}
	if held, err := Held(ctx, c, "k"); err != nil || held {
		t.Fatalf("the key after a release refused busy 3 times: held %v (%v), want free", held, err)
	}
	// Any other error is not tried again: the claim ends with its TTL.
	defer FailReleases("other", func() error { refused.Add(1); return errors.New("refused") })()
	o, err := Take(ctx, c, "other", time.Hour, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	refused.Store(0)
	o.Release(ctx)
	if n := refused.Load(); n != 1 {
		t.Fatalf("release tries after another error: %d, want 1", n)
	}
}

func TestRunRenewsAndReleases(t *testing.T) {
	c, ctx := leases(t), context.Background()
	// One renewal not answered before the deadline loses the lease (keep
	// waits on it until then), about two thirds of a TTL after it was
	// due: at 1.5 s a process starved that long beside a build lost it.
	ttl := 3 * time.Second
	// The test moves the clock past the take's deadline once Run renewed,
	// rather than wait the whole TTL on the wall clock.
	clock := testkit.RunningClock()
	setClock(t, clock)
	err := Run(ctx, c, "k", ttl, time.Second, func(ctx context.Context) error {
		l := FromContext(ctx)
		first := l.Deadline()
		if testkit.Within(time.Minute, func() bool { return l.Check(0) != nil || l.Deadline().After(first) }) != nil {
			return errors.New("Run did not renew the lease within a minute")
		}
		if err := l.Check(0); err != nil {
			return err
		}
		// Past the deadline of the take the lease is still held: Run
		// renewed it.
		clock.Advance(first.Sub(clock.Now()) + time.Millisecond)
		if !clock.Now().After(first) {
			return errors.New("the clock is not past the take's deadline")
		}
		if err := l.Check(0); err != nil {
			return err
		}
		if o, _ := TryTake(ctx, c, "k", ttl); o != nil {
			return errors.New("taken while Run holds it")
		}
		wctx, cancel, err := Fence(ctx, 100*time.Millisecond)
		if err != nil {
			return err
		}
		defer cancel()
		if d, ok := wctx.Deadline(); !ok || d.After(time.Now().Add(100*time.Millisecond)) {
			return errors.New("the fenced write has no deadline within the margin")
		}
		if _, _, err := Fence(ctx, time.Hour); !errors.Is(err, ErrLost) || !isDown(err) {
			return fmt.Errorf("a fence past the lease's deadline: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := TryTake(ctx, c, "k", ttl); o == nil {
		t.Fatal("not released after Run")
	}
}

// TestRunEndsWorkOfALostLease: when another takes the lease over (here
// by force, as after a stall), fn's context ends with ErrLost.
func TestRunEndsWorkOfALostLease(t *testing.T) {
	c, ctx := leases(t), context.Background()
	err := Run(ctx, c, "k", time.Second, time.Second, func(ctx context.Context) error {
		l := FromContext(ctx)
		// The claim is gone from under the holder: its next renew fails.
		if _, err := c.DeleteOne(context.Background(), bson.D{{Key: "_id", Value: claimID(l.Key(), l.Epoch())}}); err != nil {
			return err
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, ErrLost) {
		t.Fatalf("fn ended with %v, want ErrLost", err)
	}
}

func isDown(err error) bool {
	e, ok := errs.As(err)
	return ok && e.Code == errs.Unavailable
}

func TestPurgeKeepsLiveAndRecentClaims(t *testing.T) {
	c, ctx := leases(t), context.Background()
	old, _ := TryTake(ctx, c, "old", time.Millisecond)
	recent, _ := TryTake(ctx, c, "recent", time.Millisecond)
	live, _ := TryTake(ctx, c, "live", time.Hour)
	if old == nil || recent == nil || live == nil {
		t.Fatal("take failed")
	}
	// Another document of the collection (a schedule's marker) stays.
	if _, err := c.InsertOne(ctx, bson.M{"_id": "marker", "expires_at": time.Now().Add(-48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: claimID("old", 1)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "expires_at", Value: time.Now().Add(-48 * time.Hour)}}}}); err != nil {
		t.Fatal(err)
	}
	if err := Purge(ctx, c, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int64{claimID("old", 1): 0, claimID("recent", 1): 1, claimID("live", 1): 1, "marker": 1} {
		if n := testkit.Count(t, c, bson.E{Key: "_id", Value: id}); n != want {
			t.Fatalf("%s: %d left, want %d", id, n, want)
		}
	}
}

// TestTakeCutAfterInsert: a take whose context ends right after its
// insert was applied on the store (a stop landing while the insert is in
// flight) answers the context's error and leaves the key free for the
// next taker at once, not after its TTL.
func TestTakeCutAfterInsert(t *testing.T) {
	c := leases(t)
	ctx, cancel := context.WithCancel(context.Background())
	restore := CutAfterInsert("k", cancel)
	l, err := Take(ctx, c, "k", time.Hour, time.Minute)
	restore()
	if l != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("a cut take: %v %v, want context.Canceled", l, err)
	}
	if n := testkit.Count(t, c, bson.E{Key: "_id", Value: claimID("k", 1)}); n != 1 {
		t.Fatalf("the cut take's claim: %d, want its insert applied", n)
	}
	next, err := TryTake(context.Background(), c, "k", time.Minute)
	if err != nil || next == nil || next.Epoch() != 2 {
		t.Fatalf("the next taker: %v %v, want epoch 2 at once", next, err)
	}
}

// TestAbandonOwnClaimOnly: the release of a take whose insert is in
// doubt frees the key whether the insert landed or not, and an insert
// still in flight that lands afterwards takes nothing; it never releases
// another taker's claim of the same epoch.
func TestAbandonOwnClaimOnly(t *testing.T) {
	c, ctx := leases(t), context.Background()
	mine := func(epoch int64) *Lease {
		return &Lease{c: c, ttl: time.Hour, key: "k", epoch: epoch, owner: newOwner(), expires: expiry(time.Now(), time.Hour)}
	}
	// Not inserted (cut before it reached the store): the epoch ends
	// released, and the late insert is a duplicate.
	a := mine(1)
	a.abandon(ctx)
	late := claim{ID: claimID("k", 1), Key: "k", Epoch: 1, Owner: a.owner, ExpiresAt: a.expires.UTC()}
	if _, err := c.InsertOne(ctx, late); !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("the late insert of an abandoned take: %v, want a duplicate", err)
	}
	if held, err := Held(ctx, c, "k"); held || err != nil {
		t.Fatalf("held after an abandoned take: %v %v", held, err)
	}
	// Another taker won epoch 2: its claim stays held.
	b, err := TryTake(ctx, c, "k", time.Hour)
	if err != nil || b == nil || b.Epoch() != 2 {
		t.Fatalf("the taker of epoch 2: %v %v", b, err)
	}
	mine(2).abandon(ctx)
	if err := b.Check(time.Minute); err != nil {
		t.Fatal(err)
	}
	if o, _ := TryTake(ctx, c, "k", time.Hour); o != nil {
		t.Fatal("a loser of epoch 2 released the winner's claim")
	}
	// Inserted (its answer lost): ended by its owner, the key free at
	// once. (b went on to delete the claim it followed, as a holder does,
	// so its own is withdrawn rather than marked: the next take is epoch 1.)
	b.abandon(ctx)
	if o, err := TryTake(ctx, c, "k", time.Hour); o == nil || err != nil {
		t.Fatalf("after the owner's abandon: %v %v", o, err)
	}
}
