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
// record that only the lease holder writes, ahead of the alert:
//
//  1. counter := {next: n, pending: <alert id>}  (write-ahead)
//  2. insert the alert with number n
//  3. counter := {next: n+1}
//
// A holder killed after 1 leaves pending set: the next holder finds the
// pending alert stored (it got n: go on from n+1) or not (n is still
// free: reuse it). Every write is fenced (lease.Fence), so a holder that
// lost its lease writes nothing after the next holder's writes.
type counter struct {
	ID      string `bson:"_id"`
	Next    int64  `bson:"next"`
	Pending string `bson:"pending"`
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
	// Creates of one replica queue here rather than all poll the lease.
	mu := stripe(&as.numbering, a.DomainID)
	mu.Lock()
	defer mu.Unlock()
	err = lease.Run(ctx, as.claims, counterID(a.DomainID), numberTTL, numberWait, func(ctx context.Context) error {
		var c counter
		err = as.claims.FindOne(ctx, bson.D{{Key: "_id", Value: counterID(a.DomainID)}}).Decode(&c)
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			c = counter{ID: counterID(a.DomainID), Next: 1}
		case err != nil:
			return store.Wrap(err)
		}
		if c.Pending != "" && c.Pending != a.ID {
			if _, err := as.Load(ctx, c.Pending); err == nil {
				c.Next++ // the pending alert was stored with c.Next
			} else if !isNotFound(err) {
				return err
			}
		}
		n := c.Next
		if err := as.writeCounter(ctx, counter{ID: c.ID, Next: n, Pending: a.ID}); err != nil {
			return err
		}
		a.AlertNumber = n
		wctx, cancel, err := lease.Fence(ctx, fence)
		if err != nil {
			return err
		}
		_, err = as.c.InsertOne(wctx, a)
		cancel()
		if mongo.IsDuplicateKeyError(err) {
			// Stored already (a retried insert of a derived id): n stays
			// free, unless the stored alert holds it (a try killed after
			// its insert left the counter pending on this very alert).
			if out, err = as.Load(ctx, a.ID); err != nil {
				return err
			}
			if out.AlertNumber >= n {
				n = out.AlertNumber + 1
			}
			return as.writeCounter(ctx, counter{ID: c.ID, Next: n})
		}
		if err != nil {
			return store.Wrap(err)
		}
		out, created = a, true
		return as.writeCounter(ctx, counter{ID: c.ID, Next: n + 1})
	})
	if created && err == nil && as.created != nil {
		as.created(out.AlertID)
	}
	return out, created, err
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
