package collector

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/trusted"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

var errNoBus = errors.New("inventory runs without an event bus")

// collect is open to workspace members as upstream has it (semantics.md
// §4.4: Access is inventory's readers); a collector of the whole domain
// stays the domain admin's (s.writable: 403).
func (s *Service) collect(ctx context.Context, p *auth.Principal, r *collectRequest) (*core.Job, error) {
	doc, err := s.writable(ctx, p, r.CollectorID)
	if err != nil {
		return nil, err
	}
	return s.Collect(ctx, doc, r.SecretID, p.WorkspaceID)
}

// Collect starts a job of collector c (semantics.md 7,
// Collector.collect): the plugin upgraded first when its upgrade mode is
// AUTO and the repository has a newer version; one task per secret (the
// trusted accounts of the collector's provider in its scope, narrowed by
// secretID and the secret filter); an IN_PROGRESS job of the same
// collector, requesting workspace and secret CANCELED; zero secrets make
// the job SUCCESS at once, otherwise the tasks are queued and the
// collector's last_collected_at set. requestWorkspace is the caller's
// workspace ("" for a domain-wide caller or a schedule).
//
// It runs on the collector as stored (a collector whose delete has begun
// is 404), and its job is the collector's child (store.Teardown.Live): a
// job created while the collector's delete runs is removed again.
func (s *Service) Collect(ctx context.Context, c *Collector, secretID, requestWorkspace string) (*core.Job, error) {
	if s.outbox == nil {
		return nil, errs.Down("The job queue", errNoBus)
	}
	var job *core.Job
	err := s.records().Live(ctx, c.ID, func(ctx context.Context, c *Collector, w *store.Writes[Collector]) error {
		var err error
		job, err = s.collectLive(ctx, c, w, secretID, requestWorkspace)
		return err
	})
	return job, err
}

func (s *Service) collectLive(ctx context.Context, c *Collector, w *store.Writes[Collector], secretID, requestWorkspace string) (*core.Job, error) {
	if err := s.upgrade(ctx, c, func(set bson.D) (*Collector, error) { return w.Set(ctx, set) }); err != nil {
		return nil, err
	}
	secrets, err := s.secrets(ctx, c, secretID)
	if err != nil {
		return nil, err
	}
	now := wire.T(wire.Now())
	id := wire.NewID("job")
	job := &core.Job{ID: id, JobID: id, Status: core.JobInProgress, TotalTasks: int32(len(secrets)), RemainedTasks: int32(len(secrets)),
		RequestSecretID: secretID, RequestWorkspaceID: requestWorkspace, SecretID: secretID, Filter: map[string]any{},
		ResourceGroup: c.ResourceGroup, DomainID: c.DomainID, WorkspaceID: c.WorkspaceID, CollectorID: c.CollectorID,
		PluginID: c.PluginInfo.PluginID, CreatedAt: now, UpdatedAt: now, TaskIDs: []string{}, Concurrency: concurrency(c.PluginInfo.Metadata)}
	if len(secrets) == 0 {
		job.Status, job.FinishedAt = core.JobSuccess, now
	}
	tasks := make([]any, len(secrets))
	for i, a := range secrets {
		tid := wire.NewID("job-task")
		job.TaskIDs = append(job.TaskIDs, tid)
		tasks[i] = &core.JobTask{ID: tid, JobTaskID: tid, Status: core.TaskPending, Provider: c.Provider, Errors: []core.ErrorInfo{},
			DomainID: c.DomainID, WorkspaceID: trusted.Workspace(a, c.WorkspaceID), ServiceAccountID: a.TrustedAccountID, JobID: id,
			SecretID: a.TrustedSecretID, CollectorID: c.CollectorID, CreatedAt: now, SubTasks: []freeform.Map{}}
	}
	// The job and its tasks are the collector's children (Live removes
	// them again if its delete began meanwhile).
	if err := w.Create(ctx, func(ctx context.Context) error {
		_, err := s.jobs.InsertOne(ctx, job)
		return store.Wrap(err)
	}, func(ctx context.Context) error {
		if _, err := s.tasks.DeleteMany(ctx, bson.D{{Key: "job_id", Value: id}}); err != nil {
			return err
		}
		_, err := s.jobs.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
		return err
	}); err != nil {
		return nil, err
	}
	// The running job of the same request is the one this job replaces.
	if err := s.cancelRunning(ctx, c, job, now); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return job, nil
	}
	if err := s.queue(ctx, job, tasks); err != nil {
		// A job whose tasks are not all queued would never finish: it
		// ends FAILURE, on a context the caller's leaving does not end,
		// unless it ended already (CANCELED by the next collect).
		fail := bson.D{{Key: "status", Value: core.JobFailure}, {Key: "finished_at", Value: now}, {Key: "updated_at", Value: now}}
		_, _ = s.jobs.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: id}, {Key: "status", Value: core.JobInProgress}}, bson.D{{Key: "$set", Value: fail}})
		return nil, err
	}
	if _, err := w.Set(ctx, bson.D{{Key: "last_collected_at", Value: now}}); err != nil {
		return nil, err
	}
	return job, nil
}

