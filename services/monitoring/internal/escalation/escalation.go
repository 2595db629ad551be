// Package escalation walks each open alert through its escalation policy
// (spec/alerts.md §4): every tick, for each alert still asking for
// attention, the next step of upstream's create_alert_notification, each
// step a notification request to the alert's project at the rule's level
// (events.NotificationRequest through the service's outbox), and the
// resolved notices of alerts that were resolved.
//
// A tick takes the lease of the alerts due only: each open alert stores
// when the escalation next looks at it (escalate_at: its next step's
// time; unset by a change that may finish it), the tick selects by it,
// and Step decides again under the lease from what is stored.
//
// Once across replicas and surviving restarts: the state (escalation_step,
// escalation_ttl, escalated_at, escalate_at) lives on the alert, each alert's step is
// decided and written under the alert's lease (alert.Change) from
// what is stored, and the request's id is derived from the step it
// announces, so a step retried after a crash publishes nothing twice (the
// outbox and the stream drop a repeated id). A tick runs on one replica
// at a time (a lease); that only saves work.
//
// A new alert's first step is taken by its insert (alert.Alert.Begin),
// its notice pending on it; the replica that stored it hands it here
// (Kicks), and the worker records the notice and clears it, without
// reading or writing the alert otherwise. A notice whose replica died
// first is found by the tick, as any step's.
package escalation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/lease"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/alert"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
	"github.com/nubes-io/nubes/services/monitoring/internal/projectalertconfig"
)

// Topic is what subscriptions name for alerts (upstream's).
const Topic = "monitoring.Alert"

// Rule is one step of a policy.
type Rule struct {
	Level           string
	EscalateMinutes int32
}

// Policy is what escalation needs of an escalation policy.
type Policy struct {
	Name            string
	Rules           []Rule
	RepeatCount     int32
	FinishCondition string
}

// Builtin is upstream's default policy, for an alert whose policy is
// gone or that never had one: one message at ALL, stop when acknowledged.
var Builtin = Policy{Name: "Default", Rules: []Rule{{Level: events.LevelAll}}, FinishCondition: alert.Acknowledged}

// Policies reads a policy by id (nil when it is gone).
type Policies func(ctx context.Context, id string) (*Policy, error)

// Notifier records a notification request (events.Outbox.Notify).
type Notifier interface {
	Notify(ctx context.Context, r events.NotificationRequest) error
}

// Worker runs the escalation.
type Worker struct {
	alerts   *alert.Alerts
	coll     *mongo.Collection
	claims   *mongo.Collection
	configs  *projectalertconfig.Configs
	policies Policies
	notify   Notifier
	clock    core.Clock
	tick     time.Duration
	log      *slog.Logger
	kicks    Kicks
}

// New builds the worker on the service's clock.
func New(db *mongo.Database, alerts *alert.Alerts, configs *projectalertconfig.Configs, policies Policies, notify Notifier,
	kicks Kicks, tick time.Duration, clock core.Clock, log *slog.Logger) *Worker {
	return &Worker{alerts: alerts, coll: db.Collection(core.AlertsCollection), claims: db.Collection(core.ClaimsCollection), configs: configs,
		policies: policies, notify: notify, clock: clock, tick: tick, log: log, kicks: kicks}
}

// Kicks carries the alerts just opened, as stored, to the worker. Their
// first step was taken by their insert (alert.Alert.Begin); the worker
// records its notice at once rather than at its next tick. Whoever opens
// an alert is given it (alert.Opener); a full queue drops a kick, and
// the tick finds the notice anyway.
type Kicks chan []*alert.Alert

// NewKicks is a queue of kicks.
func NewKicks() Kicks { return make(Kicks, 1024) }

// Opened hands on the first steps of alerts opened together.
func (k Kicks) Opened(as ...*alert.Alert) {
	if len(as) == 0 {
		return
	}
	select {
	case k <- as:
	default:
	}
}

