package event

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/alert"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
	"github.com/nubes-io/nubes/services/monitoring/internal/projectalertconfig"
)

// Alerting turns events into alerts as upstream does (spec/alerts.md §2):
// an event whose key has an unresolved alert in its project (TRIGGERED,
// ACKNOWLEDGED or ERROR) updates it (description, event_count, last
// event; a RECOVERY resolves it when the project's recovery_mode is
// AUTO); a RECOVERY with none is dropped; any other event opens an alert
// (urgency from severity, the project's policy), ERROR for an ERROR event.
//
// Each step is one atomic write of one document, so events of one key
// apply side by side and exactly once, under webhook retries, replicas
// and a worker killed mid-way:
//
//   - a key's unresolved alert is a record (project + event key) naming the
//     alert and the event that opened it; an event that finds none, or
//     finds it resolved or past the dedupe window, replaces it by a
//     compare-and-set on the alert it named (InsertOnce for the first),
//     and only the winner creates the alert; the others count on it;
//   - the new alert's id is derived from its event's, so its insert is
//     idempotent, and an alert whose opener died before storing it is
//     created from the opener event by the next event of the key;
//   - an event counts on its alert by one conditional update that also
//     records its id there (alert.Count), so a retry never counts twice;
//   - the event is marked applied last, so a death before that is
//     finished by the next try (a retried delivery, or Sweep for one
//     nobody sends again).
type Alerting struct {
	events  *mongo.Collection
	claims  *mongo.Collection
	alerts  *alert.Alerts
	configs *projectalertconfig.Configs
	log     *slog.Logger
	clock   core.Clock
}

// NewAlerting builds the rule on the service's clock.
func NewAlerting(db *mongo.Database, alerts *alert.Alerts, configs *projectalertconfig.Configs, clock core.Clock, log *slog.Logger) *Alerting {
	return &Alerting{events: db.Collection(core.EventsCollection), claims: db.Collection(core.ClaimsCollection), alerts: alerts,
		configs: configs, clock: clock, log: log}
}

// maxApplyTries bounds the rounds of Apply lost to other events of the
// same key (each lost round means another event moved the key on, or
// is creating its alert).
const maxApplyTries = 50

// openerGrace is how long an event waits for the event that claimed its
// key to store the alert before it stores the alert itself (the opener
// died, or stalls): the opener stores it within milliseconds.
const openerGrace = 2 * time.Second

// errOpenerAtWork: the key's record names an alert another event is
// still creating.
var errOpenerAtWork = errors.New("the alert of the key is being created")

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// keyRecordID names the record of a key's unresolved alert in a project (per
// project, not per webhook, as upstream's dedupe). The stored prefix
// "open-alert#" predates the name and stays: records written by earlier
// versions keep being found.
func keyRecordID(e *Event) string { return "open-alert#" + hash(e.DomainID, e.ProjectID, e.EventKey) }

// AlertIDOf is the id of the alert an event opens: derived from the
// event's, so every try of it inserts the same alert.
func AlertIDOf(eventID string) string { return "alert-" + hash("alert", eventID)[:12] }

// keyRecord is a key's alert, the event that opened it (which creates
// it), and when the key's last event that is not a RECOVERY was stored
// (LastAt: the dedupe window slides from it).
type keyRecord struct {
	ID      string     `bson:"_id"`
	AlertID string     `bson:"alert_id"`
	EventID string     `bson:"event_id,omitempty"`
	LastAt  *wire.Time `bson:"last_at,omitempty"`
	// ClaimedAt is when EventID claimed the key, on the wall clock (not
	// the service's): an alert its opener has not stored this long after
	// is stored by the next event of the key.
	ClaimedAt time.Time `bson:"claimed_at,omitempty"`
}

// urgencyOf is upstream's: HIGH for CRITICAL, ERROR and NOT_AVAILABLE.
func urgencyOf(severity string) string {
	if core.OneOf(severity, "CRITICAL", "ERROR", "NOT_AVAILABLE") {
		return alert.High
	}
	return alert.Low
}

// Applied is what applying an event did: the alert it opened or updated;
// Opened, the alert as stored when this call stored it (what follows a
// new alert is the caller's: the escalation's first step, taken by the
// insert, to be recorded); Dropped for a RECOVERY that found no open
// alert.
type Applied struct {
	AlertID string
	Opened  *alert.Alert
	Dropped bool
}

