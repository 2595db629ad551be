package event

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"log/slog"
	"slices"
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

// Alerting turns events into alerts as upstream does (spec/alerts.md §2):
// an event whose key has an open alert in its project (TRIGGERED,
// ACKNOWLEDGED or ERROR) updates it (description, event_count, last
// event; a RECOVERY resolves it when the project's recovery_mode is
// AUTO); a RECOVERY with none is dropped; any other event opens an alert
// (urgency from severity, the project's policy), ERROR for an ERROR event.
//
// Exactly once, under webhook retries, replicas and a worker killed
// mid-way: every event of one key in one project is applied under that
// key's lease, which re-reads the event and does nothing when it is
// applied already; a new alert's id is derived from the event's, so
// its insert is idempotent; the key's open alert is a record written
// only under the lease; and the event is marked applied last, so a
// death before that is finished by the next try (a retried delivery, or
// Sweep for one nobody sends again).
type Alerting struct {
	events  *mongo.Collection // set by NewStore
	claims  *mongo.Collection
	alerts  *alert.Alerts
	configs *projectalertconfig.Configs
	log     *slog.Logger
	now     func() time.Time
	// keys queue this replica's appliers of one key before its lease, so
	// that one of them at a time polls it (striped by the key's hash).
	keys [16]sync.Mutex
}

// NewAlerting builds the rule; now may be nil (wire.Now).
func NewAlerting(db *mongo.Database, alerts *alert.Alerts, configs *projectalertconfig.Configs, now func() time.Time, log *slog.Logger) *Alerting {
	if now == nil {
		now = wire.Now
	}
	return &Alerting{claims: db.Collection(core.ClaimsCollection), alerts: alerts, configs: configs, now: now, log: log}
}

// Lease bounds of a key.
const (
	keyTTL   = 15 * time.Second
	keyWait  = time.Minute
	keyFence = 5 * time.Second
)

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// openKey names the record of a key's open alert in a project (per
// project, not per webhook, as upstream's dedupe).
func openKey(e *Event) string { return "open-alert#" + hash(e.DomainID, e.ProjectID, e.EventKey) }

// AlertIDOf is the id of the alert an event opens: derived from the
// event's, so every try of it inserts the same alert.
func AlertIDOf(eventID string) string { return "alert-" + hash("alert", eventID)[:12] }

// openAlert is a key's alert and when the key's last event that is not
// a RECOVERY was stored (LastAt: the dedupe window slides from it).
type openAlert struct {
	ID      string     `bson:"_id"`
	AlertID string     `bson:"alert_id"`
	LastAt  *wire.Time `bson:"last_at,omitempty"`
}

// urgencyOf is upstream's: HIGH for CRITICAL, ERROR and NOT_AVAILABLE.
func urgencyOf(severity string) string {
	if core.OneOf(severity, "CRITICAL", "ERROR", "NOT_AVAILABLE") {
		return alert.High
	}
	return alert.Low
}

// Apply applies a stored event once: the alert it opened or updated, or
// dropped for a RECOVERY that found no open alert (its record is then
// deleted, as upstream does not store it).
func (al *Alerting) Apply(ctx context.Context, e *Event) (alertID string, dropped bool, err error) {
	key := hash(e.DomainID, e.ProjectID, e.EventKey)
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	mu := &al.keys[h.Sum32()%uint32(len(al.keys))]
	mu.Lock()
	defer mu.Unlock()
	err = lease.Run(ctx, al.claims, "event-key#"+key, keyTTL, keyWait, func(ctx context.Context) error {
		var cur Event
		err := al.events.FindOne(ctx, bson.D{{Key: "_id", Value: e.ID}}).Decode(&cur)
		if errors.Is(err, mongo.ErrNoDocuments) {
			dropped = true // a RECOVERY another try dropped
			return nil
		}
		if err != nil {
			return store.Wrap(err)
		}
		if cur.Applied {
			alertID = cur.AlertID
			return nil
		}
		// As stored: a retry decides with the first try's created_at (the
		// dedupe window), not its own.
		e := &cur
		open, last, err := al.open(ctx, e)
		if err != nil {
			return err
		}
		switch {
		case open != nil:
			if err := al.update(ctx, open, e); err != nil {
				return err
			}
			if err := al.slide(ctx, e, open.AlertID, last); err != nil {
				return err
			}
			alertID = open.AlertID
		case e.EventType == "RECOVERY":
			wctx, cancel, err := lease.Fence(ctx, keyFence)
			if err != nil {
				return err
			}
			defer cancel()
			_, err = al.events.DeleteOne(wctx, bson.D{{Key: "_id", Value: e.ID}})
			dropped = true
			return store.Wrap(err)
		default:
			a, err := al.create(ctx, e)
			if err != nil {
				return err
			}
			alertID = a.AlertID
		}
		wctx, cancel, err := lease.Fence(ctx, keyFence)
		if err != nil {
			return err
		}
		defer cancel()
		_, err = al.events.UpdateOne(wctx, bson.D{{Key: "_id", Value: e.ID}}, bson.D{{Key: "$set", Value: bson.D{
			{Key: "applied", Value: true}, {Key: "alert_id", Value: alertID}}}})
		return store.Wrap(err)
	})
	return alertID, dropped, err
}

