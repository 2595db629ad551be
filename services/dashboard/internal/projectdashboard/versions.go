package projectdashboard

import (
	"context"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
)

func (s *service) deleteVersion(ctx context.Context, p *auth.Principal, r *versionReq) (*api.Empty, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	d, err := s.visible(ctx, p, r.ProjectDashboardID)
	if err != nil {
		return nil, err
	}
	// The latest version only grows: one below it stays below it. One
	// above it (not stored yet) is not found, whatever a writer adds
	// meanwhile.
	if r.Version == d.Version {
		return nil, errs.New(errs.LatestVersion, "The latest version cannot be deleted. (version = %d)", r.Version)
	}
	if r.Version > d.Version {
		return nil, errs.NotFound("version", strconv.Itoa(int(r.Version)))
	}
	res, err := s.versions.DeleteOne(ctx, bson.D{{Key: "_id", Value: versionID(d.ID, r.Version)}})
	if err == nil && res.DeletedCount == 0 {
		err = errs.NotFound("version", strconv.Itoa(int(r.Version)))
	}
	err = store.Wrap(err)
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

// revertVersion copies an old version's layouts, variables and
// variables_schema (not its settings) into a new version: the number
// never goes back.
func (s *service) revertVersion(ctx context.Context, p *auth.Principal, r *versionReq) (*Dashboard, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	return s.changed(ctx, p, r.ProjectDashboardID, func(d *Dashboard) error {
		old, err := s.getSnapshot(ctx, d, r.Version)
		if err != nil {
			return err
		}
		d.Layouts, d.Variables, d.VariablesSchema = old.Layouts, old.Variables, old.VariablesSchema
		nextVersion(d)
		return nil
	})
}

// getSnapshot reads version n of d by its _id; a missing one is 404.
func (s *service) getSnapshot(ctx context.Context, d *Dashboard, n int32) (*Version, error) {
	v, err := store.Get[Version](ctx, s.versions, "version", versionID(d.ID, n))
	if errs.Is(err, errs.NotFoundCode) {
		return nil, errs.NotFound("version", strconv.Itoa(int(n)))
	}
	if err != nil {
		return nil, err
	}
	v.Latest = v.Version == d.Version
	return v, nil
}

func (s *service) getVersion(ctx context.Context, p *auth.Principal, r *getVersionReq) (*Version, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	d, err := s.visible(ctx, p, r.ProjectDashboardID)
	if err != nil {
		return nil, err
	}
	v, err := s.getSnapshot(ctx, d, r.Version)
	if err != nil {
		return nil, err
	}
	v.only = r.Only
	return v, nil
}

func (s *service) listVersions(ctx context.Context, p *auth.Principal, r *versionQuery) (*api.List[Version], error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	d, err := s.visible(ctx, p, r.ProjectDashboardID)
	if err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("version", r.Version)...)
	// Versions are the dashboard's children: reaching d (visible) is
	// reaching them.
	sc := bson.D{{Key: "domain_id", Value: d.DomainID}, {Key: "project_dashboard_id", Value: d.ID}}
	out, err := store.Search[Version](ctx, s.versions, q, versionResource, sc)
	if err != nil {
		return nil, err
	}
	for i := range out.Results {
		out.Results[i].Latest = out.Results[i].Version == d.Version
	}
	return out, nil
}
