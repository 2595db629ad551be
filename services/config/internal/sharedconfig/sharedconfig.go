// Package sharedconfig holds the shared-config resource (/config/v2
// shared-config): named records of free-form data shared by a domain
// (resource_group DOMAIN, workspace_id and project_id "*"), a workspace
// (WORKSPACE, project_id "*") or a project (PROJECT). The name is unique
// per domain, workspace and project, as upstream makes it.
//
// Tenancy as upstream: domain admins, workspace owners and members;
// reads reach the domain's and the workspace's records too (workspace_id
// and user_projects with "*" appended), changes only the caller's own
// level (pkg/tenancy decides both).
package sharedconfig

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/config/internal/core"
)

// Identity's operations the service asks on the caller's behalf.
const (
	ProjectGetPath   = "/identity/v2/project/get"
	WorkspaceGetPath = "/identity/v2/workspace/get"
)

// SharedConfig is a stored shared config; the JSON form is SharedConfigInfo.
type SharedConfig struct {
	ID            string        `bson:"_id" json:"-"`
	Name          string        `bson:"name" json:"name"`
	Data          freeform.Map  `bson:"data" json:"data"`
	Tags          freeform.Flat `bson:"tags" json:"tags"`
	ResourceGroup string        `bson:"resource_group" json:"resource_group"`
	ProjectID     string        `bson:"project_id" json:"project_id"`
	WorkspaceID   string        `bson:"workspace_id" json:"workspace_id"`
	DomainID      string        `bson:"domain_id" json:"domain_id"`
	CreatedAt     wire.Time     `bson:"created_at" json:"created_at"`
	UpdatedAt     wire.Time     `bson:"updated_at" json:"updated_at"`
	Revision      int64         `bson:"revision" json:"-"`
}

// Rev implements core.Record.
func (c *SharedConfig) Rev() int64 { return c.Revision }

// SetRev implements core.Record.
func (c *SharedConfig) SetRev(n int64) { c.Revision = n }

var access = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)

var resource = query.Resource{
	KeywordFields: []string{"name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"name", "resource_group", "workspace_id", "project_id"},
	Fields:        query.FieldsOf[SharedConfig](),
	Maps:          freeform.FieldsOf[SharedConfig](),
	Tenancy:       tenancy.InProject,
}

type (
	createReq struct {
		Name          string         `json:"name" v:"required,max=255"`
		Data          map[string]any `json:"data" v:"required"`
		Tags          map[string]any `json:"tags"`
		ResourceGroup string         `json:"resource_group" v:"required,enum=DOMAIN|WORKSPACE|PROJECT"`
		WorkspaceID   string         `json:"workspace_id" v:"max=64"`
		ProjectID     string         `json:"project_id" v:"max=64"`
	}
	// The record is found by name among those the caller reaches;
	// workspace_id and project_id pick one where several levels hold it.
	updateReq struct {
		Name        string         `json:"name" v:"required,max=255"`
		Data        map[string]any `json:"data"`
		Tags        map[string]any `json:"tags"`
		WorkspaceID string         `json:"workspace_id" v:"max=64"`
		ProjectID   string         `json:"project_id" v:"max=64"`
	}
	nameReq struct {
		Name        string `json:"name" v:"required,max=255"`
		WorkspaceID string `json:"workspace_id" v:"max=64"`
		ProjectID   string `json:"project_id" v:"max=64"`
	}
	listReq struct {
		Query       *query.Query `json:"query"`
		Name        string       `json:"name"`
		WorkspaceID string       `json:"workspace_id"`
		ProjectID   string       `json:"project_id"`
	}
	statReq struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

type configs struct {
	c        *mongo.Collection
	identity *call.Client
	limits   core.Limits
}

// Routes creates the indexes and returns the operations.
func Routes(ctx context.Context, db *mongo.Database, identity *call.Client, limits core.Limits) ([]api.Route, error) {
	cs := configs{c: db.Collection(core.SharedConfigs), identity: identity, limits: limits.OrDefault()}
	if err := store.EnsureIndexes(ctx, cs.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "name", Value: 1}}, Unique: true},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}},
	); err != nil {
		return nil, err
	}
	p := "/config/v2/shared-config/"
	return []api.Route{
		api.Op[createReq, SharedConfig]{Path: p + "create", Access: access, Summary: "Create a config of the domain, a workspace or a project; a taken name is 409.", Handle: cs.create},
		api.Op[updateReq, SharedConfig]{Path: p + "update", Access: access, Summary: "Replace a shared config's data or tags.", Handle: cs.update},
		api.Op[nameReq, api.Empty]{Path: p + "delete", Access: access, Summary: "Delete a shared config.", Handle: cs.delete},
		api.Op[nameReq, SharedConfig]{Path: p + "get", Access: access, Summary: "Get a shared config by name.", Handle: cs.get},
		api.Op[listReq, api.List[SharedConfig]]{Path: p + "list", Access: access, Summary: "List the shared configs the caller reaches.", Handle: cs.list},
		api.Op[statReq, map[string]any]{Path: p + "stat", Access: access, Summary: "Statistics over the shared configs the caller reaches.", Handle: cs.stat},
	}, nil
}

