package job

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/store"
)

// costIndexes are the secondary indexes of the cost rows, each for the
// reads and deletes that filter on its leading keys: job_task_id for the
// deletes of a task's rows (every attempt, stop and failure, Tidy);
// data_source_id for a changed window's swap and a deregister's delete;
// domain_id and workspace_id for every cost read (analyze, list, stat).
var costIndexes = []store.Index{
	{Keys: bson.D{{Key: "job_task_id", Value: 1}}},
	{Keys: bson.D{{Key: "data_source_id", Value: 1}, {Key: "billed_month", Value: 1}}},
	{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "billed_date", Value: -1}}},
}

// ensureCostIndexes declares costIndexes where the store's reads can use
// them. FerretDB 1.24 on SQLite (the embedded store of make run, the e2e
// and the bench) serves a filter from an index only when it is {_id: x}
// alone, and scans for every other: there a secondary index is never read
// and costs each inserted row one JSON extraction per key (FerretDB's
// inserts of a 100,000-row sync: 15.1 s of CPU with them, 8.7 s without,
// docs/decisions.md), so it is not declared, and dropped if an earlier
// start made it. MongoDB and FerretDB on PostgreSQL get them.
func ensureCostIndexes(ctx context.Context, db *mongo.Database, costs *mongo.Collection) error {
	if !scansOnly(ctx, db, costs.Name()) {
		return store.EnsureIndexes(ctx, costs, costIndexes...)
	}
	cur, err := costs.Indexes().List(ctx)
	if err != nil {
		return fmt.Errorf("indexes of %s: %w", costs.Name(), err)
	}
	var existing []struct {
		Name string `bson:"name"`
	}
	if err := cur.All(ctx, &existing); err != nil {
		return fmt.Errorf("indexes of %s: %w", costs.Name(), err)
	}
	have := map[string]bool{}
	for _, e := range existing {
		have[e.Name] = true
	}
	for _, x := range costIndexes {
		if name := indexName(x.Keys); have[name] {
			if err := costs.Indexes().DropOne(ctx, name); err != nil {
				return fmt.Errorf("index %s of %s: %w", name, costs.Name(), err)
			}
		}
	}
	return nil
}

// scansOnly reports whether the store says, in explain, that it does not
// push a filter on a field other than _id down to its indexes: FerretDB
// answers filterPushdown (false on SQLite), MongoDB does not answer it.
// An explain that fails counts as no: the indexes are then declared.
func scansOnly(ctx context.Context, db *mongo.Database, coll string) bool {
	var res bson.M
	err := db.RunCommand(ctx, bson.D{
		{Key: "explain", Value: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{{Key: "domain_id", Value: ""}}}}},
		{Key: "verbosity", Value: "queryPlanner"},
	}).Decode(&res)
	if err != nil {
		return false
	}
	pushed, ok := res["filterPushdown"].(bool)
	return ok && !pushed
}

// indexName is MongoDB's default index name (as store.EnsureIndexes
// names them): field_dir joined by "_".
func indexName(keys bson.D) string {
	name := ""
	for i, k := range keys {
		if i > 0 {
			name += "_"
		}
		name += fmt.Sprintf("%s_%v", k.Key, k.Value)
	}
	return name
}
