package trustedaccount

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/projectgroup"
	"github.com/nubes-io/nubes/services/identity/internal/schema"
	"github.com/nubes-io/nubes/services/identity/internal/serviceaccount"
)

// What a sync makes of the accounts the plugin reports, as upstream's
// job service does: for each result, the workspace (a DOMAIN account's
// sync_options.single_workspace_id, or the workspace named by the first
// location entry, found by name or made; a WORKSPACE account's own), a
// project group per further location entry (none with
// sync_options.skip_project_group), a PRIVATE project for the result, and
// in it a managed general service account (is_managed, reference_id =
// the result's resource_id, trusted_account_id) whose keys (the result's
// secret_data, checked against its TRUSTING_SECRET schema before anything
// of the result is written) are a PROJECT
// secret of the secret service naming the trusted secret, so get-data
// answers the trusted keys overlaid by the account's own.
//
// Every record a sync makes has an id derived from what upstream matches
// it by (wire.DerivedID: the domain, the workspace, the project, the
// provider and the plugin's resource_id), so a second sync, a redelivered
// job or a replica racing one finds it by _id and changes it in place:
// each step is one upsert of one document.

// syncTokenTTL bounds the credential a sync calls the secret service with.
const syncTokenTTL = 10 * time.Minute

// location is one entry of a result's location (workspace, then groups).
type location struct{ name, resourceID string }

// result is one account the plugin reported.
type result struct {
	name, resourceID, secretSchemaID string
	data, tags, secretData           map[string]any
	location                         []location
}

func parseResult(a map[string]any) (result, error) {
	r := result{}
	r.name, _ = a["name"].(string)
	r.resourceID, _ = a["resource_id"].(string)
	r.secretSchemaID, _ = a["secret_schema_id"].(string)
	if r.resourceID == "" {
		return r, errs.Required("results.resource_id")
	}
	if r.name == "" {
		r.name = r.resourceID
	}
	r.data, _ = a["data"].(map[string]any)
	r.tags, _ = a["tags"].(map[string]any)
	r.secretData, _ = a["secret_data"].(map[string]any)
	if err := freeform.CheckAll("results.data", r.data, "results.tags", r.tags); err != nil {
		return r, err
	}
	locs, _ := a["location"].([]any)
	for _, l := range locs {
		m, _ := l.(map[string]any)
		name, _ := m["name"].(string)
		id, _ := m["resource_id"].(string)
		if name == "" || id == "" {
			return r, errs.Invalid("results.location", "each entry has a name and a resource_id")
		}
		r.location = append(r.location, location{name: name, resourceID: id})
	}
	return r, nil
}

// placeOf is upstream's rule of which location entries a result keeps:
// skip_project_group keeps a DOMAIN account's workspace entry only, and
// none of a WORKSPACE account's.
func placeOf(r result, resourceGroup string, syncOptions map[string]any) []location {
	if skip, _ := syncOptions["skip_project_group"].(bool); skip {
		if resourceGroup == "DOMAIN" && len(r.location) > 0 {
			return r.location[:1]
		}
		return nil
	}
	return r.location
}

// syncer makes one job's records, acting as a SYSTEM caller of its domain.
type syncer struct {
	*service
	t       *TrustedAccount
	sys     auth.Principal
	secrets *call.Client
	now     wire.Time
}

func (s *service) newSyncer(ctx context.Context, t *TrustedAccount) (*syncer, error) {
	if err := serviceaccount.New(s.Deps).EnsureIndexes(ctx); err != nil {
		return nil, err
	}
	sys := core.SystemPrincipal(t.DomainID)
	token, err := s.Cfg.Signer.Issue(sys, syncTokenTTL)
	if err != nil {
		return nil, err
	}
	return &syncer{service: s, t: t, sys: sys, now: wire.T(wire.Now()),
		secrets: call.NewClient("secret", s.Cfg.ServiceURLs["secret"], token, nil)}, nil
}

