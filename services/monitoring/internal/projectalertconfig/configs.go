// Package projectalertconfig holds the project alert configs of the
// monitoring service (upstream's monitoring/v1/project-alert-config,
// spec/alerts.md §3): per project, the escalation policy its alerts
// follow and the options notification_urgency (ALL, HIGH_ONLY) and
// recovery_mode (AUTO, MANUAL), with upstream's defaults.
//
// It must not read other resources' collections; policies come through
// the Policies it is given, projects from identity.
package projectalertconfig

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// Option values and upstream's defaults.
const (
	UrgencyAll      = "ALL"
	UrgencyHighOnly = "HIGH_ONLY"
	RecoveryAuto    = "AUTO"
	RecoveryManual  = "MANUAL"
)

// Options are a config's options.
type Options struct {
	NotificationUrgency string `bson:"notification_urgency" json:"notification_urgency" v:"enum=ALL|HIGH_ONLY"`
	RecoveryMode        string `bson:"recovery_mode" json:"recovery_mode" v:"enum=AUTO|MANUAL"`
}

// Defaults are upstream's options of a project without a config (or
// options left out).
var Defaults = Options{NotificationUrgency: UrgencyAll, RecoveryMode: RecoveryManual}

// PolicyInfo names a config's policy (upstream's escalation_policy_info).
type PolicyInfo struct {
	EscalationPolicyID string `bson:"escalation_policy_id" json:"escalation_policy_id"`
	Name               string `bson:"-" json:"name"`
}

// Config is a project's alert config, stored and sent in the same shape
// (escalation_policy_info.name is filled in when read). An empty
// escalation_policy_id follows the scope's default policy.
type Config struct {
	ID                   string     `bson:"_id" json:"-"`
	ProjectID            string     `bson:"project_id" json:"project_id"`
	Options              Options    `bson:"options" json:"options"`
	EscalationPolicyInfo PolicyInfo `bson:"escalation_policy_info" json:"escalation_policy_info"`
	DomainID             string     `bson:"domain_id" json:"domain_id"`
	WorkspaceID          string     `bson:"workspace_id" json:"workspace_id"`
	CreatedAt            wire.Time  `bson:"created_at" json:"created_at"`
}

var resource = query.Resource{
	KeywordFields: []string{"project_id"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"project_id", "options", "escalation_policy_info"},
	Fields:        query.FieldsOf[Config](),
	Tenancy:       tenancy.InProject,
	Maps:          freeform.FieldsOf[Config](),
}

// Policy is what a config needs of an escalation policy.
type Policy struct {
	ID, Name, ResourceGroup, ProjectID, WorkspaceID, DomainID string
}

// Policies reads escalation policies (escalationpolicy's).
type Policies interface {
	// Policy returns the policy by id, nil when there is none.
	Policy(ctx context.Context, id string) (*Policy, error)
}

