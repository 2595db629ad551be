// Package exchangerate holds the exchange-rate operations of the
// cost-analysis service (spec part 2, semantics.md section 7): the
// supported currencies and their default rates come from config; a domain
// overrides a rate (set), returns to the default (reset), or disables a
// currency. Rows exist only for a domain's overrides.
//
// It must not hold rules of other resources.
package exchangerate

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// UnsupportedCurrency is the code of a currency outside the configured set.
const UnsupportedCurrency = errs.UnsupportedCurrency

// Rate is the ExchangeRateInfo sent, and a domain's override as stored
// (_id = domain_id/currency).
type Rate struct {
	ID        string  `bson:"_id" json:"-"`
	Currency  string  `bson:"currency" json:"currency"`
	Rate      float64 `bson:"rate" json:"rate"`
	State     string  `bson:"state" json:"state"`
	IsDefault bool    `bson:"is_default" json:"is_default"`
	DomainID  string  `bson:"domain_id" json:"domain_id"`
}

type (
	setRequest struct {
		Currency string   `json:"currency" v:"required,max=8"`
		Rate     *float64 `json:"rate" v:"required"`
		DomainID string   `json:"domain_id" v:"max=64"`
	}
	rateRequest struct {
		Currency string `json:"currency" v:"required,max=8"`
		DomainID string `json:"domain_id" v:"max=64"`
	}
	rateQuery struct {
		Query    *query.Query `json:"query"` // accepted and ignored, as upstream does
		DomainID string       `json:"domain_id" v:"max=64"`
	}
)

// Validate: a rate above 0.
func (r *setRequest) Validate() error {
	if *r.Rate <= 0 {
		return errs.Invalid("rate", "must be greater than 0")
	}
	return nil
}

// Rates serves the exchange-rate operations.
type Rates struct {
	c        *mongo.Collection
	defaults map[string]float64
}

// New serves rates with the configured defaults (currency → rate).
func New(db *mongo.Database, defaults map[string]float64) *Rates {
	d := map[string]float64{}
	for k, v := range defaults {
		d[strings.ToUpper(strings.TrimSpace(k))] = v
	}
	return &Rates{c: db.Collection(core.ExchangeRatesCollection), defaults: d}
}

// Routes are the operations (no stat: the spec has none).
func (rs *Rates) Routes() []api.Route {
	const base = "/cost-analysis/v1/exchange-rate/"
	return []api.Route{
		api.Op[setRequest, Rate]{Path: base + "set", Access: core.Admins, Summary: "Override the rate of a currency for the caller's domain.", Handle: rs.set},
		api.Op[rateRequest, Rate]{Path: base + "reset", Access: core.Admins, Summary: "Return a currency to its default rate.", Handle: rs.reset},
		api.Op[rateRequest, Rate]{Path: base + "enable", Access: core.Admins, Summary: "Enable a currency for the caller's domain.", Handle: rs.enable},
		api.Op[rateRequest, Rate]{Path: base + "disable", Access: core.Admins, Summary: "Disable a currency for the caller's domain.", Handle: rs.disable},
		api.Op[rateRequest, Rate]{Path: base + "get", Access: core.Readers, Summary: "Get the rate of a currency: the domain's override, else the default.", Handle: rs.get},
		api.Op[rateQuery, api.List[Rate]]{Path: base + "list", Access: core.Readers, Summary: "List every supported currency's rate for the caller's domain.", Handle: rs.list},
	}
}

// domainOf is the domain a request acts for: the caller's; a domain_id in
// the body (the spec lists it) must name it, except for a service
// credential (never a person's SYSTEM_ADMIN grant: issue 21).
func domainOf(p *auth.Principal, domainID string) (string, error) {
	if domainID == "" || domainID == p.DomainID {
		return p.DomainID, nil
	}
	if p.IsService() {
		return domainID, nil
	}
	return "", errs.Forbidden()
}

// currency normalises and checks a currency code.
func (rs *Rates) currency(c string) (string, error) {
	c = strings.ToUpper(c)
	if _, ok := rs.defaults[c]; !ok {
		return "", errs.New(UnsupportedCurrency, "Currency %s is not supported (supported: %s).", c, strings.Join(rs.supported(), ", "))
	}
	return c, nil
}

func (rs *Rates) supported() []string { return slices.Sorted(maps.Keys(rs.defaults)) }

func (rs *Rates) byDefault(currency, domainID string) *Rate {
	return &Rate{Currency: currency, Rate: rs.defaults[currency], State: core.Enabled, IsDefault: true, DomainID: domainID}
}

func key(domainID, currency string) string { return domainID + "/" + currency }

