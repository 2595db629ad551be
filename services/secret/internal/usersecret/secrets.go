// Package usersecret holds the user-secret resource (spec part 3,
// /secret/v1/user-secret):
// a user secret is one user's credential; its data is sealed at rest
// (pkg/seal, bound to the record and its owner), never returned but by
// get_data to a SYSTEM caller, and never written to a log line or an error
// message. Every other operation sees only the caller's own secrets:
// another user, even of the same domain, gets 404.
//
// Decoding, validation, authorization and errors come from pkg; this
// package holds only the secret service's rules. It must not log or
// return secret data anywhere but get_data's answer.
package usersecret

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

// Collection holds the user secrets, _id = user_secret_id.
const Collection = "secret_user_secrets"

// IDPrefix is the kind of user secret ids (user-secret-<12 hex>).
const IDPrefix = "user-secret"

// UserSecret is a stored user secret. The JSON form is UserSecretInfo:
// the sealed data, encrypted and encrypt_options never leave but through
// get_data.
type UserSecret struct {
	ID             string        `bson:"_id" json:"-"`
	UserSecretID   string        `bson:"user_secret_id" json:"user_secret_id"`
	Name           string        `bson:"name" json:"name"`
	SchemaID       string        `bson:"schema_id" json:"schema_id"`
	Provider       string        `bson:"provider" json:"provider"`
	Tags           freeform.Flat `bson:"tags" json:"tags"`
	DomainID       string        `bson:"domain_id" json:"domain_id"`
	UserID         string        `bson:"user_id" json:"user_id"`
	CreatedAt      wire.Time     `bson:"created_at" json:"created_at"`
	UpdatedAt      wire.Time     `bson:"updated_at" json:"-"`
	Encrypted      bool          `bson:"encrypted" json:"-"`
	EncryptOptions freeform.Map  `bson:"encrypt_options" json:"-"`
	Sealed         seal.Sealed   `bson:"sealed" json:"-"`
}

// DataInfo is UserSecretDataInfo, get_data's answer.
type DataInfo struct {
	Encrypted      bool           `json:"encrypted"`
	EncryptOptions map[string]any `json:"encrypt_options"`
	Data           map[string]any `json:"data"`
}

// AD binds a secret's sealed data to its record and its owner: a
// ciphertext copied onto another secret, user or domain does not open.
func AD(id, domainID, userID string) []byte { return seal.AD(Collection, id, domainID, userID) }

// ResealTarget is the one sealed field of the service, for key rotation.
func ResealTarget(db *mongo.Database) seal.Target {
	return seal.Target{Coll: db.Collection(Collection), Field: seal.Field{Path: "sealed", AD: func(doc bson.Raw) ([]byte, error) {
		str := func(k string) string { v, _ := doc.Lookup(k).StringValueOK(); return v }
		id, domain, user := str("_id"), str("domain_id"), str("user_id")
		if id == "" || domain == "" || user == "" {
			return nil, fmt.Errorf("user secret %q lacks its owner", id)
		}
		return AD(id, domain, user), nil
	}}}
}

// Every signed-in caller keeps secrets of their own; only SYSTEM reads
// their data.
var (
	users      = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)
	systemOnly = auth.Service() // services only: never a person's SYSTEM_ADMIN grant (issue 21)
)

var resource = query.Resource{
	KeywordFields: []string{"user_secret_id", "name", "schema_id", "provider"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"user_secret_id", "name", "schema_id", "provider"},
	Fields:        query.FieldsOf[UserSecret](), // never sealed, encrypted or encrypt_options
	Maps:          freeform.FieldsOf[UserSecret](),
	Secret:        []string{"sealed"},
	// A user secret is its owner's alone, whatever the role (pkg/tenancy).
	Tenancy: tenancy.Fields{Domain: "domain_id", Owner: "user_id"},
}