type (
	options struct {
		NotificationUrgency string `json:"notification_urgency" v:"enum=ALL|HIGH_ONLY"`
		RecoveryMode        string `json:"recovery_mode" v:"enum=AUTO|MANUAL"`
	}
	createConfig struct {
		ProjectID          string   `json:"project_id" v:"required,max=255"`
		EscalationPolicyID string   `json:"escalation_policy_id" v:"max=255"`
		Options            *options `json:"options"`
	}
	updateConfig struct {
		ProjectID          string   `json:"project_id" v:"required,max=255"`
		EscalationPolicyID string   `json:"escalation_policy_id" v:"max=255"`
		Options            *options `json:"options"`
	}
	configRequest struct {
		ProjectID string `json:"project_id" v:"required"`
	}
	configQuery struct {
		Query              *query.Query `json:"query"`
		ProjectID          string       `json:"project_id"`
		EscalationPolicyID string       `json:"escalation_policy_id"`
		WorkspaceID        string       `json:"workspace_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Configs serves the project-alert-config operations.
type Configs struct {
	c        *mongo.Collection
	projects core.Projects
	policies Policies
}

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database, projects core.Projects, policies Policies) (*Configs, error) {
	cs := &Configs{c: db.Collection(core.ConfigsCollection), projects: projects, policies: policies}
	return cs, store.EnsureIndexes(ctx, cs.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "escalation_policy_info.escalation_policy_id", Value: 1}}},
	)
}

// Routes are the operations.
func (cs *Configs) Routes() []api.Route {
	const base = "/monitoring/v1/project-alert-config/"
	return []api.Route{
		api.Op[createConfig, Config]{Path: base + "create", Access: core.Writers, Summary: "Configure a project's alerts: escalation policy, notification urgency, recovery mode (Nubes' addition).", Handle: cs.create},
		api.Op[updateConfig, Config]{Path: base + "update", Access: core.Writers, Summary: "Change a project's alert config; options left out keep their value (Nubes' addition).", Handle: cs.update},
		api.Op[configRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete a project's alert config; its alerts follow the defaults (Nubes' addition).", Handle: cs.delete},
		api.Op[configRequest, Config]{Path: base + "get", Access: core.Readers, Summary: "Get a project's alert config (Nubes' addition).", Handle: cs.get},
		api.Op[configQuery, api.List[Config]]{Path: base + "list", Access: core.Readers, Summary: "List the alert configs the caller may see (Nubes' addition).", Handle: cs.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the alert configs the caller may see (Nubes' addition).", Handle: cs.stat},
	}
}

// policy checks a policy a config of the project may follow: one of the
// domain the caller sees, DOMAIN, the project's workspace's, or the
// project's own (upstream: ERROR_INVALID_ESCALATION_POLICY otherwise).
func (cs *Configs) policy(ctx context.Context, p *auth.Principal, pr *core.Project, id string) (PolicyInfo, error) {
	if id == "" {
		return PolicyInfo{}, nil
	}
	pol, err := cs.policies.Policy(ctx, id)
	if err != nil {
		return PolicyInfo{}, err
	}
	if pol == nil || pol.DomainID != p.DomainID {
		return PolicyInfo{}, errs.NotFound("escalation_policy_id", id)
	}
	ok := pol.WorkspaceID == core.Global || pol.WorkspaceID == pr.WorkspaceID
	if pol.ResourceGroup == "PROJECT" {
		ok = pol.ProjectID == pr.ProjectID
	}
	if !ok {
		return PolicyInfo{}, errs.New(errs.InvalidEscalationPolicy, "The escalation policy %s cannot be used by project %s.", id, pr.ProjectID)
	}
	return PolicyInfo{EscalationPolicyID: id, Name: pol.Name}, nil
}

func merge(o Options, r *options) Options {
	if r == nil {
		return o
	}
	if r.NotificationUrgency != "" {
		o.NotificationUrgency = r.NotificationUrgency
	}
	if r.RecoveryMode != "" {
		o.RecoveryMode = r.RecoveryMode
	}
	return o
}

func (cs *Configs) create(ctx context.Context, p *auth.Principal, r *createConfig) (*Config, error) {
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return nil, err
	}
	pr, err := cs.projects.Get(ctx, p, r.ProjectID)
	if err != nil {
		return nil, err
	}
	if err := rule.Admits(tenancy.Record{Domain: pr.DomainID, Workspace: pr.WorkspaceID, Project: pr.ProjectID}); err != nil {
		return nil, err
	}
	info, err := cs.policy(ctx, p, pr, r.EscalationPolicyID)
	if err != nil {
		return nil, err
	}
	doc := &Config{ID: pr.ProjectID, ProjectID: pr.ProjectID, Options: merge(Defaults, r.Options), EscalationPolicyInfo: info,
		DomainID: pr.DomainID, WorkspaceID: pr.WorkspaceID, CreatedAt: wire.T(wire.Now())}
	// One per project: its _id is the project's, so a second create
	// collides on insert, atomically on both stores.
	if _, err := cs.c.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.Duplicate("project_id", pr.ProjectID)
		}
		return nil, store.Wrap(err)
	}
	return doc, nil
}

func (cs *Configs) update(ctx context.Context, p *auth.Principal, r *updateConfig) (*Config, error) {
	doc, err := store.GetToChange[Config](ctx, cs.c, resource, p, "project_id", r.ProjectID)
	if err != nil {
		return nil, err
	}
	var set bson.D
	if r.EscalationPolicyID != "" {
		info, err := cs.policy(ctx, p, &core.Project{ProjectID: doc.ProjectID, WorkspaceID: doc.WorkspaceID, DomainID: doc.DomainID}, r.EscalationPolicyID)
		if err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "escalation_policy_info", Value: info})
	}
	if r.Options != nil {
		set = append(set, bson.E{Key: "options", Value: merge(doc.Options, r.Options)})
	}
	if len(set) == 0 {
		return cs.named(ctx, doc)
	}
	out, err := store.SetByID[Config](ctx, cs.c, "project_id", doc.ID, set)
	if err != nil {
		return nil, err
	}
	return cs.named(ctx, out)
}

func (cs *Configs) delete(ctx context.Context, p *auth.Principal, r *configRequest) (*api.Empty, error) {
	doc, err := store.GetToChange[Config](ctx, cs.c, resource, p, "project_id", r.ProjectID)
	if err != nil {
		return nil, err
	}
	res, err := cs.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: doc.ID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("project_id", doc.ID)
	}
	return &api.Empty{}, nil
}

// named fills in the policy's name.
func (cs *Configs) named(ctx context.Context, doc *Config) (*Config, error) {
	if id := doc.EscalationPolicyInfo.EscalationPolicyID; id != "" {
		pol, err := cs.policies.Policy(ctx, id)
		if err != nil {
			return nil, err
		}
		if pol != nil {
			doc.EscalationPolicyInfo.Name = pol.Name
		}
	}
	return doc, nil
}

func (cs *Configs) get(ctx context.Context, p *auth.Principal, r *configRequest) (*Config, error) {
	doc, err := store.GetFor[Config](ctx, cs.c, resource, p, "project_id", r.ProjectID)
	if err != nil {
		return nil, err
	}
	return cs.named(ctx, doc)
}

func (cs *Configs) list(ctx context.Context, p *auth.Principal, r *configQuery) (*api.List[Config], error) {
	q := query.With(r.Query, query.Params("project_id", r.ProjectID, "escalation_policy_info.escalation_policy_id", r.EscalationPolicyID,
		"workspace_id", r.WorkspaceID)...)
	l, err := store.SearchFor[Config](ctx, cs.c, q, resource, p)
	if err != nil {
		return nil, err
	}
	for i := range l.Results {
		if _, err := cs.named(ctx, &l.Results[i]); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (cs *Configs) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, cs.c, p, resource, r.Query)
	return &res, err
}

// Of returns the config of a project of domainID (no tenancy: for alerts
// and the escalation), nil when it has none.
func (cs *Configs) Of(ctx context.Context, domainID, projectID string) (*Config, error) {
	doc, err := store.Get[Config](ctx, cs.c, "project_id", projectID)
	if errs.Is(err, errs.NotFoundCode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if doc.DomainID != domainID {
		return nil, nil
	}
	return doc, nil
}

// OptionsOf are the options of a project: its config's, else upstream's
// defaults.
func (cs *Configs) OptionsOf(ctx context.Context, domainID, projectID string) (Options, error) {
	doc, err := cs.Of(ctx, domainID, projectID)
	if err != nil || doc == nil {
		return Defaults, err
	}
	return doc.Options, nil
}
