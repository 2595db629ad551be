package identityapi

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
)

// New creates the indexes and returns the service.
func New(ctx context.Context, db *mongo.Database, bus *events.Bus, log *slog.Logger, cfg Config) (*Service, error) {
	cfg.Defaults()
	if cfg.Signer == nil || cfg.Cipher == nil {
		return nil, errors.New("identity needs a signing key and an encryption key")
	}
	verifier, err := auth.NewVerifier(auth.JWKSOf(cfg.keys()...))
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, db: db, verifier: verifier, bus: bus, log: log,
		domains:    db.Collection(DomainsCollection),
		users:      db.Collection(UsersCollection),
		apiKeys:    db.Collection(APIKeysCollection),
		workspaces: db.Collection(WorkspacesCollection),
		projects:   db.Collection(ProjectsCollection),
		bindings:   db.Collection(RoleBindingsCollection),
		trusted:    db.Collection(TrustedAccountsCollection),
		trustedSA:  db.Collection(TrustedSACollection),
		jobs:       db.Collection(JobsCollection),
		codes: codes{c: db.Collection(CodesCollection),
			attempts: store.Slots{C: db.Collection(CountersCollection), Max: maxCodeAttempts, TTL: 24 * time.Hour},
			issued:   store.Slots{C: db.Collection(CountersCollection), Max: maxCodesIssued, TTL: codeWindow}},
	}
	s.logins = newLoginThrottle(db.Collection(CountersCollection), cfg)
	s.spentRefresh = store.Slots{C: db.Collection(CountersCollection), Max: 1, TTL: cfg.RefreshTTL + time.Minute}
	if s.outbox, err = events.NewOutbox(ctx, db, OutboxCollection, bus, log); err != nil {
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
		s.domains:    {unique(idx("name"))},
		s.users:      {idx("domain_id", "user_id"), idx("domain_id", "email"), idx("domain_id", "state")},
		s.apiKeys:    {idx("domain_id", "user_id")},
		s.workspaces: {idx("domain_id", "name")},
		s.projects:   {idx("domain_id", "workspace_id")},
		s.bindings:   {unique(idx("domain_id", "user_id", "workspace_id"))},
		s.trusted:    {idx("domain_id", "workspace_id")},
		s.trustedSA:  {idx("domain_id", "workspace_id")},
		s.jobs:       {idx("domain_id", "created_at")},
	} {
		if err := store.EnsureIndexes(ctx, c, list...); err != nil {
			return nil, err
		}
	}
	// Workspaces stored before is_dormant existed get it (false), so the
	// console's filter is_dormant eq false finds them; idempotent.
	if _, err := s.workspaces.UpdateMany(ctx, bson.D{{Key: "is_dormant", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "is_dormant", Value: false}}}}); err != nil {
		return nil, store.Wrap(err)
	}
	return s, nil
}

// Routes are every operation of the service.
func (s *Service) Routes() []api.Route {
	var r []api.Route
	for _, part := range [][]api.Route{
		s.tokenRoutes(), s.domainRoutes(), s.workspaceRoutes(), s.projectRoutes(), s.roleRoutes(),
		s.userRoutesV2(), s.profileRoutes(), s.userRoutesV1(), s.apiKeyRoutes(), s.trustedRoutes(), s.endpointRoutes(), s.consoleRoutes(),
	} {
		r = append(r, part...)
	}
	return r
}

// Workers run beside the server: the mail outbox relay.
func (s *Service) Workers() []func(context.Context) error {
	return []func(context.Context) error{s.outbox.Run, s.runSyncJobs, s.runSyncSchedule}
}

// JWKS is the public key set that verifies identity's tokens: the signing
// key and the earlier ones kept for rotation.
func (s *Service) JWKS() []byte { return auth.JWKSOf(s.cfg.keys()...) }

// keys are the signing key and the verify-only ones, in that order.
func (c Config) keys() []*auth.Signer { return append([]*auth.Signer{c.Signer}, c.VerifyKeys...) }

// Authenticator verifies with identity's own key and checks its own
// records (cached for auth.CheckTTL), so identity refuses a disabled user
// or API key exactly as other services do.
func (s *Service) Authenticator() auth.Authenticator {
	return auth.Checked(s.verifier, s, auth.CheckTTL)
}

// Check implements auth.Checker: the user (and the API key) behind a
// credential must still exist and be enabled, and so must its domain.
func (s *Service) Check(ctx context.Context, _ string, p *auth.Principal) error {
	refused := func(why string) error { return errs.Unauthenticated(why) }
	var key *APIKey
	if p.TokenType == auth.APIKey {
		k, err := store.Get[APIKey](ctx, s.apiKeys, "api_key_id", p.TokenID)
		if err != nil {
			if isNotFound(err) {
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
	u, err := store.Get[User](ctx, s.users, "user_id", UserKey(p.DomainID, p.UserID))
	if err != nil {
		if isNotFound(err) {
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
	if key != nil && (p.Role != keyRole(u) || key.CreatedAt.Before(u.CreatedAt.Time)) {
		return refused("API key no longer matches its user.")
	}
	if key == nil {
		if held, err := s.roleHeld(ctx, u, p); err != nil || !held {
			return cmp.Or(err, refused("The role of this token was taken away; ask for a new token."))
		}
	}
	d, err := store.Get[Domain](ctx, s.domains, "domain_id", p.DomainID)
	if err != nil {
		if isNotFound(err) {
			return refused("Domain is deleted.")
		}
		return err
	}
	if d.State != Enabled {
		return refused("Domain is disabled.")
	}
	if key != nil && time.Since(key.LastAccessedAt.Time) > keyAccessResolution {
		set := bson.D{{Key: "last_accessed_at", Value: wire.T(wire.Now())}}
		if _, err := s.apiKeys.UpdateOne(ctx, bson.D{{Key: "_id", Value: key.ID}}, bson.D{{Key: "$set", Value: set}}); err != nil {
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
func (s *Service) roleHeld(ctx context.Context, u *User, p *auth.Principal) (bool, error) {
	admin := keyRole(u) == auth.DomainAdmin
	switch p.Role {
	case auth.User:
		return true, nil
	case auth.DomainAdmin, auth.SystemAdmin:
		return admin, nil
	case auth.WorkspaceOwner, auth.WorkspaceMember:
		if admin && p.Role == auth.WorkspaceOwner {
			return true, nil // grant makes domain admins owners of every workspace
		}
		b, err := s.binding(ctx, p.DomainID, p.UserID, p.WorkspaceID)
		return b != nil && b.RoleType == string(p.Role), err
	}
	return false, nil
}

func isNotFound(err error) bool {
	e, ok := errs.As(err)
	return ok && e.Code == errs.NotFoundCode
}

// mail records an e-mail in the outbox: it is sent once even when NATS or
// the mailer is down right now. Its link or code is sealed
// (events.SealMail): neither the outbox nor the mail streams hold it in
// clear. data["token_id"], when set, names the token the mail carries.
func (s *Service) mail(ctx context.Context, u *User, to, template string, data map[string]string) error {
	lang := u.Language
	if lang == "" {
		lang = "en"
	}
	m := events.Mail{To: to, Language: lang, Template: template, Data: data, TokenID: data["token_id"]}
	delete(m.Data, "token_id")
	if err := events.SealMail(s.cfg.Cipher, &m); err != nil {
		return err
	}
	return s.outbox.Enqueue(ctx, m)
}
