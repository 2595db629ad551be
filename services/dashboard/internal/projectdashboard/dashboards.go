package projectdashboard

import (
	"context"
	"maps"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

// checkDomain: domain_id is required by the spec but the tenant comes
// from the token; another domain's id is 404, as for its records.
func checkDomain(p *auth.Principal, domainID string) error {
	if domainID != p.DomainID {
		return errs.NotFound("domain_id", domainID)
	}
	return nil
}

// visible loads a dashboard the caller may use: one it does not reach
// (pkg/tenancy: another domain, another workspace, for a member a project
// not in its token) is 404; a PRIVATE one of another user is 403.
func (s *service) visible(ctx context.Context, p *auth.Principal, id string) (*Dashboard, error) {
	d, err := store.GetFor[Dashboard](ctx, s.dashboards, dashboardResource, p, "project_dashboard_id", id)
	if err != nil {
		return nil, err
	}
	if err := private(p, d); err != nil {
		return nil, err
	}
	return d, nil
}

// private refuses (403) another user's private dashboard.
func private(p *auth.Principal, d *Dashboard) error {
	if d.Viewers == Private && d.UserID != p.UserID {
		return errs.New(errs.PermissionDenied, "Permission denied. (reason = the dashboard is private to its owner)")
	}
	return nil
}

// scope confines a list or stat to what the caller may see: what it
// reaches (pkg/tenancy), public dashboards and its own private ones.
func scope(p *auth.Principal) (bson.D, error) {
	sc, err := store.Scope(p, dashboardResource)
	if err != nil {
		return nil, err
	}
	return append(sc, bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: "viewers", Value: Public}},
		bson.D{{Key: "viewers", Value: Private}, {Key: "user_id", Value: p.UserID}},
	}}), nil
}

// notUnique turns the unique index's conflict into the upstream code.
func notUnique(err error, name string) error {
	if errs.Is(err, errs.SaveUniqueValues) {
		return errs.New(errs.NotUnique, "A dashboard with this name exists in the project. (name = %s)", name)
	}
	return err
}

func (s *service) create(ctx context.Context, p *auth.Principal, r *createReq) (*Dashboard, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	pr, err := s.projects.get(ctx, p, r.ProjectID)
	if err != nil {
		return nil, err
	}
	owner := ""
	if r.Viewers == Private {
		owner = p.UserID
	}
	id, now := wire.NewID("project-dash"), wire.T(wire.Now())
	d := &Dashboard{
		ID: id, ProjectDashboardID: id, ProjectID: r.ProjectID, Name: r.Name, Viewers: r.Viewers, Version: 1,
		Layouts: wire.List(r.Layouts), Variables: wire.Object(r.Variables), Settings: wire.Object(r.Settings),
		VariablesSchema: wire.Object(r.VariablesSchema), Labels: wire.List(r.Labels), Tags: wire.Object(r.Tags),
		UserID: owner, DomainID: p.DomainID, WorkspaceID: pr.WorkspaceID, CreatedAt: now, UpdatedAt: now,
	}
	// identity answered the project on the caller's behalf; the kit's
	// rule still decides whether the caller may place a dashboard there.
	rule, err := tenancy.For(p, dashboardResource.Tenancy)
	if err != nil {
		return nil, err
	}
	if err := rule.Admits(tenancy.Record{Domain: d.DomainID, Workspace: d.WorkspaceID, Project: d.ProjectID}); err != nil {
		return nil, err
	}
	if _, err := s.dashboards.InsertOne(ctx, d); err != nil {
		return nil, notUnique(store.Wrap(err), r.Name)
	}
	// Upstream snapshots version 1 only when the create carried content.
	if r.Layouts != nil || r.Variables != nil || r.VariablesSchema != nil {
		if err := s.insertVersion(ctx, snapshot(d, 1)); err != nil {
			s.undoCreate(ctx, id)
			return nil, err
		}
	}
	return d, nil
}

// undoCreate removes a dashboard whose first snapshot could not be stored.
func (s *service) undoCreate(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	if _, err := s.dashboards.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
		s.log.Warn("a dashboard without its first version was left", "project_dashboard_id", id, "error", err.Error())
	}
}

// snapshot is the version record of d's content as version n.
func snapshot(d *Dashboard, n int32) *Version {
	return &Version{
		ID: versionID(d.ID, n), ProjectDashboardID: d.ID, Version: n,
		Layouts: wire.List(d.Layouts), Variables: wire.Object(d.Variables), Settings: wire.Object(d.Settings),
		VariablesSchema: wire.Object(d.VariablesSchema), DomainID: d.DomainID, CreatedAt: wire.T(wire.Now()),
	}
}

// insertVersion stores a snapshot. Its _id names the dashboard and
// the version: one stored already (by a writer that repaired it) is
// the same content, and is kept.
func (s *service) insertVersion(ctx context.Context, v *Version) error {
	_, err := store.InsertOnce(ctx, s.versions, v)
	return err
}

