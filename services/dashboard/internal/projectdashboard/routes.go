package projectdashboard

import (
	"context"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
)

// Collections owned by the dashboard service.
const (
	DashboardsCollection = "dashboard_project_dashboards"
	VersionsCollection   = "dashboard_project_dashboard_versions"
)

// members may use every operation: dashboards are made by the users of a
// project, not only by its admins. A user without a role binding (USER)
// gets 403.
var members = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)

type (
	createReq struct {
		ProjectID       string        `json:"project_id" v:"required,max=64"`
		Name            string        `json:"name" v:"required,max=100"`
		Viewers         string        `json:"viewers" v:"required,enum=PUBLIC|PRIVATE"`
		DomainID        string        `json:"domain_id" v:"required,max=64"`
		Layouts         freeform.List `json:"layouts" v:"max=1000"`
		Variables       freeform.Map  `json:"variables"`
		Settings        freeform.Map  `json:"settings"`
		VariablesSchema freeform.Map  `json:"variables_schema"`
		Labels          freeform.List `json:"labels" v:"max=100"`
		Tags            freeform.Flat `json:"tags"`
	}
	updateReq struct {
		ProjectDashboardID string        `json:"project_dashboard_id" v:"required,max=64"`
		DomainID           string        `json:"domain_id" v:"required,max=64"`
		Name               string        `json:"name" v:"max=100"`
		Layouts            freeform.List `json:"layouts" v:"max=1000"`
		Variables          freeform.Map  `json:"variables"`
		Settings           freeform.Map  `json:"settings"`
		VariablesSchema    freeform.Map  `json:"variables_schema"`
		Labels             freeform.List `json:"labels" v:"max=100"`
		Tags               freeform.Flat `json:"tags"`
	}
	dashboardReq struct {
		ProjectDashboardID string `json:"project_dashboard_id" v:"required,max=64"`
		DomainID           string `json:"domain_id" v:"required,max=64"`
	}
	getReq struct {
		ProjectDashboardID string   `json:"project_dashboard_id" v:"required,max=64"`
		DomainID           string   `json:"domain_id" v:"required,max=64"`
		Only               []string `json:"only" v:"max=50"`
	}
	versionReq struct {
		ProjectDashboardID string `json:"project_dashboard_id" v:"required,max=64"`
		Version            int32  `json:"version" v:"required,min=1"`
		DomainID           string `json:"domain_id" v:"required,max=64"`
	}
	getVersionReq struct {
		ProjectDashboardID string   `json:"project_dashboard_id" v:"required,max=64"`
		Version            int32    `json:"version" v:"required,min=1"`
		DomainID           string   `json:"domain_id" v:"required,max=64"`
		Only               []string `json:"only" v:"max=50"`
	}
	versionQuery struct {
		ProjectDashboardID string       `json:"project_dashboard_id" v:"required,max=64"`
		DomainID           string       `json:"domain_id" v:"required,max=64"`
		Query              *query.Query `json:"query"`
		Version            *int32       `json:"version"`
	}
	dashboardQuery struct {
		DomainID           string       `json:"domain_id" v:"required,max=64"`
		Query              *query.Query `json:"query"`
		ProjectDashboardID string       `json:"project_dashboard_id"`
		ProjectID          string       `json:"project_id"`
		Name               string       `json:"name"`
		Viewers            string       `json:"viewers" v:"enum=PUBLIC|PRIVATE"`
		UserID             string       `json:"user_id"`
	}
	statReq struct {
		Query    *stat.Query `json:"query" v:"required"`
		DomainID string      `json:"domain_id" v:"required,max=64"`
	}
)

// Validate checks the content's keys and nesting.
func (r *createReq) Validate() error {
	return checkAll(r.Layouts, r.Variables, r.Settings, r.VariablesSchema, r.Labels, r.Tags)
}