// place makes (or finds again) the records of one result.
func (y *syncer) place(ctx context.Context, a map[string]any) error {
	r, err := parseResult(a)
	if err != nil {
		return err
	}
	// The keys first: a result whose keys do not fit stores nothing.
	if len(r.secretData) > 0 {
		if _, err := y.schemas.CheckSecret(ctx, &y.sys, r.secretSchemaID, schema.TrustingSecret, r.secretData); err != nil {
			return err
		}
	}
	loc := placeOf(r, y.t.ResourceGroup, y.t.SyncOptions)
	ws := y.t.WorkspaceID
	if y.t.ResourceGroup == "DOMAIN" {
		single, _ := y.t.SyncOptions["single_workspace_id"].(string)
		switch {
		case single != "":
			w, err := store.GetLive[core.Workspace](ctx, y.Workspaces, "workspace_id", single)
			if err != nil {
				return err
			}
			if w.DomainID != y.t.DomainID {
				return errs.NotFound("sync_options.single_workspace_id", single)
			}
			ws = w.WorkspaceID
		case len(loc) > 0:
			if ws, err = y.workspace(ctx, loc[0]); err != nil {
				return err
			}
			loc = loc[1:]
		default:
			return nil // upstream: a domain account's result without a location is skipped
		}
	}
	parent := ""
	for _, l := range loc {
		if parent, err = y.group(ctx, ws, parent, l); err != nil {
			return err
		}
	}
	projectID, err := y.project(ctx, ws, parent, r)
	if err != nil {
		return err
	}
	return y.account(ctx, ws, projectID, r)
}

// workspace finds the workspace of a location entry: the one an earlier
// sync made, else one of that name (upstream matches by name), else a new
// one.
func (y *syncer) workspace(ctx context.Context, l location) (string, error) {
	id := wire.DerivedID("workspace", y.t.DomainID, l.resourceID)
	var w core.Workspace
	err := y.Workspaces.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&w)
	if err == nil {
		return w.WorkspaceID, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return "", store.Wrap(err)
	}
	err = y.Workspaces.FindOne(ctx, bson.D{{Key: "domain_id", Value: y.t.DomainID}, {Key: "name", Value: l.name}, {Key: tenancy.MarkField, Value: bson.D{{Key: "$exists", Value: false}}}},
		options.FindOne().SetSort(bson.D{{Key: "created_at", Value: 1}})).Decode(&w)
	if err == nil {
		return w.WorkspaceID, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return "", store.Wrap(err)
	}
	w = core.Workspace{ID: id, WorkspaceID: id, Name: l.name, State: core.Enabled, Tags: map[string]any{}, DomainID: y.t.DomainID,
		CreatedBy: "sync:" + y.t.TrustedAccountID, CreatedAt: y.now}
	if _, err := y.Workspaces.InsertOne(ctx, w); err != nil && !mongo.IsDuplicateKeyError(err) {
		return "", store.Wrap(err)
	}
	return id, nil
}

// group makes (or renames and moves) the project group of a location
// entry in workspace ws, under parent.
func (y *syncer) group(ctx context.Context, ws, parent string, l location) (string, error) {
	id := wire.DerivedID("pg", y.t.DomainID, ws, l.resourceID)
	g := projectgroup.ProjectGroup{ID: id, ProjectGroupID: id, Users: []string{}, Tags: map[string]any{}, WorkspaceID: ws,
		DomainID: y.t.DomainID, CreatedBy: "sync:" + y.t.TrustedAccountID, CreatedAt: y.now}
	return id, store.Wrap(store.Upsert(ctx, y.DB.Collection(projectgroup.Collection), id, bson.D{{Key: "name", Value: l.name}, {Key: "parent_group_id", Value: parent}}, g))
}

