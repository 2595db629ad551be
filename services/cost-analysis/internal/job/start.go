package job

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/datasourcerule"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/rows"
)

// Start runs a sync of ds as plugin-protocols.md section 5 says, in four
// steps, each undoing its own work when it fails:
//
//	prepare  check the data source, read from identity what the sync
//	         needs (secrets, the rules' directory); nothing is stored,
//	         so identity unreachable answers 503 and leaves no job
//	reserve  claim the data source's one running job and store the job
//	         (undo: the claim goes back)
//	plan     ask the plugin for its tasks (Job.get_tasks), once per
//	         secret (undo: the job is FAILURE ERROR_GET_JOB_TASKS)
//	enqueue  store the tasks, put the totals on the job, queue the tasks
//	         (undo: the tasks not queued are CANCELED, the job FAILURE)
//
// A MANUAL data source has one secret, its own; a plugin that fails
// get_tasks fails the job. A USE_SERVICE_ACCOUNT_SECRET one has a secret
// per trusted account it selects (Accounts); a get_tasks failing for one
// account is logged and that account has no task. No task makes the job
// SUCCESS at once.
func (js *Jobs) Start(ctx context.Context, ds *core.DataSource, start string) (*Job, error) {
	s, err := js.prepare(ctx, ds, start)
	if err != nil {
		return nil, err
	}
	if err := js.reserve(ctx, s); err != nil {
		return nil, err
	}
	if s.dir != nil {
		if _, err := js.dirs.InsertOne(ctx, bson.D{{Key: "_id", Value: s.job.ID}, {Key: "projects", Value: s.dir.Projects},
			{Key: "service_accounts", Value: s.dir.ServiceAccounts}}); err != nil {
			return js.failed(ctx, s.job, GetJobTasksFailed, "The projects and service accounts for the rules could not be kept: "+err.Error())
		}
	}
	p, err := js.plan(ctx, s)
	if err != nil {
		return js.failed(ctx, s.job, GetJobTasksFailed, err.Error())
	}
	return js.enqueue(ctx, s, p)
}

// syncing is what the steps of a Start share.
type syncing struct {
	ds      *core.DataSource
	start   string
	secrets []secret
	dir     *datasourcerule.Directory
	job     *Job
}

// prepare checks that ds syncs and reads what the sync needs; it stores
// nothing.
func (js *Jobs) prepare(ctx context.Context, ds *core.DataSource, start string) (*syncing, error) {
	if ds.State != core.Enabled {
		return nil, errs.New(errs.DataSourceState, "The data source is %s: it does not sync. (data_source_id = %s)", ds.State, ds.DataSourceID)
	}
	if js.outbox == nil {
		return nil, errs.Down("The event bus", errors.New("cost-analysis runs without NATS: jobs cannot be queued"))
	}
	secrets, err := js.secrets(ctx, ds)
	if err != nil {
		return nil, err
	}
	dir, err := js.directory(ctx, ds)
	if err != nil {
		return nil, err
	}
	now := wire.T(wire.Now())
	id := wire.NewID("job")
	opts := map[string]any{"no_preload_cache": false}
	if start != "" {
		opts["start"] = start
	}
	j := &Job{ID: id, JobID: id, Status: core.InProgress, Options: opts, Changed: []core.Changed{}, SyncedAccounts: []core.SyncedAccount{},
		ResourceGroup: ds.ResourceGroup, DomainID: ds.DomainID, WorkspaceID: ds.WorkspaceID, DataSourceID: ds.DataSourceID,
		SecretType: ds.SecretType, TaskIDs: []string{}, Pending: true, CreatedAt: now, UpdatedAt: now}
	return &syncing{ds: ds, start: start, secrets: secrets, dir: dir, job: j}, nil
}

