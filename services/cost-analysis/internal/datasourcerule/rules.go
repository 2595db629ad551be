// Package datasourcerule holds the data source rules of the cost-analysis service
// (spec part 2, /cost-analysis/v1/data-source-rule; semantics.md section 7
// "Rule ordering") and the engine that applies them to cost rows.
//
// Rules of one data source and rule type are numbered 1..n, in the order
// of one list on the data source's document (order.go): each change of
// the numbering is one atomic write of that list, and the rules' stored
// orders follow it.
//
// It must not run jobs or read costs.
package datasourcerule

import (
	"context"
	"slices"
	"strconv"
	"strings"

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
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// Error codes of rule changes.
const (
	NotAllowedToChangeOrder   = errs.NotAllowedToChangeOrder
	NotAllowedToChangeManaged = errs.NotAllowedToChangeManagedRule
)

// Rule is the DataSourceRuleInfo sent.
type Rule = core.Rule

var resource = query.Resource{
	KeywordFields: []string{"data_source_rule_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "data_source_id"}, {Key: "rule_type"}, {Key: "order"}},
	MinimalFields: []string{"data_source_rule_id", "name", "rule_type", "order", "data_source_id"},
	Fields:        query.FieldsOf[Rule](),
	Tenancy:       tenancy.InWorkspace,
	Maps:          freeform.FieldsOf[Rule](),
}

type (
	createRule struct {
		DataSourceID     string            `json:"data_source_id" v:"required,max=64"`
		Name             string            `json:"name" v:"max=255"`
		Conditions       []core.Condition  `json:"conditions" v:"max=100"`
		ConditionsPolicy string            `json:"conditions_policy" v:"required,enum=ALL|ANY|ALWAYS"`
		Actions          *core.Actions     `json:"actions" v:"required"`
		Options          *core.RuleOptions `json:"options"`
		Tags             freeform.Flat     `json:"tags"`
		ResourceGroup    string            `json:"resource_group" v:"required,enum=DOMAIN|WORKSPACE"`
		WorkspaceID      string            `json:"workspace_id" v:"max=64"`
	}
	updateRule struct {
		DataSourceRuleID string            `json:"data_source_rule_id" v:"required,max=64"`
		Name             *string           `json:"name" v:"max=255"`
		Conditions       *[]core.Condition `json:"conditions"`
		ConditionsPolicy string            `json:"conditions_policy" v:"enum=ALL|ANY|ALWAYS"`
		Actions          *core.Actions     `json:"actions"`
		Options          *core.RuleOptions `json:"options"`
		Tags             freeform.Flat     `json:"tags"`
	}
	changeOrder struct {
		DataSourceRuleID string `json:"data_source_rule_id" v:"required,max=64"`
		Order            *int   `json:"order" v:"required"`
	}
	ruleRequest struct {
		DataSourceRuleID string `json:"data_source_rule_id" v:"required,max=64"`
	}
	ruleQuery struct {
		Query            *query.Query `json:"query"`
		DataSourceRuleID string       `json:"data_source_rule_id"`
		Name             string       `json:"name"`
		RuleType         string       `json:"rule_type" v:"enum=MANAGED|CUSTOM"`
		WorkspaceID      string       `json:"workspace_id"`
		DataSourceID     string       `json:"data_source_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// conditionKeys are the cost fields a condition may read; tags.* and
// additional_info.* name a key inside them.
var conditionKeys = []string{"provider", "region_code", "product", "account", "usage_type", "resource_group", "resource"}

func checkConditions(policy string, conds []core.Condition) error {
	if policy != "ALWAYS" && len(conds) == 0 {
		return errs.Required("conditions")
	}
	for i, c := range conds {
		if c.Key == "" || c.Operator == "" {
			return errs.Required("conditions.key")
		}
		ok := slices.Contains(conditionKeys, c.Key) ||
			(strings.HasPrefix(c.Key, "tags.") && len(c.Key) > len("tags.")) ||
			(strings.HasPrefix(c.Key, "additional_info.") && len(c.Key) > len("additional_info."))
		if !ok {
			return errs.Invalid("conditions.key", "condition "+strconv.Itoa(i+1)+": "+c.Key+" is not one of "+strings.Join(conditionKeys, ", ")+", tags.*, additional_info.*")
		}
	}
	return nil
}

func checkActions(a *core.Actions) error {
	if a.ChangeProject == "" && a.MatchProject == nil && a.MatchServiceAccount == nil && len(a.AddAdditionalInfo) == 0 {
		return errs.Required("actions")
	}
	if m := a.MatchProject; m != nil && m.Target != "project_id" && m.Target != "name" {
		return errs.Invalid("actions.match_project.target", "must be project_id or name")
	}
	if m := a.MatchServiceAccount; m != nil && m.Target != "service_account_id" && m.Target != "name" && !strings.HasPrefix(m.Target, "data.") {
		return errs.Invalid("actions.match_service_account.target", "must be service_account_id, name or data.<key>")
	}
	return nil
}

// Validate: conditions as the policy needs them, at least one action.
func (r *createRule) Validate() error {
	if err := checkConditions(r.ConditionsPolicy, r.Conditions); err != nil {
		return err
	}
	return checkActions(r.Actions)
}

// Validate: the order is a position (1 or more).
func (r *changeOrder) Validate() error {
	if *r.Order < 1 {
		return errs.Invalid("order", "must be 1 or more")
	}
	return nil
}

// Rules serves the rule operations and keeps the rule orders.
type Rules struct {
	db      *mongo.Database
	c       *mongo.Collection
	sources *mongo.Collection
}

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database) (*Rules, error) {
	rs := &Rules{db: db, c: db.Collection(core.RulesCollection), sources: db.Collection(core.DataSourcesCollection)}
	return rs, store.EnsureIndexes(ctx, rs.c,
		store.Index{Keys: bson.D{{Key: "data_source_id", Value: 1}, {Key: "rule_type", Value: 1}, {Key: "order", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}}},
	)
}

// Routes are the operations.
func (rs *Rules) Routes() []api.Route {
	const base = "/cost-analysis/v1/data-source-rule/"
	return []api.Route{
		api.Op[createRule, Rule]{Path: base + "create", Access: core.Writers, Summary: "Append a CUSTOM rule to a data source's rules (order = count + 1).", Handle: rs.create},
		api.Op[updateRule, Rule]{Path: base + "update", Access: core.Writers, Summary: "Change a CUSTOM rule's name, conditions, actions, options or tags.", Handle: rs.update},
		api.Op[changeOrder, Rule]{Path: base + "change-order", Access: core.Writers, Summary: "Move a CUSTOM rule to another position; the others are renumbered 1..n.", Handle: rs.changeOrder},
		api.Op[ruleRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete a CUSTOM rule; the others are renumbered 1..n.", Handle: rs.delete},
		api.Op[ruleRequest, Rule]{Path: base + "get", Access: core.Readers, Summary: "Get a rule.", Handle: rs.get},
		api.Op[ruleQuery, api.List[Rule]]{Path: base + "list", Access: core.Readers, Summary: "List the rules the caller may see.", Handle: rs.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the rules the caller may see.", Handle: rs.stat},
	}
}

// load returns a rule the caller may see (404 otherwise).
func (rs *Rules) load(ctx context.Context, p *auth.Principal, id string) (*Rule, error) {
	return store.GetFor[Rule](ctx, rs.c, resource, p, "data_source_rule_id", id)
}

// writable returns a rule the caller may change: never a MANAGED rule
// (code says which change), a default (domain) rule only by a domain
// admin, and a rule of a data source only by who may change the data
// source (a DOMAIN data source's rules are the domain admin's alone).
func (rs *Rules) writable(ctx context.Context, p *auth.Principal, id, managedCode string) (*Rule, error) {
	r, err := store.GetToChange[Rule](ctx, rs.c, resource, p, "data_source_rule_id", id)
	if err != nil {
		return nil, err
	}
	if r.RuleType == core.Managed {
		return nil, errs.New(managedCode, "A MANAGED rule cannot be changed; it follows the data source's plugin. (data_source_rule_id = %s)", r.DataSourceRuleID)
	}
	if r.IsDefault && !tenancy.DomainWide(p) {
		return nil, errs.Forbidden()
	}
	if _, err := core.ChangeDataSource(ctx, rs.db, p, r.DataSourceID); err != nil {
		return nil, err
	}
	return r, nil
}

func (rs *Rules) create(ctx context.Context, p *auth.Principal, r *createRule) (*Rule, error) {
	// A rule changes its data source's costs: the caller must be one who
	// may change the data source (a DOMAIN one: a domain admin).
	ds, err := core.ChangeDataSource(ctx, rs.db, p, r.DataSourceID)
	if err != nil {
		return nil, err
	}
	ws, err := core.Placement(p, r.ResourceGroup, r.WorkspaceID)
	if err != nil {
		return nil, err
	}
	if ds.WorkspaceID != core.Global && ws != ds.WorkspaceID {
		return nil, errs.Invalid("workspace_id", "a rule of a WORKSPACE data source belongs to the data source's workspace")
	}
	conds := r.Conditions
	if r.ConditionsPolicy == "ALWAYS" || conds == nil {
		conds = []core.Condition{}
	}
	opts := core.RuleOptions{}
	if r.Options != nil {
		opts = *r.Options
	}
	id := wire.NewID("rule")
	doc := &Rule{ID: id, DataSourceRuleID: id, Name: r.Name, RuleType: core.Custom, Conditions: conds,
		ConditionsPolicy: r.ConditionsPolicy, Actions: *r.Actions, Options: opts, Tags: wire.Object(r.Tags),
		IsDefault: r.ResourceGroup == core.Domain, ResourceGroup: r.ResourceGroup, WorkspaceID: ws,
		DomainID: ds.DomainID, DataSourceID: ds.DataSourceID, CreatedAt: wire.T(wire.Now())}
	// Listed first, so a rule never exists outside the list; an id
	// listed without its rule (the insert failed) takes no number.
	if _, err := rs.listChange(ctx, ds.DataSourceID, bson.D{{Key: "$push", Value: bson.D{{Key: orderField(core.Custom), Value: id}}}}); err != nil {
		return nil, err
	}
	if _, err := rs.c.InsertOne(ctx, doc); err != nil {
		_, _ = rs.listChange(context.WithoutCancel(ctx), ds.DataSourceID, bson.D{{Key: "$pull", Value: bson.D{{Key: orderField(core.Custom), Value: id}}}})
		return nil, store.Wrap(err)
	}
	if _, err := rs.listChange(ctx, ds.DataSourceID, nil); err != nil {
		return nil, err
	}
	return rs.settledOne(ctx, ds.DataSourceID, core.Custom, id)
}

// settledOne settles the rules of a type and returns rule id as settled
// (404 when a concurrent delete took it).
func (rs *Rules) settledOne(ctx context.Context, dataSourceID, ruleType, id string) (*Rule, error) {
	rules, err := rs.settle(ctx, dataSourceID, ruleType)
	if err != nil {
		return nil, err
	}
	at := slices.IndexFunc(rules, func(r Rule) bool { return r.ID == id })
	if at < 0 {
		return nil, errs.NotFound("data_source_rule_id", id)
	}
	return &rules[at], nil
}

func (rs *Rules) update(ctx context.Context, p *auth.Principal, r *updateRule) (*Rule, error) {
	doc, err := rs.writable(ctx, p, r.DataSourceRuleID, NotAllowedToChangeManaged)
	if err != nil {
		return nil, err
	}
	policy, conds := doc.ConditionsPolicy, doc.Conditions
	if r.ConditionsPolicy != "" {
		policy = r.ConditionsPolicy
	}
	if r.Conditions != nil {
		conds = *r.Conditions
		for _, c := range conds {
			if c.Key == "" || c.Operator == "" || !slices.Contains([]string{"eq", "contain", "not", "not_contain"}, c.Operator) {
				return nil, errs.Invalid("conditions", "each condition needs key, value and operator (eq, contain, not, not_contain)")
			}
		}
	}
	if policy == "ALWAYS" || conds == nil {
		conds = []core.Condition{}
	}
	if err := checkConditions(policy, conds); err != nil {
		return nil, err
	}
	set := bson.D{{Key: "conditions_policy", Value: policy}, {Key: "conditions", Value: conds}}
	if r.Actions != nil {
		if err := checkActions(r.Actions); err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "actions", Value: *r.Actions})
	}
	if r.Name != nil {
		if len([]rune(*r.Name)) > 255 {
			return nil, errs.Invalid("name", "longer than 255 characters")
		}
		set = append(set, bson.E{Key: "name", Value: strings.TrimSpace(*r.Name)})
	}
	if r.Options != nil {
		set = append(set, bson.E{Key: "options", Value: *r.Options})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	return store.SetByID[Rule](ctx, rs.c, "data_source_rule_id", doc.ID, set)
}

// changeOrder moves the rule to position order among its data source's
// rules of its type (one compare-and-set of the list) and renumbers them
// 1..n.
func (rs *Rules) changeOrder(ctx context.Context, p *auth.Principal, r *changeOrder) (*Rule, error) {
	doc, err := rs.writable(ctx, p, r.DataSourceRuleID, NotAllowedToChangeOrder)
	if err != nil {
		return nil, err
	}
	if err := rs.moveInList(ctx, doc.DataSourceID, doc.RuleType, doc.ID, *r.Order); err != nil {
		return nil, err
	}
	return rs.settledOne(ctx, doc.DataSourceID, doc.RuleType, doc.ID)
}

func (rs *Rules) delete(ctx context.Context, p *auth.Principal, r *ruleRequest) (*api.Empty, error) {
	doc, err := rs.writable(ctx, p, r.DataSourceRuleID, NotAllowedToChangeManaged)
	if err != nil {
		return nil, err
	}
	// The rule goes first, then its id from the list: a listed id
	// without a rule takes no number, a rule outside the list would.
	res, err := rs.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: doc.ID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("data_source_rule_id", doc.ID)
	}
	_, err = rs.listChange(ctx, doc.DataSourceID, bson.D{{Key: "$pull", Value: bson.D{{Key: orderField(doc.RuleType), Value: doc.ID}}}})
	if err != nil && !errs.Is(err, errs.NotFoundCode) {
		return nil, err
	}
	if err == nil {
		if _, err := rs.settle(ctx, doc.DataSourceID, doc.RuleType); err != nil && !errs.Is(err, errs.NotFoundCode) {
			return nil, err
		}
	}
	return &api.Empty{}, nil
}

// Reads of rules leave out, for a workspace caller, the values of the
// cost keys the rule's data source denies (core.RedactRule).
func (rs *Rules) get(ctx context.Context, p *auth.Principal, r *ruleRequest) (*Rule, error) {
	doc, err := rs.load(ctx, p, r.DataSourceRuleID)
	if err != nil {
		return nil, err
	}
	d, err := core.DeniedFor(ctx, rs.db, p)
	if err != nil {
		return nil, err
	}
	core.RedactRule(doc, d.Of(doc.DataSourceID))
	return doc, nil
}

func (rs *Rules) list(ctx context.Context, p *auth.Principal, r *ruleQuery) (*api.List[Rule], error) {
	d, err := core.DeniedFor(ctx, rs.db, p)
	if err != nil {
		return nil, err
	}
	if err := r.Query.Paths(d.Refuse(core.RuleValuePaths...)); err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("data_source_rule_id", r.DataSourceRuleID, "name", r.Name, "rule_type", r.RuleType,
		"workspace_id", r.WorkspaceID, "data_source_id", r.DataSourceID)...)
	l, err := store.SearchFor[Rule](ctx, rs.c, q, resource, p)
	if err != nil || d == nil {
		return l, err
	}
	for i := range l.Results {
		core.RedactRule(&l.Results[i], d.Of(l.Results[i].DataSourceID))
	}
	return l, nil
}

func (rs *Rules) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	d, err := core.DeniedFor(ctx, rs.db, p)
	if err != nil {
		return nil, err
	}
	if _, err := r.Query.Paths(d.Refuse(core.RuleValuePaths...)); err != nil {
		return nil, err
	}
	res := resource
	if d.Hides() {
		// Rows a stat builds leave conditions and actions out whole.
		res.Secret = core.RuleValuePaths
	}
	out, err := stat.RunFor(ctx, rs.c, p, res, r.Query)
	return &out, err
}

// ManagedSpec is one entry of a plugin's metadata data_source_rules.
type ManagedSpec struct {
	Name             string
	Conditions       []core.Condition
	ConditionsPolicy string
	Actions          core.Actions
	Options          core.RuleOptions
	Tags             freeform.Flat
}

// ReplaceManaged makes specs the data source's MANAGED rules, numbered
// 1..n in their order: the new list is written first (one atomic write),
// then the rules, and the settle deletes the MANAGED rules the list no
// longer names. Of two replaces at once the later list wins, and the
// loser's rules go at whichever settle comes last.
func (rs *Rules) ReplaceManaged(ctx context.Context, ds *core.DataSource, specs []ManagedSpec) error {
	now := wire.T(wire.Now())
	rules := make([]Rule, 0, len(specs))
	ids := make([]string, 0, len(specs))
	for i, s := range specs {
		id := wire.NewID("rule")
		conds := s.Conditions
		if conds == nil || s.ConditionsPolicy == "ALWAYS" {
			conds = []core.Condition{}
		}
		rules = append(rules, Rule{ID: id, DataSourceRuleID: id, Name: s.Name, RuleType: core.Managed, Order: i + 1, Conditions: conds,
			ConditionsPolicy: s.ConditionsPolicy, Actions: s.Actions, Options: s.Options, Tags: wire.Object(s.Tags),
			IsDefault: ds.WorkspaceID == core.Global, ResourceGroup: ds.ResourceGroup, WorkspaceID: ds.WorkspaceID,
			DomainID: ds.DomainID, DataSourceID: ds.DataSourceID, CreatedAt: now})
		ids = append(ids, id)
	}
	v, err := rs.listChange(ctx, ds.DataSourceID, bson.D{{Key: "$set", Value: bson.D{{Key: orderField(core.Managed), Value: ids}}}})
	if err != nil {
		return err
	}
	if len(rules) > 0 {
		docs := make([]any, len(rules))
		for i := range rules {
			rules[i].OrderVersion = v // of this list: a settle of an older one leaves it
			docs[i] = rules[i]
		}
		if _, err := rs.c.InsertMany(ctx, docs); err != nil {
			return store.Wrap(err)
		}
	}
	if _, err := rs.listChange(ctx, ds.DataSourceID, nil); err != nil {
		return err
	}
	_, err = rs.settle(ctx, ds.DataSourceID, core.Managed)
	return err
}

// DeleteAll deletes every rule of a data source (its deregister, after
// the mark that stops every list change).
func (rs *Rules) DeleteAll(ctx context.Context, dataSourceID string) error {
	return store.DeleteChildren(ctx, rs.c, bson.D{{Key: "data_source_id", Value: dataSourceID}})
}

// Of returns the rules of a data source (for the engine), each type in
// its list's order.
func (rs *Rules) Of(ctx context.Context, dataSourceID string) ([]Rule, error) {
	var out []Rule
	for _, typ := range []string{core.Managed, core.Custom} {
		rules, _, _, err := rs.ordered(ctx, dataSourceID, typ)
		if err != nil {
			return nil, err
		}
		out = append(out, rules...)
	}
	return out, nil
}
