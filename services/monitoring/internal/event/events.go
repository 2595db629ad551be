// Package event holds the events webhooks receive: how an event the
// plugin parsed is stored (one record per event_key within a webhook,
// the raw body kept) and published, and the read-only event/list and
// event/get operations, Nubes' addition to the spec.
//
// It must not call plugins; package ingest does and hands it the results.
package event

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// Event is one event a webhook received, stored and sent in the same
// shape except raw_data, stored as the JSON text of the body (a body's
// keys may hold characters a document key may not).
type Event struct {
	ID             string        `bson:"_id" json:"-"`
	EventID        string        `bson:"event_id" json:"event_id"`
	EventKey       string        `bson:"event_key" json:"event_key"`
	EventType      string        `bson:"event_type" json:"event_type"`
	Title          string        `bson:"title" json:"title"`
	Description    string        `bson:"description" json:"description"`
	Severity       string        `bson:"severity" json:"severity"`
	Resource       freeform.Map  `bson:"resource" json:"resource"`
	Resources      []string      `bson:"resources" json:"resources"`
	Rule           string        `bson:"rule" json:"rule"`
	ImageURL       string        `bson:"image_url" json:"image_url"`
	Provider       string        `bson:"provider" json:"provider"`
	Account        string        `bson:"account" json:"account"`
	AdditionalInfo freeform.Flat `bson:"additional_info" json:"additional_info"`
	RawData        rawJSON       `bson:"raw_data" json:"raw_data"`
	// BodyID names the delivery's body in BodiesCollection when the body
	// made several events: it is stored once, there, and RawData is empty
	// here until a get fills it in.
	BodyID string `bson:"body_id,omitempty" json:"-"`
	// RawBytes is the body's size; RawOmitted says it was larger than
	// MaxRawKept and is not stored (raw_data answers {}).
	RawBytes   int64     `bson:"raw_bytes" json:"raw_bytes"`
	RawOmitted bool      `bson:"raw_omitted,omitempty" json:"raw_omitted,omitempty"`
	OccurredAt wire.Time `bson:"occurred_at" json:"occurred_at"`
	WebhookID  string    `bson:"webhook_id" json:"webhook_id"`
	// AlertID is the alert the event opened or updated ("" while it is
	// not applied yet); Applied says it was (alerting.go).
	AlertID string `bson:"alert_id" json:"alert_id"`
	Applied bool   `bson:"applied" json:"-"`
	// Latest is, on the first delivery of a body (its id is the body's
	// ID), the generation of the last delivery of that body stored as an
	// event of its own (0: none but the first); the generation g > 1 of
	// a body has the id ID-g (Save).
	Latest int64 `bson:"latest,omitempty" json:"-"`
	// DuplicateWindow is how long after the last event of its key in its
	// project an event still counts on that key's alert, in seconds
	// (the webhook plugin's metadata duplicate_event_time, else 600).
	DuplicateWindow int64     `bson:"duplicate_window,omitempty" json:"-"`
	ProjectID       string    `bson:"project_id" json:"project_id"`
	WorkspaceID     string    `bson:"workspace_id" json:"workspace_id"`
	DomainID        string    `bson:"domain_id" json:"domain_id"`
	CreatedAt       wire.Time `bson:"created_at" json:"created_at"`
	UpdatedAt       wire.Time `bson:"updated_at" json:"updated_at"`
}

// rawJSON is JSON text stored as a string and sent as JSON.
type rawJSON string

// MarshalJSON sends the text as JSON ({} when empty).
func (r rawJSON) MarshalJSON() ([]byte, error) {
	if r == "" || !json.Valid([]byte(r)) {
		return []byte("{}"), nil
	}
	return []byte(r), nil
}

// Severities and event types of EventInfo.
var (
	Severities = []string{"NONE", "CRITICAL", "ERROR", "WARNING", "INFO", "NOT_AVAILABLE"}
	EventTypes = []string{"ALERT", "RECOVERY", "ERROR"}
)

// ID is the event id of one delivery of an event: its webhook, key,
// type and the body it came in. A webhook that sends the same body
// again within the dedupe window, while the alert it made is not
// resolved, is retrying: the same id collides on insert, so a retried
// delivery is one event. The same body later is a new event (the check
// failing again, as upstream stores every event): the generation g of
// a body is stored as ID-g (Save). 96 bits of SHA-256: collisions
// between different deliveries are not a practical concern.
func ID(webhookID, eventKey, eventType, raw string) string {
	body := sha256.Sum256([]byte(raw))
	sum := sha256.Sum256([]byte(webhookID + "\x00" + eventKey + "\x00" + eventType + "\x00" + hex.EncodeToString(body[:])))
	return "event-" + hex.EncodeToString(sum[:12])
}

