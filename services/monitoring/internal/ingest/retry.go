package ingest

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
	"github.com/nubes-io/nubes/services/monitoring/internal/event"
)

// A kept body: the ingest answered 502 or 504 because the plugin could
// not be reached or did not answer in time, and the retry worker parses
// it again later (backing off), until it succeeds, the plugin answers an
// error (a parse failure: one error event), the webhook is gone, or
// MaxAttempts tries failed (an error event carrying the body). Two
// replicas may retry one body at once on FerretDB, whose conditional
// update is not atomic: harmless, since an event's _id is derived from
// its key (and the error event's key from the kept body's id).
type kept struct {
	ID        string    `bson:"_id"`
	WebhookID string    `bson:"webhook_id"`
	Body      string    `bson:"body"`
	Attempts  int       `bson:"attempts"`
	LastError string    `bson:"last_error"`
	NextAt    time.Time `bson:"next_at"`
	CreatedAt time.Time `bson:"created_at"`
}

func (in *Ingest) ensurePending(ctx context.Context) error {
	return store.EnsureIndexes(ctx, in.pending, store.Index{Keys: bson.D{{Key: "next_at", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "webhook_id", Value: 1}}})
}

// DefaultMaxKept is how many bodies a webhook keeps for retry by default.
const DefaultMaxKept = 1000

// keep stores a body for retry, unless the webhook keeps MaxKept already:
// then the body is dropped (the sender gets 503 and sends it again
// later) and counted among the webhook's failed requests. Two replicas
// keeping at once may pass the bound by one each.
func (in *Ingest) keep(ctx context.Context, wh *core.Webhook, raw string, cause error) error {
	maxKept := in.cfg.MaxKept
	if maxKept <= 0 {
		maxKept = DefaultMaxKept
	}
	n, err := in.pending.CountDocuments(ctx, bson.D{{Key: "webhook_id", Value: wh.WebhookID}})
	if err != nil {
		return errs.Down("The store", err)
	}
	if n >= int64(maxKept) {
		in.log.Warn("webhook body dropped: the webhook keeps as many as webhook_max_kept_bodies for its plugin", "webhook_id", wh.WebhookID,
			"kept", n, "error", reason(cause))
		return errs.Down("The webhook's plugin", fmt.Errorf("%d bodies wait for it already (webhook_max_kept_bodies); this one is not kept: send it again later", n))
	}
	now := time.Now().UTC()
	_, err = in.pending.InsertOne(ctx, kept{ID: wire.NewID("pending"), WebhookID: wh.WebhookID, Body: raw, Attempts: 1,
		LastError: reason(cause), NextAt: now.Add(in.cfg.RetryInterval), CreatedAt: now})
	if err != nil {
		// Not kept: the sender must send it again, so this is not a 502.
		return errs.Down("The store", err)
	}
	return nil
}

// Pending counts the kept bodies.
func (in *Ingest) Pending(ctx context.Context) (int64, error) {
	return in.pending.CountDocuments(ctx, bson.D{})
}

// Run retries kept bodies every RetryInterval until ctx is done.
func (in *Ingest) Run(ctx context.Context) error {
	t := time.NewTicker(in.cfg.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := in.RetryOnce(ctx); err != nil && ctx.Err() == nil {
			in.log.Warn("retry of kept webhook bodies failed", "error", err.Error())
		}
	}
}

// RetryOnce retries the kept bodies that are due.
func (in *Ingest) RetryOnce(ctx context.Context) error {
	now := time.Now().UTC()
	cur, err := in.pending.Find(ctx, bson.D{{Key: "next_at", Value: bson.D{{Key: "$lte", Value: now}}}},
		options.Find().SetSort(bson.D{{Key: "next_at", Value: 1}}).SetLimit(100))
	if err != nil {
		return store.Wrap(err)
	}
	var due []kept
	if err := cur.All(ctx, &due); err != nil {
		return store.Wrap(err)
	}
	for _, k := range due {
		if ctx.Err() != nil {
			return nil
		}
		// Lease the record for this try; the back-off is the lease.
		backoff := in.retries().Delay(k.Attempts + 1)
		res, err := in.pending.UpdateOne(ctx, bson.D{{Key: "_id", Value: k.ID}, {Key: "next_at", Value: k.NextAt}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "next_at", Value: now.Add(backoff)}}}, {Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}}})
		if err != nil {
			return store.Wrap(err)
		}
		if res.ModifiedCount == 0 {
			continue // another replica has it
		}
		if err := in.retry(ctx, k); err != nil {
			in.log.Warn("kept webhook body not retried", "pending_id", k.ID, "error", err.Error())
		}
	}
	return nil
}

func (in *Ingest) retry(ctx context.Context, k kept) error {
	done := func() error {
		_, err := in.pending.DeleteOne(ctx, bson.D{{Key: "_id", Value: k.ID}})
		return store.Wrap(err)
	}
	wh, err := store.GetLive[core.Webhook](ctx, in.webhooks, "webhook_id", k.WebhookID)
	if errs.Is(err, errs.NotFoundCode) {
		in.log.Info("kept body of a deleted webhook dropped", "pending_id", k.ID, "webhook_id", k.WebhookID)
		return done()
	}
	if err != nil {
		return err
	}
	data, err := decodeObject([]byte(k.Body))
	if err != nil {
		return done() // cannot happen: only decoded bodies are kept
	}
	pctx, cancel := context.WithTimeout(ctx, in.cfg.ParseTimeout)
	results, err := plugin.Webhook{Target: in.plugins.Plugin(wh.PluginInfo.PluginID, wh.PluginInfo.Version)}.
		Parse(pctx, wire.Object(wh.PluginInfo.Options), data)
	cancel()
	now := in.cfg.Clock.Now()
	if err != nil {
		if in.retries().Again(k.Attempts+1, err) {
			_, uerr := in.pending.UpdateOne(ctx, bson.D{{Key: "_id", Value: k.ID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "last_error", Value: reason(err)}}}})
			return store.Wrap(uerr)
		}
		msg := reason(err)
		if _, again := transient(err); again {
			msg = fmt.Sprintf("the plugin could not parse the body after %d tries: %s", k.Attempts+1, msg)
		}
		if _, err := in.take(ctx, event.ParseError(wh, "error-"+k.ID, msg, k.Body, now)); err != nil {
			return err
		}
		return done()
	}
	evs, err := in.events.Delivery(ctx, wh, k.Body, results[:min(len(results), MaxEvents)], now)
	if err != nil {
		return err
	}
	if _, err := in.takeAll(ctx, evs); err != nil {
		return err
	}
	return done()
}
