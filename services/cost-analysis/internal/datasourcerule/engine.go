package datasourcerule

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// Project is what the engine knows of a project of the domain (from
// identity, read when the job starts).
type Project struct {
	ProjectID   string `json:"project_id"`
	Name        string `json:"name"`
	WorkspaceID string `json:"workspace_id"`
	DomainID    string `json:"domain_id"`
}

// ServiceAccount is what the engine knows of a service account: one of
// identity's trusted service accounts (read when the job starts). It has
// no project; a domain-wide one has workspace "*".
type ServiceAccount struct {
	ServiceAccountID string      `bson:"service_account_id" json:"service_account_id"`
	Name             string      `bson:"name" json:"name"`
	WorkspaceID      string      `bson:"workspace_id" json:"workspace_id"`
	Data             core.Object `bson:"data" json:"data"`
}

// Directory is the projects and service accounts match actions look up.
type Directory struct {
	Projects        []Project
	ServiceAccounts []ServiceAccount
}

// Engine applies a data source's rules, in order, to cost rows. Rows are
// the plugin's CostInfo maps; the engine sets project_id,
// service_account_id, workspace_id and additional_info on them.
type Engine struct {
	rules []core.Rule
	dir   Directory
	// workspace is the data source's workspace ("*" for a DOMAIN one):
	// a match outside it counts only with all_workspaces.
	workspace string
}

// NewEngine orders rules as they apply: MANAGED ones first, then CUSTOM,
// each by order.
func NewEngine(rules []core.Rule, dir Directory, workspaceID string) *Engine {
	rs := slices.Clone(rules)
	rank := func(t string) int {
		if t == core.Managed {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(rs, func(a, b core.Rule) int {
		if d := rank(a.RuleType) - rank(b.RuleType); d != 0 {
			return d
		}
		return a.Order - b.Order
	})
	return &Engine{rules: rs, dir: dir, workspace: workspaceID}
}

// Apply runs the rules on row and returns the ids of the rules that
// matched, in order.
func (e *Engine) Apply(row map[string]any) []string { return e.apply(row, true) }

// Run runs the rules on row, as Apply, without listing the rules that
// matched: a sync runs every rule on every row, and the list is not kept.
func (e *Engine) Run(row map[string]any) { e.apply(row, false) }

func (e *Engine) apply(row map[string]any, list bool) []string {
	var matched []string
	ownInfo := false // row's additional_info is a copy of this Apply's
	for i := range e.rules {
		r := &e.rules[i]
		if !Matches(r.ConditionsPolicy, r.Conditions, row) {
			continue
		}
		if list {
			matched = append(matched, r.DataSourceRuleID)
		}
		e.act(r.Actions, row, &ownInfo)
		if r.Options.StopProcessing {
			break
		}
	}
	return matched
}

// Matches reports whether row meets conditions under policy: ALWAYS
// matches, ALL needs every condition, ANY one of them.
func Matches(policy string, conditions []core.Condition, row map[string]any) bool {
	switch policy {
	case "ALWAYS":
		return true
	case "ALL":
		for _, c := range conditions {
			if !holds(c, row) {
				return false
			}
		}
		return true
	case "ANY":
		return slices.ContainsFunc(conditions, func(c core.Condition) bool { return holds(c, row) })
	}
	return false
}

// holds checks one condition. A key the row lacks equals nothing and
// contains nothing.
func holds(c core.Condition, row map[string]any) bool {
	v, ok := Lookup(row, c.Key)
	s := ""
	if ok {
		s = text(v)
	}
	switch c.Operator {
	case "eq":
		return ok && s == c.Value
	case "contain":
		return ok && strings.Contains(s, c.Value)
	case "not":
		return !ok || s != c.Value
	case "not_contain":
		return !ok || !strings.Contains(s, c.Value)
	}
	return false
}

// Lookup reads a dotted path (tags.env, additional_info.Account) of row.
// After tags. or additional_info. the rest is first tried as one key,
// as a query reads them (pkg/freeform Flat), so a condition on
// tags.kubernetes.io/cluster/prod finds that tag.
func Lookup(row map[string]any, path string) (any, bool) {
	if !strings.Contains(path, ".") { // a top-level field: most conditions
		v := row[path]
		return v, v != nil
	}
	for _, field := range []string{"tags", "additional_info"} {
		if key, ok := strings.CutPrefix(path, field+"."); ok {
			if m, _ := row[field].(map[string]any); m != nil && m[key] != nil {
				return m[key], true
			}
		}
	}
	var cur any = row
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok || cur == nil {
			return nil, false
		}
	}
	return cur, true
}

// text renders a value as a condition compares it (whole floats as ints).
func text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		if x == float64(int64(x)) {
			return fmt.Sprintf("%d", int64(x))
		}
	}
	return fmt.Sprint(v)
}

