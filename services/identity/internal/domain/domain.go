package domain

import (
	"context"
	"encoding/json"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/domainadmin"
	"github.com/nubes-io/nubes/services/identity/internal/password"
)

type domainAdminReq struct {
	UserID   string `json:"user_id" v:"required,max=60"`
	Password string `json:"password" v:"required,max=72"`
	Email    string `json:"email" v:"max=255"`
	Name     string `json:"name" v:"max=128"`
}

type createDomain struct {
	Name  string          `json:"name" v:"required,max=40"`
	Tags  freeform.Flat   `json:"tags"`
	Admin *domainAdminReq `json:"admin"`
}

type domainRequest struct {
	DomainID string `json:"domain_id" v:"required"`
}

type domainQuery struct {
	Query    *query.Query `json:"query"`
	DomainID string       `json:"domain_id"`
	Name     string       `json:"name"`
	State    string       `json:"state" v:"enum=ENABLED|DISABLED"`
}

type authInfoRequest struct {
	Name string `json:"name" v:"required"`
}

// authInfo is what the console reads before anyone signs in
// (spec/clients.md section 1, step 4): metadata and config.settings
// are read without a guard, so they are objects, never null.
type authInfo struct {
	DomainID          string         `json:"domain_id"`
	Name              string         `json:"name"`
	State             string         `json:"state"`
	ExternalAuthState string         `json:"external_auth_state"`
	Metadata          map[string]any `json:"metadata"`
	Config            authConfig     `json:"config"`
}

type authConfig struct {
	Settings map[string]any `json:"settings"`
}

type publicKey struct {
	DomainID  string `json:"domain_id"`
	PublicKey string `json:"public_key"`
}

// A domain is its own tenant: a domain admin reaches its own domain.
var domainResource = query.Resource{KeywordFields: []string{"domain_id", "name"}, DefaultSort: []query.SortKey{{Key: "name"}}, Fields: query.FieldsOf[core.Domain](), Maps: freeform.FieldsOf[core.Domain](),
	Tenancy: tenancy.InDomain}

// domainsOf is the domains p reaches: a SYSTEM caller creates, lists,
// enables and disables every domain, so for it they are the platform's
// records; anyone else reaches its own domain.
func domainsOf(p *auth.Principal) query.Resource {
	r := domainResource
	if p.IsSystem() {
		r.Tenancy = tenancy.OfPlatform
	}
	return r
}

func (s *service) routes() []api.Route {
	return []api.Route{
		api.Op[createDomain, core.Domain]{Path: "/identity/v2/domain/create", Access: core.SystemOnly, Summary: "Create a domain, optionally with its first admin.", Handle: s.createDomain},
		api.Op[domainRequest, core.Domain]{Path: "/identity/v2/domain/get", Access: core.DomainAdmin, Summary: "Get a domain (a domain admin gets only its own).", Handle: s.getDomain},
		api.Op[domainRequest, core.Domain]{Path: "/identity/v2/domain/enable", Access: core.SystemOnly, Summary: "Enable a domain.", Handle: s.domainState(core.Enabled)},
		api.Op[domainRequest, core.Domain]{Path: "/identity/v2/domain/disable", Access: core.SystemOnly, Summary: "Disable a domain: its tokens and API keys stop working.", Handle: s.domainState(core.Disabled)},
		api.Op[domainQuery, api.List[core.Domain]]{Path: "/identity/v2/domain/list", Access: core.SystemOnly, Summary: "List domains.", Handle: s.listDomains},
		api.Op[authInfoRequest, authInfo]{Path: "/identity/v2/domain/get-auth-info", Access: auth.Public(), Summary: "The domain id of a domain name, for login.", Handle: s.authInfo},
		api.Op[domainRequest, publicKey]{Path: "/identity/v2/domain/get-public-key", Access: auth.Public(), Summary: "The public key (JWK) that verifies the domain's tokens.", Handle: s.publicKey},
	}
}

func (s *service) createDomain(ctx context.Context, _ *auth.Principal, r *createDomain) (*core.Domain, error) {
	if r.Admin != nil {
		if err := password.Check(r.Admin.Password); err != nil {
			return nil, err
		}
	}
	id := wire.NewID("domain")
	d := &core.Domain{ID: id, DomainID: id, Name: r.Name, State: core.Enabled, Tags: wire.Object(r.Tags), CreatedAt: wire.T(wire.Now())}
	if _, err := s.Domains.InsertOne(ctx, d); err != nil {
		if e, ok := errs.As(store.Wrap(err)); ok && e.Status() == 409 {
			return nil, errs.Duplicate("name", r.Name)
		}
		return nil, store.Wrap(err)
	}
	if r.Admin != nil {
		if _, err := domainadmin.Ensure(ctx, s.Deps, id, r.Admin.UserID, r.Admin.Password, r.Admin.Email, r.Admin.Name); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (s *service) getDomain(ctx context.Context, p *auth.Principal, r *domainRequest) (*core.Domain, error) {
	return store.GetFor[core.Domain](ctx, s.Domains, domainsOf(p), p, "domain_id", r.DomainID)
}

func (s *service) domainState(state string) func(context.Context, *auth.Principal, *domainRequest) (*core.Domain, error) {
	return func(ctx context.Context, p *auth.Principal, r *domainRequest) (*core.Domain, error) {
		d, err := store.GetToChange[core.Domain](ctx, s.Domains, domainsOf(p), p, "domain_id", r.DomainID)
		if err != nil {
			return nil, err
		}
		return store.SetByID[core.Domain](ctx, s.Domains, "domain_id", d.ID, bson.D{{Key: "state", Value: state}})
	}
}

func (s *service) listDomains(ctx context.Context, p *auth.Principal, r *domainQuery) (*api.List[core.Domain], error) {
	q := query.With(r.Query, query.Params("domain_id", r.DomainID, "name", r.Name, "state", r.State)...)
	return store.SearchFor[core.Domain](ctx, s.Domains, q, domainsOf(p), p)
}

func (s *service) authInfo(ctx context.Context, _ *auth.Principal, r *authInfoRequest) (*authInfo, error) {
	var d core.Domain
	err := s.Domains.FindOne(ctx, bson.D{{Key: "name", Value: r.Name}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errs.NotFound("name", r.Name)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	// Nubes has no external authentication and no domain settings yet:
	// the console then shows the local sign-in form with its defaults.
	return &authInfo{DomainID: d.DomainID, Name: d.Name, State: d.State, ExternalAuthState: core.Disabled,
		Metadata: map[string]any{}, Config: authConfig{Settings: map[string]any{}}}, nil
}

func (s *service) publicKey(ctx context.Context, _ *auth.Principal, r *domainRequest) (*publicKey, error) {
	if _, err := store.Get[core.Domain](ctx, s.Domains, "domain_id", r.DomainID); err != nil {
		return nil, err
	}
	return &publicKey{DomainID: r.DomainID, PublicKey: string(mustJSON(s.Cfg.Signer.PublicJWK()))}, nil
}

type service struct{ *core.Deps }

// Routes are the operations of domains.
func Routes(d *core.Deps) []api.Route { return (&service{Deps: d}).routes() }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
