// Package lease is the one lock of the kit: a lease on a key, held by one
// owner across replicas, that expires when its holder stops renewing it
// and carries a fencing token (its epoch) that grows with every take.
//
// It is safe on MongoDB and on FerretDB 1.24, whose conditional updates
// and filtered deletes read, then write by _id, and so can overwrite or
// delete a record someone else just wrote. Only the insert of a new _id
// is atomic on both, so that is what decides:
//
//   - a take inserts the claim <key>#<epoch+1> after reading the latest
//     claim <key>#<epoch> and finding it expired or released: of any
//     number of takers of the same epoch, the unique _id lets one win;
//   - a claim is written afterwards only by its owner (renew, release),
//     so a read-then-write update never meets another writer;
//   - a release marks the owner's own claim; a take that holds deletes
//     only the claim below its own, and a take that does not hold only
//     its own claim (below), so while a holder could still act the
//     latest claim of a key that was held stays and held epochs never go
//     back; only Purge deletes a key's latest claim, an hour or more
//     after it ended, and the key starts again at epoch 1;
//   - a taker that read a purged epoch and re-inserted it sees, when it
//     reads again after its insert, a later claim, and does not hold; it
//     withdraws its claim, which no one held, since the later claim may
//     be withdrawn as well (next point);
//   - a taker whose insert followed a claim purged meanwhile (the key
//     starts again at epoch 1 after Purge) deletes its own claim and
//     does not hold: the key's new epoch 1 may have a holder below it.
//     It looks for the very claim it read, by owner: another stale taker
//     may have inserted that epoch again;
//   - a take that fails or is cut after its insert may have gone through
//     ends its own claim (abandon: the live claim inserted again under
//     the same _id, or the existing one if its owner token is the
//     take's, then marked released, or deleted when the claim it
//     followed is gone, as above), so that the key is free at once, not
//     after the TTL, and never marked free above a holder of epoch 1.
//
// A holder holds while its clock is before the expiry it wrote; a renew
// counts only if its answer came back before the expiry it extends (so
// it was applied before any taker could find the claim expired). Work
// under a lease renews it (Run does) or is bounded well below its TTL,
// and a final write whose loss to a later holder would be wrong goes
// through Fence. Replicas' clocks are assumed to agree well within
// a TTL.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
)

// now is this process's clock for expiries; tests of TTLs move their own
// (setClock) rather than sleep through one.
var now = time.Now

// ErrLost is the cause of a Run context that ended because the lease
// expired or was taken over, and the error of Renew and Check then.
var ErrLost = errors.New("lease lost")

// claim is one take of a key: <key>#<epoch>, written by its owner only.
// Other documents may share the collection: claims carry the field lease.
type claim struct {
	ID        string    `bson:"_id"`
	Key       string    `bson:"lease"`
	Epoch     int64     `bson:"epoch"`
	Owner     string    `bson:"owner"`
	ExpiresAt time.Time `bson:"expires_at"`
	Released  bool      `bson:"released,omitempty"`
}

// epochDigits pads epochs in _id so that _id order is epoch order.
const epochDigits = 19

func claimID(key string, epoch int64) string { return fmt.Sprintf("%s#%0*d", key, epochDigits, epoch) }

// ofKey selects the claims of key: the _id range keeps the query on the
// _id index, the lease field drops the keys that merely start with key.
func ofKey(key string) bson.D {
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: key + "#"}, {Key: "$lt", Value: key + "#:"}}}, {Key: "lease", Value: key}}
}

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	c     *mongo.Collection
	ttl   time.Duration
	key   string
	epoch int64
	owner string
	// followed is the owner of the claim this take followed (epoch-1),
	// "" at epoch 1: the take must find that very claim still there.
	followed string

	mu      sync.Mutex // serialises the owner's writes to its claim
	expires time.Time  // by this process's clock
	lost    bool
}

// Key is the key held.
func (l *Lease) Key() string { return l.key }

// Epoch is the fencing token: every take of the key has a larger one.
func (l *Lease) Epoch() int64 { return l.epoch }

// Deadline is when the lease ends unless renewed.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Check returns ErrLost unless the lease is held for at least margin
// more: call it right before a write that a later holder must not see
// land after its own, with a margin above that write's timeout.
func (l *Lease) Check(margin time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost || l.expires.Sub(now()) < margin {
		return ErrLost
	}
	return nil
}