// kickers record the notices of new alerts side by side, each those of
// the kicks waiting, up to kickBatch alerts: a burst of new alerts
// (opened by the ingest a batch at a time) costs the store one command
// of clearings per batch, not one per alert.
const (
	kickers   = 2
	kickBatch = 64
)

// Run ticks, and steps the alerts kicked, until ctx is done.
func (w *Worker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for range kickers {
		wg.Go(func() { w.kicked(ctx) })
	}
	t := time.NewTicker(w.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := w.Tick(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("escalation tick failed; the next one goes on", "error", err.Error())
		}
	}
}

// kicked records the first notices of the alerts kicked until ctx is
// done, those waiting together.
func (w *Worker) kicked(ctx context.Context) {
	for {
		var batch []*alert.Alert
		select {
		case <-ctx.Done():
			return
		case as := <-w.kicks:
			batch = append(batch, as...)
		}
	more:
		for len(batch) < kickBatch {
			select {
			case as := <-w.kicks:
				batch = append(batch, as...)
			default:
				break more
			}
		}
		if err := w.begun(ctx, batch); err != nil && ctx.Err() == nil {
			w.log.Warn("first notices of new alerts failed; the next tick goes on", "alerts", len(batch), "error", err.Error())
		}
	}
}

// begun records the notices of alerts as their inserts left them, side
// by side (each waits for the outbox), and clears those recorded in one
// command. One without a notice (its escalation ended by its insert)
// has nothing to record.
func (w *Worker) begun(ctx context.Context, alerts []*alert.Alert) error {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		cleared []*alert.Alert
		failed  []error
	)
	for _, a := range alerts {
		if a.Notice == nil {
			continue
		}
		wg.Go(func() {
			err := w.alerting(ctx, a, a.Notice)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Errorf("%s: %w", a.ID, err))
				return
			}
			cleared = append(cleared, a)
		})
	}
	wg.Wait()
	if err := w.alerts.ClearNotices(ctx, cleared); err != nil {
		failed = append(failed, err)
	}
	return errors.Join(failed...)
}

// tickTTL bounds a tick's lease: three ticks, so that a replica killed
// while it held it delays the escalation by that much at most. It is not
// renewed: a pass that outlives it may overlap the next replica's, which
// only repeats reads (each alert's step is decided under its lease).
func (w *Worker) tickTTL() time.Duration { return max(3*w.tick, time.Second) }

// Tick runs one pass, unless another replica's is running.
func (w *Worker) Tick(ctx context.Context) error {
	l, err := lease.TryTake(ctx, w.claims, "escalation#tick", w.tickTTL())
	if err != nil || l == nil {
		return err
	}
	defer l.Release(ctx)
	return w.Pass(ctx)
}

// Pass steps every alert that is due and sends the resolved notices.
func (w *Worker) Pass(ctx context.Context) error {
	// Only the alerts due: an open one whose stored next look has come
	// (or was never set), an ERROR one not announced yet, a resolved one
	// whose notices are not sent. Step decides each again under its lease.
	now := wire.T(w.clock.Now())
	cur, err := w.coll.Find(ctx, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{alert.Triggered, alert.Acknowledged}}}},
			{Key: "escalation_ttl", Value: bson.D{{Key: "$gt", Value: 0}}},
			{Key: "$or", Value: bson.A{
				bson.D{{Key: alert.EscalateAtField, Value: nil}},
				bson.D{{Key: alert.EscalateAtField, Value: bson.D{{Key: "$lte", Value: now}}}},
			}}},
		bson.D{{Key: "state", Value: alert.Error}, {Key: "escalation_ttl", Value: bson.D{{Key: "$gt", Value: 0}}}, {Key: "escalated_at", Value: nil}},
		bson.D{{Key: alert.ResolveNoticeField, Value: true}},
		bson.D{{Key: "notice", Value: bson.D{{Key: "$exists", Value: true}}}},
	}}}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return store.Wrap(err)
	}
	var ids []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &ids); err != nil {
		return store.Wrap(err)
	}
	var failed []error
	for _, id := range ids {
		if ctx.Err() != nil {
			return nil
		}
		if err := w.Step(ctx, id.ID); err != nil && !errs.Is(err, errs.NotFoundCode) {
			failed = append(failed, fmt.Errorf("%s: %w", id.ID, err))
		}
	}
	if err := w.alerts.PurgeSpent(ctx); err != nil {
		failed = append(failed, err)
	}
	return errors.Join(failed...)
}