func generationID(first string, g int64) string {
	if g <= 1 {
		return first
	}
	return first + "-" + strconv.FormatInt(g, 10)
}

// BodyKey is the event_key of a body that failed to parse: the same
// failing body sent again is the same error event.
func BodyKey(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return "error-" + hex.EncodeToString(sum[:12])
}

// MaxRawKept bounds the raw body stored with an event (a body may be 1
// MiB): a larger one is counted (raw_bytes) and left out (raw_omitted).
const MaxRawKept = 256 << 10

// DefaultRetention is how long events are kept by default (Purge).
const DefaultRetention = 30 * 24 * time.Hour

// Store records events and announces them (the ingest applies each to
// its alert in between: Alerting). Its sweep applies the events whose
// request died before they were.
type Store struct {
	c      *mongo.Collection
	bodies *mongo.Collection
	outbox *events.Outbox // nil: events are stored, not published
	alerts *Alerting
	log    *slog.Logger
}

// NewStore creates the collection's indexes; outbox may be nil.
func NewStore(ctx context.Context, db *mongo.Database, outbox *events.Outbox, alerts *Alerting, log *slog.Logger) (*Store, error) {
	s := &Store{c: db.Collection(core.EventsCollection), bodies: db.Collection(core.BodiesCollection), outbox: outbox, alerts: alerts, log: log}
	if err := store.EnsureIndexes(ctx, s.bodies, store.Index{Keys: bson.D{{Key: "created_at", Value: 1}}}); err != nil {
		return nil, err
	}
	return s, store.EnsureIndexes(ctx, s.c,
		store.Index{Keys: bson.D{{Key: "created_at", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "webhook_id", Value: 1}, {Key: "event_key", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "applied", Value: 1}, {Key: "created_at", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "alert_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "webhook_id", Value: 1}, {Key: "created_at", Value: -1}}},
	)
}

// Outcome says what became of one parsed event: stored, or a duplicate
// of one stored, with the alert it opened or updated; a RECOVERY with no
// unresolved alert is dropped (not stored, as upstream).
type Outcome struct {
	EventID   string `json:"event_id"`
	EventKey  string `json:"event_key"`
	Duplicate bool   `json:"duplicate"`
	AlertID   string `json:"alert_id"`
	Dropped   bool   `json:"dropped,omitempty"`
}

// FromPlugin turns one EventInfo of Event.parse into an event of wh, as
// upstream does: severity NONE, provider and account "" by default,
// resource.name added to resources, occurred_at read as ISO 8601 (now
// when absent or unreadable). An event without event_key is keyed by
// its content, so the same event sent twice is still one.
func FromPlugin(wh *core.Webhook, m map[string]any, raw string, now time.Time) *Event {
	str := func(k string) string { s, _ := m[k].(string); return strings.TrimSpace(s) }
	obj := func(k string) map[string]any { o, _ := m[k].(map[string]any); return wire.Object(o) }
	e := &Event{EventKey: str("event_key"), EventType: strings.ToUpper(str("event_type")), Title: str("title"), Description: str("description"),
		Severity: strings.ToUpper(str("severity")), Resource: obj("resource"), Rule: str("rule"), ImageURL: str("image_url"),
		Provider: str("provider"), Account: str("account"), AdditionalInfo: obj("additional_info")}
	if e.EventKey == "" {
		b, _ := json.Marshal(m)
		sum := sha256.Sum256(b)
		e.EventKey = "content-" + hex.EncodeToString(sum[:16])
	}
	if !core.OneOf(e.Severity, Severities...) {
		e.Severity = "NONE"
	}
	if e.EventType == "" {
		e.EventType = "ALERT"
	}
	if list, ok := m["resources"].([]any); ok {
		for _, v := range list {
			if s, ok := v.(string); ok {
				e.Resources = append(e.Resources, s)
			}
		}
	}
	if name, ok := e.Resource["name"].(string); ok && name != "" && !core.OneOf(name, e.Resources...) {
		e.Resources = append(e.Resources, name)
	}
	e.Resources = wire.List(e.Resources)
	e.OccurredAt = wire.T(now)
	if t, err := time.Parse(time.RFC3339Nano, str("occurred_at")); err == nil {
		e.OccurredAt = wire.T(t)
	}
	own(e, wh, raw, now)
	return e
}

// ParseError is the event upstream stores when a body cannot be parsed:
// type ERROR, severity CRITICAL, the reason in the description. key
// makes a retried failure of the same body the same event.
func ParseError(wh *core.Webhook, key, reason, raw string, now time.Time) *Event {
	e := &Event{EventKey: key, EventType: "ERROR", Title: "Webhook Event Parsing Error - " + wh.Name, Description: reason,
		Severity: "CRITICAL", Resource: map[string]any{}, Resources: []string{}, AdditionalInfo: map[string]any{},
		OccurredAt: wire.T(now)}
	own(e, wh, raw, now)
	return e
}

// own makes e an event of wh received in the body raw: its id from the
// whole body, the body itself kept only up to MaxRawKept.
func own(e *Event, wh *core.Webhook, raw string, now time.Time) {
	e.EventID = ID(wh.WebhookID, e.EventKey, e.EventType, raw)
	e.ID = e.EventID
	e.RawBytes = int64(len(raw))
	if len(raw) <= MaxRawKept {
		e.RawData = rawJSON(raw)
	} else {
		e.RawOmitted = true
	}
	e.WebhookID, e.ProjectID, e.WorkspaceID, e.DomainID = wh.WebhookID, wh.ProjectID, wh.WorkspaceID, wh.DomainID
	e.CreatedAt, e.UpdatedAt = wire.T(now), wire.T(now)
	e.DuplicateWindow = DuplicateEventTime
	switch v := wh.PluginInfo.Metadata["duplicate_event_time"].(type) {
	case int32:
		e.DuplicateWindow = int64(v)
	case int64:
		e.DuplicateWindow = v
	case float64:
		e.DuplicateWindow = int64(v)
	}
}

// DuplicateEventTime is upstream's DUPLICATE_EVENT_TIME: an event of a key
// counts on the key's unresolved alert when the key's last event came at most
// this many seconds before it (a webhook plugin's metadata
// duplicate_event_time overrides it).
const DuplicateEventTime = 600

// Recorded is an event as Record left it: Event is the stored record
// (e, or the delivery stored before it), Outcome what the delivery is
// answered so far. Apply says the event is still to be applied to its
// alert (Alerting.Apply; Fresh: stored by this call just now); a
// duplicate applied already is not.
type Recorded struct {
	Event   *Event
	Outcome Outcome
	Apply   bool
	Fresh   bool
}

// Record stores an event. A delivery stored and applied already is a
// duplicate: nothing changes. One stored but not applied (its request
// died mid-way, or another replica is at it) is to be applied again:
// Apply decides once. The same body after the dedupe window, or after
// the alert it made was resolved, is stored as the body's next
// generation (ID).
func (s *Store) Record(ctx context.Context, e *Event) (Recorded, error) {
	first, gen := e.ID, int64(1)
	for range maxGenerationTries {
		e.ID, e.EventID = generationID(first, gen), generationID(first, gen)
		out := Outcome{EventID: e.EventID, EventKey: e.EventKey}
		_, err := s.c.InsertOne(ctx, e)
		if err == nil {
			if gen > 1 {
				_, err := s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: first}}, bson.D{{Key: "$max", Value: bson.D{{Key: "latest", Value: gen}}}})
				if err != nil {
					s.log.Warn("event stored; its body's first delivery does not name it (the next delivery finds it all the same)", "event_id", e.EventID, "error", err.Error())
				}
			}
			return Recorded{Event: e, Outcome: out, Apply: true, Fresh: true}, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return Recorded{Outcome: out}, store.Wrap(err)
		}
		var cur Event
		err = s.c.FindOne(ctx, bson.D{{Key: "_id", Value: e.ID}}).Decode(&cur)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue // dropped meanwhile (a RECOVERY): store it again
		}
		if err != nil {
			return Recorded{Outcome: out}, store.Wrap(err)
		}
		if gen == 1 && cur.Latest > 1 {
			gen = cur.Latest // straight to the body's last generation
			continue
		}
		retry, err := s.retry(ctx, &cur, e)
		if err != nil {
			return Recorded{Outcome: out}, err
		}
		if !retry {
			gen++
			continue
		}
		out.EventID = cur.EventID
		if cur.Applied {
			out.Duplicate, out.AlertID = true, cur.AlertID
			return Recorded{Event: &cur, Outcome: out}, nil
		}
		return Recorded{Event: &cur, Outcome: out, Apply: true}, nil
	}
	return Recorded{Outcome: Outcome{EventID: e.EventID, EventKey: e.EventKey}}, errs.Down("the event store", store.ErrConflict)
}

