// Package core holds what the monitoring service's resources share: the
// collections, who may call, the caller's tenancy (domain and workspace),
// identity's projects, and the claims collection where names and defaults
// are decided by single-document atomic writes.
//
// It holds no operation of its own and never imports echo or nats.
package core

import (
	"context"
	"slices"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

// Collections owned by the monitoring service.
const (
	PoliciesCollection = "monitoring_escalation_policies"
	NotesCollection    = "monitoring_notes"
	WebhooksCollection = "monitoring_webhooks"
	// RequestsCollection holds each webhook's request counters (_id =
	// webhook_id), written only by the counter flusher so that counting
	// never races a change of the webhook itself.
	RequestsCollection = "monitoring_webhook_requests"
	EventsCollection   = "monitoring_events"
	// BodiesCollection holds the raw body of a delivery that made several
	// events, once (_id = body_id), rather than once per event.
	BodiesCollection = "monitoring_event_bodies"
	// PendingCollection keeps ingest bodies the plugin could not parse in
	// time, for the retry worker.
	PendingCollection = "monitoring_pending_ingest"
	// ClaimsCollection holds name claims, scope defaults and leases, each
	// keyed by _id.
	ClaimsCollection = "monitoring_claims"
	OutboxCollection = "monitoring_outbox"
	// DeadLettersCollection keeps the messages its consumers gave up on
	// (events.DeadRecords).
	DeadLettersCollection = "monitoring_dead_letters"
	// AlertsCollection holds alerts (_id = alert_id); ConfigsCollection
	// the project alert configs (_id = project_id).
	AlertsCollection  = "monitoring_alerts"
	ConfigsCollection = "monitoring_project_alert_configs"
)

// Global is the workspace_id (and project_id) of a record that belongs to
// the whole domain, as upstream stores it.
const Global = tenancy.All

var (
	// Readers may read every monitoring resource of their domain.
	Readers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
	// Writers may change them (DOMAIN-level records need a domain admin).
	Writers = Readers
)

// ProjectGetPath is identity's operation answering a project the caller
// may see (404 for an unknown one or another domain's).
const ProjectGetPath = "/identity/v2/project/get"

// Project is what monitoring needs of identity's ProjectInfo.
type Project struct {
	ProjectID   string `json:"project_id"`
	WorkspaceID string `json:"workspace_id"`
	DomainID    string `json:"domain_id"`
}

// Projects asks identity about projects on the caller's behalf.
type Projects struct{ Identity *call.Client }

// Get returns the project if it exists in the caller's domain (and
// workspace). identity's answer passes through; identity down is 503.
func (ps Projects) Get(ctx context.Context, p *auth.Principal, id string) (*Project, error) {
	var pr Project
	if err := ps.Identity.Call(ctx, ProjectGetPath, map[string]string{"project_id": id}, &pr); err != nil {
		return nil, err
	}
	// identity confines the lookup already; checking again keeps tenancy
	// true whatever it answers (a member reaches only its projects).
	rule, err := tenancy.For(p, tenancy.InProject)
	if err != nil {
		return nil, err
	}
	if pr.ProjectID != id || pr.WorkspaceID == "" || !rule.Sees(tenancy.Record{Domain: pr.DomainID, Workspace: pr.WorkspaceID, Project: pr.ProjectID}) {
		return nil, errs.NotFound("project_id", id)
	}
	return &pr, nil
}

// RoleBindingListPath is identity's role-binding/list.
const RoleBindingListPath = "/identity/v2/role-binding/list"

// WorkspaceUser checks, on the caller's behalf, that identity binds the
// user to the workspace (a workspace role there, or the domain's admin):
// upstream's check of alert/assign_user. 404 ERROR_NOT_FOUND otherwise;
// identity down is 503.
func (ps Projects) WorkspaceUser(ctx context.Context, domainID, workspaceID, userID string) error {
	var l struct {
		Results []struct {
			UserID      string `json:"user_id"`
			RoleType    string `json:"role_type"`
			WorkspaceID string `json:"workspace_id"`
			DomainID    string `json:"domain_id"`
		} `json:"results"`
	}
	if err := ps.Identity.Call(ctx, RoleBindingListPath, map[string]any{"user_id": userID}, &l); err != nil {
		return err
	}
	for _, b := range l.Results {
		if b.UserID == userID && b.DomainID == domainID && (b.WorkspaceID == workspaceID || b.RoleType == "DOMAIN_ADMIN") {
			return nil
		}
	}
	return errs.NotFound("user_id", userID)
}

// OneOf reports whether v is one of the values.
func OneOf(v string, values ...string) bool { return slices.Contains(values, v) }
