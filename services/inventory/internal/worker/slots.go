package worker

import (
	"context"
	"strconv"
	"time"

	"github.com/nubes-io/nubes/pkg/lease"
)

// A job's concurrency slots are leases slot-<job>-<i> (i = 1..limit) in
// the leases collection: a sub-task runs only while it holds one. The
// holder's heartbeat renews it, so a holder that dies frees it after
// slotTTL, and a run whose slot was lost stops.

func (w *Worker) slotTTL() time.Duration { return 2 * w.cfg.AckWait }

// takeSlot returns a free slot of the job, now held, or nil when all
// limit slots are held.
func (w *Worker) takeSlot(ctx context.Context, jobID string, limit int) (*lease.Lease, error) {
	for i := 1; i <= limit; i++ {
		l, err := lease.TryTake(ctx, w.leases, SlotKey(jobID, i), w.slotTTL())
		if err != nil || l != nil {
			return l, err
		}
	}
	return nil, nil
}

// SlotKey is the lease of slot i of a job.
func SlotKey(jobID string, i int) string { return "slot-" + jobID + "-" + strconv.Itoa(i) }