// latest returns the claim of key with the largest epoch, nil for none.
func latest(ctx context.Context, c *mongo.Collection, key string) (*claim, error) {
	var cl claim
	err := c.FindOne(ctx, ofKey(key), options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}})).Decode(&cl)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &cl, nil
}

func newOwner() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TryTake takes key in c for ttl, or returns nil when another holds it.
func TryTake(ctx context.Context, c *mongo.Collection, key string, ttl time.Duration) (*Lease, error) {
	if err := fault(&takeFaults, key); err != nil {
		return nil, err
	}
	cur, err := latest(ctx, c, key)
	if err != nil {
		return nil, err
	}
	return takeAfter(ctx, c, key, ttl, cur)
}

// expiry is now+ttl as the store keeps it (milliseconds), so that holder
// and takers compare the same instant.
func expiry(now time.Time, ttl time.Duration) time.Time {
	return now.Add(ttl).Truncate(time.Millisecond)
}

// takeAfter takes key when cur, the latest claim read, is free.
func takeAfter(ctx context.Context, c *mongo.Collection, key string, ttl time.Duration, cur *claim) (*Lease, error) {
	at := now()
	l := &Lease{c: c, ttl: ttl, key: key, epoch: 1, owner: newOwner(), expires: expiry(at, ttl)}
	if cur != nil {
		if !cur.Released && at.Before(cur.ExpiresAt) {
			return nil, nil
		}
		l.epoch, l.followed = cur.Epoch+1, cur.Owner
	}
	epoch := l.epoch
	// The expiry stored is the one this process holds by: a taker that
	// finds it passed finds it passed here too.
	_, err := c.InsertOne(ctx, claim{ID: claimID(key, epoch), Key: key, Epoch: epoch, Owner: l.owner, ExpiresAt: l.expires.UTC()})
	if err == nil {
		if cut, ok := cuts.Load(key); ok {
			cut.(func())()
			err = ctx.Err() // as the driver answers a context ended in flight
		}
	}
	if mongo.IsDuplicateKeyError(err) {
		return nil, nil // another taker won this epoch
	}
	if err != nil {
		// The insert may have been applied (or be in flight): a claim
		// left behind would keep the key for its TTL with no holder.
		l.abandon(ctx)
		return nil, store.Wrap(err)
	}
	// The claim this take followed must still be there. Purge deletes a
	// key's latest claim once it ended long ago, and the key starts again
	// at epoch 1: if that happened between this take's read and its
	// insert, a taker that read nothing may hold epoch 1 now, below this
	// claim, where a later taker reading the latest would not see it.
	// The very claim, by its owner: another stale taker may have
	// inserted that epoch again since.
	if epoch > 1 {
		gone, err := l.followedGone(ctx)
		if err != nil {
			l.abandon(ctx)
			return nil, err
		}
		if gone {
			l.withdraw(ctx)
			return nil, nil
		}
	}
	// A taker that read before a purge may have inserted an epoch that
	// was purged: a later claim then exists, and this one never held.
	// It withdraws too: the later claim may be such a stale taker's, who
	// withdraws in turn, and this claim, left live, would then be the
	// latest with no holder and keep the key for its TTL.
	after, err := latest(ctx, c, key)
	if err != nil {
		l.abandon(ctx)
		return nil, err
	}
	if after == nil || after.Epoch != epoch || after.Owner != l.owner {
		l.withdraw(ctx)
		return nil, nil
	}
	// The claim before is no longer needed (never the latest: epochs
	// only grow). By _id alone, which FerretDB looks up rather than
	// scans; older stragglers (a stale taker's) go with Purge. A delete
	// that races a stale re-insert removes at worst a claim that was
	// never held, as above.
	if epoch > 1 {
		_, _ = c.DeleteOne(ctx, bson.D{{Key: "_id", Value: claimID(key, epoch-1)}})
	}
	return l, nil
}