// act applies one rule's actions to row. additional_info is copied
// before its first change in an Apply (the caller's map stays as it
// was), and changed in place after: a row many rules add to is copied
// once, not once per rule.
func (e *Engine) act(a core.Actions, row map[string]any, ownInfo *bool) {
	if a.ChangeProject != "" {
		row["project_id"] = a.ChangeProject
		if p, ok := e.project("project_id", a.ChangeProject, true); ok {
			row["workspace_id"] = p.WorkspaceID
		}
	}
	if m := a.MatchProject; m != nil {
		if v, ok := Lookup(row, m.Source); ok {
			if p, ok := e.project(m.Target, text(v), m.AllWorkspaces); ok {
				row["project_id"], row["workspace_id"] = p.ProjectID, p.WorkspaceID
			}
		}
	}
	if m := a.MatchServiceAccount; m != nil {
		if v, ok := Lookup(row, m.Source); ok {
			if sa, ok := e.serviceAccount(m.Target, text(v), m.AllWorkspaces); ok {
				// A trusted service account has no project: the row keeps
				// its own. Its workspace counts for a domain data source
				// only (a workspace one keeps its costs in its workspace).
				row["service_account_id"] = sa.ServiceAccountID
				if sa.WorkspaceID != "" && sa.WorkspaceID != core.Global && e.domainWide() {
					row["workspace_id"] = sa.WorkspaceID
				}
			}
		}
	}
	if len(a.AddAdditionalInfo) > 0 {
		info, _ := row["additional_info"].(map[string]any)
		if !*ownInfo {
			info = maps.Clone(info)
			if info == nil {
				info = make(map[string]any, len(a.AddAdditionalInfo))
			}
			*ownInfo = true
		}
		maps.Copy(info, a.AddAdditionalInfo)
		row["additional_info"] = info
	}
}

// domainWide reports whether the engine runs for a DOMAIN data source.
func (e *Engine) domainWide() bool { return e.workspace == "" || e.workspace == core.Global }

// inScope reports whether a project or service account of workspaceID may
// match: any for a domain data source or with all_workspaces; else one of
// the data source's workspace or a domain-wide one.
func (e *Engine) inScope(workspaceID string, all bool) bool {
	return all || e.domainWide() || workspaceID == e.workspace || workspaceID == core.Global
}

// project finds the project whose field (project_id or name) is value.
func (e *Engine) project(field, value string, all bool) (Project, bool) {
	for _, p := range e.dir.Projects {
		var v string
		switch field {
		case "project_id":
			v = p.ProjectID
		case "name":
			v = p.Name
		default:
			return Project{}, false
		}
		if v == value && e.inScope(p.WorkspaceID, all) {
			return p, true
		}
	}
	return Project{}, false
}

// serviceAccount finds the service account whose field (service_account_id,
// name, or data.<key>, a dotted path into its data) is value.
func (e *Engine) serviceAccount(field, value string, all bool) (ServiceAccount, bool) {
	for _, sa := range e.dir.ServiceAccounts {
		var v string
		switch {
		case field == "service_account_id":
			v = sa.ServiceAccountID
		case field == "name":
			v = sa.Name
		case strings.HasPrefix(field, "data."):
			x, ok := Lookup(sa.Data, strings.TrimPrefix(field, "data."))
			if !ok {
				continue
			}
			v = text(x)
		default:
			return ServiceAccount{}, false
		}
		if v == value && e.inScope(sa.WorkspaceID, all) {
			return sa, true
		}
	}
	return ServiceAccount{}, false
}
