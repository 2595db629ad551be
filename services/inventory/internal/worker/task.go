package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// ErrJobTimeout is the job task error of a job past its timeout.
const ErrJobTimeout = "ERROR_JOB_TIMEOUT"

// Record is the stored outcome of one sub-task (_id =
// <job_task_id>-<n>); the first one stored is the one that counts.
type Record struct {
	ID        string           `bson:"_id"`
	JobID     string           `bson:"job_id"`
	JobTaskID string           `bson:"job_task_id"`
	Created   int32            `bson:"created"`
	Updated   int32            `bson:"updated"`
	Failure   int32            `bson:"failure"`
	Failed    bool             `bson:"failed"`
	Errors    []core.ErrorInfo `bson:"errors"`
	// Seen are the cloud services the sub-task wrote (garbage collection
	// keeps them).
	Seen []string  `bson:"seen"`
	At   time.Time `bson:"at"`
}

// RecordID is the id of sub-task n of a task (also its message id).
func RecordID(taskID string, n int) string { return taskID + "-" + strconv.Itoa(n) }

// Leases of the finishing steps, renewed while they run (lease.Run); a
// holder that dies frees them after the TTL. Leases (issue 35) because
// each holds a job's task or job while its finishing work runs (garbage
// collection, the job's counts over its tasks' documents).
const (
	leaseTTL  = 5 * time.Minute
	leaseWait = 30 * time.Second
)

func holderName() string {
	h, _ := os.Hostname()
	return h + "-" + wire.NewID("w")
}

// run handles one message; nil means done (ack).
func (w *Worker) run(ctx context.Context, t events.InventoryTask, attempt int) error {
	job, err := w.job(ctx, t.JobID)
	if err != nil || job == nil || job.DomainID != t.DomainID {
		return err // a job deleted meanwhile: nothing to do
	}
	task, err := w.task(ctx, t.JobTaskID)
	if err != nil || task == nil || task.JobID != job.JobID {
		return err
	}
	if job.Status != core.JobInProgress {
		// Canceled or failed (timed out): the task ends with it.
		status := core.TaskCanceled
		if job.Status == core.JobFailure {
			status = core.TaskFailure
		}
		return core.EndTasks(ctx, w.tasks, []string{task.ID}, status, nil, wire.T(wire.Now()))
	}
	if w.timedOut(job) {
		return w.TimeOut(ctx, job)
	}
	if t.SubTask < 0 {
		return w.split(ctx, job, task)
	}
	return w.subTask(ctx, job, task, t.SubTask, attempt)
}

func (w *Worker) timedOut(job *core.Job) bool {
	return time.Since(job.CreatedAt.Time) > w.cfg.JobTimeout
}

func (w *Worker) job(ctx context.Context, id string) (*core.Job, error) {
	var j core.Job
	err := w.jobs.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&j)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	return &j, store.Wrap(err)
}

func (w *Worker) task(ctx context.Context, id string) (*core.JobTask, error) {
	var t core.JobTask
	err := w.tasks.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&t)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	return &t, store.Wrap(err)
}

// collector loads a job's collector; nil for one deleted, or whose
// delete has begun (its jobs go with it).
func (w *Worker) collector(ctx context.Context, id string) (*core.Collector, error) {
	c, err := store.GetLive[core.Collector](ctx, w.collectors, "collector_id", id)
	if errs.Is(err, errs.NotFoundCode) {
		return nil, nil
	}
	return c, err
}