func (w *Worker) policyOf(ctx context.Context, a *alert.Alert) (Policy, error) {
	if a.EscalationPolicyID == "" {
		return Builtin, nil
	}
	p, err := w.policies(ctx, a.EscalationPolicyID)
	if err != nil {
		return Policy{}, err
	}
	if p == nil || len(p.Rules) == 0 {
		return Builtin, nil
	}
	return *p, nil
}

// Step takes one alert one step on (upstream's create_alert_notification),
// or sends its resolved notices. A step is decided and written first,
// its notice with it (Alert.Notice); the notice is recorded in the outbox
// after the write, and cleared then (flush). A notice left by a step cut
// short (a killed replica) is found by the same read that decides (the
// tick selects such alerts): it is recorded, and the step decided again.
func (w *Worker) Step(ctx context.Context, id string) error {
	for range 2 {
		ch, err := w.alerts.Change(ctx, id, func(a *alert.Alert) error { return w.decide(ctx, a) })
		if err != nil {
			return err
		}
		a := ch.After
		if a.Notice != nil {
			if err := w.flush(ctx, a); err != nil {
				return err
			}
			if ch.Wrote {
				return nil // the step just taken
			}
			continue // one left by a step cut short: recorded now
		}
		if a.Open() || !resolveNotice(a) {
			return nil
		}
		pol, err := w.policyOf(ctx, a)
		if err != nil {
			return err
		}
		// Sent while the mark stands, then cleared: a crash in between
		// sends them again under the same ids (one notice each).
		if err := w.resolved(ctx, a, pol); err != nil {
			return err
		}
		_, err = w.alerts.Change(ctx, id, func(a *alert.Alert) error {
			a.ResolveNotice = false
			return nil
		})
		return err
	}
	return nil
}

// decide edits the alert to its next escalation state, from what is
// stored: a step taken (with its notice), the escalation stopped, or the
// time of its next look.
func (w *Worker) decide(ctx context.Context, a *alert.Alert) error {
	if a.Notice != nil || (!a.Open() && a.State != alert.Error) {
		return nil // a notice not recorded yet (Step records it and decides again), or resolved meanwhile
	}
	now := w.clock.Now()
	pol, err := w.policyOf(ctx, a)
	if err != nil {
		return err
	}
	if a.State == alert.Error {
		// Upstream announces an ERROR alert once, at its creation.
		if a.EscalatedAt != nil || a.EscalationTTL <= 0 {
			return nil
		}
		a.AnnounceError(pol.Rules[0].Level, now)
		return nil
	}
	if a.EscalationTTL <= 0 {
		return nil
	}
	opts, err := w.configs.OptionsOf(ctx, a.DomainID, a.ProjectID)
	if err != nil {
		return err
	}
	if (opts.NotificationUrgency == projectalertconfig.UrgencyHighOnly && a.Urgency == alert.Low) ||
		(pol.FinishCondition == alert.Acknowledged && a.State == alert.Acknowledged) {
		a.EscalationTTL = 0
		return nil
	}
	step, ttl := a.EscalationStep, a.EscalationTTL
	if step < 1 || int(step) > len(pol.Rules) {
		step = 1 // the policy lost rules since
	}
	if a.EscalatedAt != nil {
		wait := time.Duration(pol.Rules[step-1].EscalateMinutes) * time.Minute
		if due := a.EscalatedAt.Add(wait); !now.After(due) {
			// Not due (the policy changed, or a look asked for by a
			// change): the next look is when it is.
			lookAt(a, due)
			return nil
		}
		switch {
		case int(step) < len(pol.Rules):
			step++
		case ttl <= 1:
			a.EscalationTTL = 0
			return nil
		default:
			step, ttl = 1, ttl-1
		}
	}
	a.TakeStep(step, ttl, pol.Rules[step-1].Level, pol.Rules[step-1].EscalateMinutes, now)
	return nil
}