// Take takes key, waiting up to wait for its holder to release it or let
// it expire; past wait it answers 503.
func Take(ctx context.Context, c *mongo.Collection, key string, ttl, wait time.Duration) (*Lease, error) {
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for {
		l, err := TryTake(ctx, c, key, ttl)
		// A store busy with another writer (SQLite under FerretDB)
		// applied nothing: taken again, as a held key is waited for.
		if (err != nil && !store.Busy(err)) || l != nil {
			return l, err
		}
		if time.Now().After(deadline) {
			if err != nil {
				return nil, err
			}
			// "the lock ": nothing was done yet (testkit.CallQueued
			// retries exactly this answer; Fence's differs).
			return nil, errs.Down("the lock "+key, fmt.Errorf("held by another request for %s", wait))
		}
		// Jittered, growing pauses: waiting takers do not retry in step.
		select {
		case <-ctx.Done():
			return nil, store.Wrap(ctx.Err())
		case <-time.After(pause + time.Duration(mrand.Int64N(int64(pause)))):
		}
		pause = min(2*pause, 80*time.Millisecond)
	}
}

// byID selects the owner's claim. By _id alone: FerretDB scans the
// collection for _id plus any other condition, and the _id names this
// owner's take (unique per epoch; a claim purged then re-inserted by a
// stale taker exists only once a later epoch does, when this lease has
// expired and Renew refuses before writing).
func (l *Lease) byID() bson.D { return bson.D{{Key: "_id", Value: claimID(l.key, l.epoch)}} }

// Renew extends the lease by its TTL from now. It returns ErrLost when
// the lease expired before the renew was answered, or was released.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent := now()
	if l.lost || !sent.Before(l.expires) {
		l.lost = true
		return ErrLost
	}
	next := expiry(sent, l.ttl)
	res, err := l.c.UpdateOne(ctx, l.byID(), bson.D{{Key: "$set", Value: bson.D{{Key: "expires_at", Value: next.UTC()}}}})
	if err != nil {
		return store.Wrap(err) // held until l.expires all the same
	}
	// Answered after the old expiry: a taker may have found the claim
	// expired before this write landed.
	if res.MatchedCount == 0 || !now().Before(l.expires) {
		l.lost = true
		return ErrLost
	}
	l.expires = next
	return nil
}

// Release gives the lease up if this owner still holds it. It marks the
// owner's own claim, so it can never free a lease someone else took. It
// runs even when ctx is cancelled (a deferred release).
func (l *Lease) Release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return
	}
	l.lost = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// A store busy with another writer (SQLite under FerretDB) applied
	// nothing: released again within the bound, as Take takes again. Left
	// as it was, the key stayed held for the rest of its TTL, and every
	// writer queued on it in that time answered 503.
	for pause := time.Millisecond; ; pause = min(2*pause, 80*time.Millisecond) {
		err := fault(&releaseFaults, l.key)
		if err == nil {
			// The claim ended now, not at its expiry: Purge counts from here.
			_, err = l.c.UpdateOne(ctx, l.byID(), bson.D{{Key: "$set", Value: bson.D{{Key: "released", Value: true},
				{Key: "expires_at", Value: expiry(now(), 0).UTC()}}}})
		}
		if !store.Busy(err) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// abandon ends the claim of a take that failed or was cut after its
// insert may have gone through, on a context of its own (the take's may
// have ended), so that the key is free at once rather than after the
// TTL. Whether the insert was applied is unknown, and so is whether
// another taker of the same epoch won the _id. It finishes the take as
// takeAfter would, then gives it up; the writes are safe on FerretDB's
// non-atomic filters all the same:
//
//   - the take's live claim is inserted again: an insert of the take
//     still in flight then lands on a duplicate _id, never later as a
//     claim no one holds; a duplicate is this take's own claim only when
//     its owner token is this take's, and another taker's claim is
//     never touched;
//   - live, the claim keeps every other taker off while the claim it
//     followed is checked, as takeAfter does: gone (purged, the key
//     maybe held again at epoch 1 below it), the claim is withdrawn, for
//     marked released it would let the next taker take the key beside
//     that holder; still there, the claim is marked released by _id
//     (this owner's claim is written by no one else).
//
// When the store does not answer, the claim ends with its TTL.
func (l *Lease) abandon(ctx context.Context) {
	l.mu.Lock()
	l.lost = true // never handed out: no other writer of l from here
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := l.c.InsertOne(ctx, claim{ID: claimID(l.key, l.epoch), Key: l.key, Epoch: l.epoch, Owner: l.owner, ExpiresAt: l.expires.UTC()})
	if mongo.IsDuplicateKeyError(err) {
		var cur claim
		err = l.c.FindOne(ctx, l.byID()).Decode(&cur)
		if err == nil && cur.Owner != l.owner {
			return // another taker's claim
		}
	}
	if err != nil {
		return
	}
	if gone, err := l.followedGone(ctx); err != nil || gone {
		l.withdraw(ctx)
		return
	}
	_, _ = l.c.UpdateOne(ctx, l.byID(), bson.D{{Key: "$set", Value: bson.D{{Key: "released", Value: true}}}})
}

// withdraw deletes the claim of a take that did not hold (takeAfter):
// one that followed a purged claim, which, marked released, would be the
// latest claim above a live holder's epoch 1, so that the next taker
// would take over from it; or one below a later claim, which that claim's
// withdraw would leave live with no holder. By _id and owner, on a
// context of its own; when the store does not answer, the claim ends
// with its TTL (the one case left: see Purge).
func (l *Lease) withdraw(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = l.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: claimID(l.key, l.epoch)}, {Key: "owner", Value: l.owner}})
}