// split asks the plugin for the task's sub-tasks, stores them and queues
// one message per sub-task. Any failure of Job.get_tasks is swallowed, as
// upstream does: the task runs as one sub-task without task_options.
func (w *Worker) split(ctx context.Context, job *core.Job, task *core.JobTask) error {
	if !task.Split {
		c, err := w.collector(ctx, job.CollectorID)
		if err != nil || c == nil {
			return err
		}
		subs := []freeform.Map{nil}
		secret, err := w.identity.SecretData(ctx, task.DomainID, task.ServiceAccountID)
		switch {
		case err != nil && core.Permanent(err):
			// Without its secret the task cannot run: it fails as a
			// whole, with identity's answer.
			return w.failTask(ctx, job, task, core.TaskError("", err))
		case err != nil:
			return err
		}
		if got, err := core.CollectorPlugin(w.plugins, c).GetTasks(ctx, c.PluginInfo.Options, secret); err == nil && len(got) > 0 {
			subs = subs[:0]
			for _, o := range got {
				subs = append(subs, o)
			}
		} else if err != nil {
			w.log.Info("Job.get_tasks failed; the task runs as one", "job_task_id", task.ID, "error", err.Error())
		}
		now := wire.T(wire.Now())
		n := int32(len(subs))
		set := bson.D{{Key: "sub_tasks", Value: subs}, {Key: "split", Value: true}, {Key: "total_sub_tasks", Value: n},
			{Key: "remained_sub_tasks", Value: n}, {Key: "status", Value: core.TaskInProgress}, {Key: "started_at", Value: now}}
		if _, err := w.tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: task.ID}}, bson.D{{Key: "$set", Value: set}}); err != nil {
			return store.Wrap(err)
		}
		task.SubTasks, task.Split = subs, true
	}
	// Queued again after a redelivery: the stream drops the duplicates
	// within its window and a recorded sub-task is skipped beyond it.
	for i := range task.SubTasks {
		m := events.InventoryTask{ID: RecordID(task.ID, i), JobID: job.JobID, JobTaskID: task.ID, DomainID: job.DomainID, SubTask: i}
		if err := w.bus.Publish(ctx, events.InventoryTaskSubject, m.ID, m); err != nil {
			return err
		}
	}
	return nil
}

// failTask ends a task that cannot run at all (FAILURE with err).
func (w *Worker) failTask(ctx context.Context, job *core.Job, task *core.JobTask, e core.ErrorInfo) error {
	err := lease.Run(ctx, w.leases, "task-"+task.ID, leaseTTL, leaseWait, func(ctx context.Context) error {
		now := wire.T(wire.Now())
		set := bson.D{{Key: "status", Value: core.TaskFailure}, {Key: "errors", Value: []core.ErrorInfo{e}}, {Key: "failure_count", Value: 1},
			{Key: "finished_at", Value: now}, {Key: "split", Value: true}, {Key: "remained_sub_tasks", Value: 0}}
		_, err := w.tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: task.ID}}, bson.D{{Key: "$set", Value: set}})
		return store.Wrap(err)
	})
	if err != nil {
		return err
	}
	return w.accountJob(ctx, job)
}

// subTask runs sub-task n and records its outcome.
func (w *Worker) subTask(ctx context.Context, job *core.Job, task *core.JobTask, n, attempt int) error {
	if n >= len(task.SubTasks) {
		return nil // not a sub-task of this task
	}
	if core.Final(task.Status) && task.Split && task.RemainedSubTasks == 0 {
		return w.afterRecord(ctx, job, task) // finished: make sure the job is counted
	}
	recID := RecordID(task.ID, n)
	done, err := w.recorded(ctx, recID)
	if err != nil {
		return err
	}
	if done {
		return w.afterRecord(ctx, job, task)
	}
	var slot *lease.Lease
	if job.Concurrency > 0 {
		if slot, err = w.takeSlot(ctx, job.ID, job.Concurrency); err != nil {
			return err
		}
		if slot == nil {
			return errWait
		}
		defer slot.Release(ctx)
	}
	c, err := w.collector(ctx, job.CollectorID)
	if err != nil || c == nil {
		return err
	}
	rec := Record{ID: recID, JobID: job.JobID, JobTaskID: task.ID, Errors: []core.ErrorInfo{}}
	secret, err := w.identity.SecretData(ctx, task.DomainID, task.ServiceAccountID)
	switch {
	case err != nil && core.Permanent(err):
		rec.Failed, rec.Failure, rec.Errors = true, 1, []core.ErrorInfo{core.TaskError("", err)}
	case err != nil:
		return err
	default:
		runCtx, stop := context.WithCancel(ctx)
		ended := make(chan struct{})
		var jobOver bool
		go func() {
			defer close(ended)
			jobOver = w.heartbeat(runCtx, job, slot, stop)
		}()
		out, err := w.collect.Run(runCtx, job, task, c, task.SubTasks[n], secret, recID, func(err error) bool { return retries.Again(attempt, err) })
		stop()
		<-ended
		if jobOver {
			return nil // canceled or timed out meanwhile: nothing to record
		}
		if err != nil {
			return err
		}
		rec.Created, rec.Updated, rec.Failure, rec.Failed = out.Created, out.Updated, out.Failure, out.Failed
		rec.Errors, rec.Seen = out.Errors, out.Seen
	}
	rec.At = time.Now().UTC()
	if _, err := w.records.InsertOne(ctx, rec); err != nil {
		if !mongo.IsDuplicateKeyError(err) {
			return store.Wrap(err)
		}
		return w.afterRecord(ctx, job, task) // another delivery recorded it first
	}
	w.log.Info("inventory sub-task done", "job_id", job.JobID, "job_task_id", task.ID, "sub_task", n, "created", rec.Created,
		"updated", rec.Updated, "failure", rec.Failure, "worker", w.holder)
	return w.afterRecord(ctx, job, task)
}

