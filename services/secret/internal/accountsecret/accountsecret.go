// Package accountsecret holds the secret resource (/secret/v1/secret):
// the credentials of identity's service accounts, as upstream's secret
// service keeps them. A secret belongs to the whole domain, a workspace or
// a project (resource_group); its data is sealed at rest with the
// service's keyring (pkg/seal, bound to the record and its domain) and
// answered in clear only by get-data, to a service credential, overlaid
// on the data of the trusted secret it names.
//
// The data never appears in an answer, a list, a filter, a sort or a log
// line; every other operation sees the metadata through the kit's tenancy
// (a workspace member only its projects' secrets and the workspace's).
package accountsecret

import (
	"context"
	"fmt"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Collection holds the secrets, _id = secret_id.
const Collection = "secret_secrets"

// IDPrefix is the kind of secret ids (secret-<12 hex>).
const IDPrefix = "secret"

// Identity's operations the service reads on the caller's behalf (and
// get-secret-data as a service).
const (
	ServiceAccountGetPath = "/identity/v2/service-account/get"
	ProjectGetPath        = "/identity/v2/project/get"
	TrustedListPath       = "/identity/v2/trusted-account/list"
	TrustedDataPath       = "/identity/v2/trusted-account/get-secret-data"
)

// Resource groups.
const (
	Domain    = "DOMAIN"
	Workspace = "WORKSPACE"
	Project   = "PROJECT"
)

// Secret is a stored secret; its JSON form is SecretInfo (no data, no
// sealed bytes, no encryption fields).
type Secret struct {
	ID               string        `bson:"_id" json:"-"`
	SecretID         string        `bson:"secret_id" json:"secret_id"`
	Name             string        `bson:"name" json:"name"`
	SchemaID         string        `bson:"schema_id" json:"schema_id"`
	Provider         string        `bson:"provider" json:"provider"`
	Tags             freeform.Flat `bson:"tags" json:"tags"`
	TrustedSecretID  string        `bson:"trusted_secret_id" json:"trusted_secret_id"`
	ServiceAccountID string        `bson:"service_account_id" json:"service_account_id"`
	ResourceGroup    string        `bson:"resource_group" json:"resource_group"`
	ProjectID        string        `bson:"project_id" json:"project_id"`
	WorkspaceID      string        `bson:"workspace_id" json:"workspace_id"`
	DomainID         string        `bson:"domain_id" json:"domain_id"`
	CreatedAt        wire.Time     `bson:"created_at" json:"created_at"`
	UpdatedAt        wire.Time     `bson:"updated_at" json:"-"`
	Encrypted        bool          `bson:"encrypted" json:"-"`
	EncryptOptions   freeform.Map  `bson:"encrypt_options" json:"-"`
	// TrustedAccountID is the account of TrustedSecretID, resolved at
	// create, by which get-data reads the trusted data from identity.
	TrustedAccountID string      `bson:"trusted_account_id" json:"-"`
	Sealed           seal.Sealed `bson:"sealed" json:"-"`
}

// DataInfo is SecretDataInfo, get-data's answer.
type DataInfo struct {
	Encrypted      bool           `json:"encrypted"`
	EncryptOptions map[string]any `json:"encrypt_options"`
	Data           map[string]any `json:"data"`
}

// AD binds a secret's sealed data to its record and domain: a ciphertext
// copied onto another secret or domain does not open. (The project is not
// bound: a secret moves with its service account.)
func AD(id, domainID string) []byte { return seal.AD(Collection, id, domainID) }

// ResealTarget is the sealed field of the secrets, for key rotation.
func ResealTarget(db *mongo.Database) seal.Target {
	return seal.Target{Coll: db.Collection(Collection), Field: seal.Field{Path: "sealed", AD: func(doc bson.Raw) ([]byte, error) {
		str := func(k string) string { v, _ := doc.Lookup(k).StringValueOK(); return v }
		id, domain := str("_id"), str("domain_id")
		if id == "" || domain == "" {
			return nil, fmt.Errorf("secret %q lacks its domain", id)
		}
		return AD(id, domain), nil
	}}}
}

var (
	users   = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
	service = auth.Service() // get-data: services only, never a person's SYSTEM_ADMIN grant
)

// Resource is the secrets' query declaration: workspace roles reach their
// workspace's and the domain's (workspace "*"), a member its projects'
// and the workspace's (project "*").
var Resource = query.Resource{
	KeywordFields: []string{"secret_id", "name", "schema_id", "provider"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"secret_id", "name", "schema_id", "provider"},
	Fields:        query.FieldsOf[Secret](),
	Maps:          freeform.FieldsOf[Secret](),
	Secret:        []string{"sealed", "data", "encrypt_options"},
	Tenancy:       tenancy.InProject,
}

type (
	createReq struct {
		Name             string         `json:"name" v:"required,max=255"`
		Data             map[string]any `json:"data" v:"required"`
		SchemaID         string         `json:"schema_id" v:"max=255"`
		Provider         string         `json:"provider" v:"max=255"`
		Tags             freeform.Flat  `json:"tags"`
		TrustedSecretID  string         `json:"trusted_secret_id" v:"max=64"`
		ServiceAccountID string         `json:"service_account_id" v:"max=64"`
		ResourceGroup    string         `json:"resource_group" v:"required,enum=DOMAIN|WORKSPACE|PROJECT"`
		ProjectID        string         `json:"project_id" v:"max=64"`
		WorkspaceID      string         `json:"workspace_id" v:"max=64"`
		Encrypted        bool           `json:"encrypted"`
		EncryptOptions   map[string]any `json:"encrypt_options"`
	}
	updateReq struct {
		SecretID  string        `json:"secret_id" v:"required,max=64"`
		Name      string        `json:"name" v:"max=255"`
		Tags      freeform.Flat `json:"tags"`
		ProjectID string        `json:"project_id" v:"max=64"`
	}
	updateDataReq struct {
		SecretID       string         `json:"secret_id" v:"required,max=64"`
		Data           map[string]any `json:"data" v:"required"`
		SchemaID       string         `json:"schema_id" v:"max=255"`
		Encrypted      bool           `json:"encrypted"`
		EncryptOptions map[string]any `json:"encrypt_options"`
	}
	secretReq struct {
		SecretID string `json:"secret_id" v:"required,max=64"`
	}
	getDataReq struct {
		SecretID string `json:"secret_id" v:"required,max=64"`
		DomainID string `json:"domain_id" v:"required,max=64"`
	}
	listReq struct {
		Query            *query.Query `json:"query"`
		SecretID         string       `json:"secret_id"`
		Name             string       `json:"name"`
		SchemaID         string       `json:"schema_id"`
		Provider         string       `json:"provider"`
		TrustedSecretID  string       `json:"trusted_secret_id"`
		ServiceAccountID string       `json:"service_account_id"`
		ProjectID        string       `json:"project_id"`
		WorkspaceID      string       `json:"workspace_id"`
		// DomainID: a service (identity's sync and deletes, inventory's
		// collect) names the domain it reads for; anyone else only their
		// own.
		DomainID string `json:"domain_id" v:"max=64"`
	}
	statReq struct {
		Query    *stat.Query `json:"query" v:"required"`
		DomainID string      `json:"domain_id" v:"max=64"`
	}
)

// Validate refuses empty data and keys the store cannot hold.
func (r *createReq) Validate() error { return checkPayload(r.Data, r.Tags, r.EncryptOptions) }

// Validate refuses tags the store cannot hold.
func (r *updateReq) Validate() error { return freeform.Check("tags", r.Tags) }

// Validate refuses empty data and keys the store cannot hold.
func (r *updateDataReq) Validate() error { return checkPayload(r.Data, nil, r.EncryptOptions) }

func checkPayload(data, tags, encryptOptions map[string]any) error {
	if len(data) == 0 {
		return errs.Invalid("data", "a secret holds at least one member")
	}
	// data is stored sealed, as JSON bytes: any key is fine.
	return freeform.CheckAll("tags", tags, "encrypt_options", encryptOptions)
}

// Secrets are the secret operations.
type Secrets struct {
	c        *mongo.Collection
	keys     *seal.Keyring
	identity *call.Client
	log      *slog.Logger
}

// Routes creates the indexes and returns the secret operations.
func Routes(ctx context.Context, db *mongo.Database, keys *seal.Keyring, identity *call.Client, log *slog.Logger) ([]api.Route, error) {
	s := &Secrets{c: db.Collection(Collection), keys: keys, identity: identity, log: log}
	if err := store.EnsureIndexes(ctx, s.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "service_account_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "trusted_secret_id", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "provider", Value: 1}}},
	); err != nil {
		return nil, err
	}
	const p = "/secret/v1/secret/"
	return []api.Route{
		api.Op[createReq, Secret]{Path: p + "create", Access: users, Summary: "Create a secret of the domain, a workspace or a project (a service account's); data is sealed at rest.", Handle: s.create},
		api.Op[updateReq, Secret]{Path: p + "update", Access: users, Summary: "Change a secret's name, tags or (a PROJECT secret's) project.", Handle: s.update},
		api.Op[updateDataReq, api.Empty]{Path: p + "update-data", Access: users, Summary: "Replace a secret's data (sealed again).", Handle: s.updateData},
		api.Op[secretReq, api.Empty]{Path: p + "delete", Access: users, Summary: "Delete a secret and its sealed data.", Handle: s.delete},
		api.Op[secretReq, Secret]{Path: p + "get", Access: users, Summary: "Get a secret (never its data).", Handle: s.get},
		api.Op[getDataReq, DataInfo]{Path: p + "get-data", Access: service, Summary: "Read a secret's data, overlaid on its trusted secret's (services only).", Handle: s.getData},
		api.Op[listReq, api.List[Secret]]{Path: p + "list", Access: users, Summary: "List secrets (never their data).", Handle: s.list},
		api.Op[statReq, map[string]any]{Path: p + "stat", Access: users, Summary: "Statistics over secrets.", Handle: s.stat},
	}, nil
}

// serviceAccount is what is read of identity's ServiceAccountInfo.
type serviceAccount struct {
	ServiceAccountID string `json:"service_account_id"`
	Provider         string `json:"provider"`
	ProjectID        string `json:"project_id"`
	WorkspaceID      string `json:"workspace_id"`
	DomainID         string `json:"domain_id"`
}

// project is what is read of identity's ProjectInfo.
type project struct {
	ProjectID   string `json:"project_id"`
	WorkspaceID string `json:"workspace_id"`
	DomainID    string `json:"domain_id"`
}

// trustedAccount is what is read of identity's TrustedAccountInfo.
type trustedAccount struct {
	TrustedAccountID string `json:"trusted_account_id"`
	TrustedSecretID  string `json:"trusted_secret_id"`
	WorkspaceID      string `json:"workspace_id"`
}

// place resolves where a new secret lives, as upstream: a PROJECT secret
// takes its provider, project and workspace from its service account (or
// its workspace from its project); a WORKSPACE secret is in every project
// of the workspace ("*"), a DOMAIN secret in every workspace. identity
// answers on the caller's behalf, so what the caller cannot see is 404.
func (s *Secrets) place(ctx context.Context, p *auth.Principal, r *createReq, doc *Secret) error {
	rule, err := tenancy.For(p, Resource.Tenancy)
	if err != nil {
		return err
	}
	stamp := rule.Stamp()
	switch r.ResourceGroup {
	case Project:
		switch {
		case r.ServiceAccountID != "":
			var sa serviceAccount
			if err := s.identity.Call(ctx, ServiceAccountGetPath, map[string]any{"service_account_id": r.ServiceAccountID}, &sa); err != nil {
				return err
			}
			doc.ServiceAccountID, doc.Provider, doc.ProjectID, doc.WorkspaceID = sa.ServiceAccountID, sa.Provider, sa.ProjectID, sa.WorkspaceID
		case r.ProjectID != "":
			var pr project
			if err := s.identity.Call(ctx, ProjectGetPath, map[string]any{"project_id": r.ProjectID}, &pr); err != nil {
				return err
			}
			doc.ProjectID, doc.WorkspaceID = pr.ProjectID, pr.WorkspaceID
		default:
			return errs.Required("project_id")
		}
	case Workspace:
		doc.ProjectID, doc.WorkspaceID = tenancy.All, stamp.Workspace
		if doc.WorkspaceID == "" { // a domain-wide caller names the workspace
			if r.WorkspaceID == "" || r.WorkspaceID == tenancy.All {
				return errs.Required("workspace_id")
			}
			doc.WorkspaceID = r.WorkspaceID
		}
	default:
		doc.ProjectID, doc.WorkspaceID = tenancy.All, tenancy.All
	}
	if doc.Provider == "" {
		doc.Provider = r.Provider
	}
	return rule.Admits(tenancy.Record{Domain: stamp.Domain, Workspace: doc.WorkspaceID, Project: doc.ProjectID})
}

// trusted resolves a trusted secret the caller sees (its workspace or the
// domain's) to its account, through identity on the caller's behalf.
func (s *Secrets) trusted(ctx context.Context, trustedSecretID, workspaceID string) (string, error) {
	var out struct {
		Results []trustedAccount `json:"results"`
	}
	if err := s.identity.Call(ctx, TrustedListPath, map[string]any{"trusted_secret_id": trustedSecretID}, &out); err != nil {
		return "", err
	}
	for _, a := range out.Results {
		if a.TrustedSecretID == trustedSecretID && (a.WorkspaceID == tenancy.All || a.WorkspaceID == workspaceID || workspaceID == tenancy.All) {
			return a.TrustedAccountID, nil
		}
	}
	return "", errs.NotFound("trusted_secret_id", trustedSecretID)
}

func (s *Secrets) create(ctx context.Context, p *auth.Principal, r *createReq) (*Secret, error) {
	id, now := wire.NewID(IDPrefix), wire.T(wire.Now())
	doc := &Secret{ID: id, SecretID: id, Name: r.Name, SchemaID: r.SchemaID, Tags: wire.Object(r.Tags), ResourceGroup: r.ResourceGroup,
		DomainID: p.DomainID, CreatedAt: now, UpdatedAt: now, Encrypted: r.Encrypted, EncryptOptions: wire.Object(r.EncryptOptions)}
	if err := s.place(ctx, p, r, doc); err != nil {
		return nil, err
	}
	if r.TrustedSecretID != "" {
		account, err := s.trusted(ctx, r.TrustedSecretID, doc.WorkspaceID)
		if err != nil {
			return nil, err
		}
		doc.TrustedSecretID, doc.TrustedAccountID = r.TrustedSecretID, account
	}
	sealed, err := s.keys.SealJSON(r.Data, AD(id, doc.DomainID))
	if err != nil {
		return nil, err
	}
	doc.Sealed = sealed
	if _, err := s.c.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

func (s *Secrets) update(ctx context.Context, p *auth.Principal, r *updateReq) (*Secret, error) {
	doc, err := store.GetToChange[Secret](ctx, s.c, Resource, p, "secret_id", r.SecretID)
	if err != nil {
		return nil, err
	}
	set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}}
	if r.ProjectID != "" && r.ProjectID != doc.ProjectID {
		if doc.ResourceGroup != Project {
			return nil, errs.New(errs.PermissionDenied, "Only a PROJECT secret moves to another project. (secret_id = %s)", doc.SecretID)
		}
		var pr project
		if err := s.identity.Call(ctx, ProjectGetPath, map[string]any{"project_id": r.ProjectID}, &pr); err != nil {
			return nil, err
		}
		if pr.WorkspaceID != doc.WorkspaceID {
			return nil, errs.NotFound("project_id", r.ProjectID)
		}
		rule, err := tenancy.For(p, Resource.Tenancy)
		if err != nil {
			return nil, err
		}
		if err := rule.Admits(tenancy.Record{Domain: doc.DomainID, Workspace: doc.WorkspaceID, Project: pr.ProjectID}); err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "project_id", Value: pr.ProjectID})
	}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	return store.SetByID[Secret](ctx, s.c, "secret_id", doc.ID, set)
}

