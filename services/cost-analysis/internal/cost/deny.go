package cost

import (
	"context"
	"strings"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// source is the data source a cost read is about, as upstream requires it
// (data_source_id at the top level, or an eq condition on it in the
// query's filter, which upstream's stat also reads), and the cost keys
// the caller may not read there: the data source's permissions.deny for a
// workspace caller, none for a domain admin (or SYSTEM). A data source the
// caller does not see has no costs it sees either (its scope keeps them
// out), so it answers as one with no costs, not 404: lists stay empty for
// outsiders whatever they name.
func (cs *Costs) source(ctx context.Context, p *auth.Principal, top string, filter []query.Condition) (string, []string, error) {
	id := top
	for _, c := range filter {
		if id != "" {
			break
		}
		if v, ok := c.Value.(string); ok && c.Key == "data_source_id" && c.Operator == "eq" {
			id = v
		}
	}
	if id == "" {
		return "", nil, errs.Required("data_source_id")
	}
	deny, err := cs.denied(ctx, p, id)
	return id, deny, err
}

// denied is the deny list of data source id for p (none for a domain-wide
// caller or a data source p does not see).
func (cs *Costs) denied(ctx context.Context, p *auth.Principal, id string) ([]string, error) {
	if tenancy.DomainWide(p) {
		return nil, nil
	}
	ds, err := core.LoadDataSource(ctx, cs.db, p, id)
	if errs.Is(err, errs.NotFoundCode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ds.Permissions.Deny, nil
}

// refuse answers 403 to a query that reads a denied key, one under it or
// one above it (a filter, sort, group or push on `data` reads every data
// key): upstream refuses analyze fields on denied keys with
// ERROR_PERMISSION_DENIED; Nubes refuses every slot, so no filter or group
// is an oracle for a hidden value.
func refuse(deny []string) func(at string, p *string) error {
	return func(at string, p *string) error {
		if query.IsSecret(deny, *p) {
			return errs.New(errs.PermissionDenied, "%s: the data source's permissions deny %q to workspace callers.", at, *p)
		}
		return nil
	}
}

// denying is the cost resource with the denied keys as its secret paths:
// a stat whose stages build no rows then leaves out the whole field
// holding one (data, tags, additional_info), and the kit refuses what
// refuse might have missed.
func denying(deny []string) query.Resource {
	r := resource
	if len(deny) > 0 {
		r.Secret = append(append([]string{}, resource.Secret...), deny...)
	}
	return r
}

// leaveOut removes the denied keys from a cost row.
func leaveOut(c *Cost, deny []string) {
	for _, d := range deny {
		family, key, keyed := strings.Cut(d, ".")
		switch family {
		case "data":
			if !keyed {
				c.Data = core.Object{}
				continue
			}
			deletePath(c.Data, key)
		case "tags":
			if !keyed {
				c.Tags = freeform.Flat{}
			}
			delete(c.Tags, key) // tags are flat: the rest is one key
		case "additional_info":
			if !keyed {
				c.AdditionalInfo = freeform.Flat{}
			}
			delete(c.AdditionalInfo, key)
		}
	}
}

// deletePath removes key from a free-form map: the key itself when the
// map has it, else the dotted path into nested objects (data.a.b).
func deletePath(m map[string]any, key string) {
	if _, ok := m[key]; ok {
		delete(m, key)
		return
	}
	head, rest, nested := strings.Cut(key, ".")
	if !nested {
		return
	}
	if child, ok := m[head].(map[string]any); ok {
		deletePath(child, rest)
	}
}