type (
	createReq struct {
		Name           string         `json:"name" v:"required,max=255"`
		Data           map[string]any `json:"data" v:"required"`
		SchemaID       string         `json:"schema_id" v:"max=255"`
		Tags           freeform.Flat  `json:"tags"`
		Encrypted      bool           `json:"encrypted"`
		EncryptOptions map[string]any `json:"encrypt_options"`
	}
	updateReq struct {
		UserSecretID string        `json:"user_secret_id" v:"required,max=64"`
		Name         string        `json:"name" v:"max=255"`
		Tags         freeform.Flat `json:"tags"`
		// Data is declared only to refuse it with a clear message.
		Data map[string]any `json:"data"`
	}
	updateDataReq struct {
		UserSecretID   string         `json:"user_secret_id" v:"required,max=64"`
		SchemaID       string         `json:"schema_id" v:"required,max=255"`
		Data           map[string]any `json:"data" v:"required"`
		Encrypted      bool           `json:"encrypted"`
		EncryptOptions map[string]any `json:"encrypt_options"`
	}
	getDataReq struct {
		UserSecretID string `json:"user_secret_id" v:"required,max=64"`
		DomainID     string `json:"domain_id" v:"required,max=64"`
	}
	secretReq struct {
		UserSecretID string `json:"user_secret_id" v:"required,max=64"`
	}
	listReq struct {
		Query        *query.Query `json:"query"`
		UserSecretID string       `json:"user_secret_id"`
		Name         string       `json:"name"`
		SchemaID     string       `json:"schema_id"`
		Provider     string       `json:"provider"`
	}
	statReq struct {
		Query *stat.Query `json:"query" v:"required"`
		// DomainID is accepted as upstream clients send it; the scope is
		// always the caller's own domain and user.
		DomainID string `json:"domain_id" v:"max=64"`
	}
)

// Validate refuses empty data and keys the store cannot hold.
func (r *createReq) Validate() error {
	return checkPayload(r.Data, r.Tags, r.EncryptOptions)
}

// Validate refuses data: it changes only through update_data.
func (r *updateReq) Validate() error {
	if r.Data != nil {
		return errs.Invalid("data", "update changes name and tags only; data changes go through update_data")
	}
	return freeform.Check("tags", r.Tags)
}

// Validate refuses empty data and keys the store cannot hold.
func (r *updateDataReq) Validate() error {
	return checkPayload(r.Data, nil, r.EncryptOptions)
}

func checkPayload(data, tags, encryptOptions map[string]any) error {
	if len(data) == 0 {
		return errs.Invalid("data", "a secret holds at least one member")
	}
	// data is exempt: it is stored sealed, as JSON bytes. tags and
	// encrypt_options keep dots and a leading $ (escaped in the store,
	// pkg/freeform).
	return freeform.CheckAll("tags", tags, "encrypt_options", encryptOptions)
}

// Secrets are the user-secret operations.
type Secrets struct {
	c       *mongo.Collection
	keys    *seal.Keyring
	schemas *Schemas
	log     *slog.Logger
}

// Routes creates the service's indexes and returns its operations.
func Routes(ctx context.Context, db *mongo.Database, keys *seal.Keyring, repository *call.Client, log *slog.Logger) ([]api.Route, error) {
	s := &Secrets{c: db.Collection(Collection), keys: keys, schemas: &Schemas{repo: repository}, log: log}
	// Every list and stat is confined to one owner of one domain.
	if err := store.EnsureIndexes(ctx, s.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "user_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "user_id", Value: 1}, {Key: "name", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "user_id", Value: 1}, {Key: "schema_id", Value: 1}}},
	); err != nil {
		return nil, err
	}
	const p = "/secret/v1/user-secret/"
	// Upstream's proto package of user secrets is user_secret, not secret.
	const grpc = "spaceone.api.user_secret.v1.UserSecret"
	return []api.Route{
		api.Op[createReq, UserSecret]{Path: p + "create", Service: grpc, Access: users, Summary: "Create a secret of the caller's own; data is sealed at rest.", Handle: s.create},
		api.Op[updateReq, UserSecret]{Path: p + "update", Service: grpc, Access: users, Summary: "Change a secret's name or tags (data changes go through update_data).", Handle: s.update},
		api.Op[secretReq, api.Empty]{Path: p + "delete", Service: grpc, Access: users, Summary: "Delete a secret and its sealed data.", Handle: s.delete},
		api.Op[updateDataReq, api.Empty]{Path: p + "update-data", Service: grpc, Access: users, Summary: "Replace a secret's data (validated against its repository schema).", Handle: s.updateData},
		api.Op[getDataReq, DataInfo]{Path: p + "get-data", Service: grpc, Access: systemOnly, Summary: "Read a secret's data (services only: a SYSTEM token, never a person's SYSTEM_ADMIN grant).", Handle: s.getData},
		api.Op[secretReq, UserSecret]{Path: p + "get", Service: grpc, Access: users, Summary: "Get one of the caller's secrets (never its data).", Handle: s.get},
		api.Op[listReq, api.List[UserSecret]]{Path: p + "list", Service: grpc, Access: users, Summary: "List the caller's secrets.", Handle: s.list},
		api.Op[statReq, map[string]any]{Path: p + "stat", Service: grpc, Access: users, Summary: "Statistics over the caller's secrets.", Handle: s.stat},
	}, nil
}

