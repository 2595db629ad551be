package apikey

import (
	"context"
	"encoding/json"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/credential"
)

// API keys, v1 and v2 (spec part 1; semantics.md 4.3). One collection
// holds both generations; Version says which one made a key, and both
// generations see every key of the domain, each in its own shape.
//
// A key is a JWT signed by identity (typ API_KEY, jti = api_key_id). Its
// value is shown once, in the create response, and never stored: the
// record only says whether the key is still good, and every service asks
// identity that (auth.Checked + credential.Checker.Check) before trusting it.
//
// Rules (docs/decisions.md, "API keys"):
//   - The key acts with the role its user has in the domain when it is
//     made: DOMAIN_ADMIN for a domain admin, USER otherwise. Check refuses
//     it once the user's role differs (a demoted admin's keys stop).
//   - v2: a user manages its own keys. A DOMAIN_ADMIN (or SYSTEM) caller
//     may also get, list, count, disable and delete the keys of every user
//     of its domain, but not create, enable or rename them for others.
//   - An API key cannot create or enable API keys, so a stolen key cannot
//     outlive its own revocation. A SYSTEM token has no user and makes no
//     v2 key.
//   - v2 keys expire (default now + 365 days, at most 365 days ahead);
//     once expired_at passes they report EXPIRED and can no longer be
//     enabled. v1 keys never expire.
//   - v1: DOMAIN_ADMIN of the named domain_id, or SYSTEM for any domain;
//     a domain_id other than the caller's answers 404.
//   - At most maxAPIKeysPerUser keys per user.

// maxAPIKeyLifetime bounds a v2 key's expired_at (upstream: one year).
const maxAPIKeyLifetime = 365 * 24 * time.Hour

// maxAPIKeysPerUser bounds how many keys one user may hold.
const maxAPIKeysPerUser = 100

type createAPIKeyV2 struct {
	Name      string `json:"name" v:"max=128"`
	ExpiredAt string `json:"expired_at" v:"max=40" doc:"ISO 8601; default now + 365 days, at most 365 days ahead"`
}

type updateAPIKeyV2 struct {
	APIKeyID string `json:"api_key_id" v:"required,max=64"`
	Name     string `json:"name" v:"max=128"`
}

type apiKeyRequestV2 struct {
	APIKeyID string `json:"api_key_id" v:"required,max=64"`
}

type apiKeyQueryV2 struct {
	Query    *query.Query `json:"query"`
	APIKeyID string       `json:"api_key_id"`
	Name     string       `json:"name"`
	State    string       `json:"state" v:"enum=ENABLED|DISABLED|EXPIRED"`
	UserID   string       `json:"user_id"`
}

type createAPIKeyV1 struct {
	UserID   string `json:"user_id" v:"required,max=60"`
	DomainID string `json:"domain_id" v:"required,max=64"`
}

type apiKeyRequestV1 struct {
	APIKeyID string `json:"api_key_id" v:"required,max=64"`
	DomainID string `json:"domain_id" v:"required,max=64"`
}

type getAPIKeyV1 struct {
	APIKeyID string   `json:"api_key_id" v:"required,max=64"`
	DomainID string   `json:"domain_id" v:"required,max=64"`
	Only     []string `json:"only" v:"max=20"`
}

type apiKeyQueryV1 struct {
	Query    *query.Query `json:"query"`
	DomainID string       `json:"domain_id" v:"required,max=64"`
	APIKeyID string       `json:"api_key_id"`
	State    string       `json:"state" v:"enum=ENABLED|DISABLED|EXPIRED"`
	UserID   string       `json:"user_id"`
}

type apiKeyStatV1 struct {
	Query    *stat.Query `json:"query" v:"required"`
	DomainID string      `json:"domain_id" v:"required,max=64"`
}