// custom returns the domain's override, or nil.
func (rs *Rates) custom(ctx context.Context, domainID, currency string) (*Rate, error) {
	var r Rate
	err := rs.c.FindOne(ctx, bson.D{{Key: "_id", Value: key(domainID, currency)}}).Decode(&r)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &r, nil
}

// put writes an override whole (upsert by _id) and returns it.
func (rs *Rates) put(ctx context.Context, r *Rate) (*Rate, error) {
	r.ID, r.IsDefault = key(r.DomainID, r.Currency), false
	_, err := rs.c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: r.ID}}, r, options.Replace().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) { // a concurrent first write won the insert: write over it
		_, err = rs.c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: r.ID}}, r)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return r, nil
}

func (rs *Rates) target(p *auth.Principal, currency, domainID string) (string, string, error) {
	d, err := domainOf(p, domainID)
	if err != nil {
		return "", "", err
	}
	c, err := rs.currency(currency)
	return c, d, err
}

func (rs *Rates) set(ctx context.Context, p *auth.Principal, r *setRequest) (*Rate, error) {
	c, d, err := rs.target(p, r.Currency, r.DomainID)
	if err != nil {
		return nil, err
	}
	state := core.Enabled
	if cur, err := rs.custom(ctx, d, c); err != nil {
		return nil, err
	} else if cur != nil {
		state = cur.State // setting a rate does not enable a disabled currency
	}
	return rs.put(ctx, &Rate{Currency: c, Rate: *r.Rate, State: state, DomainID: d})
}

func (rs *Rates) reset(ctx context.Context, p *auth.Principal, r *rateRequest) (*Rate, error) {
	c, d, err := rs.target(p, r.Currency, r.DomainID)
	if err != nil {
		return nil, err
	}
	if _, err := rs.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: key(d, c)}}); err != nil {
		return nil, store.Wrap(err)
	}
	return rs.byDefault(c, d), nil
}

// enable: an override that only disabled the currency (rate 0) goes, and
// the default answers; another override is enabled.
func (rs *Rates) enable(ctx context.Context, p *auth.Principal, r *rateRequest) (*Rate, error) {
	c, d, err := rs.target(p, r.Currency, r.DomainID)
	if err != nil {
		return nil, err
	}
	cur, err := rs.custom(ctx, d, c)
	switch {
	case err != nil:
		return nil, err
	case cur == nil:
		return rs.byDefault(c, d), nil
	case cur.Rate == 0:
		if _, err := rs.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: cur.ID}}); err != nil {
			return nil, store.Wrap(err)
		}
		return rs.byDefault(c, d), nil
	case cur.State == core.Enabled:
		return cur, nil
	}
	cur.State = core.Enabled
	return rs.put(ctx, cur)
}

// disable: the override is disabled, or a disabled override with rate 0
// is created.
func (rs *Rates) disable(ctx context.Context, p *auth.Principal, r *rateRequest) (*Rate, error) {
	c, d, err := rs.target(p, r.Currency, r.DomainID)
	if err != nil {
		return nil, err
	}
	cur, err := rs.custom(ctx, d, c)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		cur = &Rate{Currency: c, Rate: 0, DomainID: d}
	} else if cur.State == core.Disabled {
		return cur, nil
	}
	cur.State = core.Disabled
	return rs.put(ctx, cur)
}

func (rs *Rates) get(ctx context.Context, p *auth.Principal, r *rateRequest) (*Rate, error) {
	c, d, err := rs.target(p, r.Currency, r.DomainID)
	if err != nil {
		return nil, err
	}
	cur, err := rs.custom(ctx, d, c)
	if err != nil || cur != nil {
		return cur, err
	}
	return rs.byDefault(c, d), nil
}

// list answers every supported currency, the domain's override where it
// has one, sorted by currency. The overrides are read by _id.
func (rs *Rates) list(ctx context.Context, p *auth.Principal, r *rateQuery) (*api.List[Rate], error) {
	d, err := domainOf(p, r.DomainID)
	if err != nil {
		return nil, err
	}
	currencies := rs.supported()
	ids := make(bson.A, len(currencies))
	for i, c := range currencies {
		ids[i] = key(d, c)
	}
	cur, err := rs.c.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	var rows []Rate
	if err := cur.All(ctx, &rows); err != nil {
		return nil, store.Wrap(err)
	}
	byCur := map[string]Rate{}
	for _, row := range rows {
		if row.DomainID == d {
			byCur[row.Currency] = row
		}
	}
	out := make([]Rate, 0, len(currencies))
	for _, c := range currencies {
		if row, ok := byCur[c]; ok {
			out = append(out, row)
		} else {
			out = append(out, *rs.byDefault(c, d))
		}
	}
	return &api.List[Rate]{Results: out, TotalCount: int64(len(out))}, nil
}
