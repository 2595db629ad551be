package job

import (
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/store"
)

// costIndexes are the secondary indexes of the cost rows, each for the
// reads and deletes that filter on its leading keys: job_task_id for the
// deletes of a task's rows (every attempt, stop and failure, Tidy);
// data_source_id for a changed window's swap and a deregister's delete;
// domain_id and workspace_id for every cost read (analyze, list, stat).
// The embedded SQLite store, which reads no plain index, gets none
// (store.EnsureIndexes; FerretDB's inserts of a 100,000-row sync took
// 15.1 s of CPU with them, 8.7 s without, docs/decisions.md).
var costIndexes = []store.Index{
	{Keys: bson.D{{Key: "job_task_id", Value: 1}}},
	{Keys: bson.D{{Key: "data_source_id", Value: 1}, {Key: "billed_month", Value: 1}}},
	{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "billed_date", Value: -1}}},
}