// APIKeyInfoV2 is the v2 APIKeyInfo. APIKey is set only by create.
type APIKeyInfoV2 struct {
	APIKeyID       string    `json:"api_key_id"`
	APIKey         string    `json:"api_key"`
	AppID          string    `json:"app_id"`
	Name           string    `json:"name"`
	State          string    `json:"state"`
	DomainID       string    `json:"domain_id"`
	UserID         string    `json:"user_id"`
	CreatedAt      wire.Time `json:"created_at"`
	LastAccessedAt wire.Time `json:"last_accessed_at"`
	ExpiredAt      wire.Time `json:"expired_at"`
}

// APIKeyInfoV1 is the v1 APIKeyInfo. APIKey is set only by create.
type APIKeyInfoV1 struct {
	APIKeyID       string    `json:"api_key_id"`
	APIKey         string    `json:"api_key"`
	State          string    `json:"state"`
	UserID         string    `json:"user_id"`
	DomainID       string    `json:"domain_id"`
	LastAccessedAt wire.Time `json:"last_accessed_at"`
	CreatedAt      wire.Time `json:"created_at"`
	only           []string  // get's `only`: the fields to keep, nil for all
}

// A key is its user's alone (Owner), whatever the role; keysOf widens
// that for a domain admin where it may act on every key of its domain.
var apiKeyResource = query.Resource{
	KeywordFields: []string{"api_key_id", "name", "user_id"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"api_key_id", "name", "state", "user_id", "expired_at"},
	Fields:        query.FieldsOf[core.APIKey](),
	Maps:          freeform.FieldsOf[core.APIKey](),
	Tenancy:       tenancy.Fields{Domain: "domain_id", Owner: "user_id"},
}

// keysOf is the API keys p reaches: its own; with adminToo, for a domain
// admin (or SYSTEM), every key of its domain: v1, and v2's get, list,
// stat, disable and delete. Creating, enabling and renaming stay the
// user's own (adminToo false), so an admin cannot revive another's key.
func keysOf(p *auth.Principal, adminToo bool) query.Resource {
	r := apiKeyResource
	if adminToo && tenancy.DomainWide(p) {
		r.Tenancy = tenancy.InDomain
	}
	return r
}

func (s *service) routes() []api.Route {
	const v2, v1 = "/identity/v2/api-key/", "/identity/v1/api-key/"
	return []api.Route{
		api.Op[createAPIKeyV2, APIKeyInfoV2]{Path: v2 + "create", Access: core.AnyRole, Summary: "Create an API key of the caller; its value appears only in this answer.", Handle: s.createKeyV2},
		api.Op[updateAPIKeyV2, APIKeyInfoV2]{Path: v2 + "update", Access: core.AnyRole, Summary: "Rename one of the caller's API keys.", Handle: s.updateKeyV2},
		api.Op[apiKeyRequestV2, APIKeyInfoV2]{Path: v2 + "enable", Access: core.AnyRole, Summary: "Enable one of the caller's API keys (not an expired one).", Handle: s.enableKeyV2},
		api.Op[apiKeyRequestV2, APIKeyInfoV2]{Path: v2 + "disable", Access: core.AnyRole, Summary: "Disable an API key: every service refuses it within seconds.", Handle: s.disableKeyV2},
		api.Op[apiKeyRequestV2, api.Empty]{Path: v2 + "delete", Access: core.AnyRole, Summary: "Delete an API key: every service refuses it within seconds.", Handle: s.deleteKeyV2},
		api.Op[apiKeyRequestV2, APIKeyInfoV2]{Path: v2 + "get", Access: core.AnyRole, Summary: "Get an API key (never its value).", Handle: s.getKeyV2},
		api.Op[apiKeyQueryV2, api.List[APIKeyInfoV2]]{Path: v2 + "list", Access: core.AnyRole, Summary: "List the caller's API keys (a domain admin: every key of the domain).", Handle: s.listKeysV2},
		api.Op[core.StatRequest, map[string]any]{Path: v2 + "stat", Access: core.AnyRole, Summary: "Statistics over the API keys the caller may list.", Handle: s.statKeysV2},

		api.Op[createAPIKeyV1, APIKeyInfoV1]{Path: v1 + "create", Access: core.DomainAdmin, Summary: "Create an API key for a user of the domain; its value appears only in this answer.", Handle: s.createKeyV1},
		api.Op[apiKeyRequestV1, APIKeyInfoV1]{Path: v1 + "enable", Access: core.DomainAdmin, Summary: "Enable an API key.", Handle: s.keyStateV1(core.Enabled)},
		api.Op[apiKeyRequestV1, APIKeyInfoV1]{Path: v1 + "disable", Access: core.DomainAdmin, Summary: "Disable an API key: every service refuses it within seconds.", Handle: s.keyStateV1(core.Disabled)},
		api.Op[apiKeyRequestV1, api.Empty]{Path: v1 + "delete", Access: core.DomainAdmin, Summary: "Delete an API key.", Handle: s.deleteKeyV1},
		api.Op[getAPIKeyV1, APIKeyInfoV1]{Path: v1 + "get", Access: core.DomainAdmin, Summary: "Get an API key (never its value).", Handle: s.getKeyV1},
		api.Op[apiKeyQueryV1, api.List[APIKeyInfoV1]]{Path: v1 + "list", Access: core.DomainAdmin, Summary: "List the API keys of a domain.", Handle: s.listKeysV1},
		api.Op[apiKeyStatV1, map[string]any]{Path: v1 + "stat", Access: core.DomainAdmin, Summary: "Statistics over the API keys of a domain.", Handle: s.statKeysV1},
	}
}

