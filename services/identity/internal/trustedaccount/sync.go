package trustedaccount

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/schedule"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// Trusted-account sync: the worker that runs the jobs trusted-account/sync
// records, and the schedule that records them at the hours of an
// account's schedule.
//
// A sync job's event (nubes.job.identity) is read by the durable consumer
// identity-sync that every replica shares. The worker calls the account
// collector plugin of the account's provider (config
// account_collector_plugins: provider -> plugin_id[@version]) with
// AccountCollector.sync {options: the provider's plugin_info options
// overlaid by the account's plugin_options and sync_options, schema_id:
// its secret_schema_id, secret_data: its unsealed secret data,
// domain_id}, and places each reported account as a managed general
// service account (general.go). The job ends SUCCESS, or FAILURE with the
// error's code and message (the first result that cannot be placed ends
// it, as upstream). A job that is no longer IN_PROGRESS (canceled by a later sync)
// is not run; a redelivered job runs again, which upserts the same
// records. Without a plugin client (Config.Plugins) no worker runs.

// JobSuccess is the status of a sync that finished.
const JobSuccess = "SUCCESS"

// runSyncJobs consumes sync job events until ctx is done, one at a time.
func (s *service) runSyncJobs(ctx context.Context) error {
	if s.Cfg.Plugins == nil || s.Bus == nil {
		return nil
	}
	return events.Consume(ctx, s.Bus, events.ConsumerSpec{Stream: events.JobStream, Consumer: jetstream.ConsumerConfig{
		Durable:       events.IdentitySyncConsumer,
		FilterSubject: events.IdentityJobSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.Cfg.SyncAckWait,
	}, MaxDeliver: 20, DeadLetter: events.DeadRecords(s.DB.Collection(core.DeadLettersCollection))}, 1, s.handleSync)
}

func (s *service) handleSync(ctx context.Context, m events.Delivery) events.Outcome {
	var ev TrustedSyncEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.JobID == "" {
		return events.Poison("not a trusted-account sync job")
	}
	if err := s.runSync(ctx, ev); err != nil {
		s.Log.Warn("trusted-account sync failed; retried", "job_id", ev.JobID, "error", err.Error())
		return events.RetryAfter(5*time.Second, err)
	}
	return events.Done()
}

// runSync runs one sync job; an error is the store's (tried again).
func (s *service) runSync(ctx context.Context, ev TrustedSyncEvent) error {
	var job IdentityJob
	err := s.Jobs.FindOne(ctx, bson.D{{Key: "_id", Value: ev.JobID}}).Decode(&job)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil // another deployment's job, or deleted
	}
	if err != nil {
		return store.Wrap(err)
	}
	if job.Status != JobInProgress || job.DomainID != ev.DomainID {
		return nil
	}
	// The worker acts for the job's domain, as a SYSTEM token of it would.
	sys := core.SystemPrincipal(job.DomainID)
	t, err := store.GetFor[TrustedAccount](ctx, s.Trusted, trustedResource, &sys, "trusted_account_id", job.TrustedAccountID)
	if err != nil {
		if errs.Is(err, errs.NotFoundCode) {
			return s.finishSync(ctx, &job, errs.NotFoundCode, "The trusted account no longer exists.")
		}
		return err
	}
	target, err := s.accountCollector(t.Provider)
	if err != nil {
		e, _ := errs.As(err)
		return s.finishSync(ctx, &job, e.Code, e.Message)
	}
	data, err := s.trustedSecretData(ctx, t)
	if err != nil {
		if e, ok := errs.As(err); ok && e.Code == errs.NotFoundCode {
			return s.finishSync(ctx, &job, e.Code, e.Message)
		}
		return err
	}
	// The plugin's options, upstream's merge: the provider's plugin_info
	// options, then the account's plugin_options, then its sync_options.
	opts := map[string]any{}
	if pr, err := s.providers.Get(ctx, &sys, t.Provider); err == nil {
		if o, ok := pr.PluginInfo["options"].(map[string]any); ok {
			maps.Copy(opts, o)
		}
	} else if !errs.Is(err, errs.NotFoundCode) {
		return err
	}
	maps.Copy(opts, t.PluginOptions)
	maps.Copy(opts, t.SyncOptions)
	accounts, err := target.Sync(ctx, plugin.SyncRequest{Options: opts, SchemaID: t.SecretSchemaID, SecretData: data, DomainID: t.DomainID})
	if err != nil {
		code, msg := errs.Unknown, err.Error()
		if f, ok := plugin.FailureOf(err); ok {
			code, msg = errs.PluginFailed, f.Error()
			if f.Code != "" {
				code, msg = f.Code, f.Message
			}
		} else if e, ok := errs.As(err); ok {
			code, msg = e.Code, e.Message
		}
		return s.finishSync(ctx, &job, code, msg)
	}
	y, err := s.newSyncer(ctx, t)
	if err != nil {
		return err
	}
	for _, a := range accounts {
		if err := y.place(ctx, a); err != nil {
			if e, ok := errs.As(err); ok && e.Status() < 500 {
				return s.finishSync(ctx, &job, e.Code, e.Message)
			}
			return err
		}
	}
	return s.finishSync(ctx, &job, "", "")
}