// lookAt stores due as the alert's next look. The look is due just after
// due (a step is taken only once now is after it), so it is stored a
// millisecond later: a pass at due itself would look for nothing.
func lookAt(a *alert.Alert, due time.Time) {
	next := wire.T(due.Add(time.Millisecond))
	a.EscalateAt = &next
}

// flush records the alert's pending notice in the outbox (its id is the
// step's: recorded twice, it is one notice) and clears it.
func (w *Worker) flush(ctx context.Context, a *alert.Alert) error {
	if err := w.alerting(ctx, a, a.Notice); err != nil {
		return err
	}
	return w.alerts.ClearNotices(ctx, []*alert.Alert{a})
}

// resolveNotice reports whether the alert's resolved notices are due.
func resolveNotice(a *alert.Alert) bool { return a.ResolveNotice }

func tags(a *alert.Alert) []events.MessageTag {
	var res []string
	for _, r := range a.Resources {
		res = append(res, r.Name)
	}
	t := []events.MessageTag{{Key: "Alert Number", Value: fmt.Sprintf("#%d", a.AlertNumber)}, {Key: "State", Value: a.State},
		{Key: "Urgency", Value: a.Urgency}, {Key: "Triggered by", Value: a.TriggeredBy}, {Key: "Project", Value: a.ProjectID}}
	if len(res) > 0 {
		t = append(t, events.MessageTag{Key: "Resource", Value: strings.Join(res, ", ")})
	}
	if a.Assignee != "" {
		t = append(t, events.MessageTag{Key: "Assigned to", Value: a.Assignee})
	}
	if a.Account != "" {
		t = append(t, events.MessageTag{Key: "Account", Value: a.Account})
	}
	return t
}

func (w *Worker) request(a *alert.Alert, id, typ, level, title string) events.NotificationRequest {
	return events.NotificationRequest{ID: id, DomainID: a.DomainID, WorkspaceID: a.WorkspaceID, ProjectID: a.ProjectID, Topic: Topic,
		NotificationType: typ, Level: level, Message: events.NotificationMessage{Title: title, Description: a.Description,
			ImageURL: a.ImageURL, Tags: tags(a), OccurredAt: wire.FormatTime(a.CreatedAt.Time)}}
}

func (w *Worker) alerting(ctx context.Context, a *alert.Alert, n *alert.Notice) error {
	r := w.request(a, n.ID, events.NotifyError, n.Level, "[Alerting] "+a.Title)
	link, err := w.alerts.LinkURL(a)
	if err != nil {
		return err
	}
	if link != "" {
		r.Message.Callbacks = []events.MessageCallback{{Label: "Acknowledge", URL: link}}
	}
	return w.notify.Notify(ctx, r)
}

// resolved sends one [Resolved] message per step the alert reached, each
// at its level (upstream), without a callback.
func (w *Worker) resolved(ctx context.Context, a *alert.Alert, pol Policy) error {
	var at int64
	if a.ResolvedAt != nil {
		at = a.ResolvedAt.UnixMilli()
	}
	reached := min(max(int(a.EscalationStep), 1), len(pol.Rules))
	for i := range reached {
		r := w.request(a, fmt.Sprintf("notify-%s-resolved-%d-s%d", a.AlertID, at, i+1), events.NotifySuccess, pol.Rules[i].Level, "[Resolved] "+a.Title)
		if err := w.notify.Notify(ctx, r); err != nil {
			return err
		}
	}
	return nil
}