// keyState is the state a key reports: EXPIRED once expired_at passed.
func keyState(k *core.APIKey, now time.Time) string {
	if !k.ExpiredAt.IsZero() && now.After(k.ExpiredAt.Time) {
		return core.Expired
	}
	return k.State
}

func keyInfoV2(k *core.APIKey, now time.Time) APIKeyInfoV2 {
	return APIKeyInfoV2{APIKeyID: k.APIKeyID, AppID: k.AppID, Name: k.Name, State: keyState(k, now), DomainID: k.DomainID,
		UserID: k.UserID, CreatedAt: k.CreatedAt, LastAccessedAt: k.LastAccessedAt, ExpiredAt: k.ExpiredAt}
}

func keyInfoV1(k *core.APIKey, now time.Time) APIKeyInfoV1 {
	return APIKeyInfoV1{APIKeyID: k.APIKeyID, State: keyState(k, now), UserID: k.UserID, DomainID: k.DomainID,
		LastAccessedAt: k.LastAccessedAt, CreatedAt: k.CreatedAt}
}

// MarshalJSON writes every field, or only those asked for by get's only.
func (i APIKeyInfoV1) MarshalJSON() ([]byte, error) {
	type plain APIKeyInfoV1
	b, err := json.Marshal(plain(i))
	if err != nil || i.only == nil {
		return b, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	keep := map[string]json.RawMessage{}
	for _, f := range i.only {
		if v, ok := all[f]; ok {
			keep[f] = v
		}
	}
	return json.Marshal(keep)
}

// keyIssuer refuses the callers that may not mint or revive a key: an API
// key (a stolen key must not outlive its revocation) and a SYSTEM token
// (v2 keys belong to the calling user, and a SYSTEM token has none).
func keyIssuer(p *auth.Principal, v2 bool) error {
	if p.TokenType == auth.APIKey || (v2 && p.TokenType == auth.SystemToken) {
		return errs.New(errs.PermissionDenied, "Permission denied. (reason = an API key cannot create or enable API keys; a SYSTEM token has no user)")
	}
	return nil
}

// parseExpiry reads expired_at: RFC 3339 (any offset), or a UTC date and
// time without offset, or a date (midnight UTC).
func parseExpiry(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errs.Invalid("expired_at", "not an ISO 8601 time")
}

// newKey signs and records a key of userID, a user p reaches.
func (s *service) newKey(ctx context.Context, p *auth.Principal, userID, name string, version int, expiresAt time.Time) (*core.APIKey, string, error) {
	u, err := s.UserFor(ctx, p, userID)
	if err != nil {
		return nil, "", err
	}
	now := wire.Now()
	var ttl time.Duration // 0: no expiry (v1)
	if !expiresAt.IsZero() {
		if ttl = expiresAt.Sub(now); ttl <= 0 {
			return nil, "", errs.Invalid("expired_at", "must be in the future")
		}
	}
	var k *core.APIKey
	var token string
	// A child of the user (core.UserRecords): a key recorded while the
	// user's delete runs goes again (404).
	err = s.UserRecords().Live(ctx, u.ID, func(ctx context.Context, u *core.User, w *store.Writes[core.User]) error {
		domainID := u.DomainID
		n, err := s.APIKeys.CountDocuments(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "user_id", Value: u.UserID}})
		if err != nil {
			return store.Wrap(err)
		}
		if n >= maxAPIKeysPerUser {
			return errs.Invalid("user_id", "a user holds at most 100 API keys; delete one first")
		}
		id := wire.NewID("api-key")
		token, err = s.Cfg.Signer.Issue(auth.Principal{TokenType: auth.APIKey, TokenID: id, DomainID: domainID, UserID: u.UserID, Role: credential.KeyRole(u)}, ttl)
		if err != nil {
			return err
		}
		k = &core.APIKey{ID: id, APIKeyID: id, Name: name, State: core.Enabled, UserID: u.UserID, DomainID: domainID,
			Version: version, CreatedAt: wire.T(now)}
		if !expiresAt.IsZero() {
			k.ExpiredAt = wire.T(expiresAt)
		}
		// Signed before it is recorded: a key whose insert failed has no
		// record, and Check refuses a key without one.
		return w.Create(ctx, func(ctx context.Context) error {
			_, err := s.APIKeys.InsertOne(ctx, k)
			return store.Wrap(err)
		}, func(ctx context.Context) error {
			_, err := s.APIKeys.DeleteOne(ctx, bson.D{{Key: "_id", Value: k.ID}})
			return err
		})
	})
	if errs.Is(err, errs.NotFoundCode) {
		return nil, "", errs.NotFound("user_id", userID)
	}
	if err != nil {
		return nil, "", err
	}
	return k, token, nil
}

