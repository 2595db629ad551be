package core

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Deps are what the operations of every resource share: the
// configuration, the collections, the verification codes, the login
// throttle, the mail outbox and the verifier of identity's own tokens.
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
	Codes      Codes
	Logins     LoginThrottle // password attempts (throttle.go)
	Outbox     *events.Outbox
	Verifier   *auth.Verifier
	Bus        *events.Bus
	Log        *slog.Logger
	root       atomic.Pointer[string] // the root domain's id, once read
	// dummyHash is what an unknown user's password is compared with
	// (PasswordMatches): made on first use, not at package init.
	dummyHash func() []byte
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
		Codes: Codes{C: db.Collection(CodesCollection),
			Attempts: store.Slots{C: db.Collection(CountersCollection), Max: maxCodeAttempts, TTL: 24 * time.Hour},
			issued:   store.Slots{C: db.Collection(CountersCollection), Max: maxCodesIssued, TTL: codeWindow}},
	}
	s.dummyHash = sync.OnceValue(func() []byte {
		h, _ := bcrypt.GenerateFromPassword([]byte("Nubes-dummy-password-1"), cfg.PasswordCost)
		return h
	})
	s.Logins = newLoginThrottle(db.Collection(CountersCollection), cfg)
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

// Authenticator verifies with identity's own key and checks its own
// records (cached for auth.CheckTTL), so identity refuses a disabled user
// or API key exactly as other services do.
func (s *Deps) Authenticator() auth.Authenticator {
	return auth.Checked(s.Verifier, s, auth.CheckTTL)
}

// Check implements auth.Checker: the user (and the API key) behind a
// credential must still exist and be enabled, and so must its domain.
func (s *Deps) Check(ctx context.Context, _ string, p *auth.Principal) error {
	refused := func(why string) error { return errs.Unauthenticated(why) }
	var key *APIKey
	if p.TokenType == auth.APIKey {
		k, err := store.Get[APIKey](ctx, s.APIKeys, "api_key_id", p.TokenID)
		if err != nil {
			if IsNotFound(err) {
				return refused("API key is deleted.")
			}
			return err
		}
		if k.DomainID != p.DomainID || k.UserID != p.UserID {
			return refused("API key does not match its token.")
		}
		if k.State != Enabled || (!k.ExpiredAt.IsZero() && time.Now().After(k.ExpiredAt.Time)) {
			return refused("API key is disabled or expired.")
		}
		key = k
	}
	u, err := store.Get[User](ctx, s.Users, "user_id", UserKey(p.DomainID, p.UserID))
	if err != nil {
		if IsNotFound(err) {
			return refused("User is deleted.")
		}
		return err
	}
	if u.State == Disabled {
		return refused("User is disabled.")
	}
	if key == nil && p.Session != u.SessionEpoch {
		return refused("This session has ended (the user's password, MFA or state changed); sign in again.")
	}
	// A key acts with the role its user had when it was made: it stops
	// when that role changes (a demoted admin), and a key older than its
	// user belonged to an earlier user of the same id.
	if key != nil && (p.Role != KeyRole(u) || key.CreatedAt.Before(u.CreatedAt.Time)) {
		return refused("API key no longer matches its user.")
	}
	if key == nil {
		if held, err := s.roleHeld(ctx, u, p); err != nil || !held {
			return cmp.Or(err, refused("The role of this token was taken away; ask for a new token."))
		}
	}
	d, err := store.Get[Domain](ctx, s.Domains, "domain_id", p.DomainID)
	if err != nil {
		if IsNotFound(err) {
			return refused("Domain is deleted.")
		}
		return err
	}
	if d.State != Enabled {
		return refused("Domain is disabled.")
	}
	if key != nil && time.Since(key.LastAccessedAt.Time) > keyAccessResolution {
		set := bson.D{{Key: "last_accessed_at", Value: wire.T(wire.Now())}}
		if _, err := s.APIKeys.UpdateOne(ctx, bson.D{{Key: "_id", Value: key.ID}}, bson.D{{Key: "$set", Value: set}}); err != nil {
			return store.Wrap(err)
		}
	}
	return nil
}

// keyAccessResolution is how stale an API key's last_accessed_at may get:
// it is shown to people, not used for decisions, so a check that finds it
// fresher stays a read.
const keyAccessResolution = time.Minute

// roleHeld reports whether u still has the role its access token was
// granted with, so that removing a role binding takes effect within
// auth.CheckTTL instead of at the token's expiry.
func (s *Deps) roleHeld(ctx context.Context, u *User, p *auth.Principal) (bool, error) {
	admin := KeyRole(u) == auth.DomainAdmin
	switch p.Role {
	case auth.User:
		return true, nil
	case auth.DomainAdmin, auth.SystemAdmin:
		return admin, nil
	case auth.WorkspaceOwner, auth.WorkspaceMember:
		if admin && p.Role == auth.WorkspaceOwner {
			return true, nil // grant makes domain admins owners of every workspace
		}
		b, err := s.Binding(ctx, p.DomainID, p.UserID, p.WorkspaceID)
		return b != nil && b.RoleType == string(p.Role), err
	}
	return false, nil
}

func IsNotFound(err error) bool {
	e, ok := errs.As(err)
	return ok && e.Code == errs.NotFoundCode
}

// mail records an e-mail in the outbox: it is sent once even when NATS or
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

// rootDomainID is the id of the root domain the bootstrap recorded.
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

// KeyRole is the role a new key of u carries, and the role Check wants
// to see in a key of u: DOMAIN_ADMIN for a domain admin, else USER.
func KeyRole(u *User) auth.Role {
	if u.RoleType == string(auth.DomainAdmin) {
		return auth.DomainAdmin
	}
	return auth.User
}
