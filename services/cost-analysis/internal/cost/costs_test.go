package cost

import (
	"fmt"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/model"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// A task that starts while a read runs (between the read of the unfinished
// tasks and the query) is caught by the second read of them: the query
// runs again without its rows. The race is staged by the read itself.
func TestFinishedOnlyReadsTheTasksAgain(t *testing.T) {
	ctx := t.Context()
	db := testkit.Get().Database(t)
	cs := New(db)
	p := &auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin}
	n := 0
	addTask := func(status string) string {
		n++
		id := fmt.Sprintf("job-task-%d", n)
		if _, err := cs.tasks.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "job_task_id", Value: id},
			{Key: "domain_id", Value: "domain-a"}, {Key: "status", Value: status}}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.c.InsertOne(ctx, bson.D{{Key: "_id", Value: "cost-" + id}, {Key: "cost_id", Value: "cost-" + id},
			{Key: "job_task_id", Value: id}, {Key: "domain_id", Value: "domain-a"}, {Key: "workspace_id", Value: "*"}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	addTask(model.Success)
	addTask(model.InProgress)
	addTask(model.Pending)
	// Another domain's running task is no business of domain-a's reads.
	if _, err := cs.tasks.InsertOne(ctx, bson.D{{Key: "_id", Value: "job-task-b"}, {Key: "domain_id", Value: "domain-b"},
		{Key: "status", Value: model.InProgress}}); err != nil {
		t.Fatal(err)
	}

	shown := func(scope bson.D) []string {
		cur, err := cs.c.Find(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		var docs []Cost
		if err := cur.All(ctx, &docs); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range docs {
			ids = append(ids, d.CostID)
		}
		slices.Sort(ids)
		return ids
	}
	for _, c := range []struct {
		name     string
		starting int // tasks that start during each of the first reads
		reads    int
		want     []string
	}{
		{"nothing starts", 0, 1, []string{"cost-job-task-1"}},
		{"a task starts during the first read", 1, 2, []string{"cost-job-task-1"}},
		// A task starting during every read: the fourth answers, with
		// the rows of the task that started during it.
		{"tasks keep starting", 10, 4, []string{"cost-job-task-1", "cost-job-task-7"}},
	} {
		if _, err := cs.tasks.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$nin", Value: bson.A{"job-task-1", "job-task-2", "job-task-3", "job-task-b"}}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.c.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$nin", Value: bson.A{"cost-job-task-1", "cost-job-task-2", "cost-job-task-3"}}}}}); err != nil {
			t.Fatal(err)
		}
		n = 3
		reads := 0
		got, err := finishedOnly(ctx, cs, p, func(scope bson.D) ([]string, error) {
			if reads < c.starting {
				addTask(model.InProgress)
			}
			reads++
			return shown(scope), nil
		})
		if err != nil || reads != c.reads || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v after %d reads (%v), want %v after %d", c.name, got, reads, err, c.want, c.reads)
		}
	}
}