// sweepExpired marks the domain's keys whose expired_at passed as
// EXPIRED, so that list and stat filters on state see what get reports.
func (s *service) sweepExpired(ctx context.Context, domainID string) error {
	_, err := s.APIKeys.UpdateMany(ctx, bson.D{
		{Key: "domain_id", Value: domainID},
		{Key: "expired_at", Value: bson.D{{Key: "$type", Value: "date"}, {Key: "$lt", Value: wire.T(wire.Now())}}},
		{Key: "state", Value: bson.D{{Key: "$ne", Value: core.Expired}}},
	}, bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: core.Expired}}}})
	return store.Wrap(err)
}

// setKeyState changes a key's state. Enabling an expired key is refused.
func (s *service) setKeyState(ctx context.Context, k *core.APIKey, state string) (*core.APIKey, error) {
	if state == core.Enabled && keyState(k, time.Now()) == core.Expired {
		return nil, errs.Invalid("api_key_id", "the API key has expired; create a new one")
	}
	return store.SetByID[core.APIKey](ctx, s.APIKeys, "api_key_id", k.ID, bson.D{{Key: "state", Value: state}})
}

func (s *service) deleteKey(ctx context.Context, k *core.APIKey) error {
	_, err := s.APIKeys.DeleteOne(ctx, bson.D{{Key: "_id", Value: k.ID}})
	return store.Wrap(err)
}

// --- v2 ---

// ownKey loads a key p may change (keysOf); anything else is 404.
func (s *service) ownKey(ctx context.Context, p *auth.Principal, id string, adminToo bool) (*core.APIKey, error) {
	return store.GetToChange[core.APIKey](ctx, s.APIKeys, keysOf(p, adminToo), p, "api_key_id", id)
}