// project makes (or renames and moves) the PRIVATE project of a result in
// workspace ws, as a child of the workspace (a workspace being deleted
// gets none).
func (y *syncer) project(ctx context.Context, ws, group string, r result) (string, error) {
	id := wire.DerivedID("project", y.t.DomainID, ws, r.resourceID)
	set := bson.D{{Key: "name", Value: r.name}}
	if group != "" {
		set = append(set, bson.E{Key: "project_group_id", Value: group})
	}
	res, err := y.Projects.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return "", store.Wrap(err)
	}
	if res.MatchedCount > 0 {
		return id, nil
	}
	pr := &core.Project{ID: id, ProjectID: id, Name: r.name, ProjectType: "PRIVATE", Users: []string{}, Tags: map[string]any{},
		WorkspaceID: ws, DomainID: y.t.DomainID, CreatedBy: "sync:" + y.t.TrustedAccountID, CreatedAt: y.now, ProjectGroupID: group}
	err = y.WorkspaceRecords().Live(ctx, ws, func(ctx context.Context, _ *core.Workspace, lw *store.Writes[core.Workspace]) error {
		return lw.Create(ctx, func(ctx context.Context) error {
			_, err := y.Projects.InsertOne(ctx, pr)
			if mongo.IsDuplicateKeyError(err) {
				return nil // a racing run made it
			}
			return store.Wrap(err)
		}, func(ctx context.Context) error {
			_, err := y.Projects.DeleteOne(ctx, bson.D{{Key: "_id", Value: pr.ID}})
			return err
		})
	})
	return id, err
}

// account makes (or finds again) the managed service account of a result
// in its project and stores its keys.
func (y *syncer) account(ctx context.Context, ws, projectID string, r result) error {
	provider := y.t.Provider
	id := wire.DerivedID(serviceaccount.IDPrefix, y.t.DomainID, ws, projectID, provider, r.resourceID)
	doc := core.ServiceAccount{ID: id, ServiceAccountID: id, State: core.AccountActive, Data: wire.Object(r.data), Provider: provider,
		Tags: wire.Object(r.tags), ReferenceID: r.resourceID, IsManaged: true, ProjectID: projectID, WorkspaceID: ws, DomainID: y.t.DomainID,
		CreatedAt: y.now}
	accounts := y.DB.Collection(core.ServiceAccountsCollection)
	set := bson.D{{Key: "name", Value: r.name}, {Key: "trusted_account_id", Value: y.t.TrustedAccountID}, {Key: "last_synced_at", Value: y.now}}
	if err := store.Upsert(ctx, accounts, id, set, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) { // the project has another account of that name
			return errs.Duplicate("name", r.name)
		}
		return store.Wrap(err)
	}
	if len(r.secretData) == 0 {
		return nil // upstream: a result without keys gets no secret
	}
	var cur core.ServiceAccount
	if err := accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&cur); err != nil {
		return store.Wrap(err)
	}
	if cur.SecretID != "" {
		var out struct {
			TotalCount int `json:"total_count"`
		}
		if err := y.secrets.Call(ctx, serviceaccount.SecretListPath, map[string]any{"secret_id": cur.SecretID, "query": map[string]any{"count_only": true}}, &out); err != nil {
			return err
		}
		if out.TotalCount > 0 {
			body := map[string]any{"secret_id": cur.SecretID, "data": r.secretData}
			if r.secretSchemaID != "" {
				body["schema_id"] = r.secretSchemaID
			}
			return y.secrets.Call(ctx, serviceaccount.SecretUpdateDataPath, body, nil)
		}
	}
	var created struct {
		SecretID string `json:"secret_id"`
	}
	if err := y.secrets.Call(ctx, serviceaccount.SecretCreatePath, map[string]any{"name": id + "-secret", "data": r.secretData,
		"schema_id": r.secretSchemaID, "service_account_id": id, "resource_group": "PROJECT", "trusted_secret_id": y.t.TrustedSecretID}, &created); err != nil {
		return err
	}
	_, err := accounts.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "secret_id", Value: created.SecretID},
		{Key: "secret_schema_id", Value: r.secretSchemaID}}}})
	return store.Wrap(err)
}