// heartbeat keeps the slot while the sub-task runs, and stops the run
// (returning true) when the job is no longer IN_PROGRESS or passed its
// timeout (handle keeps the message). A lost slot stops the run too
// (returning false: the message comes again), so that no more than the
// job's concurrency ever runs.
func (w *Worker) heartbeat(ctx context.Context, job *core.Job, slot *lease.Lease, stop func()) bool {
	t := time.NewTicker(max(w.cfg.AckWait/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if slot != nil {
			if err := slot.Renew(ctx); errors.Is(err, lease.ErrLost) {
				stop()
				return false
			}
		}
		j, err := w.job(ctx, job.ID)
		if err != nil {
			continue // the store will tell the run itself
		}
		if j == nil || j.Status != core.JobInProgress || w.timedOut(j) {
			stop()
			return true
		}
	}
}

func (w *Worker) recorded(ctx context.Context, id string) (bool, error) {
	err := w.records.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, store.Wrap(err)
}

// seenBy is every cloud service the sub-tasks of a task wrote.
func (w *Worker) seenBy(ctx context.Context, recordIDs []string) (map[string]bool, error) {
	recs, err := core.ByIDs[Record](ctx, w.records, recordIDs, bson.D{{Key: "seen", Value: 1}})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, r := range recs {
		for _, id := range r.Seen {
			seen[id] = true
		}
	}
	return seen, nil
}

// afterRecord moves the task on from its records: progress while
// sub-tasks remain; once none does, the task finishes (garbage
// collection when it succeeded) and the job is counted.
func (w *Worker) afterRecord(ctx context.Context, job *core.Job, task *core.JobTask) error {
	var finished bool
	err := lease.Run(ctx, w.leases, "task-"+task.ID, leaseTTL, leaseWait, func(ctx context.Context) error {
		cur, err := w.task(ctx, task.ID)
		if err != nil || cur == nil {
			return err
		}
		if core.Final(cur.Status) && cur.RemainedSubTasks == 0 {
			finished = true
			return w.garbage.Drop(ctx, cur) // a finish that died after counting
		}
		ids := make([]string, len(cur.SubTasks))
		for i := range ids {
			ids[i] = RecordID(cur.ID, i)
		}
		found, err := core.ByIDs[Record](ctx, w.records, ids, bson.D{{Key: "seen", Value: 0}})
		if err != nil {
			return err
		}
		recs := make([]Record, 0, len(found))
		for _, id := range ids { // in sub-task order: the errors keep it
			if r, ok := found[id]; ok {
				recs = append(recs, *r)
			}
		}
		var created, updated, failure int32
		failed := false
		errList := []core.ErrorInfo{}
		for _, r := range recs {
			created, updated, failure = created+r.Created, updated+r.Updated, failure+r.Failure
			failed = failed || r.Failed || r.Failure > 0
			errList = append(errList, r.Errors...)
		}
		if len(errList) > maxTaskErrors {
			errList = errList[:maxTaskErrors]
		}
		remained := int32(len(ids) - len(recs))
		set := bson.D{{Key: "created_count", Value: created}, {Key: "updated_count", Value: updated}, {Key: "failure_count", Value: failure},
			{Key: "errors", Value: errList}, {Key: "remained_sub_tasks", Value: remained}}
		if failed && remained > 0 {
			set = append(set, bson.E{Key: "status", Value: core.TaskFailure}) // as upstream, at the first failed sub-task
		}
		if remained == 0 {
			finished = true
			status := core.TaskFailure
			if !failed {
				status = core.TaskSuccess
				seen, err := w.seenBy(ctx, ids)
				if err != nil {
					return err
				}
				gc, err := w.garbage.Collect(ctx, cur, seen)
				if err != nil {
					return err
				}
				cur.DoomedIDs = gc.Doomed
				set = append(set, bson.E{Key: "disconnected_count", Value: gc.Disconnected}, bson.E{Key: "deleted_count", Value: int32(len(gc.Doomed))},
					bson.E{Key: "doomed_ids", Value: wire.List(gc.Doomed)})
			}
			set = append(set, bson.E{Key: "status", Value: status}, bson.E{Key: "finished_at", Value: wire.T(wire.Now())})
		}
		if _, err := w.tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: cur.ID}}, bson.D{{Key: "$set", Value: set}}); err != nil {
			return store.Wrap(err)
		}
		if remained == 0 {
			// The task's final counts are stored: its records are no
			// longer needed (a late message sees the task finished).
			for _, id := range ids {
				if _, err := w.records.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
					return store.Wrap(err)
				}
			}
			return w.garbage.Drop(ctx, cur)
		}
		return nil
	})
	if err != nil || !finished {
		return err
	}
	return w.accountJob(ctx, job)
}