// Validate checks the content's keys and nesting.
func (r *updateReq) Validate() error {
	return checkAll(r.Layouts, r.Variables, r.Settings, r.VariablesSchema, r.Labels, r.Tags)
}

// Validate refuses only paths the Info does not have.
func (r *getReq) Validate() error { return checkOnly(r.Only, dashboardFields) }

// Validate refuses only paths the Info does not have.
func (r *getVersionReq) Validate() error { return checkOnly(r.Only, versionInfoFields) }

func checkAll(layouts []any, variables, settings, schema map[string]any, labels []any, tags map[string]any) error {
	for _, c := range []struct {
		key string
		v   any
	}{{"layouts", layouts}, {"variables", variables}, {"settings", settings}, {"variables_schema", schema}, {"labels", labels}, {"tags", tags}} {
		if err := checkContent(c.key, c.v); err != nil {
			return err
		}
	}
	return nil
}

// service holds the collections and clients of the operations.
type service struct {
	dashboards *mongo.Collection
	versions   *mongo.Collection
	projects   projects
	log        *slog.Logger
}

// Routes creates the service's indexes and returns its operations.
// services reaches identity (service_urls); nil makes every create 503.
func Routes(ctx context.Context, db *mongo.Database, services *call.Services, log *slog.Logger) ([]api.Route, error) {
	s := &service{
		dashboards: db.Collection(DashboardsCollection),
		versions:   db.Collection(VersionsCollection),
		projects:   projects{identity: services.Client("identity")},
		log:        log,
	}
	// A dashboard's name is unique among the public dashboards of its
	// project (user_id "") and among one user's private ones.
	if err := store.EnsureIndexes(ctx, s.dashboards,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "user_id", Value: 1}, {Key: "name", Value: 1}}, Unique: true},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "viewers", Value: 1}, {Key: "name", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "user_id", Value: 1}}},
	); err != nil {
		return nil, err
	}
	// One snapshot per (dashboard, version); the _id says so too.
	if err := store.EnsureIndexes(ctx, s.versions,
		store.Index{Keys: bson.D{{Key: "project_dashboard_id", Value: 1}, {Key: "version", Value: -1}}, Unique: true},
	); err != nil {
		return nil, err
	}
	const prefix = "/dashboard/v1/project-dashboard/"
	return []api.Route{
		api.Op[createReq, Dashboard]{Path: prefix + "create", Access: members, Summary: "Create a dashboard of a project (version 1).", Handle: s.create},
		api.Op[updateReq, Dashboard]{Path: prefix + "update", Access: members, Summary: "Change a dashboard; new layouts, variables or variables_schema make a new version; settings merge.", Handle: s.update},
		api.Op[dashboardReq, api.Empty]{Path: prefix + "delete", Access: members, Summary: "Delete a dashboard and every version of it.", Handle: s.delete},
		api.Op[getReq, Dashboard]{Path: prefix + "get", Access: members, Summary: "Get a dashboard.", Handle: s.get},
		api.Op[versionReq, api.Empty]{Path: prefix + "delete-version", Access: members, Summary: "Delete a version other than the latest.", Handle: s.deleteVersion},
		api.Op[versionReq, Dashboard]{Path: prefix + "revert-version", Access: members, Summary: "Make a new version with the content of an old one.", Handle: s.revertVersion},
		api.Op[getVersionReq, Version]{Path: prefix + "get-version", Access: members, Summary: "Get one version of a dashboard.", Handle: s.getVersion},
		api.Op[versionQuery, api.List[Version]]{Path: prefix + "list-versions", Access: members, Summary: "List a dashboard's versions, newest first.", Handle: s.listVersions},
		api.Op[dashboardQuery, api.List[Dashboard]]{Path: prefix + "list", Access: members, Summary: "List the dashboards the caller may see.", Handle: s.list},
		api.Op[statReq, map[string]any]{Path: prefix + "stat", Access: members, Summary: "Statistics over the dashboards the caller may see.", Handle: s.stat},
	}, nil
}
