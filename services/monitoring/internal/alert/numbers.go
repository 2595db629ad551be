package alert

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

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