func (s *Secrets) updateData(ctx context.Context, p *auth.Principal, r *updateDataReq) (*api.Empty, error) {
	doc, err := store.GetToChange[Secret](ctx, s.c, Resource, p, "secret_id", r.SecretID)
	if err != nil {
		return nil, err
	}
	sealed, err := s.keys.SealJSON(r.Data, AD(doc.ID, doc.DomainID))
	if err != nil {
		return nil, err
	}
	set := bson.D{{Key: "sealed", Value: sealed}, {Key: "encrypted", Value: r.Encrypted},
		{Key: "encrypt_options", Value: freeform.Map(wire.Object(r.EncryptOptions))}, {Key: "updated_at", Value: wire.T(wire.Now())}}
	if r.SchemaID != "" {
		set = append(set, bson.E{Key: "schema_id", Value: r.SchemaID})
	}
	if _, err := store.SetByID[Secret](ctx, s.c, "secret_id", doc.ID, set); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *Secrets) delete(ctx context.Context, p *auth.Principal, r *secretReq) (*api.Empty, error) {
	doc, err := store.GetToChange[Secret](ctx, s.c, Resource, p, "secret_id", r.SecretID)
	if err != nil {
		return nil, err
	}
	res, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: doc.ID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("secret_id", r.SecretID)
	}
	return &api.Empty{}, nil
}