func (cs configs) checkFree(data, tags map[string]any) error {
	if err := core.CheckData("data", data, cs.limits.MaxDataBytes); err != nil {
		return err
	}
	return core.CheckData("tags", tags, cs.limits.MaxDataBytes)
}

// place is where a new record goes, as upstream's create: PROJECT takes
// its workspace from the project (identity, on the caller's behalf),
// WORKSPACE the caller's workspace (or the one a domain admin names),
// DOMAIN the whole domain.
func (cs configs) place(ctx context.Context, p *auth.Principal, r *createReq) (tenancy.Record, error) {
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return tenancy.Record{}, err
	}
	rec := rule.Stamp()
	switch r.ResourceGroup {
	case "DOMAIN":
		rec.Workspace, rec.Project = tenancy.All, tenancy.All
	case "WORKSPACE":
		ws := r.WorkspaceID
		if rec.Workspace != "" && ws != "" && ws != rec.Workspace {
			return rec, errs.Forbidden()
		}
		if rec.Workspace == "" { // a domain-wide caller names the workspace
			if ws == "" {
				return rec, errs.Required("workspace_id")
			}
			var w struct {
				WorkspaceID string `json:"workspace_id"`
			}
			if err := cs.identity.Call(ctx, WorkspaceGetPath, map[string]string{"workspace_id": ws}, &w); err != nil {
				return rec, err
			}
			if w.WorkspaceID != ws {
				return rec, errs.NotFound("workspace_id", ws)
			}
			rec.Workspace = ws
		}
		rec.Project = tenancy.All
	case "PROJECT":
		if r.ProjectID == "" {
			return rec, errs.Required("project_id")
		}
		var pr struct {
			ProjectID   string `json:"project_id"`
			WorkspaceID string `json:"workspace_id"`
			DomainID    string `json:"domain_id"`
		}
		if err := cs.identity.Call(ctx, ProjectGetPath, map[string]string{"project_id": r.ProjectID}, &pr); err != nil {
			return rec, err
		}
		if pr.ProjectID != r.ProjectID || pr.DomainID != p.DomainID || pr.WorkspaceID == "" {
			return rec, errs.NotFound("project_id", r.ProjectID)
		}
		rec.Workspace, rec.Project = pr.WorkspaceID, r.ProjectID
	}
	return rec, rule.Admits(rec)
}