func (s *service) createKeyV2(ctx context.Context, p *auth.Principal, r *createAPIKeyV2) (*APIKeyInfoV2, error) {
	if err := keyIssuer(p, true); err != nil {
		return nil, err
	}
	now := time.Now()
	expires := now.Add(maxAPIKeyLifetime)
	if r.ExpiredAt != "" {
		t, err := parseExpiry(r.ExpiredAt)
		if err != nil {
			return nil, err
		}
		if !t.After(now) {
			return nil, errs.Invalid("expired_at", "must be in the future")
		}
		if t.After(now.Add(maxAPIKeyLifetime)) {
			return nil, errs.New(errs.APIKeyExpiredLimit, "The expiration date of an API key is at most one year ahead. (expired_at = %s)", r.ExpiredAt)
		}
		expires = t
	}
	k, token, err := s.newKey(ctx, p, p.UserID, r.Name, 2, expires)
	if err != nil {
		return nil, err
	}
	info := keyInfoV2(k, time.Now())
	info.APIKey = token
	return &info, nil
}

func (s *service) updateKeyV2(ctx context.Context, p *auth.Principal, r *updateAPIKeyV2) (*APIKeyInfoV2, error) {
	k, err := s.ownKey(ctx, p, r.APIKeyID, false)
	if err != nil {
		return nil, err
	}
	if r.Name != "" {
		if k, err = store.SetByID[core.APIKey](ctx, s.APIKeys, "api_key_id", k.ID, bson.D{{Key: "name", Value: r.Name}}); err != nil {
			return nil, err
		}
	}
	info := keyInfoV2(k, time.Now())
	return &info, nil
}

func (s *service) enableKeyV2(ctx context.Context, p *auth.Principal, r *apiKeyRequestV2) (*APIKeyInfoV2, error) {
	if err := keyIssuer(p, true); err != nil {
		return nil, err
	}
	k, err := s.ownKey(ctx, p, r.APIKeyID, false)
	if err != nil {
		return nil, err
	}
	if k, err = s.setKeyState(ctx, k, core.Enabled); err != nil {
		return nil, err
	}
	info := keyInfoV2(k, time.Now())
	return &info, nil
}

func (s *service) disableKeyV2(ctx context.Context, p *auth.Principal, r *apiKeyRequestV2) (*APIKeyInfoV2, error) {
	k, err := s.ownKey(ctx, p, r.APIKeyID, true)
	if err != nil {
		return nil, err
	}
	if k, err = s.setKeyState(ctx, k, core.Disabled); err != nil {
		return nil, err
	}
	info := keyInfoV2(k, time.Now())
	return &info, nil
}

func (s *service) deleteKeyV2(ctx context.Context, p *auth.Principal, r *apiKeyRequestV2) (*api.Empty, error) {
	k, err := s.ownKey(ctx, p, r.APIKeyID, true)
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, s.deleteKey(ctx, k)
}

func (s *service) getKeyV2(ctx context.Context, p *auth.Principal, r *apiKeyRequestV2) (*APIKeyInfoV2, error) {
	k, err := store.GetFor[core.APIKey](ctx, s.APIKeys, keysOf(p, true), p, "api_key_id", r.APIKeyID)
	if err != nil {
		return nil, err
	}
	info := keyInfoV2(k, time.Now())
	return &info, nil
}

func (s *service) listKeysV2(ctx context.Context, p *auth.Principal, r *apiKeyQueryV2) (*api.List[APIKeyInfoV2], error) {
	if err := s.sweepExpired(ctx, p.DomainID); err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("api_key_id", r.APIKeyID, "name", r.Name, "state", r.State, "user_id", r.UserID)...)
	l, err := store.SearchFor[core.APIKey](ctx, s.APIKeys, q, keysOf(p, true), p)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := &api.List[APIKeyInfoV2]{Results: make([]APIKeyInfoV2, len(l.Results)), TotalCount: l.TotalCount, Fields: l.Fields}
	for i := range l.Results {
		out.Results[i] = keyInfoV2(&l.Results[i], now)
	}
	return out, nil
}