// followedGone reports whether the claim this take followed is no longer
// there: no claim of epoch-1, or one another owner inserted since. Never
// at epoch 1, which followed none.
func (l *Lease) followedGone(ctx context.Context) (bool, error) {
	if l.epoch == 1 {
		return false, nil
	}
	var prev claim
	err := l.c.FindOne(ctx, bson.D{{Key: "_id", Value: claimID(l.key, l.epoch-1)}}, options.FindOne().SetProjection(bson.D{{Key: "owner", Value: 1}})).Decode(&prev)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return true, nil
	}
	if err != nil {
		return false, store.Wrap(err)
	}
	return prev.Owner != l.followed, nil
}

type ctxKey struct{}

// FromContext returns the lease Run holds for ctx, nil outside Run.
func FromContext(ctx context.Context) *Lease {
	l, _ := ctx.Value(ctxKey{}).(*Lease)
	return l
}

// Run takes key (as Take), runs fn while holding it and releases it.
// The lease is renewed every ttl/3 while fn runs; fn's context ends with
// cause ErrLost when the lease is lost, so that its writes stop, and
// carries the lease (FromContext) for a Check before a final write.
func Run(ctx context.Context, c *mongo.Collection, key string, ttl, wait time.Duration, fn func(ctx context.Context) error) error {
	l, err := Take(ctx, c, key, ttl, wait)
	if err != nil {
		return err
	}
	defer l.Release(ctx)
	runCtx, cancel := context.WithCancelCause(context.WithValue(ctx, ctxKey{}, l))
	defer cancel(nil)
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		l.keep(runCtx, cancel, done)
	}()
	err = fn(runCtx)
	close(done)
	<-renewed
	return err
}

// keep renews l every ttl/3 until done, and cancels with ErrLost once
// the lease is lost or its deadline passes without a renew (the store
// did not answer).
func (l *Lease) keep(ctx context.Context, cancel context.CancelCauseFunc, done <-chan struct{}) {
	every := max(l.ttl/3, time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	expiry := time.NewTimer(l.Deadline().Sub(now()))
	defer expiry.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-expiry.C:
			if starving(l.key) {
				expiry.Reset(every)
				continue
			}
			cancel(ErrLost)
			return
		case <-tick.C:
		}
		if starving(l.key) {
			continue
		}
		// A slow store gets until the deadline: a renew cut earlier
		// would lose a lease that a late answer could still keep.
		rctx, rcancel := context.WithDeadline(ctx, l.Deadline())
		err := l.Renew(rctx)
		rcancel()
		if errors.Is(err, ErrLost) {
			cancel(ErrLost)
			return
		}
		expiry.Reset(l.Deadline().Sub(now()))
	}
}

var starved sync.Map // key -> struct{}

func starving(key string) bool { _, ok := starved.Load(key); return ok }

// Starve stops Run's renewals of key, and the end of its context when
// the lease expires, until restore is called: the holder goes on as one
// whose process was starved of CPU past its TTL would, for tests of the
// writes Fence guards.
func Starve(key string) (restore func()) {
	starved.Store(key, struct{}{})
	return func() { starved.Delete(key) }
}

var takeFaults sync.Map // key -> func() error

// FailTakes makes every take of key ask fault first, until restore is
// called: a take whose fault answers an error fails with it before it
// reads, as one the store refused.
func FailTakes(key string, fault func() error) (restore func()) {
	takeFaults.Store(key, fault)
	return func() { takeFaults.Delete(key) }
}

var releaseFaults sync.Map // key -> func() error