// reserve makes the job the data source's one running job (claim.go) and
// stores it; on failure the claim goes back.
func (js *Jobs) reserve(ctx context.Context, s *syncing) error {
	// The swapped-out rows of the data source's last job go first: its
	// swap leaves out every row of its windows but its own, this job's
	// rows too.
	if err := js.tidySource(ctx, s.ds.DataSourceID); err != nil {
		return err
	}
	if err := js.claimSource(ctx, s.ds.DataSourceID, s.job.ID); err != nil {
		return err
	}
	if err := js.admit(ctx, s.ds, s.job); err != nil {
		_ = js.releaseSource(context.WithoutCancel(ctx), s.ds.DataSourceID, s.job.ID)
		return err
	}
	return nil
}

// planned is what the plugin's get_tasks answers make of a sync.
type planned struct {
	tasks    []core.Task
	changed  []core.Changed
	accounts []core.SyncedAccount
}

// plan asks the plugin for the tasks of each secret. The secret data
// goes to the plugin and nowhere else. An error fails the job (the
// caller's undo).
func (js *Jobs) plan(ctx context.Context, s *syncing) (planned, error) {
	ds, id := s.ds, s.job.ID
	last := ""
	if ds.LastSynchronizedAt != nil {
		last = wire.FormatTime(ds.LastSynchronizedAt.Time)
	}
	out := planned{tasks: []core.Task{}, changed: []core.Changed{}, accounts: []core.SyncedAccount{}}
	for _, sec := range s.secrets {
		reply, err := plugin.CostDataSource{Target: js.plugins.Plugin(ds.PluginInfo.PluginID, ds.PluginInfo.Version)}.GetTasks(ctx, plugin.CostTasksRequest{
			Options: PluginOptions(ds), SecretData: sec.data, Start: s.start, LastSynchronizedAt: last, DomainID: ds.DomainID})
		if err == nil {
			err = checkWindows(reply)
		}
		if err != nil {
			if sec.account == nil {
				js.log.Info("cost job get_tasks failed", "job_id", id, "data_source_id", ds.DataSourceID, "error", err.Error())
				return planned{}, err
			}
			// Upstream logs it and goes on with the other accounts.
			js.log.Warn("cost job get_tasks failed for a trusted account: it has no task", "job_id", id, "data_source_id", ds.DataSourceID,
				"trusted_account_id", sec.account.TrustedAccountID, "error", err.Error())
			continue
		}
		for _, t := range list(reply, "tasks") {
			tid := wire.NewID("job-task")
			to, _ := t["task_options"].(map[string]any)
			task := core.Task{ID: tid, JobTaskID: tid, Status: core.Pending, Options: wire.Object(to), JobID: id,
				DataSourceID: ds.DataSourceID, DomainID: ds.DomainID, WorkspaceID: ds.WorkspaceID, CreatedAt: s.job.CreatedAt}
			if c, ok := t["task_changed"].(map[string]any); ok && len(c) > 0 {
				ch := sec.window(changed(c))
				task.Changed = &ch
			}
			if sec.account != nil {
				task.TrustedAccountID, task.AccountWorkspaceID = sec.account.TrustedAccountID, sec.account.WorkspaceID
			}
			out.tasks = append(out.tasks, task)
		}
		for _, c := range list(reply, "changed") {
			out.changed = append(out.changed, sec.window(changed(c)))
		}
		for _, a := range list(reply, "synced_accounts") {
			if acc, _ := a["account_id"].(string); acc != "" {
				out.accounts = append(out.accounts, core.SyncedAccount{AccountID: acc})
			}
		}
	}
	return out, nil
}

