package alert

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
)

// alert_number is a counter per domain (store.Next): one atomic
// increment per new alert, so numbers are unique and increasing across
// replicas. A number is taken before the insert; a create that fails
// after taking it (the store failing, or an insert that finds its
// derived id stored by another try) leaves that number unused: the only
// gaps in a domain's numbers.
func counterID(domainID string) string { return "alert-number#" + domainID }

// number stores a, numbered; created is false when an alert of its id
// was stored already (it is returned as stored).
func (as *Alerts) number(ctx context.Context, a *Alert) (out *Alert, created bool, err error) {
	// A retried insert of a derived id mostly finds its alert: no number
	// is spent on it.
	if got, err := as.Load(ctx, a.ID); err == nil || !errs.Is(err, errs.NotFoundCode) {
		return got, false, err
	}
	n, err := store.Next(ctx, as.claims, counterID(a.DomainID))
	if err != nil {
		return nil, false, err
	}
	a.AlertNumber = n
	ok, err := store.InsertOnce(ctx, as.c, a)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		got, err := as.Load(ctx, a.ID)
		return got, false, err
	}
	return a, true, nil
}

// legacyCounter is a domain's counter as the lease-held numbering kept
// it: the next number to give.
type legacyCounter struct {
	ID   string `bson:"_id"`
	Next int64  `bson:"next"`
}

// keepNumbering carries the counters written before store.Next on: a
// counter with next and no n gets n = next-1, the last number given, by
// a conditional update that replicas starting together may all run.
func (as *Alerts) keepNumbering(ctx context.Context) error {
	cur, err := as.claims.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: "alert-number#"}, {Key: "$lt", Value: "alert-number#~"}}},
		{Key: "next", Value: bson.D{{Key: "$exists", Value: true}}}, {Key: "n", Value: bson.D{{Key: "$exists", Value: false}}}})
	if err != nil {
		return store.Wrap(err)
	}
	var old []legacyCounter
	if err := cur.All(ctx, &old); err != nil {
		return store.Wrap(err)
	}
	for _, c := range old {
		_, err := as.claims.UpdateOne(ctx, bson.D{{Key: "_id", Value: c.ID}, {Key: "n", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: max(c.Next-1, 0)}}}})
		if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			return store.Wrap(err)
		}
	}
	return nil
}

// InsertMany stores new alerts as Insert stores each, numbered in their
// order by one increment of each domain's counter (store.NextN), in one
// insert. They are new ids (each derived from an event stored just
// now): none is looked for first. created[i] is false when an alert of
// alerts[i]'s id was stored meanwhile (out[i] is it, as stored; its
// number a gap); errs[i] is alerts[i]'s.
func (as *Alerts) InsertMany(ctx context.Context, alerts []*Alert) (out []*Alert, created []bool, errs []error) {
	out, created, errs = make([]*Alert, len(alerts)), make([]bool, len(alerts)), make([]error, len(alerts))
	if len(alerts) == 0 {
		return out, created, errs
	}
	fail := func(err error) ([]*Alert, []bool, []error) {
		for i := range errs {
			errs[i] = err
		}
		return out, created, errs
	}
	domains := map[string][]int{}
	for i, a := range alerts {
		domains[a.DomainID] = append(domains[a.DomainID], i)
	}
	for domain, idx := range domains {
		last, err := store.NextN(ctx, as.claims, counterID(domain), int64(len(idx)))
		if err != nil {
			return fail(err)
		}
		for j, i := range idx {
			alerts[i].AlertNumber = last - int64(len(idx)) + 1 + int64(j)
		}
	}
	docs := make([]any, len(alerts))
	for i, a := range alerts {
		docs[i] = a
	}
	_, err := as.c.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	for i, werr := range store.WriteErrors(err, len(alerts)) {
		switch {
		case werr == nil:
			out[i], created[i] = alerts[i], true
		case mongo.IsDuplicateKeyError(werr):
			out[i], errs[i] = as.Load(ctx, alerts[i].ID)
		default:
			errs[i] = store.Wrap(werr)
		}
	}
	return out, created, errs
}
