package inventory_test

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
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
	t.Parallel()
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

// TestCollectQueueFailureAfterCancel: a collect whose queueing failed
// after a second collect of the same secret replaced and cancelled its
// job writes no FAILURE over that CANCELED: the FAILURE is a conditional
// update of a job still IN_PROGRESS. Unconditional, the job ends FAILURE.
func TestCollectQueueFailureAfterCancel(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 1), Hang: true})
	firstJob := make(chan string, 1)
	second := make(chan jobOut, 1)
	var started atomic.Bool // the second collect's queueing passes
	defer collector.FailQueue(c.CollectorID, func(jobID string) error {
		if started.Swap(true) {
			return nil
		}
		firstJob <- jobID
		second <- s.collect(s.adminA, c.CollectorID, "trusted-secret-adom")
		return errQueueRefused
	})()
	r := s.adminA.Call("/inventory/v1/collector/collect", map[string]any{"collector_id": c.CollectorID, "secret_id": "trusted-secret-adom"})
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("the first collect with its queue refused: %d %s, want 503", r.Status, r.Body)
	}
	first, later := <-firstJob, <-second
	var j jobOut
	s.adminA.Call("/inventory/v1/job/get", map[string]any{"job_id": first}).OK(&j)
	if j.Status != "CANCELED" {
		t.Fatalf("the first job after the second collect cancelled it: %s, want CANCELED (a FAILURE landed over it)", j.Status)
	}
	s.adminA.Call("/inventory/v1/job/get", map[string]any{"job_id": later.JobID}).OK(&j)
	if j.Status != "IN_PROGRESS" {
		t.Fatalf("the second job: %+v", j)
	}
	if n := s.count(core.JobsCollection, bson.D{{Key: "collector_id", Value: c.CollectorID}}); n != 2 {
		t.Fatalf("jobs of the collector: %d, want 2", n)
	}
}