// accountCollector is the account collector plugin of a provider.
func (s *service) accountCollector(provider string) (plugin.AccountCollector, error) {
	ref := s.Cfg.AccountCollectors[provider]
	if ref == "" {
		return plugin.AccountCollector{}, errs.New(errs.NoPluginEndpoint,
			"No account collector plugin is configured for provider %s (account_collector_plugins).", provider)
	}
	id, version, _ := strings.Cut(ref, "@")
	return plugin.AccountCollector{Target: s.Cfg.Plugins.Plugin(id, version)}, nil
}

// finishSync ends a job: SUCCESS without code, else FAILURE with it.
func (s *service) finishSync(ctx context.Context, job *IdentityJob, code, message string) error {
	now := wire.T(wire.Now())
	set := bson.D{{Key: "remained_tasks", Value: 0}, {Key: "finished_at", Value: now}, {Key: "updated_at", Value: now},
		{Key: "error_code", Value: code}, {Key: "error_message", Value: message}}
	if code == "" {
		set = append(set, bson.E{Key: "status", Value: JobSuccess}, bson.E{Key: "success_tasks", Value: 1}, bson.E{Key: "failure_tasks", Value: 0})
	} else {
		set = append(set, bson.E{Key: "status", Value: JobFailure}, bson.E{Key: "success_tasks", Value: 0}, bson.E{Key: "failure_tasks", Value: 1})
	}
	_, err := s.Jobs.UpdateOne(ctx, bson.D{{Key: "_id", Value: job.ID}, {Key: "status", Value: JobInProgress}}, bson.D{{Key: "$set", Value: set}})
	return store.Wrap(err)
}

// runSyncSchedule records a sync of each account whose schedule is
// ENABLED at each of its hours (UTC), once across replicas (pkg/schedule):
// the replica that inserts the lease sync#<trusted_account_id>#<hour>
// does.
func (s *service) runSyncSchedule(ctx context.Context) error {
	if s.Cfg.Plugins == nil {
		return nil
	}
	return s.syncSchedule().Run(ctx)
}

// syncSchedule is the scheduler of trusted-account syncs.
func (s *service) syncSchedule() *schedule.Scheduler[TrustedAccount] {
	sched := schedule.New(schedule.Config[TrustedAccount]{
		Records: s.Trusted, Leases: s.DB.Collection(core.CountersCollection), Kind: "sync-schedule", LeasePrefix: "sync#",
		ID: func(t *TrustedAccount) string { return t.TrustedAccountID },
		Fire: func(ctx context.Context, t *TrustedAccount) error {
			_, err := s.startSync(ctx, t, "schedule")
			return err
		},
		Every: s.Cfg.SyncScheduleTick, Log: s.Log,
	})
	if s.Cfg.SyncScheduleClock != nil {
		sched.Now = s.Cfg.SyncScheduleClock
	}
	return sched
}

// FireSyncSchedules records the syncs due in the hour of now that no
// replica recorded yet.
func FireSyncSchedules(ctx context.Context, d *core.Deps, now time.Time) error {
	s := newService(d)
	return s.syncSchedule().FireAt(ctx, now)
}

// Workers are the sync worker and the sync schedule (neither runs without
// a plugin client, Config.Plugins).
func Workers(d *core.Deps) []func(context.Context) error {
	s := newService(d)
	return []func(context.Context) error{s.runSyncJobs, s.runSyncSchedule}
}
