package costanalysis_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/job"
)

// interleave stops Settle at a point (job.Config.Hook) the first time it
// gets there, until released, and tells when a cancel is about to take
// the job's lease. Later calls pass (a redelivered task settles again).
type interleave struct {
	at               string
	once             sync.Once
	reached, release chan struct{}
	cancelling       chan struct{}
	cancelOnce       sync.Once
	releaseOnce      sync.Once
}

// free lets the held Settle go (once): the test's step, and its cleanup,
// so that a failed test does not leave a worker held that the stop of
// the workers waits for.
func (h *interleave) free() { h.releaseOnce.Do(func() { close(h.release) }) }

func newInterleave(at string) *interleave {
	return &interleave{at: at, reached: make(chan struct{}), release: make(chan struct{}), cancelling: make(chan struct{})}
}

func (h *interleave) hook(point, _ string) {
	switch point {
	case h.at:
		h.once.Do(func() {
			close(h.reached)
			<-h.release
		})
	case "cancel":
		h.cancelOnce.Do(func() { close(h.cancelling) })
	}
}

func wait(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(waitBound):
		t.Fatalf("%s: not reached", what)
	}
}

// A job's final Settle racing a cancel ends either SUCCESS with its rows
// shown (a cancel after Settle's write is refused) or CANCELED with none
// of its rows left (a cancel whose write lands first: Settle's, compared
// on the job's version, does not): never SUCCESS written over
// CANCELED, never a CANCELED job's rows. Each order is forced with the
// job's test hook; cost/analyze is checked at every step.
func TestSettleRacingCancel(t *testing.T) {
	t.Parallel()
	const none, all = "[]", "[map[date:2024-06 n:3 total:4.5]]"
	start := func(t *testing.T, h *interleave) (*env, Job) {
		e := setupWith(t, options{bus: true, jobs: func(c *job.Config) { c.Hook = h.hook },
			// No redelivery while the test holds the task's Settle.
			workers: heldTasks})
		t.Cleanup(h.free) // runs before the workers' stop (cleanups run last first)
		ds := e.register(t, e.adminA, domainSource("aws"))
		e.plugin.Script(getTasksMethod, tasksReply(1))
		e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-06", "x")}})
		return e, e.sync(t, e.adminA, ds.DataSourceID, "")
	}
	// cost/analyze of the job's data source.
	check := func(t *testing.T, e *env, j Job, step, want string) {
		t.Helper()
		monthly := M{"data_source_id": j.DataSourceID, "query": M{"granularity": "MONTHLY",
			"fields": M{"total": M{"key": "cost", "operator": "sum"}, "n": M{"operator": "count"}}}}
		if got := fmt.Sprint(e.adminA.Call(costBase+"analyze", monthly).OK(nil).JSON()["results"]); got != want {
			t.Fatalf("%s: cost/analyze %s, want %s", step, got, want)
		}
	}
	stored := func(t *testing.T, e *env, jobID string) int64 {
		return e.count(t, costs, bson.E{Key: "job_id", Value: jobID})
	}

	t.Run("cancel first", func(t *testing.T) {
		// The task has stored its rows and is about to settle the job
		// when the cancel lands: Settle then finds the job CANCELED.
		h := newInterleave("settle")
		e, j := start(t, h)
		wait(t, "the task's Settle", h.reached)
		if n := stored(t, e, j.JobID); n != 3 {
			t.Fatalf("%d rows stored before the settle, want 3", n)
		}
		check(t, e, j, "before the settle", none)
		var c Job
		e.adminA.Call(jobBase+"cancel", M{"job_id": j.JobID}).OK(&c)
		if c.Status != "CANCELED" {
			t.Fatalf("cancel answered %+v", c)
		}
		check(t, e, j, "cancelled", none)
		h.free()
		final := e.waitJob(t, e.adminA, j.JobID, func(j Job) bool { return j.RemainedTasks == 0 })
		if final.Status != "CANCELED" {
			t.Fatalf("the settle wrote %s over CANCELED: %+v", final.Status, final)
		}
		check(t, e, j, "settled", none)
		testkit.Eventually(t, waitBound, "the cancelled job's rows deleted", func() bool { return stored(t, e, j.JobID) == 0 })
		check(t, e, j, "tidied", none)
	})

	t.Run("cancel during the final settle", func(t *testing.T) {
		// Settle has found the job done and is about to write SUCCESS
		// when the cancel lands: the cancel's write comes first, so
		// Settle's, compared on the job's version, does not land; Settle
		// decides again on the CANCELED job.
		h := newInterleave("settle:final")
		e, j := start(t, h)
		wait(t, "the final Settle", h.reached)
		check(t, e, j, "while settling", none)
		var c Job
		e.adminA.Call(jobBase+"cancel", M{"job_id": j.JobID}).OK(&c)
		if c.Status != "CANCELED" {
			t.Fatalf("cancel answered %+v", c)
		}
		h.free()
		final := e.waitJob(t, e.adminA, j.JobID, func(j Job) bool { return j.RemainedTasks == 0 })
		if final.Status != "CANCELED" {
			t.Fatalf("the settle wrote %s over CANCELED: %+v", final.Status, final)
		}
		check(t, e, j, "settled", none)
		testkit.Eventually(t, waitBound, "the cancelled job's rows deleted", func() bool { return stored(t, e, j.JobID) == 0 })
		check(t, e, j, "tidied", none)
	})

	t.Run("settle first", func(t *testing.T) {
		// Settle's SUCCESS has landed when the cancel comes: the cancel
		// finds the job SUCCESS.
		h := newInterleave("settle:done")
		e, j := start(t, h)
		wait(t, "the final Settle's write", h.reached)
		e.adminA.Call(jobBase+"cancel", M{"job_id": j.JobID}).Fails(http.StatusConflict, errs.JobState)
		h.free()
		final := e.waitJob(t, e.adminA, j.JobID, finished)
		if final.Status != "SUCCESS" || final.RemainedTasks != 0 {
			t.Fatalf("job %+v", final)
		}
		check(t, e, j, "succeeded", all)
		if n := stored(t, e, j.JobID); n != 3 {
			t.Fatalf("%d rows of the succeeded job, want 3", n)
		}
	})
}