// Apply applies a stored event once: the alert it opened or updated, or
// dropped for a RECOVERY that found no unresolved alert (its record is then
// deleted, as upstream does not store it). fresh says e was stored by
// this call just now, as it is; otherwise it is read again first.
func (al *Alerting) Apply(ctx context.Context, e *Event, fresh bool) (Applied, error) {
	alertID, opened, dropped, err := al.apply(ctx, e, fresh)
	return Applied{AlertID: alertID, Opened: opened, Dropped: dropped}, err
}

func (al *Alerting) apply(ctx context.Context, e *Event, fresh bool) (alertID string, opened *alert.Alert, dropped bool, err error) {
	if !fresh {
		var cur Event
		err := al.events.FindOne(ctx, bson.D{{Key: "_id", Value: e.ID}}).Decode(&cur)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return "", nil, true, nil // a RECOVERY another try dropped
		}
		if err != nil {
			return "", nil, false, store.Wrap(err)
		}
		if cur.Applied {
			return cur.AlertID, nil, false, nil
		}
		// As stored: a retry decides with the first try's created_at (the
		// dedupe window), not its own.
		e = &cur
	}
	var waited time.Duration
	for range maxApplyTries {
		rec, err := al.record(ctx, e)
		if err != nil {
			return "", nil, false, err
		}
		// Most events of a storm count on the alert their key's record
		// names: counted straight away, the alert is not read first. One
		// resolved, deleted or not stored yet is decided below.
		if current(rec, e) && e.EventType != "RECOVERY" {
			counted, err := al.alerts.Count(ctx, rec.AlertID, countOf(e))
			if err != nil {
				return "", nil, false, err
			}
			if counted != alert.Closed {
				if err := al.slide(ctx, rec, e, rec.AlertID); err != nil {
					return "", nil, false, err
				}
				return rec.AlertID, nil, false, al.mark(ctx, e, rec.AlertID)
			}
		}
		a, err := al.unresolved(ctx, rec, e, waited >= openerGrace)
		if errors.Is(err, errOpenerAtWork) {
			// Another event of the key is creating its alert: wait for it
			// rather than create it too (which would spend a number).
			d := min(openerGrace/20, openerGrace-waited)
			if err := store.Sleep(ctx, d); err != nil {
				return "", nil, false, err
			}
			waited += d
			continue
		}
		if err != nil {
			return "", nil, false, err
		}
		switch {
		case a != nil:
			counted, err := al.update(ctx, a, e)
			if err != nil {
				return "", nil, false, err
			}
			if counted == alert.Closed {
				continue // resolved or deleted meanwhile: decide again
			}
			if err := al.slide(ctx, rec, e, a.AlertID); err != nil {
				return "", nil, false, err
			}
			alertID = a.AlertID
		case e.EventType == "RECOVERY":
			_, err = al.events.DeleteOne(ctx, bson.D{{Key: "_id", Value: e.ID}})
			return "", nil, true, store.Wrap(err)
		default:
			won, err := al.claim(ctx, rec, e)
			if err != nil {
				return "", nil, false, err
			}
			if !won {
				continue // another event of the key moved it on first
			}
			a, created, err := al.create(ctx, e)
			if err != nil {
				return "", nil, false, err
			}
			alertID = a.AlertID
			if created {
				opened = a
			}
		}
		return alertID, opened, false, al.mark(ctx, e, alertID)
	}
	return "", nil, false, errs.Down("the alert of event key "+e.EventKey, store.ErrConflict)
}

// mark records that e was applied to alertID: last, so that a death
// before it is finished by the next try.
func (al *Alerting) mark(ctx context.Context, e *Event, alertID string) error {
	_, err := al.events.UpdateOne(ctx, bson.D{{Key: "_id", Value: e.ID}}, markOf(alertID))
	return store.Wrap(err)
}

func markOf(alertID string) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{{Key: "applied", Value: true}, {Key: "alert_id", Value: alertID}}}}
}

// record reads the record of e's key (nil: none).
func (al *Alerting) record(ctx context.Context, e *Event) (*keyRecord, error) {
	var o keyRecord
	err := al.claims.FindOne(ctx, bson.D{{Key: "_id", Value: keyRecordID(e)}}).Decode(&o)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &o, nil
}

// current reports whether e may count on the alert rec names: the key's
// last event (not a RECOVERY) came within e's DuplicateWindow before it,
// upstream's dedupe (alerts.md §2.4), so a key quiet for ten minutes
// opens a new alert and a RECOVERY that late is dropped. A record written
// before the window was kept (no LastAt) stays current.
func current(rec *keyRecord, e *Event) bool {
	if rec == nil {
		return false
	}
	return rec.LastAt == nil || e.DuplicateWindow <= 0 || e.CreatedAt.Sub(rec.LastAt.Time) <= time.Duration(e.DuplicateWindow)*time.Second
}