// maxGenerationTries bounds Save's rounds: each moves to a later
// generation of the body or finds one dropped meanwhile.
const maxGenerationTries = 10

// retry tells whether e, a delivery of the body of the stored event cur,
// is a retry of it: within cur's dedupe window, with cur's alert (if
// applied) not resolved or gone.
func (s *Store) retry(ctx context.Context, cur, e *Event) (bool, error) {
	if window := time.Duration(cur.DuplicateWindow) * time.Second; window > 0 && e.CreatedAt.Sub(cur.CreatedAt.Time) > window {
		return false, nil
	}
	if !cur.Applied || s.alerts == nil || cur.AlertID == "" {
		return true, nil
	}
	a, err := s.alerts.alerts.Load(ctx, cur.AlertID)
	if errs.Is(err, errs.NotFoundCode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return a.Unresolved(), nil
}

// Announce queues the announcement of e, applied to alertID. The event
// is stored either way: only its announcement can be lost.
func (s *Store) Announce(ctx context.Context, e *Event, alertID string) {
	if s.outbox == nil {
		return
	}
	e.AlertID = alertID
	if err := s.outbox.Publish(ctx, events.MonitoringEventSubject, e.EventID, payload(e)); err != nil {
		s.log.Warn("event stored but not queued for publishing", "event_id", e.EventID, "error", err.Error())
	}
}

func payload(e *Event) events.MonitoringEvent {
	return events.MonitoringEvent{EventID: e.EventID, EventKey: e.EventKey, EventType: e.EventType, Title: e.Title,
		Description: e.Description, Severity: e.Severity, Resources: e.Resources, Provider: e.Provider, Account: e.Account,
		OccurredAt: wire.FormatTime(e.OccurredAt.Time), WebhookID: e.WebhookID, ProjectID: e.ProjectID,
		WorkspaceID: e.WorkspaceID, DomainID: e.DomainID, ReceivedAt: wire.FormatTime(e.UpdatedAt.Time)}
}

var resource = query.Resource{
	KeywordFields: []string{"event_id", "event_key", "title", "description"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"event_id", "event_key", "event_type", "title", "severity", "webhook_id", "created_at"},
	Fields:        query.FieldsOf[Event](),
	Tenancy:       tenancy.InProject,
	Maps:          freeform.FieldsOf[Event](),
	// A page of events without their bodies: 1,000 bodies of up to
	// MaxRawKept would be a quarter of a gigabyte.
	GetOnly: []string{"raw_data"},
	// And a page of events is at most this many stored bytes (their
	// descriptions and additional_info come from the plugin).
	MaxPageBytes: MaxPageBytes,
}

// MaxPageBytes bounds one event/list answer's stored size.
const MaxPageBytes = 4 << 20

type (
	eventRequest struct {
		EventID string `json:"event_id" v:"required"`
	}
	eventQuery struct {
		Query     *query.Query `json:"query"`
		EventID   string       `json:"event_id"`
		EventKey  string       `json:"event_key"`
		AlertID   string       `json:"alert_id"`
		EventType string       `json:"event_type" v:"enum=ALERT|RECOVERY|ERROR"`
		Severity  string       `json:"severity" v:"enum=NONE|CRITICAL|ERROR|WARNING|INFO|NOT_AVAILABLE"`
		WebhookID string       `json:"webhook_id"`
		ProjectID string       `json:"project_id"`
	}
)

// Routes are the read-only operations (Nubes' addition).
func (s *Store) Routes() []api.Route {
	const base = "/monitoring/v1/event/"
	return []api.Route{
		api.Op[eventRequest, Event]{Path: base + "get", Access: core.Readers, Summary: "Get an event a webhook received (Nubes' addition).", Handle: s.get},
		api.Op[eventQuery, api.List[Event]]{Path: base + "list", Access: core.Readers, Summary: "List the events webhooks received, without their raw bodies (event/get has them), a page at most 4 MiB (Nubes' addition).", Handle: s.list},
	}
}

func (s *Store) get(ctx context.Context, p *auth.Principal, r *eventRequest) (*Event, error) {
	e, err := store.GetFor[Event](ctx, s.c, resource, p, "event_id", r.EventID)
	if err != nil {
		return nil, err
	}
	return e, s.fillRaw(ctx, e)
}

func (s *Store) list(ctx context.Context, p *auth.Principal, r *eventQuery) (*api.List[Event], error) {
	q := query.With(r.Query, query.Params("event_id", r.EventID, "event_key", r.EventKey, "alert_id", r.AlertID, "event_type", r.EventType,
		"severity", r.Severity, "webhook_id", r.WebhookID, "project_id", r.ProjectID)...)
	return store.SearchFor[Event](ctx, s.c, q, resource, p)
}