// enqueue stores the planned tasks, puts the totals on the job (before
// any task is queued: a worker settling the job must see every task) and
// queues the tasks. A failure ends the tasks not queued (CANCELED) and
// fails the job; a job cancelled while the plugin planned queues nothing.
func (js *Jobs) enqueue(ctx context.Context, s *syncing, p planned) (*Job, error) {
	id := s.job.ID
	ids := make([]string, len(p.tasks))
	for i := range p.tasks {
		ids[i] = p.tasks[i].ID
		if _, err := js.tasks.InsertOne(ctx, p.tasks[i]); err != nil {
			js.unqueued(ctx, ids[:i], "The tasks could not be stored.")
			return js.failed(ctx, s.job, GetJobTasksFailed, "The tasks could not be stored: "+err.Error())
		}
	}
	ch, err := js.change(ctx, id, func(cur *Job) error {
		cur.TotalTasks, cur.RemainedTasks, cur.TaskIDs, cur.Changed, cur.SyncedAccounts = len(ids), len(ids), ids, p.changed, p.accounts
		return nil
	})
	if err != nil {
		return nil, js.gone(ctx, id, err)
	}
	j := ch.After
	if j.Status != core.InProgress { // cancelled while get_tasks ran
		js.unqueued(ctx, ids, "The job is "+j.Status+".")
		// Recounts remained_tasks; the job is answered as it is either way.
		if err := js.Settle(ctx, id); err == nil {
			if cur, err := js.Load(ctx, id); err == nil && cur != nil {
				j = cur
			}
		}
		return j, nil
	}
	if len(p.tasks) == 0 {
		if err := js.Settle(ctx, id); err != nil {
			return nil, err
		}
		return js.Load(ctx, id)
	}
	for i, t := range p.tasks {
		if err := js.outbox.Add(ctx, events.CostTaskSubject, t.JobTaskID, events.CostTask{JobTaskID: t.JobTaskID, JobID: id,
			DataSourceID: s.ds.DataSourceID, DomainID: s.ds.DomainID}); err != nil {
			js.unqueued(ctx, ids[i:], "The tasks could not be queued.")
			return js.failed(ctx, j, GetJobTasksFailed, "The tasks could not be queued: "+err.Error())
		}
	}
	return j, nil
}

// admit stores the job of a data source claimed for it, once nothing of
// an earlier job stands in the way: a job running from before the claims
// (made TIMEOUT when past its timeout, else 409), or the swapped-out rows
// of the last success still being deleted (503). A deregister that began
// meanwhile finds the stored job, or this start sees its mark and takes
// the job back (404).
func (js *Jobs) admit(ctx context.Context, ds *core.DataSource, j *Job) error {
	cur, err := js.jobs.Find(ctx, bson.D{{Key: "data_source_id", Value: ds.DataSourceID}, {Key: "status", Value: core.InProgress}})
	if err != nil {
		return store.Wrap(err)
	}
	var running []Job
	if err := cur.All(ctx, &running); err != nil {
		return store.Wrap(err)
	}
	for _, r := range running {
		done, err := js.Expire(ctx, r.JobID)
		if err != nil {
			return err
		}
		if !done {
			return errs.New(errs.DuplicateJob, "A job of the data source is running. (data_source_id = %s, job_id = %s)", ds.DataSourceID, r.JobID)
		}
	}
	// A job that succeeded since tidySource ran is tidied here; one
	// whose deletes fail keeps the sync refused until it is tidied.
	busy, err := js.swapPending(ctx, ds.DataSourceID)
	if err == nil && busy {
		if err = js.tidySource(ctx, ds.DataSourceID); err == nil {
			busy, err = js.swapPending(ctx, ds.DataSourceID)
		}
	}
	if err != nil {
		return err
	}
	if busy {
		return errs.Down("The data source's last sync", errors.New("its replaced costs are still being deleted"))
	}
	if _, err := js.jobs.InsertOne(ctx, j); err != nil {
		return store.Wrap(err)
	}
	// Deregister marks the data source, then lists its jobs (Forget):
	// either it lists this one, or this read sees the mark.
	live, err := js.sourceLive(ctx, ds.DataSourceID)
	if err == nil && !live {
		err = errs.NotFound("data_source_id", ds.DataSourceID)
	}
	if err != nil {
		_, _ = js.jobs.DeleteOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: j.ID}})
		return err
	}
	return nil
}