// unresolved returns the alert e counts on, the one its key's record rec
// names, nil when there is none: never had, resolved, deleted (its
// delete begun included), or the record not current.
//
// An alert its opener has not stored yet is stored from the opener
// event once the opener had its grace (help, or a claim that old);
// before that it answers errOpenerAtWork.
func (al *Alerting) unresolved(ctx context.Context, rec *keyRecord, e *Event, help bool) (*alert.Alert, error) {
	if !current(rec, e) {
		return nil, nil
	}
	a, err := al.alerts.Live(ctx, rec.AlertID)
	if errs.Is(err, errs.NotFoundCode) && rec.EventID != "" {
		// Its opener claimed the key but did not store it (it is on its
		// way, or its request died): stored from the opener, as the
		// opener would. An alert deleted since is stored no more: its
		// opener event went with it.
		// Even a retry of the opener itself waits: the first try may be
		// storing it at this moment, and two stores spend two numbers.
		if !help && time.Since(rec.ClaimedAt) < openerGrace {
			return nil, errOpenerAtWork
		}
		a, err = al.createFrom(ctx, rec.EventID)
	}
	if errs.Is(err, errs.NotFoundCode) || (err == nil && a == nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !a.Unresolved() {
		return nil, nil
	}
	return a, nil
}

// createFrom stores the alert the event eventID opens, nil when the
// event is gone.
func (al *Alerting) createFrom(ctx context.Context, eventID string) (*alert.Alert, error) {
	var opener Event
	err := al.events.FindOne(ctx, bson.D{{Key: "_id", Value: eventID}}).Decode(&opener)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	// Not told as opened: the opener's caller would have; the
	// escalation's tick takes it.
	a, _, err := al.create(ctx, &opener)
	return a, err
}

// claim makes e the opener of its key's next alert, replacing rec (nil:
// the key has no record) unless another event replaced it first.
func (al *Alerting) claim(ctx context.Context, rec *keyRecord, e *Event) (bool, error) {
	next := openerRecord(e)
	if rec == nil {
		return store.InsertOnce(ctx, al.claims, next)
	}
	res, err := al.claims.ReplaceOne(ctx, bson.D{{Key: "_id", Value: rec.ID}, {Key: "alert_id", Value: rec.AlertID}}, next)
	if err != nil {
		return false, store.Wrap(err)
	}
	return res.MatchedCount == 1, nil
}

// openerRecord is the record of e's key naming e as the opener of its
// next alert.
func openerRecord(e *Event) keyRecord {
	stored := e.CreatedAt
	return keyRecord{ID: keyRecordID(e), AlertID: AlertIDOf(e.EventID), EventID: e.ID, LastAt: &stored, ClaimedAt: time.Now().UTC()}
}

// update applies e to its unresolved alert (upstream changes only the
// description; Nubes also counts the event and names it the last).
func (al *Alerting) update(ctx context.Context, cur *alert.Alert, e *Event) (alert.Counted, error) {
	ev := countOf(e)
	if e.EventType != "RECOVERY" || !cur.Open() {
		return al.alerts.Count(ctx, cur.ID, ev)
	}
	opts, err := al.configs.OptionsOf(ctx, e.DomainID, e.ProjectID)
	if err != nil {
		return alert.Closed, err
	}
	if opts.RecoveryMode != projectalertconfig.RecoveryAuto {
		return al.alerts.Count(ctx, cur.ID, ev)
	}
	// A resolve changes the state too: a compare-and-set of the whole
	// change, rarer than the counts it may race with.
	now := al.clock.Now()
	ch, err := al.alerts.Change(ctx, cur.ID, func(a *alert.Alert) error {
		if slices.Contains(a.AppliedEvents, e.EventID) || a.State == alert.Resolved {
			return nil
		}
		applied := append(slices.Clone(a.AppliedEvents), e.EventID)
		a.AppliedEvents = applied[max(0, len(applied)-alert.RecentEvents):]
		a.Description, a.EventCount, a.LastEventID, a.LastEventAt = e.Description, a.EventCount+1, e.EventID, &ev.OccurredAt
		if a.Open() {
			alert.MoveTo(a, alert.Resolved, "", now)
		}
		return nil
	})
	counted := alert.CountedNow
	switch {
	case err != nil:
	case slices.Contains(ch.Before.AppliedEvents, e.EventID):
		counted = alert.CountedBefore
	case !ch.Wrote:
		counted = alert.Closed
	}
	if errs.Is(err, errs.NotFoundCode) {
		return alert.Closed, nil
	}
	return counted, err
}

// countOf is what e changes on the alert it counts on.
func countOf(e *Event) alert.Event {
	return alert.Event{ID: e.EventID, Description: e.Description, OccurredAt: wire.T(e.OccurredAt.Time)}
}

// create opens the alert of e (the key's record names it already).
func (al *Alerting) create(ctx context.Context, e *Event) (*alert.Alert, bool, error) {
	pol, err := al.alerts.PolicyFor(ctx, projectOf(e))
	if err != nil {
		return nil, false, err
	}
	return al.alerts.Insert(ctx, al.alertOf(e, pol))
}

func projectOf(e *Event) *core.Project {
	return &core.Project{ProjectID: e.ProjectID, WorkspaceID: e.WorkspaceID, DomainID: e.DomainID}
}

// alertOf is the alert e opens under its project's policy pol, not
// stored yet (upstream's copy of the event, alerts.md §2.6).
func (al *Alerting) alertOf(e *Event, pol alert.Policy) *alert.Alert {
	now := al.clock.Now()
	a := alert.NewAlertOf(AlertIDOf(e.EventID), projectOf(e), pol, now)
	a.Title, a.Description, a.Severity, a.Rule, a.ImageURL = e.Title, e.Description, e.Severity, e.Rule, e.ImageURL
	a.Provider, a.Account, a.AdditionalInfo, a.WebhookID, a.TriggeredBy = e.Provider, e.Account, wire.Object(e.AdditionalInfo), e.WebhookID, e.WebhookID
	a.Urgency, a.EventKey, a.EventCount, a.LastEventID = urgencyOf(e.Severity), e.EventKey, 1, e.EventID
	a.AppliedEvents = []string{e.EventID}
	at := wire.T(e.OccurredAt.Time)
	a.LastEventAt = &at
	for _, name := range e.Resources {
		a.Resources = append(a.Resources, alert.Resource{Name: name})
	}
	if a.Title == "" {
		a.Title = e.EventKey
	}
	if e.EventType == "ERROR" {
		a.State = alert.Error
	}
	a.Begin(pol.Start, now)
	return a
}

// slide moves the key's dedupe window to e (upstream's window slides
// with each duplicate; a RECOVERY is no duplicate there), never back
// ($max): an event applied late (the sweep's) is older than the last one.
// A record slid less than slideStep before e is left as it is: a storm
// of one key writes its record once a second, not once an event, and
// the window is measured to within slideStep.
func (al *Alerting) slide(ctx context.Context, rec *keyRecord, e *Event, alertID string) error {
	if e.EventType == "RECOVERY" {
		return nil
	}
	if rec != nil && rec.AlertID == alertID && rec.LastAt != nil && e.CreatedAt.Sub(rec.LastAt.Time) < slideStep {
		return nil
	}
	_, err := al.claims.UpdateOne(ctx, bson.D{{Key: "_id", Value: keyRecordID(e)}, {Key: "alert_id", Value: alertID}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "last_at", Value: e.CreatedAt}}}})
	return store.Wrap(err)
}

