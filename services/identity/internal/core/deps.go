package core

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
)

// Deps are what the operations of every resource share: the
// configuration, the collections, the mail outbox and the verifier of
// identity's own tokens. The stored state of the codes and the login
// throttle is in collections here; their rules are verification's and
// login's.
type Deps struct {
	Cfg        Config
	DB         *mongo.Database
	Domains    *mongo.Collection
	Users      *mongo.Collection
	APIKeys    *mongo.Collection
	Workspaces *mongo.Collection
	Projects   *mongo.Collection
	Bindings   *mongo.Collection
	Trusted    *mongo.Collection
	TrustedSA  *mongo.Collection
	Jobs       *mongo.Collection
	Outbox     *events.Outbox
	Verifier   *auth.Verifier
	Bus        *events.Bus
	Log        *slog.Logger
	root       atomic.Pointer[string] // the root domain's id, once read
}

// New creates the indexes and returns the dependencies of every resource.
func New(ctx context.Context, db *mongo.Database, bus *events.Bus, log *slog.Logger, cfg Config) (*Deps, error) {
	cfg.Defaults()
	if cfg.Signer == nil || cfg.Cipher == nil {
		return nil, errors.New("identity needs a signing key and an encryption key")
	}
	verifier, err := auth.NewVerifier(auth.JWKSOf(cfg.Keys()...))
	if err != nil {
		return nil, err
	}
	s := &Deps{
		Cfg: cfg, DB: db, Verifier: verifier, Bus: bus, Log: log,
		Domains:    db.Collection(DomainsCollection),
		Users:      db.Collection(UsersCollection),
		APIKeys:    db.Collection(APIKeysCollection),
		Workspaces: db.Collection(WorkspacesCollection),
		Projects:   db.Collection(ProjectsCollection),
		Bindings:   db.Collection(RoleBindingsCollection),
		Trusted:    db.Collection(TrustedAccountsCollection),
		TrustedSA:  db.Collection(TrustedSACollection),
		Jobs:       db.Collection(JobsCollection),
	}
	if s.Outbox, err = events.NewOutbox(ctx, db, OutboxCollection, bus, log); err != nil {
		return nil, err
	}
	idx := func(keys ...string) store.Index {
		d := bson.D{}
		for _, k := range keys {
			d = append(d, bson.E{Key: k, Value: 1})
		}
		return store.Index{Keys: d}
	}
	unique := func(i store.Index) store.Index { i.Unique = true; return i }
	for c, list := range map[*mongo.Collection][]store.Index{
		s.Domains:    {unique(idx("name"))},
		s.Users:      {idx("domain_id", "user_id"), idx("domain_id", "email"), idx("domain_id", "state")},
		s.APIKeys:    {idx("domain_id", "user_id")},
		s.Workspaces: {idx("domain_id", "name")},
		s.Projects:   {idx("domain_id", "workspace_id")},
		s.Bindings:   {unique(idx("domain_id", "user_id", "workspace_id"))},
		s.Trusted:    {idx("domain_id", "workspace_id")},
		s.TrustedSA:  {idx("domain_id", "workspace_id")},
		s.Jobs:       {idx("domain_id", "created_at")},
	} {
		if err := store.EnsureIndexes(ctx, c, list...); err != nil {
			return nil, err
		}
	}
	// Workspaces stored before is_dormant existed get it (false), so the
	// console's filter is_dormant eq false finds them; idempotent.
	if _, err := s.Workspaces.UpdateMany(ctx, bson.D{{Key: "is_dormant", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "is_dormant", Value: false}}}}); err != nil {
		return nil, store.Wrap(err)
	}
	return s, nil
}

// JWKS is the public key set that verifies identity's tokens: the signing
// key and the earlier ones kept for rotation.
func (s *Deps) JWKS() []byte { return auth.JWKSOf(s.Cfg.Keys()...) }

// keys are the signing key and the verify-only ones, in that order.
func (c Config) Keys() []*auth.Signer { return append([]*auth.Signer{c.Signer}, c.VerifyKeys...) }

// Mail records an e-mail in the outbox: it is sent once even when NATS or
// the mailer is down right now. Its link or code is sealed
// (events.SealMail): neither the outbox nor the mail streams hold it in
// clear. data["token_id"], when set, names the token the mail carries.
func (s *Deps) Mail(ctx context.Context, u *User, to, template string, data map[string]string) error {
	lang := u.Language
	if lang == "" {
		lang = "en"
	}
	m := events.Mail{To: to, Language: lang, Template: template, Data: data, TokenID: data["token_id"]}
	delete(m.Data, "token_id")
	if err := events.SealMail(s.Cfg.Cipher, &m); err != nil {
		return err
	}
	return s.Outbox.Enqueue(ctx, m)
}

// RootDomainID is the id of the root domain the bootstrap recorded.
func (s *Deps) RootDomainID(ctx context.Context) (string, error) {
	if id := s.root.Load(); id != nil {
		return *id, nil
	}
	var b struct {
		DomainID string `bson:"domain_id"`
	}
	if err := s.DB.Collection(BootstrapCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "root"}}).Decode(&b); err != nil {
		return "", store.Wrap(err)
	}
	s.root.Store(&b.DomainID)
	return b.DomainID, nil
}

// SystemPrincipal is who a SYSTEM token of a domain speaks for.
func SystemPrincipal(domainID string) auth.Principal {
	return auth.Principal{TokenType: auth.SystemToken, DomainID: domainID, UserID: "system", Role: auth.SystemAdmin}
}
