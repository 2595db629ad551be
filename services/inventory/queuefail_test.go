package inventory_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/inventory/internal/collector"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// errQueueRefused stands for a store that refused the tasks' write.
var errQueueRefused = errs.Down("the job queue", errors.New("refused by the test"))

// TestCollectQueueFailure: a collect whose tasks cannot be queued answers
// the error, and its job, which would otherwise never finish, ends
// FAILURE; no task of it is stored or queued.
func TestCollectQueueFailure(t *testing.T) {
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	jobs := make(chan string, 1)
	defer collector.FailQueue(c.CollectorID, func(jobID string) error {
		jobs <- jobID
		return errQueueRefused
	})()
	r := s.adminA.Call("/inventory/v1/collector/collect", map[string]any{"collector_id": c.CollectorID, "secret_id": "trusted-secret-adom"})
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("collect with its queue refused: %d %s, want 503", r.Status, r.Body)
	}
	id := <-jobs
	var j jobOut
	s.adminA.Call("/inventory/v1/job/get", map[string]any{"job_id": id}).OK(&j)
	if j.Status != "FAILURE" || j.FinishedAt == "" {
		t.Fatalf("the job whose tasks were not queued: %+v, want FAILURE", j)
	}
	if n := len(s.tasksOf(id)); n != 0 {
		t.Fatalf("tasks of the unqueued job: %d", n)
	}
	if n := s.count(core.OutboxCollection, nil); n != 0 {
		t.Fatalf("events queued: %d", n)
	}
}

// TestCollectQueueFailureAfterLostLease: a collect whose holder was
// starved past the collector's lease (lease.Starve) before its queueing
// failed, while a second collect of the same secret took the lease over
// and cancelled its job, writes no FAILURE over that CANCELED: the
// FAILURE goes through the collector's fence, which refuses a holder
// whose lease is lost. Unfenced, the job ends FAILURE.
func TestCollectQueueFailureAfterLostLease(t *testing.T) {
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 1), Hang: true})
	key := "collector-" + c.CollectorID
	firstJob := make(chan string, 1)
	second := make(chan jobOut, 1)
	var started atomic.Bool // the second collect's queueing passes
	defer collector.FailQueue(c.CollectorID, func(jobID string) error {
		if started.Swap(true) {
			return nil
		}
		firstJob <- jobID
		// The holder stops renewing; once its claim has expired, a second
		// collect takes the lease and cancels this job.
		t.Cleanup(lease.Starve(key))
		deadline := time.Now().Add(time.Minute)
		for {
			held, err := lease.Held(context.Background(), s.db.Collection(core.LeasesCollection), key)
			if err == nil && !held {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the starved lease still held after a minute (%v)", err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		second <- s.collect(s.adminA, c.CollectorID, "trusted-secret-adom")
		return errQueueRefused
	})()
	r := s.adminA.Call("/inventory/v1/collector/collect", map[string]any{"collector_id": c.CollectorID, "secret_id": "trusted-secret-adom"})
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("the starved collect with its queue refused: %d %s, want 503", r.Status, r.Body)
	}
	first, later := <-firstJob, <-second
	var j jobOut
	s.adminA.Call("/inventory/v1/job/get", map[string]any{"job_id": first}).OK(&j)
	if j.Status != "CANCELED" {
		t.Fatalf("the first job after the second collect cancelled it: %s, want CANCELED (an unfenced FAILURE landed over it)", j.Status)
	}
	s.adminA.Call("/inventory/v1/job/get", map[string]any{"job_id": later.JobID}).OK(&j)
	if j.Status != "IN_PROGRESS" {
		t.Fatalf("the second job: %+v", j)
	}
	if n := s.count(core.JobsCollection, bson.D{{Key: "collector_id", Value: c.CollectorID}}); n != 2 {
		t.Fatalf("jobs of the collector: %d, want 2", n)
	}
}
