package alert

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

type (
	createAlert struct {
		Title       string `json:"title" v:"required,max=1000"`
		ProjectID   string `json:"project_id" v:"required,max=255"`
		Description string `json:"description" v:"max=20000"`
		Assignee    string `json:"assignee" v:"max=255"`
		Urgency     string `json:"urgency" v:"enum=HIGH|LOW"`
	}
	updateAlert struct {
		AlertID          string `json:"alert_id" v:"required"`
		Title            string `json:"title" v:"max=1000"`
		State            string `json:"state" v:"enum=TRIGGERED|ACKNOWLEDGED|RESOLVED"`
		Description      string `json:"description" v:"max=20000"`
		ResetDescription bool   `json:"reset_description"`
		Urgency          string `json:"urgency" v:"enum=HIGH|LOW"`
		ProjectID        string `json:"project_id" v:"max=255"`
	}
	assignUser struct {
		AlertID  string `json:"alert_id" v:"required"`
		Assignee string `json:"assignee" v:"required,max=255"`
	}
	updateState struct {
		AlertID   string `json:"alert_id" v:"required"`
		AccessKey string `json:"access_key" v:"required,max=1000"`
		State     string `json:"state" v:"enum=ACKNOWLEDGED"`
		Responder string `json:"responder" v:"max=255"`
	}
	alertRequest struct {
		AlertID string `json:"alert_id" v:"required"`
	}
	alertQuery struct {
		Query              *query.Query `json:"query"`
		AlertNumber        int64        `json:"alert_number"`
		AlertID            string       `json:"alert_id"`
		Title              string       `json:"title"`
		State              string       `json:"state" v:"enum=TRIGGERED|ACKNOWLEDGED|RESOLVED|ERROR"`
		Assignee           string       `json:"assignee"`
		Urgency            string       `json:"urgency" v:"enum=HIGH|LOW"`
		Severity           string       `json:"severity" v:"enum=CRITICAL|ERROR|WARNING|INFO|NOT_AVAILABLE|NONE"`
		Resource           string       `json:"resource"`
		Provider           string       `json:"provider"`
		Account            string       `json:"account"`
		TriggeredBy        string       `json:"triggered_by"`
		WebhookID          string       `json:"webhook_id"`
		EscalationPolicyID string       `json:"escalation_policy_id"`
		WorkspaceID        string       `json:"workspace_id"`
		ProjectID          string       `json:"project_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Routes are the operations (Nubes' addition to the spec: upstream's
// monitoring/v1/alert).
func (as *Alerts) Routes() []api.Route {
	const base = "/monitoring/v1/alert/"
	return []api.Route{
		api.Op[createAlert, Alert]{Path: base + "create", Access: core.Writers, Summary: "Open an alert in a project (Nubes' addition); triggered_by is the caller.", Handle: as.create},
		api.Op[updateAlert, Alert]{Path: base + "update", Access: core.Writers, Summary: "Change an alert's title, state, description, urgency or project (Nubes' addition); an ERROR alert changes no more.", Handle: as.update},
		api.Op[updateState, Alert]{Path: base + "update-state", Access: auth.Public(), Summary: "Acknowledge an alert with the access key of a notification's link, without a token (Nubes' addition).", Handle: as.updateStateOp},
		api.Op[assignUser, Alert]{Path: base + "assign-user", Access: core.Writers, Summary: "Assign an alert to a user (Nubes' addition).", Handle: as.assign},
		api.Op[alertRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete an alert with its events and notes (Nubes' addition).", Handle: as.delete},
		api.Op[alertRequest, Alert]{Path: base + "get", Access: core.Readers, Summary: "Get an alert (Nubes' addition).", Handle: as.get},
		api.Op[alertQuery, api.List[Alert]]{Path: base + "list", Access: core.Readers, Summary: "List the alerts the caller may see (Nubes' addition).", Handle: as.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the alerts the caller may see (Nubes' addition).", Handle: as.stat},
	}
}

// PolicyFor is the escalation policy a new alert of pr takes.
func (as *Alerts) PolicyFor(ctx context.Context, pr *core.Project) (Policy, error) {
	return as.policy(ctx, pr.DomainID, pr.WorkspaceID, pr.ProjectID)
}

// NewAlertOf is an alert of a project with upstream's defaults under the
// project's policy, resolved by the caller (PolicyFor: alerts of one
// project opened together resolve it once); the caller fills what its
// source gives, then begins its escalation (Alert.Begin).
func NewAlertOf(id string, pr *core.Project, pol Policy, now time.Time) *Alert {
	return &Alert{ID: id, AlertID: id, State: Triggered, Urgency: High, Severity: "NONE", Resources: []Resource{},
		AdditionalInfo: map[string]any{}, EscalationStep: 1, EscalationTTL: pol.RepeatCount + 1, EscalationPolicyID: pol.ID,
		DomainID: pr.DomainID, WorkspaceID: pr.WorkspaceID, ProjectID: pr.ProjectID, CreatedAt: wire.T(now), UpdatedAt: wire.T(now)}
}

func (as *Alerts) create(ctx context.Context, p *auth.Principal, r *createAlert) (*Alert, error) {
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return nil, err
	}
	pr, err := as.projects.Get(ctx, p, r.ProjectID)
	if err != nil {
		return nil, err
	}
	if err := rule.Admits(tenancy.Record{Domain: pr.DomainID, Workspace: pr.WorkspaceID, Project: pr.ProjectID}); err != nil {
		return nil, err
	}
	pol, err := as.PolicyFor(ctx, pr)
	if err != nil {
		return nil, err
	}
	now := as.clock.Now()
	a := NewAlertOf(wire.NewID("alert"), pr, pol, now)
	a.Title, a.Description, a.Assignee, a.TriggeredBy = r.Title, r.Description, r.Assignee, p.UserID
	if r.Urgency != "" {
		a.Urgency = r.Urgency
	}
	a.Begin(pol.Start, now)
	out, created, err := as.Insert(ctx, a)
	if err == nil && created && as.cfg.Opened != nil {
		as.cfg.Opened.Opened(out)
	}
	return out, err
}

// changeFor checks that the caller may change the alert, then changes it
// (Change) and returns it as written.
func (as *Alerts) changeFor(ctx context.Context, p *auth.Principal, id string, fn func(a *Alert) error) (*Alert, error) {
	if _, err := store.GetToChange[Alert](ctx, as.c, resource, p, "alert_id", id); err != nil {
		return nil, err
	}
	ch, err := as.Change(ctx, id, fn)
	return ch.After, err
}

func refuseError(a *Alert) error {
	if a.State == Error {
		return errs.New(InvalidState, "The alert is in state ERROR and cannot be changed. (alert_id = %s)", a.AlertID)
	}
	return nil
}

// MoveTo moves the alert to state by responder at now, as upstream's
// update does it. A move out of an open state to RESOLVED marks its
// resolved notices due (the escalation sends them).
func MoveTo(a *Alert, state, responder string, now time.Time) {
	if state == Resolved && a.Open() {
		a.ResolveNotice = true
	}
	// The escalation looks at the alert next tick: the move may finish it.
	a.State, a.EscalateAt = state, nil
	switch state {
	case Acknowledged:
		a.Responder, a.AcknowledgedAt, a.ResolvedAt = responder, ptr(now), nil
	case Resolved:
		a.EscalationTTL, a.ResolvedAt = 0, ptr(now)
	case Triggered:
		// ttl is not restored, as upstream (*(d)* in spec/alerts.md).
		a.AcknowledgedAt, a.ResolvedAt = nil, nil
	}
}

func (as *Alerts) update(ctx context.Context, p *auth.Principal, r *updateAlert) (*Alert, error) {
	var moved *core.Project
	var pol Policy
	if r.ProjectID != "" {
		cur, err := store.GetToChange[Alert](ctx, as.c, resource, p, "alert_id", r.AlertID)
		if err != nil {
			return nil, err
		}
		if r.ProjectID != cur.ProjectID {
			if moved, err = as.projects.Get(ctx, p, r.ProjectID); err != nil {
				return nil, err
			}
			rule, err := tenancy.For(p, resource.Tenancy)
			if err != nil {
				return nil, err
			}
			if err := rule.Admits(tenancy.Record{Domain: moved.DomainID, Workspace: moved.WorkspaceID, Project: moved.ProjectID}); err != nil {
				return nil, err
			}
			if pol, err = as.policy(ctx, moved.DomainID, moved.WorkspaceID, moved.ProjectID); err != nil {
				return nil, err
			}
		}
	}
	now := as.clock.Now()
	out, err := as.changeFor(ctx, p, r.AlertID, func(a *Alert) error {
		if err := refuseError(a); err != nil {
			return err
		}
		if r.Title != "" {
			a.Title = r.Title
		}
		switch {
		case r.ResetDescription:
			a.Description = ""
		case r.Description != "":
			a.Description = r.Description
		}
		if r.Urgency != "" {
			a.Urgency = r.Urgency
		}
		if moved != nil && moved.ProjectID != a.ProjectID {
			// The new project's policy starts over (upstream: ttl =
			// repeat_count, without the +1 of a create).
			a.ProjectID, a.WorkspaceID = moved.ProjectID, moved.WorkspaceID
			a.EscalationPolicyID, a.EscalationTTL, a.EscalationStep, a.EscalatedAt = pol.ID, pol.RepeatCount, 1, nil
		}
		if r.State != "" {
			MoveTo(a, r.State, p.UserID, now)
		} else if r.Title != "" || r.ResetDescription || r.Description != "" || r.Urgency != "" || moved != nil {
			// A change may stop or restart the escalation (urgency,
			// another project): the escalation looks at it next tick
			// (MoveTo says so for a state).
			a.EscalateAt = nil
		}
		return nil
	})
	if err != nil || moved == nil {
		return out, err
	}
	// Its notes and events follow it, after the alert (whose project is
	// the truth): a move cut short here is finished by the same update
	// sent again, which finds the alert moved and moves them.
	return out, as.follow(ctx, out)
}

// follow moves the records of an alert (its notes and events) into the
// alert's project and workspace.
func (as *Alerts) follow(ctx context.Context, a *Alert) error {
	for _, c := range as.cascade[:2] {
		if _, err := c.UpdateMany(ctx, bson.D{{Key: "alert_id", Value: a.AlertID}, {Key: "project_id", Value: bson.D{{Key: "$ne", Value: a.ProjectID}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "project_id", Value: a.ProjectID}, {Key: "workspace_id", Value: a.WorkspaceID}}}}); err != nil {
			return store.Wrap(err)
		}
	}
	return nil
}

// EscalateAtField is the stored time of an alert's next escalation look
// (Alert.EscalateAt).
const EscalateAtField = "escalate_at"

// ResolveNoticeField marks an alert resolved from an open state whose
// resolved notification is still to be sent (by the escalation worker).
const ResolveNoticeField = "resolve_notice"

func (as *Alerts) assign(ctx context.Context, p *auth.Principal, r *assignUser) (*Alert, error) {
	// The alert first (404 for one the caller does not reach), then the
	// user: one of its workspace (upstream's check), asked of identity.
	a, err := store.GetToChange[Alert](ctx, as.c, resource, p, "alert_id", r.AlertID)
	if err != nil {
		return nil, err
	}
	if err := as.projects.WorkspaceUser(ctx, a.DomainID, a.WorkspaceID, r.Assignee); err != nil {
		return nil, err
	}
	return as.changeFor(ctx, p, r.AlertID, func(a *Alert) error {
		if err := refuseError(a); err != nil {
			return err
		}
		a.Assignee = r.Assignee
		return nil
	})
}

// delete tears the alert down mark first (store.Teardown): from the mark
// on it is out of every read and refuses every change; then its notes,
// events and its key's record go, and the alert last. A delete cut
// short is finished by a retry.
func (as *Alerts) delete(ctx context.Context, p *auth.Principal, r *alertRequest) (*api.Empty, error) {
	_, err := store.Teardown[Alert]{Records: as.c, Resource: resource, Key: "alert_id",
		Children: func(ctx context.Context, a *Alert) error {
			for _, c := range as.cascade {
				if err := store.DeleteChildren(ctx, c, bson.D{{Key: "alert_id", Value: a.ID}}); err != nil {
					return err
				}
			}
			return nil
		},
	}.Delete(ctx, p, r.AlertID)
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (as *Alerts) get(ctx context.Context, p *auth.Principal, r *alertRequest) (*Alert, error) {
	return store.GetFor[Alert](ctx, as.c, resource, p, "alert_id", r.AlertID)
}

// GetFor reads an alert the caller may see (notes check their alert).
func (as *Alerts) GetFor(ctx context.Context, p *auth.Principal, id string) (*Alert, error) {
	return store.GetFor[Alert](ctx, as.c, resource, p, "alert_id", id)
}

func (as *Alerts) list(ctx context.Context, p *auth.Principal, r *alertQuery) (*api.List[Alert], error) {
	params := query.Params("alert_number", r.AlertNumber, "alert_id", r.AlertID, "title", r.Title, "state", r.State, "assignee", r.Assignee,
		"urgency", r.Urgency, "severity", r.Severity, "resources.name", r.Resource, "provider", r.Provider, "account", r.Account,
		"triggered_by", r.TriggeredBy, "webhook_id", r.WebhookID, "escalation_policy_id", r.EscalationPolicyID,
		"workspace_id", r.WorkspaceID, "project_id", r.ProjectID)
	return store.SearchFor[Alert](ctx, as.c, query.With(r.Query, params...), resource, p)
}

func (as *Alerts) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, as.c, p, resource, r.Query)
	return &res, err
}