func (s *Secrets) get(ctx context.Context, p *auth.Principal, r *secretReq) (*Secret, error) {
	return store.GetFor[Secret](ctx, s.c, Resource, p, "secret_id", r.SecretID)
}

// trustedData is identity's answer of a trusted account's secret data.
type trustedData struct {
	TrustedSecretID string         `json:"trusted_secret_id"`
	Data            map[string]any `json:"data"`
}

// getData unseals a secret for a service of the suite, on the trusted
// secret's data when it names one (upstream: the trusted data overlaid by
// the secret's own, so an attached account gets its trusted account's
// keys plus, say, its role_arn). Each read is logged, without the data.
func (s *Secrets) getData(ctx context.Context, p *auth.Principal, r *getDataReq) (*DataInfo, error) {
	doc, err := store.Get[Secret](ctx, s.c, "secret_id", r.SecretID)
	if err != nil {
		return nil, err
	}
	if doc.DomainID != r.DomainID {
		return nil, errs.NotFound("secret_id", r.SecretID)
	}
	var own map[string]any
	if err := s.keys.OpenJSON(doc.Sealed, AD(doc.ID, doc.DomainID), &own); err != nil {
		return nil, fmt.Errorf("secret %s: %w", doc.ID, err) // names the key id, never the data
	}
	data := map[string]any{}
	if doc.TrustedSecretID != "" {
		var td trustedData
		if err := s.identity.CallAsService(ctx, TrustedDataPath, map[string]any{"trusted_account_id": doc.TrustedAccountID, "domain_id": doc.DomainID}, &td); err != nil {
			return nil, err
		}
		if td.TrustedSecretID != doc.TrustedSecretID {
			return nil, errs.NotFound("trusted_secret_id", doc.TrustedSecretID)
		}
		for k, v := range td.Data {
			data[k] = v
		}
	}
	for k, v := range own {
		data[k] = v
	}
	s.log.Info("secret data read", "secret_id", doc.ID, "domain_id", doc.DomainID, "trusted_secret_id", doc.TrustedSecretID,
		"caller_domain_id", p.DomainID, "caller_user_id", p.UserID)
	return &DataInfo{Encrypted: doc.Encrypted, EncryptOptions: wire.Object(doc.EncryptOptions), Data: data}, nil
}

// callerIn is p acting in the domain its request names: its own, or any
// for a service credential.
func callerIn(p *auth.Principal, domainID string) (*auth.Principal, error) {
	if domainID == "" || domainID == p.DomainID {
		return p, nil
	}
	if !p.IsService() {
		return nil, errs.NotFound("domain_id", domainID)
	}
	in := *p
	in.DomainID = domainID
	return &in, nil
}

func (s *Secrets) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[Secret], error) {
	caller, err := callerIn(p, r.DomainID)
	if err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("secret_id", r.SecretID, "name", r.Name, "schema_id", r.SchemaID, "provider", r.Provider,
		"trusted_secret_id", r.TrustedSecretID, "service_account_id", r.ServiceAccountID, "project_id", r.ProjectID, "workspace_id", r.WorkspaceID)...)
	return store.SearchFor[Secret](ctx, s.c, q, Resource, caller)
}

func (s *Secrets) stat(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
	caller, err := callerIn(p, r.DomainID)
	if err != nil {
		return nil, err
	}
	res, err := stat.RunFor(ctx, s.c, caller, Resource, r.Query)
	return &res, err
}
