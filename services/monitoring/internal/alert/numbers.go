package alert

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/store"
)

// alert_number is a counter per domain with no gap and no duplicate,
// under concurrent creates on several replicas and a creator killed
// mid-way. FerretDB has no atomic increment, so numbering runs under the
// domain's lease (alert-number#<domain>) and keeps its counter in one
// record that only the lease holder writes, ahead of the alerts. The
// creates a replica has waiting for a domain are numbered as one batch
// under one take of the lease (the take, not the writes, is what costs):
//
//  1. counter := {next: n, batch: [id_0 .. id_k-1]}  (write-ahead)
//  2. insert the alerts in order, id_i with number n+i
//  3. counter := {next: n+k}
//
// A holder killed after 1 leaves the batch set: the next holder finds
// which of its alerts are stored with their numbers, in order (inserts
// go in order, so they are a prefix id_0 .. id_j-1), and goes on from
// n+j. An alert already stored (a retried insert of a derived id) ends
// the batch where it stands: the counter is written, and the rest is a
// batch of its own. Every write is fenced (lease.Fence), so a holder
// that lost its lease writes nothing after the next holder's writes.
type counter struct {
	ID   string `bson:"_id"`
	Next int64  `bson:"next"`
	// Pending is the one-alert batch of the counter as stored before
	// batches (read, never written).
	Pending string   `bson:"pending,omitempty"`
	Batch   []string `bson:"batch,omitempty"`
}

// maxBatch bounds a batch, so that one take of the lease does not hold it
// for long: the holder's inserts are sequential.
const maxBatch = 64

// waiting is a create waiting for its number.
type waiting struct {
	a       *Alert
	done    bool
	out     *Alert
	created bool
	err     error
}

// Bounds of the numbering lease.
const (
	numberTTL  = 15 * time.Second
	numberWait = time.Minute
)

// stripes are in-process locks in front of leases: callers of one
// replica take turns before the lease, so that one of them at a time
// polls it. Numbering and changes have their own, and neither is taken
// while holding the other, so a shared stripe never deadlocks.
type stripes [16]sync.Mutex

func stripe(s *stripes, key string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return &s[h.Sum32()%uint32(len(s))]
}

func counterID(domainID string) string { return "alert-number#" + domainID }

func isNotFound(err error) bool {
	e, ok := errs.As(err)
	return ok && e.Code == errs.NotFoundCode
}

// number stores a, numbered; created is false when an alert of its id
// was stored already (it is returned as stored).
func (as *Alerts) number(ctx context.Context, a *Alert) (out *Alert, created bool, err error) {
	w := &waiting{a: a}
	as.queueMu.Lock()
	if as.queued == nil {
		as.queued = map[string][]*waiting{}
	}
	as.queued[a.DomainID] = append(as.queued[a.DomainID], w)
	as.queueMu.Unlock()
	// Creates of one replica queue here rather than all poll the lease;
	// the one that gets the stripe numbers what is queued, its own
	// included, unless one before it did.
	mu := stripe(&as.numbering, a.DomainID)
	mu.Lock()
	if !w.done {
		as.queueMu.Lock()
		q := as.queued[a.DomainID]
		delete(as.queued, a.DomainID)
		as.queueMu.Unlock()
		for len(q) > 0 {
			batch := q[:min(len(q), maxBatch)]
			q = q[len(batch):]
			// Another create's batch: the caller that leaves must not
			// cut it (lease.Run bounds the wait and the work).
			err := lease.Run(context.WithoutCancel(ctx), as.claims, counterID(a.DomainID), numberTTL, numberWait, func(ctx context.Context) error {
				return as.numberBatch(ctx, a.DomainID, batch)
			})
			for _, b := range batch {
				if !b.done {
					b.done, b.err = true, err
					if b.err == nil {
						b.err = errs.Down("The alert numbering", errors.New("not numbered"))
					}
				}
			}
		}
	}
	mu.Unlock()
	if w.created && w.err == nil && as.created != nil {
		as.created(w.out.AlertID)
	}
	return w.out, w.created, w.err
}

// numberBatch numbers and stores the batch under the domain's lease.
func (as *Alerts) numberBatch(ctx context.Context, domainID string, batch []*waiting) error {
	var c counter
	err := as.claims.FindOne(ctx, bson.D{{Key: "_id", Value: counterID(domainID)}}).Decode(&c)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		c = counter{ID: counterID(domainID), Next: 1}
	case err != nil:
		return store.Wrap(err)
	}
	if c.Pending != "" {
		c.Batch = []string{c.Pending}
	}
	// A batch left by a holder that stopped: its stored prefix took
	// c.Next, c.Next+1, ...
	from := c.Next
	for i, id := range c.Batch {
		got, err := as.Load(ctx, id)
		if isNotFound(err) {
			break
		}
		if err != nil {
			return err
		}
		if got.AlertNumber != from+int64(i) {
			break // stored before that batch, with a number of its own
		}
		c.Next = got.AlertNumber + 1
	}
	for len(batch) > 0 {
		ids := make([]string, len(batch))
		for i, b := range batch {
			ids[i] = b.a.ID
		}
		n := c.Next
		if err := as.writeCounter(ctx, counter{ID: c.ID, Next: n, Batch: ids}); err != nil {
			return err
		}
		stopped := len(batch)
		for i, b := range batch {
			b.a.AlertNumber = n + int64(i)
			wctx, cancel, err := lease.Fence(ctx, fence)
			if err != nil {
				return err
			}
			_, err = as.c.InsertOne(wctx, b.a)
			cancel()
			if mongo.IsDuplicateKeyError(err) {
				// Stored already (a retried insert of a derived id): its
				// number and the ones after stay free, unless the stored
				// alert holds one (a try killed after its insert).
				out, err := as.Load(ctx, b.a.ID)
				if err != nil {
					return err
				}
				b.done, b.out = true, out
				c.Next = n + int64(i)
				if out.AlertNumber >= c.Next {
					c.Next = out.AlertNumber + 1
				}
				stopped = i
				break
			}
			if err != nil {
				return store.Wrap(err)
			}
			b.done, b.out, b.created = true, b.a, true
		}
		if stopped == len(batch) {
			c.Next = n + int64(len(batch))
			batch = nil
		} else {
			batch = batch[stopped+1:]
		}
		if err := as.writeCounter(ctx, counter{ID: c.ID, Next: c.Next}); err != nil {
			return err
		}
	}
	return nil
}

func (as *Alerts) writeCounter(ctx context.Context, c counter) error {
	wctx, cancel, err := lease.Fence(ctx, fence)
	if err != nil {
		return err
	}
	defer cancel()
	_, err = as.claims.ReplaceOne(wctx, bson.D{{Key: "_id", Value: c.ID}}, c, options.Replace().SetUpsert(true))
	return store.Wrap(err)
}