// open returns the key's open alert, nil when it has none (never had,
// resolved, or deleted: its delete begun included) or when the key's last
// event (not a RECOVERY) came more than the event's DuplicateWindow
// before it: upstream's dedupe (alerts.md §2.4), so a key quiet for ten
// minutes opens a new alert and a RECOVERY that late is dropped.
func (al *Alerting) open(ctx context.Context, e *Event) (*alert.Alert, *wire.Time, error) {
	var o openAlert
	err := al.claims.FindOne(ctx, bson.D{{Key: "_id", Value: openKey(e)}}).Decode(&o)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, store.Wrap(err)
	}
	// A record written before the window was kept (no LastAt) stays open.
	if o.LastAt != nil && e.DuplicateWindow > 0 && e.CreatedAt.Sub(o.LastAt.Time) > time.Duration(e.DuplicateWindow)*time.Second {
		return nil, nil, nil
	}
	a, err := al.alerts.Live(ctx, o.AlertID)
	if err != nil {
		if isNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	if a.State == alert.Resolved {
		return nil, nil, nil
	}
	return a, o.LastAt, nil
}

// update applies e to its open alert (upstream changes only the
// description; Nubes also counts the event and names it the last).
func (al *Alerting) update(ctx context.Context, open *alert.Alert, e *Event) error {
	opts, err := al.configs.OptionsOf(ctx, e.DomainID, e.ProjectID)
	if err != nil {
		return err
	}
	now := al.now()
	_, err = al.alerts.Change(ctx, open.ID, func(a *alert.Alert) (bson.D, error) {
		if a.LastEventID == e.EventID || slices.Contains(a.AppliedEvents, e.EventID) {
			return nil, nil // applied before the event was marked
		}
		applied := append(slices.Clone(a.AppliedEvents), e.EventID)
		applied = applied[max(0, len(applied)-alert.RecentEvents):]
		at := wire.T(e.OccurredAt.Time)
		set := bson.D{{Key: "description", Value: e.Description}, {Key: "event_count", Value: a.EventCount + 1},
			{Key: "last_event_id", Value: e.EventID}, {Key: "last_event_at", Value: &at}, {Key: "applied_events", Value: applied}}
		if e.EventType == "RECOVERY" && opts.RecoveryMode == projectalertconfig.RecoveryAuto && a.Open() {
			set = append(set, alert.StateChange(a, alert.Resolved, "", now)...)
			set = append(set, bson.E{Key: alert.ResolveNoticeField, Value: true})
		}
		return set, nil
	})
	return err
}

// create opens the alert of e and makes it its key's open alert.
func (al *Alerting) create(ctx context.Context, e *Event) (*alert.Alert, error) {
	now := al.now()
	a, err := al.alerts.NewAlert(ctx, AlertIDOf(e.EventID), &core.Project{ProjectID: e.ProjectID, WorkspaceID: e.WorkspaceID, DomainID: e.DomainID}, now)
	if err != nil {
		return nil, err
	}
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
	a, _, err = al.alerts.Insert(ctx, a)
	if err != nil {
		return nil, err
	}
	wctx, cancel, err := lease.Fence(ctx, keyFence)
	if err != nil {
		return nil, err
	}
	defer cancel()
	stored := e.CreatedAt
	_, err = al.claims.ReplaceOne(wctx, bson.D{{Key: "_id", Value: openKey(e)}}, openAlert{ID: openKey(e), AlertID: a.AlertID, LastAt: &stored},
		options.Replace().SetUpsert(true))
	return a, store.Wrap(err)
}

// slide moves the key's dedupe window to e (upstream's window slides
// with each duplicate; a RECOVERY is no duplicate there), never back: an
// event applied late (the sweep's) is older than the last one.
func (al *Alerting) slide(ctx context.Context, e *Event, alertID string, last *wire.Time) error {
	if e.EventType == "RECOVERY" || (last != nil && !e.CreatedAt.After(last.Time)) {
		return nil
	}
	wctx, cancel, err := lease.Fence(ctx, keyFence)
	if err != nil {
		return err
	}
	defer cancel()
	at := e.CreatedAt
	_, err = al.claims.ReplaceOne(wctx, bson.D{{Key: "_id", Value: openKey(e)}}, openAlert{ID: openKey(e), AlertID: alertID, LastAt: &at},
		options.Replace().SetUpsert(true))
	return store.Wrap(err)
}

// Sweep applies the events stored at least age ago and never applied
// (their request died mid-way and nobody sent them again).
func (s *Store) Sweep(ctx context.Context, age time.Duration) (int, error) {
	if s.alerts == nil {
		return 0, nil
	}
	cur, err := s.c.Find(ctx, bson.D{{Key: "applied", Value: false}, {Key: "created_at", Value: bson.D{{Key: "$lt", Value: wire.T(s.alerts.now().Add(-age))}}}},
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
		alertID, dropped, err := s.alerts.Apply(ctx, e)
		if err != nil {
			return n, err
		}
		n++
		if !dropped && s.outbox != nil {
			e.AlertID = alertID
			if err := s.outbox.Add(ctx, events.MonitoringEventSubject, e.EventID, payload(e)); err != nil {
				s.log.Warn("event applied but not queued for publishing", "event_id", e.EventID, "error", err.Error())
			}
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

func isNotFound(err error) bool {
	e, ok := errs.As(err)
	return ok && e.Code == errs.NotFoundCode
}