func (s *service) statKeysV2(ctx context.Context, p *auth.Principal, r *core.StatRequest) (*map[string]any, error) {
	if err := s.sweepExpired(ctx, p.DomainID); err != nil {
		return nil, err
	}
	return core.StatFor(ctx, s.APIKeys, p, keysOf(p, true), r.Query)
}

// --- v1 ---

func (s *service) keyV1(ctx context.Context, p *auth.Principal, id, domainID string) (*core.APIKey, error) {
	caller, err := s.CallerIn(ctx, p, domainID)
	if err != nil {
		return nil, err
	}
	return store.GetToChange[core.APIKey](ctx, s.APIKeys, keysOf(caller, true), caller, "api_key_id", id)
}

func (s *service) createKeyV1(ctx context.Context, p *auth.Principal, r *createAPIKeyV1) (*APIKeyInfoV1, error) {
	if err := keyIssuer(p, false); err != nil {
		return nil, err
	}
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	k, token, err := s.newKey(ctx, caller, r.UserID, "", 1, time.Time{})
	if err != nil {
		return nil, err
	}
	info := keyInfoV1(k, time.Now())
	info.APIKey = token
	return &info, nil
}

func (s *service) keyStateV1(state string) func(context.Context, *auth.Principal, *apiKeyRequestV1) (*APIKeyInfoV1, error) {
	return func(ctx context.Context, p *auth.Principal, r *apiKeyRequestV1) (*APIKeyInfoV1, error) {
		if state == core.Enabled {
			if err := keyIssuer(p, false); err != nil {
				return nil, err
			}
		}
		k, err := s.keyV1(ctx, p, r.APIKeyID, r.DomainID)
		if err != nil {
			return nil, err
		}
		if k, err = s.setKeyState(ctx, k, state); err != nil {
			return nil, err
		}
		info := keyInfoV1(k, time.Now())
		return &info, nil
	}
}

func (s *service) deleteKeyV1(ctx context.Context, p *auth.Principal, r *apiKeyRequestV1) (*api.Empty, error) {
	k, err := s.keyV1(ctx, p, r.APIKeyID, r.DomainID)
	if err != nil {
		return nil, err
	}
	return &api.Empty{}, s.deleteKey(ctx, k)
}

func (s *service) getKeyV1(ctx context.Context, p *auth.Principal, r *getAPIKeyV1) (*APIKeyInfoV1, error) {
	k, err := s.keyV1(ctx, p, r.APIKeyID, r.DomainID)
	if err != nil {
		return nil, err
	}
	info := keyInfoV1(k, time.Now())
	if len(r.Only) > 0 {
		info.only = r.Only
	}
	return &info, nil
}

func (s *service) listKeysV1(ctx context.Context, p *auth.Principal, r *apiKeyQueryV1) (*api.List[APIKeyInfoV1], error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	if err := s.sweepExpired(ctx, caller.DomainID); err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("api_key_id", r.APIKeyID, "state", r.State, "user_id", r.UserID)...)
	l, err := store.SearchFor[core.APIKey](ctx, s.APIKeys, q, keysOf(caller, true), caller)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := &api.List[APIKeyInfoV1]{Results: make([]APIKeyInfoV1, len(l.Results)), TotalCount: l.TotalCount, Fields: l.Fields}
	for i := range l.Results {
		out.Results[i] = keyInfoV1(&l.Results[i], now)
	}
	return out, nil
}

func (s *service) statKeysV1(ctx context.Context, p *auth.Principal, r *apiKeyStatV1) (*map[string]any, error) {
	caller, err := s.CallerIn(ctx, p, r.DomainID)
	if err != nil {
		return nil, err
	}
	if err := s.sweepExpired(ctx, caller.DomainID); err != nil {
		return nil, err
	}
	return core.StatFor(ctx, s.APIKeys, caller, keysOf(caller, true), r.Query)
}

type service struct{ *core.Deps }

// Routes are the operations of API keys (v1 and v2).
func Routes(d *core.Deps) []api.Route { return (&service{Deps: d}).routes() }
