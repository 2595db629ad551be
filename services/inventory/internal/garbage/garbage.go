// Package garbage is the garbage collection of an inventory task that
// succeeded: the cloud services of its collector and secret that the
// task did not see become DISCONNECTED, and are deleted, match keys and
// all, at the third such task in a row (upstream
// DEFAULT_DISCONNECTED_STATE_DELETE_POLICY).
//
// It reads by _id alone, never a filtered scan of the collected
// resources; it takes no lease (package worker calls it under the task's)
// and serves no operation.
package garbage

import (
	"context"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// A resource of the task's collector and secret that a successful task
// did not see is DISCONNECTED; the third such task in a row deletes it.
const deleteAfter = 3

// Rosters collects garbage on the inventory's collections.
type Rosters struct {
	services *mongo.Collection
	keys     *mongo.Collection
	tasks    *mongo.Collection
	rosters  *mongo.Collection
}

// New builds garbage collection on db.
func New(db *mongo.Database) *Rosters {
	return &Rosters{services: db.Collection(core.CloudServicesCollection), keys: db.Collection(core.KeysCollection),
		tasks: db.Collection(core.JobTasksCollection), rosters: db.Collection(core.RostersCollection)}
}

// The cloud services of a collector and secret are kept as a roster, the
// ids its last successful task kept, in chunks of rosterChunk ids
// (roster-<key>-<n>) under a head (roster-<key>) that names how many
// there are. Garbage collection reads the roster and what the task saw,
// by _id: never a filtered scan of every collected resource, which
// FerretDB runs over the whole collection.
const rosterChunk = 20000

type rosterHead struct {
	ID     string `bson:"_id"`
	Chunks int    `bson:"chunks"`
	Task   string `bson:"task"`
}

type rosterPart struct {
	ID  string   `bson:"_id"`
	IDs []string `bson:"ids"`
}

func rosterKey(t *core.JobTask) string {
	return "roster-" + core.HashKey("r", t.DomainID, t.CollectorID, t.SecretID)
}

func (r *Rosters) readRoster(ctx context.Context, key string) ([]string, error) {
	heads, err := core.ByIDs[rosterHead](ctx, r.rosters, []string{key}, nil)
	if err != nil || heads[key] == nil {
		return nil, err
	}
	names := make([]string, heads[key].Chunks)
	for i := range names {
		names[i] = key + "-" + strconv.Itoa(i)
	}
	parts, err := core.ByIDs[rosterPart](ctx, r.rosters, names, nil)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, n := range names {
		if p := parts[n]; p != nil {
			ids = append(ids, p.IDs...)
		}
	}
	return ids, nil
}

// writeRoster replaces a roster: the chunks first, the head last, so a
// crash between them leaves the old head naming chunks that hold either
// list (both are what some task kept).
func (r *Rosters) writeRoster(ctx context.Context, key, taskID string, ids []string) error {
	n := 0
	for from := 0; from < len(ids) || n == 0; from += rosterChunk {
		part := rosterPart{ID: key + "-" + strconv.Itoa(n), IDs: wire.List(ids[from:min(from+rosterChunk, len(ids))])}
		if _, err := r.rosters.ReplaceOne(ctx, bson.D{{Key: "_id", Value: part.ID}}, part, options.Replace().SetUpsert(true)); err != nil {
			return store.Wrap(err)
		}
		n++
	}
	head := rosterHead{ID: key, Chunks: n, Task: taskID}
	_, err := r.rosters.ReplaceOne(ctx, bson.D{{Key: "_id", Value: key}}, head, options.Replace().SetUpsert(true))
	return store.Wrap(err)
}

// Result is what a task's garbage collection marked.
type Result struct {
	// Disconnected counts the resources marked DISCONNECTED, not doomed.
	Disconnected int32
	// Doomed are the resources to delete (Drop).
	Doomed []string
}

// Collect marks the resources of the task's roster it did not see:
// DISCONNECTED, and doomed at the third task in a row. Each is marked at
// most once per task (gc_task), so a finishing step run again after a
// crash counts the same. A resource gone, or reported since by another
// collector or secret, leaves the roster. The new roster is what the
// task saw and what it did not delete.
func (r *Rosters) Collect(ctx context.Context, task *core.JobTask, seen map[string]bool) (Result, error) {
	key := rosterKey(task)
	old, err := r.readRoster(ctx, key)
	if err != nil {
		return Result{}, err
	}
	var missing []string
	for _, id := range old {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	docs, err := core.ByIDs[core.CloudService](ctx, r.services, missing, bson.D{{Key: "collection_info", Value: 1},
		{Key: "disconnect_count", Value: 1}, {Key: "gc_task", Value: 1}, {Key: "doomed", Value: 1}})
	if err != nil {
		return Result{}, err
	}
	var g Result
	keep := make([]string, 0, len(seen)+len(missing))
	for id := range seen {
		keep = append(keep, id)
	}
	now := wire.T(wire.Now())
	for _, id := range missing {
		d := docs[id]
		if d == nil || d.CollectionInfo.CollectorID != task.CollectorID || d.CollectionInfo.SecretID != task.SecretID || d.DomainID != "" && d.DomainID != task.DomainID {
			continue
		}
		if d.GCTask != task.ID {
			d.DisconnectCount++
			d.Doomed = d.DisconnectCount >= deleteAfter
			set := bson.D{{Key: "disconnect_count", Value: d.DisconnectCount}, {Key: "gc_task", Value: task.ID}, {Key: "doomed", Value: d.Doomed},
				{Key: "state", Value: core.StateDisconnected}, {Key: "updated_at", Value: now}}
			if _, err := r.services.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}}); err != nil {
				return Result{}, store.Wrap(err)
			}
		}
		// Doomed ones stay in the roster until the next task finds them
		// gone: a finishing step run again still counts them.
		keep = append(keep, id)
		if d.Doomed {
			g.Doomed = append(g.Doomed, id)
		} else {
			g.Disconnected++
		}
	}
	if err := r.writeRoster(ctx, key, task.ID, keep); err != nil {
		return Result{}, err
	}
	return g, nil
}

// Drop deletes the resources a task's garbage collection doomed,
// with their match keys, and forgets them.
func (r *Rosters) Drop(ctx context.Context, task *core.JobTask) error {
	if len(task.DoomedIDs) == 0 {
		return nil
	}
	docs, err := core.ByIDs[core.CloudService](ctx, r.services, task.DoomedIDs, bson.D{{Key: "match_keys", Value: 1}, {Key: "gc_task", Value: 1}, {Key: "doomed", Value: 1}})
	if err != nil {
		return err
	}
	for id, d := range docs {
		if d.GCTask != task.ID || !d.Doomed {
			continue // seen again since
		}
		// A key is dropped only while it still leads to this resource
		// (read, then deleted by _id alone: FerretDB scans for more).
		keys, err := core.ByIDs[core.Key](ctx, r.keys, d.MatchKeys, nil)
		if err != nil {
			return err
		}
		for kid, k := range keys {
			if k.Target != id {
				continue
			}
			if _, err := r.keys.DeleteOne(ctx, bson.D{{Key: "_id", Value: kid}}); err != nil {
				return store.Wrap(err)
			}
		}
		if _, err := r.services.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
			return store.Wrap(err)
		}
	}
	_, err = r.tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: task.ID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "doomed_ids", Value: []string{}}}}})
	return store.Wrap(err)
}