// changed runs fn on the current state of dashboard id, which edits it,
// and writes what fn changed only if nobody wrote the dashboard since it
// was read (store.ChangeBy: a compare-and-set on its rev, which every
// write bumps; its version is the content's number, an API field);
// otherwise fn runs again on what the other left. When the write gave
// the content its next version, the snapshots follow it: the version it
// followed (should a writer have died between its write and its
// snapshot) and the new one. The dashboard is the truth.
func (s *service) changed(ctx context.Context, p *auth.Principal, id string, fn func(d *Dashboard) error) (*Dashboard, error) {
	if _, err := s.visible(ctx, p, id); err != nil {
		return nil, err
	}
	var name string // the name the write asked for, for a 409
	ch, err := store.ChangeBy(ctx, s.dashboards, "rev", "project_dashboard_id", id, func(d *Dashboard) error {
		if err := private(p, d); err != nil {
			return err
		}
		err := fn(d)
		name = d.Name
		return err
	}, bson.E{Key: "updated_at", Value: wire.T(wire.Now())})
	if err != nil {
		return nil, notUnique(err, name)
	}
	if ch.Wrote && ch.After.Version != ch.Before.Version {
		// Version 1 has a snapshot only when the create carried content
		// (upstream); every later one has one.
		if ch.Before.Version > 1 {
			if err := s.insertVersion(ctx, snapshot(ch.Before, ch.Before.Version)); err != nil {
				return nil, err
			}
		}
		if err := s.insertVersion(context.WithoutCancel(ctx), snapshot(ch.After, ch.After.Version)); err != nil {
			// Stored by the next writer to bump it (above).
			s.log.Warn("a version's snapshot was not stored", "project_dashboard_id", ch.After.ID, "version", ch.After.Version, "error", err.Error())
		}
	}
	return ch.After, nil
}

func (s *service) update(ctx context.Context, p *auth.Principal, r *updateReq) (*Dashboard, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	return s.changed(ctx, p, r.ProjectDashboardID, func(d *Dashboard) error {
		if r.Name != "" {
			d.Name = r.Name
		}
		if r.Labels != nil {
			d.Labels = r.Labels
		}
		if r.Tags != nil {
			d.Tags = r.Tags
		}
		if r.Settings != nil { // merged, one level deep, as upstream
			merged := maps.Clone(wire.Object(d.Settings))
			maps.Copy(merged, r.Settings)
			d.Settings = merged
		}
		if !(changedList(r.Layouts, d.Layouts) || changedObject(r.Variables, d.Variables) || changedObject(r.VariablesSchema, d.VariablesSchema)) {
			return nil
		}
		if r.Layouts != nil {
			d.Layouts = r.Layouts
		}
		if r.Variables != nil {
			d.Variables = r.Variables
		}
		if r.VariablesSchema != nil {
			d.VariablesSchema = r.VariablesSchema
		}
		nextVersion(d)
		return nil
	})
}

// nextVersion makes d's content its next version, as its snapshot stores
// it.
func nextVersion(d *Dashboard) {
	d.Version++
	v := snapshot(d, d.Version)
	d.Layouts, d.Variables, d.VariablesSchema, d.Settings = v.Layouts, v.Variables, v.VariablesSchema, v.Settings
}

func (s *service) delete(ctx context.Context, p *auth.Principal, r *dashboardReq) (*api.Empty, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	// Mark first (store.Teardown): from the mark on it is out of every
	// read and change (changed asks for no mark); then its versions go,
	// and the dashboard last. A delete cut short is finished by a retry.
	_, err := store.Teardown[Dashboard]{Records: s.dashboards, Resource: dashboardResource, Key: "project_dashboard_id",
		Check: func(d *Dashboard) error { return private(p, d) },
		Children: func(ctx context.Context, d *Dashboard) error {
			return store.DeleteChildren(ctx, s.versions, bson.D{{Key: "project_dashboard_id", Value: d.ID}})
		},
	}.Delete(ctx, p, r.ProjectDashboardID)
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *service) get(ctx context.Context, p *auth.Principal, r *getReq) (*Dashboard, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	d, err := s.visible(ctx, p, r.ProjectDashboardID)
	if err != nil {
		return nil, err
	}
	d.only = r.Only
	return d, nil
}

func (s *service) list(ctx context.Context, p *auth.Principal, r *dashboardQuery) (*api.List[Dashboard], error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("project_dashboard_id", r.ProjectDashboardID, "project_id", r.ProjectID,
		"name", r.Name, "viewers", r.Viewers, "user_id", r.UserID)...)
	sc, err := scope(p)
	if err != nil {
		return nil, err
	}
	return store.Search[Dashboard](ctx, s.dashboards, q, dashboardResource, sc)
}

func (s *service) stat(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	sc, err := scope(p)
	if err != nil {
		return nil, err
	}
	res, err := stat.Run(ctx, s.dashboards, sc, dashboardResource, r.Query)
	return &res, err
}
