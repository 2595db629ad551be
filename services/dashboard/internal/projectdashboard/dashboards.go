package projectdashboard

import (
	"context"
	"errors"
	"maps"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/lease"
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
	if e, ok := errs.As(err); ok && e.Code == errs.SaveUniqueValues {
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

// insertVersion stores a snapshot. Its _id is taken once only: a
// conflict means another writer holds that version number.
func (s *service) insertVersion(ctx context.Context, v *Version) error {
	if _, err := s.versions.InsertOne(ctx, v); err != nil {
		if isDuplicate(err) {
			return errVersionTaken
		}
		return store.Wrap(err)
	}
	return nil
}

// errVersionTaken: the next version number was taken by a writer that
// outlived its lock. The update is retried on the new state.
var errVersionTaken = errors.New("version number taken")

// writeAttempts bounds the retries after errVersionTaken.
const writeAttempts = 5

// locked runs fn on the current state of dashboard id while holding its
// writer lock: fn sees the dashboard as the last writer left it, rolled
// forward to its newest snapshot (see settle). A version number taken
// meanwhile makes fn run again on the new state.
func (s *service) locked(ctx context.Context, p *auth.Principal, id string, fn func(d *Dashboard) error) error {
	if _, err := s.visible(ctx, p, id); err != nil { // refuse early, without queueing
		return err
	}
	return s.locks.with(ctx, id, func(ctx context.Context) error {
		for range writeAttempts {
			d, err := s.visible(ctx, p, id)
			if err != nil {
				return err
			}
			if d, err = s.settle(ctx, d); err != nil {
				return err
			}
			if err = fn(d); !errors.Is(err, errVersionTaken) {
				return err
			}
		}
		return errs.Down("The dashboard", errors.New("the next version stayed taken"))
	})
}

// settle rolls d forward to its newest snapshot. Under the lock this
// does nothing, but a writer that crashed between storing a snapshot and
// updating the dashboard (or that outlived its lock) leaves the snapshot
// ahead of the dashboard: the snapshot is the truth, so its content and
// number are taken and written back.
func (s *service) settle(ctx context.Context, d *Dashboard) (*Dashboard, error) {
	moved := false
	for {
		var v Version
		err := s.versions.FindOne(ctx, bson.D{{Key: "_id", Value: versionID(d.ID, d.Version+1)}}).Decode(&v)
		if errors.Is(err, mongo.ErrNoDocuments) {
			break
		}
		if err != nil {
			return nil, store.Wrap(err)
		}
		d.Version, d.Layouts, d.Variables, d.Settings, d.VariablesSchema = v.Version, v.Layouts, v.Variables, v.Settings, v.VariablesSchema
		moved = true
	}
	if !moved {
		return d, nil
	}
	s.log.Warn("dashboard rolled forward to its newest snapshot", "project_dashboard_id", d.ID, "version", d.Version)
	return store.SetByID[Dashboard](ctx, s.dashboards, "project_dashboard_id", d.ID, bson.D{
		{Key: "version", Value: d.Version}, {Key: "layouts", Value: freeform.List(wire.List(d.Layouts))},
		{Key: "variables", Value: freeform.Map(wire.Object(d.Variables))}, {Key: "settings", Value: freeform.Map(wire.Object(d.Settings))},
		{Key: "variables_schema", Value: freeform.Map(wire.Object(d.VariablesSchema))},
	})
}

// bump stores next as the dashboard's new version, then updates the
// dashboard with set plus the new version's content. If the dashboard
// cannot be written the snapshot is withdrawn (or, should that fail too,
// adopted by the next writer's settle).
func (s *service) bump(ctx context.Context, next *Dashboard, set bson.D) (*Dashboard, error) {
	v := snapshot(next, next.Version)
	if err := s.insertVersion(ctx, v); err != nil {
		return nil, err
	}
	set = append(set,
		bson.E{Key: "version", Value: next.Version}, bson.E{Key: "layouts", Value: v.Layouts},
		bson.E{Key: "variables", Value: v.Variables}, bson.E{Key: "variables_schema", Value: v.VariablesSchema},
		bson.E{Key: "settings", Value: v.Settings})
	out, err := store.SetByID[Dashboard](ctx, s.dashboards, "project_dashboard_id", next.ID, set)
	if err != nil {
		if _, derr := s.versions.DeleteOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: v.ID}}); derr != nil {
			s.log.Warn("a snapshot ahead of its dashboard was left", "project_dashboard_id", next.ID, "version", v.Version, "error", derr.Error())
		}
		return nil, notUnique(err, next.Name)
	}
	return out, nil
}

func (s *service) update(ctx context.Context, p *auth.Principal, r *updateReq) (*Dashboard, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	var out *Dashboard
	err := s.locked(ctx, p, r.ProjectDashboardID, func(d *Dashboard) error {
		next := *d
		set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}}
		if r.Name != "" && r.Name != d.Name {
			next.Name = r.Name
			set = append(set, bson.E{Key: "name", Value: r.Name})
		}
		if r.Labels != nil {
			set = append(set, bson.E{Key: "labels", Value: r.Labels})
		}
		if r.Tags != nil {
			set = append(set, bson.E{Key: "tags", Value: r.Tags})
		}
		if r.Settings != nil { // merged, one level deep, as upstream
			merged := maps.Clone(wire.Object(d.Settings))
			maps.Copy(merged, r.Settings)
			next.Settings = merged
		}
		changed := changedList(r.Layouts, d.Layouts) || changedObject(r.Variables, d.Variables) ||
			changedObject(r.VariablesSchema, d.VariablesSchema)
		if !changed {
			if r.Settings != nil {
				set = append(set, bson.E{Key: "settings", Value: next.Settings})
			}
			var err error
			out, err = store.SetByID[Dashboard](ctx, s.dashboards, "project_dashboard_id", d.ID, set)
			return notUnique(err, next.Name)
		}
		if r.Layouts != nil {
			next.Layouts = r.Layouts
		}
		if r.Variables != nil {
			next.Variables = r.Variables
		}
		if r.VariablesSchema != nil {
			next.VariablesSchema = r.VariablesSchema
		}
		next.Version = d.Version + 1
		var err error
		out, err = s.bump(ctx, &next, set)
		return err
	})
	return out, err
}

func (s *service) delete(ctx context.Context, p *auth.Principal, r *dashboardReq) (*api.Empty, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	// Mark first (store.Teardown), under the dashboard's lease that its
	// writers hold: from the mark on it is out of every read and change;
	// then its versions go, and the dashboard last. A delete cut short is
	// finished by a retry.
	_, err := store.Teardown[Dashboard]{Records: s.dashboards, Resource: dashboardResource, Key: "project_dashboard_id",
		Check: func(d *Dashboard) error { return private(p, d) },
		Lock:  s.locks.with,
		Fence: lease.Fencer(s.locks.ttl / 3), // a renew period: see lease.Fencer
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