// maxTaskErrors bounds the errors a task keeps.
const maxTaskErrors = 1000

// accountJob computes the job's counters from its tasks' statuses and
// finishes it once no task remains: FAILURE if a task failed, else
// SUCCESS. It runs under the job's lease so counts never go backwards.
func (w *Worker) accountJob(ctx context.Context, job *core.Job) error {
	return lease.Run(ctx, w.leases, "job-"+job.ID, leaseTTL, leaseWait, func(ctx context.Context) error {
		cur, err := w.job(ctx, job.ID)
		if err != nil || cur == nil || cur.Status != core.JobInProgress {
			return err // deleted, canceled or finished meanwhile
		}
		tasks, err := core.ByIDs[core.JobTask](ctx, w.tasks, job.TaskIDs,
			bson.D{{Key: "status", Value: 1}, {Key: "remained_sub_tasks", Value: 1}, {Key: "split", Value: 1}})
		if err != nil {
			return err
		}
		var success, failure int32
		for _, t := range tasks {
			switch {
			case t.Status == core.TaskSuccess:
				success++
			case core.Final(t.Status) && t.Split && t.RemainedSubTasks == 0, t.Status == core.TaskCanceled:
				failure++
			}
		}
		// A task deleted by job-task/delete no longer counts as remaining.
		remained := max(int32(len(tasks))-success-failure, 0)
		now := wire.T(wire.Now())
		set := bson.D{{Key: "success_tasks", Value: success}, {Key: "failure_tasks", Value: failure}, {Key: "remained_tasks", Value: remained},
			{Key: "updated_at", Value: now}}
		if remained == 0 {
			status := core.JobSuccess
			if failure > 0 {
				status = core.JobFailure
			}
			set = append(set, bson.E{Key: "status", Value: status}, bson.E{Key: "finished_at", Value: now})
			if status == core.JobFailure {
				// Recorded before the job ends: a retry after a failed
				// update records the same id again, a no-op.
				if err := w.notifyFailure(ctx, cur, fmt.Sprintf("%d of %d tasks failed.", failure, len(tasks))); err != nil {
					return err
				}
			}
		}
		// By _id alone (FerretDB scans for more); the status was read under
		// the job's lease.
		_, err = w.jobs.UpdateOne(ctx, bson.D{{Key: "_id", Value: job.ID}}, bson.D{{Key: "$set", Value: set}})
		return store.Wrap(err)
	})
}

