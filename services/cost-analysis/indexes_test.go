package costanalysis_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	mopts "go.mongodb.org/mongo-driver/v2/mongo/options"

	costanalysis "github.com/nubes-io/nubes/services/cost-analysis"
)

// TestCostIndexesWhereRead: the embedded store (FerretDB on SQLite) serves
// no filter but {_id: x} from an index, so the cost rows get no secondary
// index there (each would only cost every stored row a JSON extraction per
// key), and one an earlier start made is dropped. MongoDB's are declared
// as before (job.costIndexes, through store.EnsureIndexes); the sync tests show the reads and
// deletes do without them here.
func TestCostIndexesWhereRead(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{})
	c := e.db.Collection("cost_costs")
	names := func() []string {
		t.Helper()
		cur, err := c.Indexes().List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var idx []struct {
			Name string `bson:"name"`
		}
		if err := cur.All(context.Background(), &idx); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range idx {
			if x.Name != "_id_" {
				out = append(out, x.Name)
			}
		}
		return out
	}
	if got := names(); len(got) > 0 {
		t.Fatalf("secondary indexes of cost_costs on the embedded store: %v, want none", got)
	}
	if _, err := c.Indexes().CreateMany(context.Background(), []mongo.IndexModel{
		{Keys: bson.D{{Key: "job_task_id", Value: 1}}, Options: mopts.Index().SetName("job_task_id_1")},
		{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "billed_date", Value: -1}},
			Options: mopts.Index().SetName("domain_id_1_workspace_id_1_billed_date_-1")},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := costanalysis.Build(context.Background(), e.deps, e.cfg); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) > 0 {
		t.Fatalf("secondary indexes of cost_costs after a new start: %v, want none", got)
	}
}
