package event

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// body is a delivery's raw body stored once for the several events it
// made (Event.BodyID).
type body struct {
	ID        string    `bson:"_id"`
	WebhookID string    `bson:"webhook_id"`
	DomainID  string    `bson:"domain_id"`
	Raw       string    `bson:"raw"`
	CreatedAt wire.Time `bson:"created_at"`
}

func bodyID(webhookID, raw string) string {
	sum := sha256.Sum256([]byte(webhookID + "\x00" + raw))
	return "body-" + hex.EncodeToString(sum[:12])
}

// Delivery makes the events the plugin parsed from one delivery of raw
// to wh, for Record each in turn. A body that made more than one event
// is stored once, here, in BodiesCollection, and its events name it: a
// body of a thousand events costs one copy, not a thousand. The same
// body sent again finds its copy stored (InsertOnce).
func (s *Store) Delivery(ctx context.Context, wh *core.Webhook, raw string, parsed []map[string]any, now time.Time) ([]*Event, error) {
	evs := make([]*Event, 0, len(parsed))
	for _, m := range parsed {
		evs = append(evs, FromPlugin(wh, m, raw, now))
	}
	if len(evs) > 1 && len(raw) <= MaxRawKept {
		b := body{ID: bodyID(wh.WebhookID, raw), WebhookID: wh.WebhookID, DomainID: wh.DomainID, Raw: raw, CreatedAt: wire.T(now)}
		stored, err := store.InsertOnce(ctx, s.bodies, b)
		if err != nil {
			return nil, err
		}
		if !stored {
			// Sent again: the copy lives as long as its newest events.
			_, err := s.bodies.UpdateOne(ctx, bson.D{{Key: "_id", Value: b.ID}}, bson.D{{Key: "$max", Value: bson.D{{Key: "created_at", Value: b.CreatedAt}}}})
			if err != nil {
				return nil, store.Wrap(err)
			}
		}
		for _, e := range evs {
			e.RawData, e.BodyID = "", b.ID
		}
	}
	return evs, nil
}

// fillRaw puts the body of e back into it when it is stored apart.
func (s *Store) fillRaw(ctx context.Context, e *Event) error {
	if e.BodyID == "" {
		return nil
	}
	got, err := store.ByIDs[body](ctx, s.bodies, []string{e.BodyID})
	if err != nil {
		return err
	}
	e.RawData = rawJSON(got[e.BodyID].Raw) // purged: {}
	return nil
}

// Purge deletes the events and bodies stored before cutoff. It is a
// delete by time only, so every replica may run it: a second run finds
// nothing.
func (s *Store) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	old := bson.D{{Key: "created_at", Value: bson.D{{Key: "$lt", Value: wire.T(cutoff)}}}}
	res, err := s.c.DeleteMany(ctx, old)
	if err != nil {
		return 0, store.Wrap(err)
	}
	if _, err := s.bodies.DeleteMany(ctx, old); err != nil {
		return res.DeletedCount, store.Wrap(err)
	}
	return res.DeletedCount, nil
}

// RunPurge purges the events older than retention every interval until
// ctx is done; retention <= 0 keeps events for ever.
func (s *Store) RunPurge(ctx context.Context, every, retention time.Duration, clock core.Clock) error {
	if retention <= 0 || every <= 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := s.Purge(ctx, clock.Now().Add(-retention)); err != nil && ctx.Err() == nil {
			s.log.Warn("old events not purged; the next run tries again", "error", err.Error())
		} else if n > 0 {
			s.log.Info("old events purged", "events", n, "retention", retention.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
