// Package escalationpolicy holds the escalation-policy operations of the
// monitoring service: rules of notification levels, a DOMAIN, WORKSPACE or
// PROJECT resource group, exactly one default among the global policies of
// a domain (DOMAIN) or of a workspace (WORKSPACE), names unique per domain.
//
// It must not read other resources' collections; projects come from
// identity through core.Projects.
package escalationpolicy

import (
	"context"
	"errors"
	"log/slog"

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

// Error codes of escalation policies (registered in pkg/errs).
const (
	InvalidScope         = errs.InvalidEscalationPolicyScope
	DefaultNotDeleteable = errs.DefaultEscalationPolicyNotAllowDeletion
)

// Resource groups.
const (
	Domain    = "DOMAIN"
	Workspace = "WORKSPACE"
	Project   = "PROJECT"
)

// Rule is one notification level of a policy.
type Rule struct {
	NotificationLevel string `bson:"notification_level" json:"notification_level" v:"required,enum=ALL|LV1|LV2|LV3|LV4|LV5|LV6|LV7|LV8|LV9|LV10"`
	EscalateMinutes   int32  `bson:"escalate_minutes" json:"escalate_minutes" v:"min=0"`
}

// Policy is an escalation policy, stored and sent in the same shape.
type Policy struct {
	ID                 string `bson:"_id" json:"-"`
	EscalationPolicyID string `bson:"escalation_policy_id" json:"escalation_policy_id"`
	Name               string `bson:"name" json:"name"`
	IsDefault          bool   `bson:"is_default" json:"is_default"`
	// DefaultVersion is the version of the scope's default claim that
	// IsDefault was written from (followDefault).
	DefaultVersion int64 `bson:"default_version,omitempty" json:"-"`
	// Deleting marks a global policy whose delete has begun (delete).
	Deleting        bool          `bson:"deleting,omitempty" json:"-"`
	Rules           []Rule        `bson:"rules" json:"rules"`
	RepeatCount     int32         `bson:"repeat_count" json:"repeat_count"`
	FinishCondition string        `bson:"finish_condition" json:"finish_condition"`
	ResourceGroup   string        `bson:"resource_group" json:"resource_group"`
	Scope           string        `bson:"scope" json:"scope"`
	ProjectID       string        `bson:"project_id" json:"project_id"`
	Tags            freeform.Flat `bson:"tags" json:"tags"`
	WorkspaceID     string        `bson:"workspace_id" json:"workspace_id"`
	DomainID        string        `bson:"domain_id" json:"domain_id"`
	CreatedAt       wire.Time     `bson:"created_at" json:"created_at"`
}

func (p *Policy) global() bool { return p.ResourceGroup != Project }

var resource = query.Resource{
	KeywordFields: []string{"escalation_policy_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"escalation_policy_id", "name", "is_default", "resource_group", "project_id"},
	Fields:        query.FieldsOf[Policy](),
	Tenancy:       tenancy.InProject,
	Maps:          freeform.FieldsOf[Policy](),
}

// MaxRepeat bounds repeat_count.
const MaxRepeat = 100

type (
	createPolicy struct {
		Name            string        `json:"name" v:"required,max=255"`
		Rules           []Rule        `json:"rules" v:"required,max=11"`
		ResourceGroup   string        `json:"resource_group" v:"required,enum=DOMAIN|WORKSPACE|PROJECT"`
		RepeatCount     int32         `json:"repeat_count" v:"min=0"`
		FinishCondition string        `json:"finish_condition" v:"enum=ACKNOWLEDGED|RESOLVED"`
		Tags            freeform.Flat `json:"tags"`
		ProjectID       string        `json:"project_id" v:"max=255"`
	}
	updatePolicy struct {
		EscalationPolicyID string        `json:"escalation_policy_id" v:"required"`
		Name               string        `json:"name" v:"max=255"`
		Rules              []Rule        `json:"rules" v:"max=11"`
		RepeatCount        *int32        `json:"repeat_count" v:"min=0"`
		FinishCondition    string        `json:"finish_condition" v:"enum=ACKNOWLEDGED|RESOLVED"`
		Tags               freeform.Flat `json:"tags"`
	}
	policyRequest struct {
		EscalationPolicyID string `json:"escalation_policy_id" v:"required"`
	}
	policyQuery struct {
		Query              *query.Query `json:"query"`
		ResourceGroup      string       `json:"resource_group" v:"enum=DOMAIN|WORKSPACE|PROJECT"`
		EscalationPolicyID string       `json:"escalation_policy_id"`
		Name               string       `json:"name"`
		IsDefault          *bool        `json:"is_default"`
		FinishCondition    string       `json:"finish_condition" v:"enum=ACKNOWLEDGED|RESOLVED"`
		ProjectID          string       `json:"project_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Validate: repeat_count is bounded; only a PROJECT policy names a project.
func (r *createPolicy) Validate() error {
	if r.RepeatCount > MaxRepeat {
		return errs.Invalid("repeat_count", "at most 100")
	}
	switch {
	case r.ResourceGroup == Project && (r.ProjectID == "" || r.ProjectID == core.Global):
		return errs.Required("project_id")
	case r.ResourceGroup != Project && r.ProjectID != "" && r.ProjectID != core.Global:
		return errs.Invalid("project_id", "only a PROJECT policy has a project")
	}
	return nil
}

// Validate bounds repeat_count.
func (r *updatePolicy) Validate() error {
	if r.RepeatCount != nil && *r.RepeatCount > MaxRepeat {
		return errs.Invalid("repeat_count", "at most 100")
	}
	return nil
}

// Policies serves the escalation-policy operations.
type Policies struct {
	c        *mongo.Collection
	claims   core.Claims
	projects core.Projects
	log      *slog.Logger
}

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database, projects core.Projects, log *slog.Logger) (*Policies, error) {
	ps := &Policies{c: db.Collection(core.PoliciesCollection), claims: core.Claims{C: db.Collection(core.ClaimsCollection)}, projects: projects, log: log}
	err := store.EnsureIndexes(ctx, ps.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "resource_group", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "project_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}},
	)
	return ps, err
}

// Routes are the operations.
func (ps *Policies) Routes() []api.Route {
	const base = "/monitoring/v1/escalation-policy/"
	return []api.Route{
		api.Op[createPolicy, Policy]{Path: base + "create", Access: core.Writers, Summary: "Create an escalation policy; the first global one of a domain or workspace becomes its default.", Handle: ps.create},
		api.Op[updatePolicy, Policy]{Path: base + "update", Access: core.Writers, Summary: "Change a policy's name, rules, repeat count, finish condition or tags.", Handle: ps.update},
		api.Op[policyRequest, Policy]{Path: base + "set-default", Access: core.Writers, Summary: "Make a global policy the default of its domain or workspace.", Handle: ps.setDefault},
		api.Op[policyRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete a policy; the default cannot be deleted.", Handle: ps.delete},
		api.Op[policyRequest, Policy]{Path: base + "get", Access: core.Readers, Summary: "Get a policy.", Handle: ps.get},
		api.Op[policyQuery, api.List[Policy]]{Path: base + "list", Access: core.Readers, Summary: "List the policies the caller may see.", Handle: ps.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the policies the caller may see.", Handle: ps.stat},
	}
}

func nameKey(domainID, name string) string { return "ep-name#" + domainID + "#" + name }

func defaultKey(domainID, workspaceID string) string {
	return "ep-default#" + domainID + "#" + workspaceID
}

func (ps *Policies) exists(ctx context.Context, id string) (bool, error) {
	n, err := ps.c.CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
	return n > 0, store.Wrap(err)
}

func (ps *Policies) create(ctx context.Context, p *auth.Principal, r *createPolicy) (*Policy, error) {
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return nil, err
	}
	id := wire.NewID("ep")
	doc := &Policy{ID: id, EscalationPolicyID: id, Name: r.Name, Rules: withDefaults(r.Rules), RepeatCount: r.RepeatCount,
		FinishCondition: r.FinishCondition, ResourceGroup: r.ResourceGroup, Scope: r.ResourceGroup, ProjectID: core.Global,
		Tags: wire.Object(r.Tags), DomainID: p.DomainID, CreatedAt: wire.T(wire.Now())}
	if doc.FinishCondition == "" {
		doc.FinishCondition = "ACKNOWLEDGED"
	}
	switch r.ResourceGroup {
	case Domain:
		if !tenancy.DomainWide(p) {
			return nil, errs.Forbidden()
		}
		doc.WorkspaceID = core.Global
	case Workspace:
		if p.WorkspaceID == "" {
			return nil, errs.Invalid("resource_group", "WORKSPACE needs a workspace-scoped token")
		}
		doc.WorkspaceID = p.WorkspaceID
	case Project:
		pr, err := ps.projects.Get(ctx, p, r.ProjectID)
		if err != nil {
			return nil, err
		}
		doc.ProjectID, doc.WorkspaceID = pr.ProjectID, pr.WorkspaceID
	}
	if err := rule.Admits(tenancy.Record{Domain: doc.DomainID, Workspace: doc.WorkspaceID, Project: doc.ProjectID}); err != nil {
		return nil, err
	}
	ok, err := ps.claims.Take(ctx, nameKey(p.DomainID, r.Name), id, ps.exists)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errs.Duplicate("name", r.Name)
	}
	if doc.global() {
		// The first global policy of a scope becomes its default, so a
		// scope with policies always has exactly one: the scope's default
		// claim is taken like a name (the insert of its _id, or the
		// takeover of a vanished holder's), before the policy is stored.
		if doc.IsDefault, err = ps.claims.Take(ctx, defaultKey(doc.DomainID, doc.WorkspaceID), id, ps.exists); err != nil {
			_ = ps.claims.Release(context.WithoutCancel(ctx), nameKey(p.DomainID, r.Name), id)
			return nil, err
		}
	}
	if err := ps.insert(ctx, doc); err != nil {
		_ = ps.claims.Release(context.WithoutCancel(ctx), nameKey(p.DomainID, r.Name), id)
		if doc.IsDefault {
			_ = ps.claims.Release(context.WithoutCancel(ctx), defaultKey(doc.DomainID, doc.WorkspaceID), id)
		}
		return nil, err
	}
	if doc.IsDefault {
		// A setDefault between the claim and the insert followed the
		// flags before this policy was stored: follow them again.
		cl, err := ps.claims.Get(ctx, defaultKey(doc.DomainID, doc.WorkspaceID))
		if err != nil {
			return nil, err
		}
		if cl == nil || cl.Owner != id {
			owner, v := "", int64(0)
			if cl != nil {
				owner, v = cl.Owner, cl.Version
			}
			if err := ps.followDefault(ctx, doc, owner, v); err != nil {
				return nil, err
			}
			doc.IsDefault = false
		}
	}
	return doc, nil
}

func (ps *Policies) insert(ctx context.Context, doc *Policy) error {
	_, err := ps.c.InsertOne(ctx, doc)
	return store.Wrap(err)
}

// withDefaults returns the rules as stored ([] never null).
func withDefaults(rules []Rule) []Rule { return wire.List(rules) }

// load returns a policy the caller may see.
func (ps *Policies) load(ctx context.Context, p *auth.Principal, id string) (*Policy, error) {
	return store.GetFor[Policy](ctx, ps.c, resource, p, "escalation_policy_id", id)
}

func (ps *Policies) writable(ctx context.Context, p *auth.Principal, id string) (*Policy, error) {
	return store.GetToChange[Policy](ctx, ps.c, resource, p, "escalation_policy_id", id)
}

func (ps *Policies) update(ctx context.Context, p *auth.Principal, r *updatePolicy) (*Policy, error) {
	doc, err := ps.writable(ctx, p, r.EscalationPolicyID)
	if err != nil {
		return nil, err
	}
	set := bson.D{}
	if r.Rules != nil {
		// As upstream: new rules reset repeat_count to the given value or 0.
		var repeat int32
		if r.RepeatCount != nil {
			repeat = *r.RepeatCount
		}
		set = append(set, bson.E{Key: "rules", Value: withDefaults(r.Rules)}, bson.E{Key: "repeat_count", Value: repeat})
	} else if r.RepeatCount != nil {
		set = append(set, bson.E{Key: "repeat_count", Value: *r.RepeatCount})
	}
	if r.FinishCondition != "" {
		set = append(set, bson.E{Key: "finish_condition", Value: r.FinishCondition})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	renamed := r.Name != "" && r.Name != doc.Name
	if renamed {
		ok, err := ps.claims.Take(ctx, nameKey(doc.DomainID, r.Name), doc.ID, ps.exists)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errs.Duplicate("name", r.Name)
		}
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if len(set) == 0 {
		return doc, nil
	}
	out, err := store.SetByID[Policy](ctx, ps.c, "escalation_policy_id", doc.ID, set)
	if err != nil {
		if renamed {
			_ = ps.claims.Release(context.WithoutCancel(ctx), nameKey(doc.DomainID, r.Name), doc.ID)
		}
		return nil, err
	}
	if renamed {
		if err := ps.claims.Release(ctx, nameKey(doc.DomainID, doc.Name), doc.ID); err != nil {
			ps.log.Warn("old policy name not released", "escalation_policy_id", doc.ID, "error", err.Error())
		}
	}
	return out, nil
}

// setDefault makes a global policy its scope's default. The scope's
// default claim is the truth (one atomic Set, counted); the policies'
// is_default flags follow it (followDefault). A delete marks the policy
// before it reads the claim, and setDefault reads the policy after it
// set the claim, so of a racing setDefault and delete one sees the
// other: the policy is never left the default of its scope deleted.
func (ps *Policies) setDefault(ctx context.Context, p *auth.Principal, r *policyRequest) (*Policy, error) {
	doc, err := ps.writable(ctx, p, r.EscalationPolicyID)
	if err != nil {
		return nil, err
	}
	if !doc.global() {
		return nil, errs.New(InvalidScope, "Only a global (DOMAIN or WORKSPACE) policy can be the default. (escalation_policy_id = %s)", doc.ID)
	}
	key := defaultKey(doc.DomainID, doc.WorkspaceID)
	was, v, err := ps.claims.Set(ctx, key, doc.ID)
	if err != nil {
		return nil, err
	}
	cur, err := store.Get[Policy](ctx, ps.c, "escalation_policy_id", doc.ID)
	if err == nil && cur.Deleting {
		err = errs.NotFound("escalation_policy_id", doc.ID)
	}
	if err != nil {
		if errs.Is(err, errs.NotFoundCode) && was != doc.ID {
			if back, rerr := ps.claims.Revert(context.WithoutCancel(ctx), key, doc.ID, was); rerr != nil {
				err = errors.Join(err, rerr)
			} else if back > 0 {
				err = errors.Join(err, ps.followDefault(context.WithoutCancel(ctx), doc, was, back))
			}
		}
		return nil, err
	}
	if err := ps.followDefault(ctx, doc, doc.ID, v); err != nil {
		return nil, err
	}
	return ps.Get(ctx, doc.ID)
}

// followDefault writes the scope's is_default flags from its default
// claim at version v: owner's true, every other policy's false, each
// write only over flags written from an older claim, so a late follow
// of an older claim never lands over a newer one's.
func (ps *Policies) followDefault(ctx context.Context, doc *Policy, owner string, v int64) error {
	older := bson.E{Key: "$or", Value: bson.A{bson.D{{Key: "default_version", Value: bson.D{{Key: "$lt", Value: v}}}},
		bson.D{{Key: "default_version", Value: bson.D{{Key: "$exists", Value: false}}}}}}
	if _, err := ps.c.UpdateMany(ctx, bson.D{{Key: "domain_id", Value: doc.DomainID}, {Key: "workspace_id", Value: doc.WorkspaceID},
		{Key: "project_id", Value: core.Global}, {Key: "_id", Value: bson.D{{Key: "$ne", Value: owner}}}, older},
		bson.D{{Key: "$set", Value: bson.D{{Key: "is_default", Value: false}, {Key: "default_version", Value: v}}}}); err != nil {
		return store.Wrap(err)
	}
	if owner == "" {
		return nil
	}
	_, err := ps.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: owner}, older},
		bson.D{{Key: "$set", Value: bson.D{{Key: "is_default", Value: true}, {Key: "default_version", Value: v}}}})
	return store.Wrap(err)
}

// delete refuses the default of a scope. A global policy is marked
// first (deleting), then the claim is read: a setDefault racing it sees
// the mark and gives the claim back.
func (ps *Policies) delete(ctx context.Context, p *auth.Principal, r *policyRequest) (*api.Empty, error) {
	doc, err := ps.writable(ctx, p, r.EscalationPolicyID)
	if err != nil {
		return nil, err
	}
	if doc.global() {
		if _, err := store.SetByID[Policy](ctx, ps.c, "escalation_policy_id", doc.ID, bson.D{{Key: "deleting", Value: true}}); err != nil {
			return nil, err
		}
		cur, err := ps.claims.Owner(ctx, defaultKey(doc.DomainID, doc.WorkspaceID))
		if err == nil && cur == doc.ID {
			err = errs.New(DefaultNotDeleteable, "The default escalation policy cannot be deleted; make another one the default first. (escalation_policy_id = %s)", doc.ID)
		}
		if err != nil {
			_, _ = ps.c.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: doc.ID}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "deleting", Value: ""}}}})
			return nil, err
		}
	}
	res, err := ps.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: doc.ID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("escalation_policy_id", doc.ID)
	}
	if err := ps.claims.Release(ctx, nameKey(doc.DomainID, doc.Name), doc.ID); err != nil {
		ps.log.Warn("policy name not released", "escalation_policy_id", doc.ID, "error", err.Error())
	}
	return &api.Empty{}, nil
}

func (ps *Policies) get(ctx context.Context, p *auth.Principal, r *policyRequest) (*Policy, error) {
	return ps.load(ctx, p, r.EscalationPolicyID)
}

func (ps *Policies) list(ctx context.Context, p *auth.Principal, r *policyQuery) (*api.List[Policy], error) {
	q := query.With(r.Query, query.Params("resource_group", r.ResourceGroup, "escalation_policy_id", r.EscalationPolicyID,
		"name", r.Name, "is_default", r.IsDefault, "finish_condition", r.FinishCondition, "project_id", r.ProjectID)...)
	return store.SearchFor[Policy](ctx, ps.c, q, resource, p)
}

func (ps *Policies) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, ps.c, p, resource, r.Query)
	return &res, err
}

// DefaultOf is the policy an alert of a project without one of its own
// follows: the default of the workspace, else of the domain; nil when
// neither has one.
func (ps *Policies) DefaultOf(ctx context.Context, domainID, workspaceID string) (*Policy, error) {
	for _, ws := range []string{workspaceID, core.Global} {
		id, err := ps.claims.Owner(ctx, defaultKey(domainID, ws))
		if err != nil {
			return nil, err
		}
		if id == "" {
			continue
		}
		pol, err := ps.Get(ctx, id)
		if err != nil || pol != nil {
			return pol, err
		}
	}
	return nil, nil
}

// Get returns a policy by id, nil when it is gone.
func (ps *Policies) Get(ctx context.Context, id string) (*Policy, error) {
	pol, err := store.Get[Policy](ctx, ps.c, "escalation_policy_id", id)
	if errs.Is(err, errs.NotFoundCode) {
		return nil, nil
	}
	return pol, err
}
