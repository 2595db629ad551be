package identityapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

var (
	systemOnly  = auth.Roles(auth.SystemAdmin)
	domainAdmin = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)
	readers     = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
)

type (
	domainAdminReq struct {
		UserID   string `json:"user_id" v:"required,max=60"`
		Password string `json:"password" v:"required,max=72"`
		Email    string `json:"email" v:"max=255"`
		Name     string `json:"name" v:"max=128"`
	}
	createDomain struct {
		Name  string          `json:"name" v:"required,max=40"`
		Tags  freeform.Flat   `json:"tags"`
		Admin *domainAdminReq `json:"admin"`
	}
	domainRequest struct {
		DomainID string `json:"domain_id" v:"required"`
	}
	domainQuery struct {
		Query    *query.Query `json:"query"`
		DomainID string       `json:"domain_id"`
		Name     string       `json:"name"`
		State    string       `json:"state" v:"enum=ENABLED|DISABLED"`
	}
	authInfoRequest struct {
		Name string `json:"name" v:"required"`
	}
	// authInfo is what the console reads before anyone signs in
	// (spec/clients.md section 1, step 4): metadata and config.settings
	// are read without a guard, so they are objects, never null.
	authInfo struct {
		DomainID          string         `json:"domain_id"`
		Name              string         `json:"name"`
		State             string         `json:"state"`
		ExternalAuthState string         `json:"external_auth_state"`
		Metadata          map[string]any `json:"metadata"`
		Config            authConfig     `json:"config"`
	}
	authConfig struct {
		Settings map[string]any `json:"settings"`
	}
	publicKey struct {
		DomainID  string `json:"domain_id"`
		PublicKey string `json:"public_key"`
	}
	statRequest struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// A domain is its own tenant: a domain admin reaches its own domain.
var domainResource = query.Resource{KeywordFields: []string{"domain_id", "name"}, DefaultSort: []query.SortKey{{Key: "name"}}, Fields: query.FieldsOf[Domain](), Maps: freeform.FieldsOf[Domain](),
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

func (s *Service) domainRoutes() []api.Route {
	return []api.Route{
		api.Op[createDomain, Domain]{Path: "/identity/v2/domain/create", Access: systemOnly, Summary: "Create a domain, optionally with its first admin.", Handle: s.createDomain},
		api.Op[domainRequest, Domain]{Path: "/identity/v2/domain/get", Access: domainAdmin, Summary: "Get a domain (a domain admin gets only its own).", Handle: s.getDomain},
		api.Op[domainRequest, Domain]{Path: "/identity/v2/domain/enable", Access: systemOnly, Summary: "Enable a domain.", Handle: s.domainState(Enabled)},
		api.Op[domainRequest, Domain]{Path: "/identity/v2/domain/disable", Access: systemOnly, Summary: "Disable a domain: its tokens and API keys stop working.", Handle: s.domainState(Disabled)},
		api.Op[domainQuery, api.List[Domain]]{Path: "/identity/v2/domain/list", Access: systemOnly, Summary: "List domains.", Handle: s.listDomains},
		api.Op[authInfoRequest, authInfo]{Path: "/identity/v2/domain/get-auth-info", Access: auth.Public(), Summary: "The domain id of a domain name, for login.", Handle: s.authInfo},
		api.Op[domainRequest, publicKey]{Path: "/identity/v2/domain/get-public-key", Access: auth.Public(), Summary: "The public key (JWK) that verifies the domain's tokens.", Handle: s.publicKey},
	}
}

func (s *Service) createDomain(ctx context.Context, _ *auth.Principal, r *createDomain) (*Domain, error) {
	if r.Admin != nil {
		if err := CheckPassword(r.Admin.Password); err != nil {
			return nil, err
		}
	}
	id := wire.NewID("domain")
	d := &Domain{ID: id, DomainID: id, Name: r.Name, State: Enabled, Tags: wire.Object(r.Tags), CreatedAt: wire.T(wire.Now())}
	if _, err := s.domains.InsertOne(ctx, d); err != nil {
		if e, ok := errs.As(store.Wrap(err)); ok && e.Status() == 409 {
			return nil, errs.Duplicate("name", r.Name)
		}
		return nil, store.Wrap(err)
	}
	if r.Admin != nil {
		if _, err := s.ensureAdmin(ctx, id, r.Admin.UserID, r.Admin.Password, r.Admin.Email, r.Admin.Name); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// ensureAdmin creates a LOCAL user bound to the domain admin role. Both
// records have deterministic ids, so running it twice (or on two replicas
// at once) makes one user and one binding.
func (s *Service) ensureAdmin(ctx context.Context, domainID, userID, password, email, name string) (bool, error) {
	hash, err := HashPassword(password)
	if err != nil {
		return false, err
	}
	now := wire.T(wire.Now())
	u := &User{
		ID: UserKey(domainID, userID), UserID: userID, DomainID: domainID, Name: name, State: Enabled, Email: email,
		AuthType: "LOCAL", UserType: "USER", RoleType: string(auth.DomainAdmin), RoleID: "managed-domain-admin",
		MFA: MFA{State: Disabled, Options: map[string]any{}}, Language: "en", Timezone: "UTC", RequiredActions: []string{},
		Tags: map[string]any{}, PasswordHash: hash, CreatedAt: now,
	}
	created := true
	if _, err := s.users.InsertOne(ctx, u); err != nil {
		if !mongo.IsDuplicateKeyError(err) {
			return false, store.Wrap(err)
		}
		created = false
	}
	b := newBinding(domainID, userID, "managed-domain-admin", string(auth.DomainAdmin), "DOMAIN", "")
	if _, err := s.bindings.InsertOne(ctx, b); err != nil && !mongo.IsDuplicateKeyError(err) {
		return false, store.Wrap(err)
	}
	return created, nil
}

func (s *Service) getDomain(ctx context.Context, p *auth.Principal, r *domainRequest) (*Domain, error) {
	return store.GetFor[Domain](ctx, s.domains, domainsOf(p), p, "domain_id", r.DomainID)
}

func (s *Service) domainState(state string) func(context.Context, *auth.Principal, *domainRequest) (*Domain, error) {
	return func(ctx context.Context, p *auth.Principal, r *domainRequest) (*Domain, error) {
		d, err := store.GetToChange[Domain](ctx, s.domains, domainsOf(p), p, "domain_id", r.DomainID)
		if err != nil {
			return nil, err
		}
		return store.SetByID[Domain](ctx, s.domains, "domain_id", d.ID, bson.D{{Key: "state", Value: state}})
	}
}

func (s *Service) listDomains(ctx context.Context, p *auth.Principal, r *domainQuery) (*api.List[Domain], error) {
	q := query.With(r.Query, query.Params("domain_id", r.DomainID, "name", r.Name, "state", r.State)...)
	return store.SearchFor[Domain](ctx, s.domains, q, domainsOf(p), p)
}

func (s *Service) authInfo(ctx context.Context, _ *auth.Principal, r *authInfoRequest) (*authInfo, error) {
	var d Domain
	err := s.domains.FindOne(ctx, bson.D{{Key: "name", Value: r.Name}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errs.NotFound("name", r.Name)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	// Nubes has no external authentication and no domain settings yet:
	// the console then shows the local sign-in form with its defaults.
	return &authInfo{DomainID: d.DomainID, Name: d.Name, State: d.State, ExternalAuthState: Disabled,
		Metadata: map[string]any{}, Config: authConfig{Settings: map[string]any{}}}, nil
}

func (s *Service) publicKey(ctx context.Context, _ *auth.Principal, r *domainRequest) (*publicKey, error) {
	if _, err := store.Get[Domain](ctx, s.domains, "domain_id", r.DomainID); err != nil {
		return nil, err
	}
	return &publicKey{DomainID: r.DomainID, PublicKey: string(mustJSON(s.cfg.Signer.PublicJWK()))}, nil
}

// bindingID is deterministic: one binding per user and workspace (""
// for the domain), enforced by _id.
func bindingID(domainID, userID, workspaceID string) string {
	sum := sha256.Sum256([]byte(domainID + "/" + userID + "/" + workspaceID))
	return "rb-" + hex.EncodeToString(sum[:6])
}

func newBinding(domainID, userID, roleID, roleType, group, workspaceID string) *RoleBinding {
	id := bindingID(domainID, userID, workspaceID)
	return &RoleBinding{ID: id, RoleBindingID: id, UserID: userID, RoleID: roleID, RoleType: roleType,
		ResourceGroup: group, WorkspaceID: workspaceID, DomainID: domainID, CreatedAt: wire.T(wire.Now())}
}

// binding is the user's binding in a workspace ("" for the domain), or nil.
func (s *Service) binding(ctx context.Context, domainID, userID, workspaceID string) (*RoleBinding, error) {
	b, err := store.Get[RoleBinding](ctx, s.bindings, "role_binding_id", bindingID(domainID, userID, workspaceID))
	if isNotFound(err) {
		return nil, nil
	}
	return b, err
}
