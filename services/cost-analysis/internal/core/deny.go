package core

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

// A data source's permissions.deny binds every read a workspace caller
// makes, not only cost rows: a rule's conditions compare a cost key with
// a value and its add_additional_info writes one, and the plugin's
// metadata keeps the MANAGED rules the same way. Denied below is the one
// rule those reads apply (docs/decisions.md "Issue 38: ... denied keys").

// RuleValuePaths are the fields of a rule that hold a cost key's value.
var RuleValuePaths = []string{"conditions", "actions.add_additional_info"}

// MetadataRulesPath is where a data source keeps its plugin's rules.
const MetadataRulesPath = "plugin_info.metadata.data_source_rules"

// everything is the deny of a data source the caller does not see: no
// value of any key family.
var everything = slices.Clone(DenyFamilies)

// Denied are the deny lists a workspace caller is held to, by data source
// id; nil for a domain-wide caller (a domain admin or SYSTEM reads all).
type Denied struct {
	by  map[string][]string
	any bool // a deny that hides values of rules (tags or additional_info)
}

// DeniedFor reads the deny lists of the data sources p sees.
func DeniedFor(ctx context.Context, db *mongo.Database, p *auth.Principal) (*Denied, error) {
	if tenancy.DomainWide(p) {
		return nil, nil
	}
	scope, err := store.Scope(p, DataSourceResource)
	if err != nil {
		return nil, err
	}
	cur, err := db.Collection(DataSourcesCollection).Find(ctx, scope)
	if err != nil {
		return nil, store.Wrap(err)
	}
	var rows []struct {
		ID          string      `bson:"_id"`
		Permissions Permissions `bson:"permissions"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, store.Wrap(err)
	}
	d := &Denied{by: map[string][]string{}}
	for _, r := range rows {
		d.by[r.ID] = r.Permissions.Deny
		d.any = d.any || hidesRuleValues(r.Permissions.Deny)
	}
	return d, nil
}

// Of is the deny list of a data source: every family for one the caller
// does not see (a rule of it stays readable, its values do not).
func (d *Denied) Of(dataSourceID string) []string {
	if d == nil {
		return nil
	}
	deny, ok := d.by[dataSourceID]
	if !ok {
		return everything
	}
	return deny
}

// Refuse is the path check of a query over rules or data sources: while
// any data source the caller sees denies a key a rule may name, a filter,
// sort, group or distinct on paths (or above or below them) is 403, so
// no count or order answers for a hidden value. only is let through:
// what it returns is left out as every row is (RedactRule).
func (d *Denied) Refuse(paths ...string) func(at string, p *string) error {
	return func(at string, p *string) error {
		if d == nil || !d.any || at == "query.only" || !query.IsSecret(paths, *p) {
			return nil
		}
		return errs.New(errs.PermissionDenied, "%s: a data source's permissions deny cost keys %q may hold to workspace callers.", at, *p)
	}
}

// Hides reports whether some data source denies a key a rule may name:
// a stat then leaves the value paths out whole (query.Resource.Secret).
func (d *Denied) Hides() bool { return d != nil && d.any }

func hidesRuleValues(deny []string) bool {
	for _, k := range deny {
		if f, _, _ := strings.Cut(k, "."); f == "tags" || f == "additional_info" {
			return true
		}
	}
	return false
}

// RedactRule leaves out of a rule what deny hides: the conditions on a
// denied key (their value is the key's) and the denied keys of
// add_additional_info. Source and target of a match name keys, not
// values, and stay.
func RedactRule(r *Rule, deny []string) {
	if len(deny) == 0 {
		return
	}
	r.Conditions = slices.DeleteFunc(slices.Clone(r.Conditions), func(c Condition) bool { return query.IsSecret(deny, c.Key) })
	if len(r.Actions.AddAdditionalInfo) > 0 {
		add := maps.Clone(r.Actions.AddAdditionalInfo)
		for k := range add {
			if query.IsSecret(deny, "additional_info."+k) {
				delete(add, k)
			}
		}
		r.Actions.AddAdditionalInfo = add
	}
}

// RedactMetadata does RedactRule to the rules a plugin's metadata gives
// (data_source_rules), as free-form maps.
func RedactMetadata(md map[string]any, deny []string) {
	if len(deny) == 0 || md == nil {
		return
	}
	raw, there := md["data_source_rules"]
	if !there {
		return
	}
	// Through JSON: metadata read back from the store holds bson.A and
	// bson.D, not []any and maps.
	var specs []any
	if b, err := json.Marshal(raw); err != nil || json.Unmarshal(b, &specs) != nil {
		if hidesRuleValues(deny) {
			delete(md, "data_source_rules") // not a list: nothing tells a value from a key
		}
		return
	}
	out := make([]any, 0, len(specs))
	for _, s := range specs {
		spec, ok := s.(map[string]any)
		if !ok {
			continue
		}
		spec = maps.Clone(spec)
		if conds, ok := spec["conditions"].([]any); ok {
			kept := []any{}
			for _, c := range conds {
				cm, _ := c.(map[string]any)
				key, _ := cm["key"].(string)
				if cm == nil || !query.IsSecret(deny, key) {
					kept = append(kept, c)
				}
			}
			spec["conditions"] = kept
		}
		if acts, ok := spec["actions"].(map[string]any); ok {
			acts = maps.Clone(acts)
			if add, ok := acts["add_additional_info"].(map[string]any); ok {
				add = maps.Clone(add)
				for k := range add {
					if query.IsSecret(deny, "additional_info."+k) {
						delete(add, k)
					}
				}
				acts["add_additional_info"] = add
			} else if _, there := acts["add_additional_info"]; there && hidesRuleValues(deny) {
				delete(acts, "add_additional_info")
			}
			spec["actions"] = acts
		}
		out = append(out, spec)
	}
	md["data_source_rules"] = out
}
