// Package alert holds the alerts of the monitoring service (upstream's
// monitoring/v1/alert, spec/alerts.md §1, Nubes' addition to the spec):
// the record, its numbering, its state transitions and the operations,
// including the signed acknowledge link a notification carries.
//
// A change of an alert is a compare-and-set on its version
// (store.Change), so an acknowledge racing an event's update loses
// neither; an event counted on its alert is one conditional update
// (Count). Alerts are numbered per domain by an atomic counter
// (numbers.go).
package alert

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/ratelimit"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// States and urgencies (upstream's).
const (
	Triggered    = "TRIGGERED"
	Acknowledged = "ACKNOWLEDGED"
	Resolved     = "RESOLVED"
	Error        = "ERROR"

	High = "HIGH"
	Low  = "LOW"
)

// InvalidState is the code of a change an alert's state refuses (an ERROR
// alert changes no more, as upstream's update fails for it).
const InvalidState = errs.AlertInvalidState

// Resource is one resource an alert is about.
type Resource struct {
	ResourceID   string `bson:"resource_id" json:"resource_id"`
	ResourceType string `bson:"resource_type" json:"resource_type"`
	Name         string `bson:"name" json:"name"`
}

// Alert is an alert, stored and sent in the same shape. event_key,
// event_count and last_event_* are Nubes' additions: the key of the
// events that feed it, how many did, and the latest.
type Alert struct {
	ID             string        `bson:"_id" json:"-"`
	AlertNumber    int64         `bson:"alert_number" json:"alert_number"`
	AlertID        string        `bson:"alert_id" json:"alert_id"`
	Title          string        `bson:"title" json:"title"`
	State          string        `bson:"state" json:"state"`
	Description    string        `bson:"description" json:"description"`
	Assignee       string        `bson:"assignee" json:"assignee"`
	Responder      string        `bson:"responder" json:"responder"`
	Urgency        string        `bson:"urgency" json:"urgency"`
	Severity       string        `bson:"severity" json:"severity"`
	Rule           string        `bson:"rule" json:"rule"`
	ImageURL       string        `bson:"image_url" json:"image_url"`
	Resources      []Resource    `bson:"resources" json:"resources"`
	Provider       string        `bson:"provider" json:"provider"`
	Account        string        `bson:"account" json:"account"`
	AdditionalInfo freeform.Flat `bson:"additional_info" json:"additional_info"`
	EscalationStep int32         `bson:"escalation_step" json:"escalation_step"`
	EscalationTTL  int32         `bson:"escalation_ttl" json:"escalation_ttl"`
	TriggeredBy    string        `bson:"triggered_by" json:"triggered_by"`
	EventKey       string        `bson:"event_key" json:"event_key"`
	EventCount     int64         `bson:"event_count" json:"event_count"`
	LastEventID    string        `bson:"last_event_id" json:"last_event_id"`
	// AppliedEvents are the ids of the last events counted (RecentEvents
	// at most): a retried event already among them is not counted again,
	// even when later events of its key were counted in between.
	AppliedEvents      []string   `bson:"applied_events,omitempty" json:"-"`
	LastEventAt        *wire.Time `bson:"last_event_at" json:"last_event_at"`
	DomainID           string     `bson:"domain_id" json:"domain_id"`
	WorkspaceID        string     `bson:"workspace_id" json:"workspace_id"`
	ProjectID          string     `bson:"project_id" json:"project_id"`
	WebhookID          string     `bson:"webhook_id" json:"webhook_id"`
	EscalationPolicyID string     `bson:"escalation_policy_id" json:"escalation_policy_id"`
	CreatedAt          wire.Time  `bson:"created_at" json:"created_at"`
	UpdatedAt          wire.Time  `bson:"updated_at" json:"updated_at"`
	AcknowledgedAt     *wire.Time `bson:"acknowledged_at" json:"acknowledged_at"`
	ResolvedAt         *wire.Time `bson:"resolved_at" json:"resolved_at"`
	EscalatedAt        *wire.Time `bson:"escalated_at" json:"escalated_at"`
	// EscalateAt is when the escalation next looks at the alert (its next
	// step, or its stop, is due); nil: at the next tick. The escalation
	// selects alerts by it and decides by Change from what is stored, so
	// a stale value costs a look, never a wrong step.
	EscalateAt *wire.Time `bson:"escalate_at,omitempty" json:"-"`
	// ResolveNotice: resolved from an open state, its resolved
	// notifications not sent yet (the escalation sends them).
	ResolveNotice bool `bson:"resolve_notice" json:"-"`
	// Notice is the escalation step's notice decided by the write that
	// took the step and not recorded in the outbox yet: the escalation
	// records it after that write and then clears it (escalation.flush).
	Notice *Notice `bson:"notice,omitempty" json:"-"`
	// Version is bumped by every write (store.Change's compare-and-set).
	Version int64 `bson:"version" json:"-"`
}

// Open reports whether the alert still asks for attention: TRIGGERED or
// ACKNOWLEDGED, as upstream's scheduler counts open alerts (escalation runs).
func (a *Alert) Open() bool { return a.State == Triggered || a.State == Acknowledged }

// Unresolved reports whether events of the alert's key still count on it
// (upstream matches an event to an alert that is not RESOLVED, ERROR
// included). Not Open: an ERROR alert is unresolved but escalates no more.
func (a *Alert) Unresolved() bool { return a.State != Resolved }

