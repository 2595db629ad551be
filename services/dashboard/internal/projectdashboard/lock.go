package projectdashboard

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/store"
)

// locks serialize the writers of one dashboard across every replica: a
// lease per dashboard id (pkg/lease), renewed while the writer runs.
//
// Why not a compare-and-set on the dashboard's version: FerretDB 1.24
// runs a conditional update as a read, then a write of the whole
// document, so two updates filtered on the same version may both match
// and the later write erases the earlier. The version snapshots are
// keyed by one _id per version, so even a writer that outlived its lease
// can never take a version number another writer holds.
type locks struct {
	c    *mongo.Collection
	ttl  time.Duration // a lease not renewed for this long was left by a crashed writer
	wait time.Duration // how long a writer waits for a busy dashboard
}

// with runs fn while holding the lease of dashboard id. A dashboard that
// stays busy longer than l.wait answers 503 (retry later).
func (l locks) with(ctx context.Context, id string, fn func(ctx context.Context) error) error {
	return lease.Run(ctx, l.c, id, l.ttl, l.wait, fn)
}

// isDuplicate reports a unique key conflict on MongoDB or FerretDB.
func isDuplicate(err error) bool {
	e, ok := errs.As(store.Wrap(err))
	return ok && e.Code == errs.SaveUniqueValues
}