func (s *Secrets) create(ctx context.Context, p *auth.Principal, r *createReq) (*UserSecret, error) {
	provider, err := s.schemas.check(ctx, p.DomainID, r.SchemaID, r.Data)
	if err != nil {
		return nil, err
	}
	id, now := wire.NewID(IDPrefix), wire.T(wire.Now())
	sealed, err := s.keys.SealJSON(r.Data, AD(id, p.DomainID, p.UserID))
	if err != nil {
		return nil, err
	}
	doc := &UserSecret{ID: id, UserSecretID: id, Name: r.Name, SchemaID: r.SchemaID, Provider: provider,
		Tags: wire.Object(r.Tags), DomainID: p.DomainID, UserID: p.UserID, CreatedAt: now, UpdatedAt: now,
		Encrypted: r.Encrypted, EncryptOptions: wire.Object(r.EncryptOptions), Sealed: sealed}
	if _, err := s.c.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

// own loads a secret of the caller: another user's or domain's is 404,
// exactly as a missing one.
func (s *Secrets) own(ctx context.Context, p *auth.Principal, id string) (*UserSecret, error) {
	return store.GetFor[UserSecret](ctx, s.c, resource, p, "user_secret_id", id)
}

func (s *Secrets) update(ctx context.Context, p *auth.Principal, r *updateReq) (*UserSecret, error) {
	if _, err := s.own(ctx, p, r.UserSecretID); err != nil {
		return nil, err
	}
	set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	return store.SetByID[UserSecret](ctx, s.c, "user_secret_id", r.UserSecretID, set)
}

func (s *Secrets) updateData(ctx context.Context, p *auth.Principal, r *updateDataReq) (*api.Empty, error) {
	doc, err := s.own(ctx, p, r.UserSecretID)
	if err != nil {
		return nil, err
	}
	provider, err := s.schemas.check(ctx, p.DomainID, r.SchemaID, r.Data)
	if err != nil {
		return nil, err
	}
	sealed, err := s.keys.SealJSON(r.Data, AD(doc.ID, doc.DomainID, doc.UserID))
	if err != nil {
		return nil, err
	}
	if _, err := store.SetByID[UserSecret](ctx, s.c, "user_secret_id", doc.ID, bson.D{
		{Key: "sealed", Value: sealed}, {Key: "schema_id", Value: r.SchemaID}, {Key: "provider", Value: provider},
		{Key: "encrypted", Value: r.Encrypted}, {Key: "encrypt_options", Value: freeform.Map(wire.Object(r.EncryptOptions))},
		{Key: "updated_at", Value: wire.T(wire.Now())},
	}); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func (s *Secrets) delete(ctx context.Context, p *auth.Principal, r *secretReq) (*api.Empty, error) {
	if _, err := s.own(ctx, p, r.UserSecretID); err != nil {
		return nil, err
	}
	res, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: r.UserSecretID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 { // deleted meanwhile
		return nil, errs.NotFound("user_secret_id", r.UserSecretID)
	}
	return &api.Empty{}, nil
}

// getData answers the data, unsealed, to a SYSTEM caller (a service of
// the suite acting for the owner) for the secret of domain_id. Each read
// is logged, without the data.
func (s *Secrets) getData(ctx context.Context, p *auth.Principal, r *getDataReq) (*DataInfo, error) {
	doc, err := store.Get[UserSecret](ctx, s.c, "user_secret_id", r.UserSecretID)
	if err != nil {
		return nil, err
	}
	if doc.DomainID != r.DomainID {
		return nil, errs.NotFound("user_secret_id", r.UserSecretID)
	}
	var data map[string]any
	if err := s.keys.OpenJSON(doc.Sealed, AD(doc.ID, doc.DomainID, doc.UserID), &data); err != nil {
		// A missing key or an altered record is the operator's to fix;
		// the cause names the key id, never the data.
		return nil, fmt.Errorf("user secret %s: %w", doc.ID, err)
	}
	s.log.Info("user secret data read", "user_secret_id", doc.ID, "domain_id", doc.DomainID,
		"caller_domain_id", p.DomainID, "caller_user_id", p.UserID)
	return &DataInfo{Encrypted: doc.Encrypted, EncryptOptions: wire.Object(doc.EncryptOptions), Data: wire.Object(data)}, nil
}

func (s *Secrets) get(ctx context.Context, p *auth.Principal, r *secretReq) (*UserSecret, error) {
	return s.own(ctx, p, r.UserSecretID)
}

func (s *Secrets) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[UserSecret], error) {
	q := query.With(r.Query, query.Params("user_secret_id", r.UserSecretID, "name", r.Name, "schema_id", r.SchemaID, "provider", r.Provider)...)
	return store.SearchFor[UserSecret](ctx, s.c, q, resource, p)
}

func (s *Secrets) stat(ctx context.Context, p *auth.Principal, r *statReq) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, s.c, p, resource, r.Query)
	return &res, err
}