// FailReleases makes every try of a release of key ask fault first,
// until restore is called: an error it answers stands for the store's
// answer to that try, with nothing written.
func FailReleases(key string, fault func() error) (restore func()) {
	releaseFaults.Store(key, fault)
	return func() { releaseFaults.Delete(key) }
}

// fault asks the fault a test set for key in faults (FailTakes,
// FailReleases); nil when there is none.
func fault(faults *sync.Map, key string) error {
	if f, ok := faults.Load(key); ok {
		return f.(func() error)()
	}
	return nil
}

var cuts sync.Map // key -> func()

// CutAfterInsert makes every take of key, until restore is called, run
// cut right after its insert was applied on the store and then answer
// as one whose context ended before the answer came (ctx.Err()): a test
// cancels the take's context in cut, as a stop landing while the insert
// is in flight.
func CutAfterInsert(key string, cut func()) (restore func()) {
	cuts.Store(key, cut)
	return func() { cuts.Delete(key) }
}

// Fence guards a final write under Run that a later holder must not see
// land after its own (a SUCCESS over a CANCELED): it answers 503
// (wrapping ErrLost) unless the lease ctx carries is held for margin
// more, and returns a context for the write that ends after margin, so
// the write lands while the lease is still held or not at all. Outside
// Run it returns ctx as is.
func Fence(ctx context.Context, margin time.Duration) (context.Context, context.CancelFunc, error) {
	l := FromContext(ctx)
	if l == nil {
		return ctx, func() {}, nil
	}
	if err := l.Check(margin); err != nil {
		return nil, nil, errs.Down("the lease "+l.key, err)
	}
	wctx, cancel := context.WithTimeout(ctx, margin)
	return wctx, cancel, nil
}

// Fencer is Fence with margin for a write that must be under Run
// (store.Teardown's Fence): outside Run it refuses (500), since the
// write would be guarded by nothing. Take margin at most a third of the
// lease's TTL, the period Run renews at: a holder whose renewals land on
// time always has more left, so only one starved or cut off for a whole
// period is refused, and a write has the rest of that period to land.
func Fencer(margin time.Duration) func(ctx context.Context) (context.Context, context.CancelFunc, error) {
	return func(ctx context.Context) (context.Context, context.CancelFunc, error) {
		if FromContext(ctx) == nil {
			return nil, nil, errors.New("a fenced write outside lease.Run")
		}
		return Fence(ctx, margin)
	}
}

// Held reports whether a live holder holds key in c (for tests and
// diagnostics: the answer may be stale as soon as it is given).
func Held(ctx context.Context, c *mongo.Collection, key string) (bool, error) {
	cur, err := latest(ctx, c, key)
	if err != nil || cur == nil {
		return false, err
	}
	return !cur.Released && now().Before(cur.ExpiresAt), nil
}

// Purge deletes the claims of c that ended (expired, or were released:
// Release dates the end) more than keep ago, so that keys used once (a
// job, a task) do not stay for ever. A key idle that
// long starts again at epoch 1: fencing needs epochs to grow only while
// a holder could still act, and none acts keep after its lease ended
// (keep is far above any TTL: an hour or more). The filtered delete reads,
// then deletes by _id: a claim it matched was already that old, and a
// take never reuses an _id while it exists. A taker that read the claim
// just before it was purged finds it gone after its own insert and
// withdraws (takeAfter), so a taker of the new epoch 1 holds alone; only
// if the store then fails that withdraw as well does the withdrawn claim
// stay above a live epoch 1 until its TTL ends.
func Purge(ctx context.Context, c *mongo.Collection, keep time.Duration) error {
	_, err := c.DeleteMany(ctx, bson.D{{Key: "lease", Value: bson.D{{Key: "$exists", Value: true}}},
		{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: now().Add(-keep).UTC()}}}})
	return store.Wrap(err)
}

// PurgeEvery purges c (Purge, keeping keep) every interval, from a
// goroutine of its own, until ctx ends or stop is called; stop waits for
// a purge under way. A failed purge is logged and left to the next one.
// Run it beside the workers of a service whose keys are each taken for
// one thing (a job, a task, a post's flush), or its claims pile up.
func PurgeEvery(ctx context.Context, c *mongo.Collection, interval, keep time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := Purge(ctx, c, keep); err != nil && ctx.Err() == nil {
				log.Warn("ended leases not purged", "collection", c.Name(), "error", err.Error())
			}
		}
	}()
	return func() { cancel(); <-done }
}
