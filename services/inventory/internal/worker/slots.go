package worker

import (
	"context"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/store"
)

// A job's concurrency slots are records slot-<job>-<i> (i = 1..limit) in
// the leases collection: a sub-task runs only while it holds one. Taking
// one is the insert of its _id (atomic on both stores); the holder's
// heartbeat pushes its expiry on, so a holder that dies frees it after
// slotTTL.
type slotDoc struct {
	ID        string    `bson:"_id"`
	Holder    string    `bson:"holder"`
	ExpiresAt time.Time `bson:"expires_at"`
}

func (w *Worker) slotTTL() time.Duration { return 2 * w.cfg.AckWait }

// takeSlot returns the id of a free slot of the job, now held, or "" when
// all limit slots are held.
func (w *Worker) takeSlot(ctx context.Context, jobID string, limit int) (string, error) {
	now := time.Now().UTC()
	for i := 1; i <= limit; i++ {
		id := "slot-" + jobID + "-" + strconv.Itoa(i)
		_, err := w.leases.InsertOne(ctx, slotDoc{ID: id, Holder: w.holder, ExpiresAt: now.Add(w.slotTTL())})
		if err == nil {
			return id, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return "", store.Wrap(err)
		}
		// Held: free it if its holder stopped refreshing it.
		var held slotDoc
		if err := w.leases.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&held); err == nil && held.ExpiresAt.Before(now) {
			_, _ = w.leases.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "expires_at", Value: held.ExpiresAt}})
			if _, err := w.leases.InsertOne(ctx, slotDoc{ID: id, Holder: w.holder, ExpiresAt: now.Add(w.slotTTL())}); err == nil {
				return id, nil
			}
		}
	}
	return "", nil
}

func (w *Worker) refreshSlot(ctx context.Context, id string) {
	_, _ = w.leases.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "holder", Value: w.holder}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "expires_at", Value: time.Now().UTC().Add(w.slotTTL())}}}})
}

func (w *Worker) releaseSlot(ctx context.Context, id string) {
	_, _ = w.leases.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "holder", Value: w.holder}})
}
