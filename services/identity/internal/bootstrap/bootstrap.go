package bootstrap

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/domainadmin"
	"github.com/nubes-io/nubes/services/identity/internal/password"
)

// Bootstrapped is what the first start made.
type Bootstrapped struct {
	DomainID      string `bson:"domain_id"`
	DomainName    string `bson:"domain_name"`
	AdminUserID   string `bson:"admin_user_id"`
	AdminPassword string `bson:"-"` // known only to the start that created the admin, or from config
	Created       bool   `bson:"-"`
}

// Run creates the root domain and its admin on first start. It is
// safe to run on many replicas at once: the first insert of the
// bootstrap record wins, every replica then converges on the same domain,
// user and binding (deterministic ids, duplicate inserts ignored). A later
// start changes nothing, not even the admin's password.
func Run(ctx context.Context, s *core.Deps) (*Bootstrapped, error) {
	c := s.DB.Collection(core.BootstrapCollection)
	want := Bootstrapped{DomainID: s.Cfg.RootDomainID, DomainName: s.Cfg.RootDomain, AdminUserID: s.Cfg.AdminUserID}
	if want.DomainID == "" {
		want.DomainID = wire.NewID("domain")
	}
	_, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "root"}, {Key: "domain_id", Value: want.DomainID},
		{Key: "domain_name", Value: want.DomainName}, {Key: "admin_user_id", Value: want.AdminUserID}})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return nil, store.Wrap(err)
	}
	var got Bootstrapped
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "root"}}).Decode(&got); err != nil {
		return nil, store.Wrap(err)
	}
	d := &core.Domain{ID: got.DomainID, DomainID: got.DomainID, Name: got.DomainName, State: core.Enabled, Tags: map[string]any{}, CreatedAt: wire.T(wire.Now())}
	if _, err := s.Domains.InsertOne(ctx, d); err != nil && !mongo.IsDuplicateKeyError(err) {
		return nil, store.Wrap(err)
	}
	pw := s.Cfg.AdminPassword
	if pw == "" {
		pw = password.Random()
	}
	created, err := domainadmin.Ensure(ctx, s, got.DomainID, got.AdminUserID, pw, "", "Administrator")
	if err != nil {
		return nil, err
	}
	got.Created = created
	if created || s.Cfg.AdminPassword != "" {
		got.AdminPassword = pw
	}
	return &got, nil
}

// SystemToken issues a SYSTEM token (SystemTokenTTL) for the root domain.
func SystemToken(s *core.Deps, b *Bootstrapped) (string, error) {
	if b == nil || b.DomainID == "" {
		return "", errors.New("not bootstrapped")
	}
	return s.Cfg.Signer.Issue(core.SystemPrincipal(b.DomainID), s.Cfg.SystemTokenTTL)
}