// queue stores the tasks and their messages (the outbox publishes them).
func (s *Service) queue(ctx context.Context, job *core.Job, tasks []any) error {
	if f, ok := queueFaults.Load(job.CollectorID); ok {
		if err := f.(func(string) error)(job.JobID); err != nil {
			return err
		}
	}
	if _, err := s.tasks.InsertMany(ctx, tasks); err != nil {
		return store.Wrap(err)
	}
	for _, t := range tasks {
		jt := t.(*core.JobTask)
		msg := events.InventoryTask{ID: jt.JobTaskID, JobID: job.JobID, JobTaskID: jt.JobTaskID, DomainID: job.DomainID, SubTask: -1}
		if err := s.outbox.Add(ctx, events.InventoryTaskSubject, msg.ID, msg); err != nil {
			return store.Wrap(err)
		}
	}
	return nil
}

var queueFaults sync.Map // collector id -> func(job id) error

// FailQueue makes the queueing of collectorID's jobs ask fault first,
// until restore is called: an error it answers fails the queueing before
// anything is queued, as a store that refused the write would (for tests
// of the job's FAILURE and its fence).
func FailQueue(collectorID string, fault func(jobID string) error) (restore func()) {
	queueFaults.Store(collectorID, fault)
	return func() { queueFaults.Delete(collectorID) }
}

// cancelRunning cancels the IN_PROGRESS jobs of the same collector,
// requesting workspace and requested secret, and their unfinished tasks.
func (s *Service) cancelRunning(ctx context.Context, c *Collector, job *core.Job, now wire.Time) error {
	// One atomic write names the request's running job and returns the
	// one it replaced: of collects at once, each replaces exactly one
	// other (or none), so all but the last are cancelled, whatever the
	// order.
	var before struct {
		Running map[string]string `bson:"running_jobs"`
	}
	key := "running_jobs." + runningKey(job.RequestSecretID, job.RequestWorkspaceID)
	err := s.c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: c.ID}, {Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: key, Value: job.JobID}}}}).Decode(&before)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return errs.NotFound("collector_id", c.CollectorID)
	}
	if err != nil {
		return store.Wrap(err)
	}
	prev := before.Running[runningKey(job.RequestSecretID, job.RequestWorkspaceID)]
	if prev == "" {
		return nil
	}
	var j core.Job
	set := bson.D{{Key: "status", Value: core.JobCanceled}, {Key: "finished_at", Value: now}, {Key: "updated_at", Value: now}}
	err = s.jobs.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: prev}, {Key: "status", Value: core.JobInProgress}}, bson.D{{Key: "$set", Value: set}}).Decode(&j)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil // it ended already
	}
	if err != nil {
		return store.Wrap(err)
	}
	return core.EndTasks(ctx, s.tasks, j.TaskIDs, core.TaskCanceled, nil, now)
}

// runningKey names a request (its secret and workspace, either maybe
// empty) in the collector's running_jobs; ids hold no dot.
func runningKey(secretID, workspaceID string) string {
	return "s-" + strings.ReplaceAll(secretID, ".", "_") + "-w-" + strings.ReplaceAll(workspaceID, ".", "_")
}

// upgrade moves a collector whose upgrade mode is AUTO to the newest
// version the repository has, initialising it again (upstream
// _update_collector_plugin). c is updated in place.
func (s *Service) upgrade(ctx context.Context, c *Collector, setCollector func(bson.D) (*Collector, error)) error {
	if c.PluginInfo.UpgradeMode != "AUTO" {
		return nil
	}
	v := s.repo.Latest(ctx, c.PluginInfo.PluginID)
	if v == "" || v == c.PluginInfo.Version {
		return nil
	}
	info := c.PluginInfo
	info.Version = v
	md, err := s.target(info).Init(ctx, wire.Object(info.Options))
	if err != nil {
		return err
	}
	info.Metadata = wire.Object(md)
	if _, err := setCollector(bson.D{{Key: "plugin_info", Value: info}}); err != nil {
		return err
	}
	c.PluginInfo = info
	return nil
}

// concurrency reads init metadata concurrency: the most sub-tasks of one
// job that run at once (0: no limit).
func concurrency(md map[string]any) int {
	switch v := md["concurrency"].(type) {
	case float64:
		if v >= 1 && v <= math.MaxInt32 {
			return int(v)
		}
	case int32:
		return max(int(v), 0)
	case int64:
		return max(int(v), 0)
	case int:
		return max(v, 0)
	}
	return 0
}