// gone passes err on; when it says the job is not found (deregister
// forgot it while it started), it first deletes what Start stored for the
// job after that: its tasks and its directory, which nothing else would
// ever delete.
func (js *Jobs) gone(ctx context.Context, jobID string, err error) error {
	if !errs.Is(err, errs.NotFoundCode) {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	if _, derr := js.tasks.DeleteMany(ctx, bson.D{{Key: "job_id", Value: jobID}}); derr != nil {
		js.log.Warn("tasks of a deregistered data source's job stay", "job_id", jobID, "error", derr.Error())
	}
	if _, derr := js.dirs.DeleteOne(ctx, bson.D{{Key: "_id", Value: jobID}}); derr != nil {
		js.log.Warn("directory of a deregistered data source's job stays", "job_id", jobID, "error", derr.Error())
	}
	return err
}

// unqueued ends the tasks of ids that no worker will ever receive (their
// job stopped, or failed, before they were queued): CANCELED, as a worker
// leaves the task of a stopped job. They would otherwise stay PENDING for
// good. Best effort: the caller is answering a failure already.
func (js *Jobs) unqueued(ctx context.Context, ids []string, message string) {
	if len(ids) == 0 {
		return
	}
	now := wire.T(wire.Now())
	if _, err := js.tasks.UpdateMany(context.WithoutCancel(ctx),
		bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "status", Value: core.Pending}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: core.Canceled}, {Key: "error_message", Value: message},
			{Key: "finished_at", Value: now}}}}); err != nil {
		js.log.Warn("cost tasks not queued stay PENDING", "tasks", len(ids), "error", err.Error())
	}
}

// failed makes the job FAILURE with code and returns it.
func (js *Jobs) failed(ctx context.Context, j *Job, code, message string) (*Job, error) {
	ch, err := js.change(ctx, j.JobID, func(cur *Job) error {
		if cur.Status == core.InProgress {
			finish(cur, core.Failure, code, message)
		}
		return nil
	})
	return ch.After, js.gone(ctx, j.JobID, err)
}