func (cs configs) create(ctx context.Context, p *auth.Principal, r *createReq) (*SharedConfig, error) {
	if err := core.CheckName(r.Name); err != nil {
		return nil, err
	}
	if err := cs.checkFree(r.Data, r.Tags); err != nil {
		return nil, err
	}
	rec, err := cs.place(ctx, p, r)
	if err != nil {
		return nil, err
	}
	now := wire.T(wire.Now())
	doc := &SharedConfig{ID: core.Key(rec.Domain, rec.Workspace, rec.Project, r.Name), Name: r.Name, Data: r.Data,
		Tags: wire.Object(r.Tags), ResourceGroup: r.ResourceGroup, ProjectID: rec.Project, WorkspaceID: rec.Workspace,
		DomainID: rec.Domain, CreatedAt: now, UpdatedAt: now, Revision: 1}
	if err := core.Insert(ctx, cs.c, doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// find is the record named name that p reaches. Where several levels
// hold the name, the narrowest wins (a project's over its workspace's
// over the domain's); two of the same level (a domain admin reaching two
// workspaces) are 409 until workspace_id or project_id picks one.
func (cs configs) find(ctx context.Context, p *auth.Principal, name, workspaceID, projectID string) (*SharedConfig, error) {
	q := query.With(nil, query.Params("name", name, "workspace_id", workspaceID, "project_id", projectID)...)
	l, err := store.SearchFor[SharedConfig](ctx, cs.c, q, resource, p)
	if err != nil {
		return nil, err
	}
	if len(l.Results) == 0 {
		return nil, errs.NotFound("name", name)
	}
	rs := l.Results
	slices.SortStableFunc(rs, func(a, b SharedConfig) int { return level(b) - level(a) })
	if len(rs) > 1 && level(rs[0]) == level(rs[1]) {
		return nil, errs.Duplicate("name", name+" (several records: name workspace_id or project_id)")
	}
	return &rs[0], nil
}

func level(c SharedConfig) int {
	switch {
	case c.ProjectID != tenancy.All && c.ProjectID != "":
		return 2
	case c.WorkspaceID != tenancy.All:
		return 1
	}
	return 0
}

// findToChange is find, then the kit's check that p may change it (403
// for the domain's or the workspace's record a narrower caller only reads).
func (cs configs) findToChange(ctx context.Context, p *auth.Principal, name, workspaceID, projectID string) (*SharedConfig, error) {
	doc, err := cs.find(ctx, p, name, workspaceID, projectID)
	if err != nil {
		return nil, err
	}
	if _, err := store.GetToChange[SharedConfig](ctx, cs.c, resource, p, "name", doc.ID); err != nil {
		if errs.Is(err, errs.NotFoundCode) {
			return nil, errs.NotFound("name", name)
		}
		return nil, err
	}
	return doc, nil
}

func (cs configs) update(ctx context.Context, p *auth.Principal, r *updateReq) (*SharedConfig, error) {
	if err := cs.checkFree(r.Data, r.Tags); err != nil {
		return nil, err
	}
	doc, err := cs.findToChange(ctx, p, r.Name, r.WorkspaceID, r.ProjectID)
	if err != nil {
		return nil, err
	}
	return core.Write(ctx, cs.c, doc.ID, r.Name, false, func(old *SharedConfig) (*SharedConfig, error) {
		c := *old
		if r.Data != nil {
			c.Data = r.Data
		}
		if r.Tags != nil {
			c.Tags = r.Tags
		}
		c.UpdatedAt = wire.T(wire.Now())
		return &c, nil
	})
}

func (cs configs) delete(ctx context.Context, p *auth.Principal, r *nameReq) (*api.Empty, error) {
	doc, err := cs.findToChange(ctx, p, r.Name, r.WorkspaceID, r.ProjectID)
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, core.Delete(ctx, cs.c, doc.ID, r.Name)
}

func (cs configs) get(ctx context.Context, p *auth.Principal, r *nameReq) (*SharedConfig, error) {
	return cs.find(ctx, p, r.Name, r.WorkspaceID, r.ProjectID)
}

func (cs configs) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[SharedConfig], error) {
	q := query.With(r.Query, query.Params("name", r.Name, "workspace_id", r.WorkspaceID, "project_id", r.ProjectID)...)
	return store.SearchFor[SharedConfig](ctx, cs.c, q, resource, p)
}

func (cs configs) stat(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, cs.c, p, resource, r.Query)
	return &res, err
}