// TimeOut ends a job past its timeout: FAILURE, and its unfinished tasks
// FAILURE with ERROR_JOB_TIMEOUT.
func (w *Worker) TimeOut(ctx context.Context, job *core.Job) error {
	now := wire.T(wire.Now())
	e := core.ErrorInfo{ErrorCode: ErrJobTimeout, Message: fmt.Sprintf("The job did not finish within %s.", w.cfg.JobTimeout), Additional: map[string]any{}}
	return lease.Run(ctx, w.leases, "job-"+job.ID, leaseTTL, leaseWait, func(ctx context.Context) error {
		cur, err := w.job(ctx, job.ID)
		if err != nil || cur == nil || cur.Status != core.JobInProgress {
			return err
		}
		// The tasks end first: a reader who sees the job FAILURE sees
		// its unfinished tasks FAILURE too.
		if err := core.EndTasks(ctx, w.tasks, cur.TaskIDs, core.TaskFailure, &e, now); err != nil {
			return err
		}
		if err := w.notifyFailure(ctx, cur, e.Message); err != nil {
			return err
		}
		set := bson.D{{Key: "status", Value: core.JobFailure}, {Key: "finished_at", Value: now}, {Key: "updated_at", Value: now}}
		_, err = w.jobs.UpdateOne(ctx, bson.D{{Key: "_id", Value: job.ID}}, bson.D{{Key: "$set", Value: set}})
		return store.Wrap(err)
	})
}

// notifyFailure asks for a notification of the domain's admins that the
// job failed (one per job: its id is the job's).
func (w *Worker) notifyFailure(ctx context.Context, job *core.Job, why string) error {
	if w.cfg.Notify == nil {
		return nil
	}
	err := w.cfg.Notify.Notify(ctx, events.NotificationRequest{ID: "failed-" + job.ID, DomainID: job.DomainID, WorkspaceID: job.WorkspaceID,
		DomainAdmins: true, Topic: "inventory.Job", NotificationType: events.NotifyError, Level: events.LevelAll,
		Message: events.NotificationMessage{Title: "[Inventory] Collection job failed", Description: why,
			Tags:       []events.MessageTag{{Key: "Job", Value: job.JobID}, {Key: "Collector", Value: job.CollectorID}},
			OccurredAt: wire.FormatTime(wire.Now())}})
	return store.Wrap(err)
}

// Sweep finds IN_PROGRESS jobs past their timeout every SweepEvery and
// ends them; every replica may run it (the writes are idempotent).
func (w *Worker) Sweep(ctx context.Context) error {
	t := time.NewTicker(w.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := w.sweepOnce(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("job timeout sweep failed", "error", err.Error())
		}
	}
}

func (w *Worker) sweepOnce(ctx context.Context) error {
	cutoff := time.Now().Add(-w.cfg.JobTimeout)
	cur, err := w.jobs.Find(ctx, bson.D{{Key: "status", Value: core.JobInProgress}, {Key: "created_at", Value: bson.D{{Key: "$lt", Value: cutoff}}}})
	if err != nil {
		return store.Wrap(err)
	}
	var jobs []core.Job
	if err := cur.All(ctx, &jobs); err != nil {
		return store.Wrap(err)
	}
	for i := range jobs {
		if err := w.TimeOut(ctx, &jobs[i]); err != nil {
			return err
		}
		w.log.Info("job timed out", "job_id", jobs[i].ID, "domain_id", jobs[i].DomainID)
	}
	return nil
}