func list(reply map[string]any, key string) []map[string]any {
	raw, _ := reply[key].([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, v := range raw {
		if m, ok := v.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// checkWindows refuses a get_tasks reply with a changed window (the job's
// or a task's) that names no month or day, or whose filter is not one
// CheckWindowFilter takes: its rows would be deleted by it.
func checkWindows(reply map[string]any) error {
	windows := list(reply, "changed")
	for _, t := range list(reply, "tasks") {
		if c, ok := t["task_changed"].(map[string]any); ok && len(c) > 0 {
			windows = append(windows, c)
		}
	}
	for _, c := range windows {
		w := changed(c)
		if f, ok := c["filter"]; ok && f != nil {
			if _, isMap := f.(map[string]any); !isMap {
				return errs.Invalid("changed.filter", "an object of cost fields")
			}
		}
		if err := rows.CheckWindowFilter(w.Filter); err != nil {
			return err
		}
		if _, ok := rows.WindowFilter("", "", "", w); !ok {
			return errs.Invalid("changed", fmt.Sprintf("start %q and end %q must be YYYY-MM or YYYY-MM-DD", w.Start, w.End))
		}
	}
	return nil
}

func changed(c map[string]any) core.Changed {
	s, _ := c["start"].(string)
	e, _ := c["end"].(string)
	f, _ := c["filter"].(map[string]any)
	return core.Changed{Start: s, End: e, Filter: wire.Object(f)}
}

// ProjectListPath is identity's operation the rules' projects come from.
const ProjectListPath = "/identity/v2/project/list"

// directory reads from identity what the rules of ds look up, nil when
// none needs anything: the domain's projects (change_project,
// match_project) and its trusted service accounts (match_service_account).
// Whatever identity answers, only what belongs to the data source's
// domain is kept.
//
// Both are read with the service credential, naming the domain: a
// scheduled sync has no caller.
func (js *Jobs) directory(ctx context.Context, ds *core.DataSource) (*datasourcerule.Directory, error) {
	rules, err := js.rules.Of(ctx, ds.DataSourceID)
	if err != nil {
		return nil, err
	}
	projects, accounts := false, false
	for _, r := range rules {
		projects = projects || r.Actions.ChangeProject != "" || r.Actions.MatchProject != nil
		accounts = accounts || r.Actions.MatchServiceAccount != nil
	}
	if !projects && !accounts {
		return nil, nil
	}
	dir := &datasourcerule.Directory{Projects: []datasourcerule.Project{}, ServiceAccounts: []datasourcerule.ServiceAccount{}}
	if projects {
		if dir.Projects, err = js.projects(ctx, ds.DomainID); err != nil {
			return nil, err
		}
	}
	if accounts {
		sas, err := js.trusted.ServiceAccounts(ctx, ds.DomainID)
		if err != nil {
			return nil, err
		}
		for _, sa := range sas {
			dir.ServiceAccounts = append(dir.ServiceAccounts, datasourcerule.ServiceAccount{ServiceAccountID: sa.TrustedServiceAccountID,
				Name: sa.Name, WorkspaceID: sa.WorkspaceID, Data: core.Object(sa.Data)})
		}
	}
	return dir, nil
}

// projects lists the projects of domainID, with the service credential
// naming the domain (identity takes domain_id from SYSTEM callers), so a
// scheduled sync reads them as one a user started does.
func (js *Jobs) projects(ctx context.Context, domainID string) ([]datasourcerule.Project, error) {
	return call.ListAll(ctx, js.identity, ProjectListPath, map[string]any{"domain_id": domainID},
		func(p datasourcerule.Project) bool { return p.DomainID == domainID })
}

// Directory returns what was kept for a job's rules (empty when nothing).
func (js *Jobs) Directory(ctx context.Context, jobID string) (datasourcerule.Directory, error) {
	var doc struct {
		Projects        []datasourcerule.Project        `bson:"projects"`
		ServiceAccounts []datasourcerule.ServiceAccount `bson:"service_accounts"`
	}
	err := js.dirs.FindOne(ctx, bson.D{{Key: "_id", Value: jobID}}).Decode(&doc)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return datasourcerule.Directory{}, store.Wrap(err)
	}
	return datasourcerule.Directory{Projects: doc.Projects, ServiceAccounts: doc.ServiceAccounts}, nil
}

// Forget deletes every job, task, kept directory and cost of a data
// source (deregister). Running jobs are cancelled first, so their workers
// stop.
func (js *Jobs) Forget(ctx context.Context, dataSourceID string) error {
	// After the data source's mark: a start either stored its job before
	// this read, or sees the mark and takes its job back (admit).
	var jobs []Job
	cur, err := js.jobs.Find(ctx, bson.D{{Key: "data_source_id", Value: dataSourceID}})
	if err != nil {
		return store.Wrap(err)
	}
	if err := cur.All(ctx, &jobs); err != nil {
		return store.Wrap(err)
	}
	ids := bson.A{}
	for _, j := range jobs {
		ids = append(ids, j.JobID)
		if j.Status == core.InProgress {
			if _, err := js.change(ctx, j.JobID, func(cur *Job) error {
				if cur.Status == core.InProgress {
					finish(cur, core.Canceled, "", "The data source was deregistered.")
				}
				return nil
			}); err != nil {
				return err
			}
		}
	}
	if err := store.DeleteChildren(ctx, js.costs, bson.D{{Key: "data_source_id", Value: dataSourceID}}); err != nil {
		return err
	}
	if err := store.DeleteChildren(ctx, js.tasks, bson.D{{Key: "data_source_id", Value: dataSourceID}}); err != nil {
		return err
	}
	if len(ids) > 0 {
		if err := store.DeleteChildren(ctx, js.dirs, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}); err != nil {
			return err
		}
	}
	return store.DeleteChildren(ctx, js.jobs, bson.D{{Key: "data_source_id", Value: dataSourceID}})
}