// slideStep is the precision of the dedupe window (slide).
const slideStep = time.Second

// Sweep applies the events stored at least age ago and never applied
// (their request died mid-way and nobody sent them again).
func (s *Store) Sweep(ctx context.Context, age time.Duration) (int, error) {
	if s.alerts == nil {
		return 0, nil
	}
	cur, err := s.c.Find(ctx, bson.D{{Key: "applied", Value: false}, {Key: "created_at", Value: bson.D{{Key: "$lt", Value: wire.T(s.alerts.clock.Now().Add(-age))}}}},
		options.Find().SetLimit(500))
	if err != nil {
		return 0, store.Wrap(err)
	}
	var stale []Event
	if err := cur.All(ctx, &stale); err != nil {
		return 0, store.Wrap(err)
	}
	n := 0
	for i := range stale {
		e := &stale[i]
		ap, err := s.alerts.Apply(ctx, e, false)
		if err != nil {
			return n, err
		}
		n++
		// An alert opened here is not told to the escalation: its tick
		// takes it.
		if !ap.Dropped {
			s.Announce(ctx, e, ap.AlertID)
		}
	}
	return n, nil
}

// RunSweep sweeps every interval until ctx is done.
func (s *Store) RunSweep(ctx context.Context, every, age time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if n, err := s.Sweep(ctx, age); err != nil && ctx.Err() == nil {
			s.log.Warn("events not applied to alerts; next sweep tries again", "applied", n, "error", err.Error())
		}
	}
}