var resource = query.Resource{
	KeywordFields: []string{"alert_id", "title", "description", "assignee", "event_key"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"alert_number", "alert_id", "title", "state", "urgency", "assignee", "project_id", "created_at"},
	Fields:        query.FieldsOf[Alert](),
	Tenancy:       tenancy.InProject.WithMarks(), // deleted mark first (store.Teardown)
	Maps:          freeform.FieldsOf[Alert](),
}

// RecentEvents bounds Alert.AppliedEvents: a retry comes from the sender
// within seconds or from the sweep within minutes, so this many events of
// one key in between is far more than the window of a retry.
const RecentEvents = 64

// Policy is what an alert takes from its escalation policy at creation.
type Policy struct {
	ID          string
	RepeatCount int32
	// Start begins the alert's escalation in its insert (Alert.Begin);
	// nil: it is not begun there.
	Start *Start
}

// PolicyOf resolves the escalation policy of a new alert of a project
// (the project's alert config, else the scope's default).
type PolicyOf func(ctx context.Context, domainID, workspaceID, projectID string) (Policy, error)

// Config tunes the alerts.
type Config struct {
	// BaseURL is the public base URL of the suite (the acknowledge links).
	BaseURL string
	// Keys seal the acknowledge links; nil: no links are made or accepted.
	Keys *seal.Keyring
	// LinkTTL is how long a link works.
	LinkTTL time.Duration
	// Failures bound each source's refused link calls (nil: no bound).
	Failures *ratelimit.Buckets
	// Opened is told of each alert the create operation opened (the
	// escalation's first step); nil: nobody.
	Opened Opener
}

// Opener is told of new alerts as stored, those opened together at once:
// what follows an alert opened (the escalation's first step, taken by
// its insert, is recorded at once rather than at the escalation's next
// tick).
type Opener interface{ Opened(as ...*Alert) }

// Alerts serves the alert operations and changes alerts for the ingest
// and the escalation.
type Alerts struct {
	c        *mongo.Collection
	claims   *mongo.Collection // the domains' alert-number counters, spent link nonces
	projects core.Projects
	policy   PolicyOf
	cascade  []*mongo.Collection // records of an alert deleted with it: its notes and events (moved with it too), its key's record (event.keyRecord)
	cfg      Config
	log      *slog.Logger
	clock    core.Clock
}

// New creates the collection's indexes. policy may be nil (no policy).
func New(ctx context.Context, db *mongo.Database, projects core.Projects, policy PolicyOf, cfg Config, log *slog.Logger) (*Alerts, error) {
	if policy == nil {
		policy = func(context.Context, string, string, string) (Policy, error) { return Policy{}, nil }
	}
	if cfg.LinkTTL <= 0 {
		cfg.LinkTTL = DefaultLinkTTL
	}
	as := &Alerts{c: db.Collection(core.AlertsCollection), claims: db.Collection(core.ClaimsCollection), projects: projects, policy: policy,
		cascade: []*mongo.Collection{db.Collection(core.NotesCollection), db.Collection(core.EventsCollection), db.Collection(core.ClaimsCollection)}, cfg: cfg, log: log}
	if err := as.keepNumbering(ctx); err != nil {
		return nil, err
	}
	return as, store.EnsureIndexes(ctx, as.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "alert_number", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "state", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "state", Value: 1}, {Key: "escalation_ttl", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "state", Value: 1}, {Key: EscalateAtField, Value: 1}}},
	)
}

// SetClock replaces the clock (tests).
func (as *Alerts) SetClock(c core.Clock) { as.clock = c }

// DefaultLinkTTL is how long an acknowledge link works by default.
const DefaultLinkTTL = 24 * time.Hour

// Load reads an alert by id (no tenancy: for the ingest and the escalation).
func (as *Alerts) Load(ctx context.Context, id string) (*Alert, error) {
	return store.Get[Alert](ctx, as.c, "alert_id", id)
}

// Live reads an alert by id as Load does, but one whose delete has begun
// (store.Teardown) answers 404, as a deleted one.
func (as *Alerts) Live(ctx context.Context, id string) (*Alert, error) {
	return store.GetLive[Alert](ctx, as.c, "alert_id", id)
}

// Notice is an escalation step's notice: the outbox request's id and the
// level it goes to.
type Notice struct {
	ID    string `bson:"id"`
	Level string `bson:"level"`
}

// Change runs fn on the alert as stored; fn edits it, and what it changed
// is written (with updated_at) if no other write came in between, else
// fn runs again on the alert as the other left it (store.Change). fn may
// refuse with an error. It returns the alert before and after; what
// follows a change is decided from the two. One being deleted changes no
// more (404).
func (as *Alerts) Change(ctx context.Context, id string, fn func(a *Alert) error) (store.Changed[Alert], error) {
	return store.Change(ctx, as.c, "alert_id", id, fn, bson.E{Key: "updated_at", Value: wire.T(as.clock.Now())})
}

// Insert stores a new alert, numbering it (numbers.go). An alert whose id
// is stored already is returned as stored, so a retried insert of a
// derived id is one alert.
func (as *Alerts) Insert(ctx context.Context, a *Alert) (*Alert, bool, error) {
	return as.number(ctx, a)
}

func ptr(t time.Time) *wire.Time { w := wire.T(t); return &w }
