package plugin

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/repository/internal/repository"
)

var jsonMarshal = json.Marshal

// source is one repository's part of a list: the rows of a page window
// and the repository's total.
type source func(ctx context.Context, page *query.Page, countOnly bool) ([]Plugin, int64, error)

// list answers one repository's plugins, or, with repository_id empty,
// every repository's in order (local first), paged over the whole
// sequence. In that case a remote that cannot be reached is left out and
// logged: the other repositories still answer.
func (ps *plugins) list(ctx context.Context, p *auth.Principal, r *pluginQuery) (*api.List[Plugin], error) {
	// Compiling here checks the query once, whichever repository answers,
	// and gives the fields to keep (only, minimal).
	plan, err := query.Compile(cloneQuery(r.Query), pluginResource, nil)
	if err != nil {
		return nil, err
	}
	params := query.Params("plugin_id", r.PluginID, "name", r.Name, "state", r.State, "resource_type", r.ResourceType,
		"provider", r.Provider, "registry_type", r.RegistryType, "domain_id", r.DomainID)
	local := ps.localSource(p, r.Query, params)
	if r.RepositoryID != "" {
		rm, err := ps.repos.Resolve(ctx, r.RepositoryID)
		if err != nil {
			return nil, err
		}
		src := local
		if rm != nil {
			src = ps.remoteSource(rm, r)
		}
		rows, total, err := src(ctx, pageOf(r.Query), countOnly(r.Query))
		if err != nil {
			return nil, err
		}
		return &api.List[Plugin]{Results: rows, TotalCount: total, Fields: plan.Fields}, nil
	}

	sources := []source{local}
	names := []string{repository.Local}
	for _, rm := range ps.repos.Remotes() {
		sources = append(sources, ps.remoteSource(rm, r))
		names = append(names, rm.Name)
	}
	// The window of the whole sequence: skip rows, then take at most limit.
	skip, limit := int64(0), int64(query.MaxPageSize())
	if pg := pageOf(r.Query); pg != nil {
		skip = int64(max(pg.Start, 1) - 1)
		if pg.Limit > 0 && pg.Limit < query.MaxPageSize() {
			limit = int64(pg.Limit)
		}
	}
	onlyCount := countOnly(r.Query)
	out := &api.List[Plugin]{Results: []Plugin{}, Fields: plan.Fields}
	var seen int64 // rows of the repositories before this one
	for i, src := range sources {
		want := limit - int64(len(out.Results))
		// Once the window is full, only the totals are still needed.
		page := &query.Page{Start: int(max(skip-seen, 0)) + 1, Limit: int(max(want, 1))}
		rows, total, err := src(ctx, page, onlyCount || want <= 0)
		if err != nil {
			if i > 0 && errs.Is(err, errs.Unavailable) {
				ps.repos.Log().Warn("remote repository left out of plugin/list", "remote", names[i], "error", err)
				continue
			}
			return nil, err
		}
		if want > 0 && !onlyCount {
			out.Results = append(out.Results, rows[:min(int64(len(rows)), want)]...)
		}
		seen += total
		out.TotalCount += total
	}
	return out, nil
}

// localSource lists the local repository's plugins the caller may see.
func (ps *plugins) localSource(p *auth.Principal, q *query.Query, params []query.Condition) source {
	return func(ctx context.Context, page *query.Page, countOnly bool) ([]Plugin, int64, error) {
		scope, err := store.Scope(p, pluginResource)
		if err != nil {
			return nil, 0, err
		}
		lq := query.With(cloneQuery(q), params...)
		lq.Page, lq.CountOnly = page, countOnly
		res, err := store.Search[Plugin](ctx, ps.c, lq, pluginResource, scope)
		if err != nil {
			return nil, 0, err
		}
		return res.Results, res.TotalCount, nil
	}
}

// remoteSource lists one remote repository's own plugins.
func (ps *plugins) remoteSource(rm *repository.RemoteRepo, r *pluginQuery) source {
	return func(ctx context.Context, page *query.Page, countOnly bool) ([]Plugin, int64, error) {
		info, err := rm.Info(ctx)
		if err != nil {
			return nil, 0, err
		}
		req := map[string]any{"repository_id": info.RepositoryID, "query": queryJSON(r.Query, page, countOnly)}
		for k, v := range map[string]string{"plugin_id": r.PluginID, "name": r.Name, "state": r.State,
			"resource_type": r.ResourceType, "provider": r.Provider, "registry_type": r.RegistryType} {
			if v != "" {
				req[k] = v
			}
		}
		var resp struct {
			Results    []Plugin `json:"results"`
			TotalCount int64    `json:"total_count"`
		}
		if err := rm.Call(ctx, "/repository/v1/plugin/list", req, &resp); err != nil {
			return nil, 0, err
		}
		for i := range resp.Results {
			resp.Results[i].RepositoryInfo = info
		}
		return resp.Results, resp.TotalCount, nil
	}
}

func pageOf(q *query.Query) *query.Page {
	if q == nil {
		return nil
	}
	return q.Page
}

func countOnly(q *query.Query) bool { return q != nil && q.CountOnly }

// cloneQuery copies q so that adding conditions or a page leaves the
// caller's query as it came.
func cloneQuery(q *query.Query) *query.Query {
	if q == nil {
		return &query.Query{}
	}
	c := *q
	c.Filter = slices.Clone(q.Filter)
	c.FilterOr = slices.Clone(q.FilterOr)
	c.Sort = slices.Clone(q.Sort)
	c.Only = slices.Clone(q.Only)
	return &c
}

// queryJSON writes a query back in its wire form, with a page window.
func queryJSON(q *query.Query, page *query.Page, countOnly bool) map[string]any {
	m := map[string]any{}
	conds := func(cs []query.Condition) []any {
		out := make([]any, len(cs))
		for i, c := range cs {
			out[i] = map[string]any{"k": c.Key, "v": c.Value, "o": c.Operator}
		}
		return out
	}
	if q != nil {
		if len(q.Filter) > 0 {
			m["filter"] = conds(q.Filter)
		}
		if len(q.FilterOr) > 0 {
			m["filter_or"] = conds(q.FilterOr)
		}
		if len(q.Sort) > 0 {
			m["sort"] = []query.SortKey(q.Sort)
		}
		if len(q.Only) > 0 {
			m["only"] = q.Only
		}
		if q.Keyword != "" {
			m["keyword"] = q.Keyword
		}
		if q.Minimal {
			m["minimal"] = true
		}
	}
	if page != nil {
		m["page"] = page
	}
	if countOnly {
		m["count_only"] = true
	}
	return m
}
