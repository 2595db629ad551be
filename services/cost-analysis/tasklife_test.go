package costanalysis_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/worker"
)

// TestTaskLifeBeforeItsStream: a worker shows its task's life from the
// message's receipt, so a task whose start waits longer than AckWait
// (here on the plugin's get_data, which answers after over three
// AckWaits) is not
// delivered again meanwhile: one attempt, one get_data call. Before, it
// showed life only once its stream began, and a second attempt ran
// (TestSyncStoresCosts saw three get_data calls for two tasks).
func TestTaskLifeBeforeItsStream(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	e := setupWith(t, options{bus: true, noWorkers: true, workers: func(c *worker.Config) { c.AckWait = ackWait }})
	ds := e.register(t, e.adminA, domainSource("aws"))
	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(2, "2024-03", "t")}, Delay: 7 * time.Second})
	j := e.sync(t, e.adminA, ds.DataSourceID, "")
	var task struct {
		ID      string `bson:"_id"`
		Attempt int    `bson:"attempt"`
	}
	if err := e.db.Collection(tasks).FindOne(t.Context(), bson.D{{Key: "job_id", Value: j.JobID}}).Decode(&task); err != nil {
		t.Fatal(err)
	}
	e.cfg.NoWorkers = false
	e.start(t)
	if j = e.waitJob(t, e.adminA, j.JobID, finished); j.Status != "SUCCESS" {
		t.Fatalf("job %+v", j)
	}
	if n := len(e.plugin.Calls(getDataMethod)); n != 1 {
		t.Fatalf("%d get_data calls for one task", n)
	}
	if err := e.db.Collection(tasks).FindOne(t.Context(), bson.D{{Key: "_id", Value: task.ID}}).Decode(&task); err != nil {
		t.Fatal(err)
	}
	if task.Attempt != 1 {
		t.Fatalf("the task ran as attempt %d", task.Attempt)
	}
}
