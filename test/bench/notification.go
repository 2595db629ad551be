package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/notification"
)

// The notification service's collections and what the bench seeds in
// them: protocols of the bench domain (a tenth in another domain), a
// third with sealed secret data, half with delivery counters.
const (
	protocolsCollection = "notification_protocols"
	protocolUsage       = "notification_protocol_usage"
	protocolCount       = 2000
)

// notificationRoutes are the notification service's operations on db,
// sealing with benchKeys. get and list call no other service, so it runs
// without the repository, plugins or an event bus (no dispatcher).
func notificationRoutes(ctx context.Context, db *mongo.Database, log *slog.Logger) ([]api.Route, error) {
	svc, err := notification.Build(ctx, app.Deps{DB: db, Log: log, Services: call.NewServices(nil, "", nil)},
		notification.Config{Keys: benchKeys, Dispatch: notification.DefaultDispatch()})
	if err != nil {
		return nil, err
	}
	return svc.Routes, nil
}

// protocolDoc is a protocol as the notification service stores it.
type protocolDoc struct {
	ID           string         `bson:"_id"`
	ProtocolID   string         `bson:"protocol_id"`
	Name         string         `bson:"name"`
	State        string         `bson:"state"`
	ProtocolType string         `bson:"protocol_type"`
	ResourceType string         `bson:"resource_type"`
	Capability   map[string]any `bson:"capability"`
	PluginInfo   map[string]any `bson:"plugin_info"`
	Sealed       *seal.Sealed   `bson:"sealed,omitempty"`
	Tags         map[string]any `bson:"tags"`
	DomainID     string         `bson:"domain_id"`
	CreatedAt    time.Time      `bson:"created_at"`
}

// usageDoc is a protocol's delivery counters.
type usageDoc struct {
	ID      string `bson:"_id"`
	Sent    int64  `bson:"sent"`
	Failed  int64  `bson:"failed"`
	Skipped int64  `bson:"skipped"`
}

// seedProtocols stores protocolCount protocols and returns the ids the
// bench caller sees.
func (b *bench) seedProtocols(ctx context.Context, db *mongo.Database) ([]string, error) {
	progress("seeding %d notification protocols", protocolCount)
	r := rand.New(rand.NewPCG(11, 12))
	var visible []string
	var usage []any
	err := seedDocs(ctx, db.Collection(protocolsCollection), protocolCount, func(n int) (any, error) {
		domain := benchDomain
		if r.IntN(10) == 0 {
			domain = otherDomain
		}
		id := wire.NewID("protocol")
		d := protocolDoc{ID: id, ProtocolID: id, Name: fmt.Sprintf("%s %s %d", words[r.IntN(len(words))], words[r.IntN(len(words))], n),
			State: "ENABLED", ProtocolType: "EXTERNAL", ResourceType: "identity.Project",
			Capability: map[string]any{"supported_schema": []any{"email_smtp"}},
			PluginInfo: map[string]any{"plugin_id": "plugin-email-noti-protocol", "version": "1.2.0", "options": map[string]any{"smtp_host": "mail.example.com"},
				"metadata": map[string]any{"data_type": "SECRET", "data": map[string]any{"schema": map[string]any{"type": "object"}}}, "upgrade_mode": "AUTO"},
			Tags: map[string]any{"team": words[r.IntN(len(words))]}, DomainID: domain, CreatedAt: pastYear(r)}
		if r.IntN(3) == 0 {
			// The service's associated data: collection, protocol id, domain.
			sealed, err := benchKeys.SealJSON(map[string]any{"smtp_password": wire.NewID("pw")}, seal.AD(protocolsCollection, id, domain))
			if err != nil {
				return nil, err
			}
			d.Sealed = &sealed
			d.PluginInfo["secret_id"], d.PluginInfo["schema"] = wire.NewID("secret"), "email_smtp"
		}
		if r.IntN(2) == 0 {
			usage = append(usage, usageDoc{ID: id, Sent: r.Int64N(1000), Failed: r.Int64N(10), Skipped: r.Int64N(10)})
		}
		if domain == benchDomain {
			visible = append(visible, id)
		}
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return visible, seedDocs(ctx, db.Collection(protocolUsage), len(usage), func(n int) (any, error) { return usage[n], nil })
}

// notificationOperations: protocol get and list beside the driver doing
// the same queries. A ProtocolInfo carries the protocol's usage counters,
// which live beside it, so a hand-written handler reads them too: the raw
// side's get is two finds by _id, its list the count, the page and the
// page's counters.
func (b *bench) notificationOperations(raw *mongo.Database, ids []string) []operation {
	protocols, usage := raw.Collection(protocolsCollection), raw.Collection(protocolUsage)
	listFilter := bson.D{{Key: "domain_id", Value: benchDomain}}
	return []operation{
		{
			name: "protocol-get", goal: 0.85,
			nubes: b.post("/notification/v1/protocol/get", func(r *rand.Rand) any { return map[string]string{"protocol_id": pickID(r, ids)} }),
			raw: func(ctx context.Context, r *rand.Rand) error {
				id := pickID(r, ids)
				var d protocolDoc
				if err := protocols.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
					return err
				}
				var u usageDoc
				if err := usage.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&u); err != nil && err != mongo.ErrNoDocuments {
					return err
				}
				return nil
			},
		},
		{
			name: "protocol-list", goal: 0.8, scans: true,
			nubes: b.post("/notification/v1/protocol/list", func(*rand.Rand) any { return pageOf() }),
			raw: func(ctx context.Context, r *rand.Rand) error {
				rows, err := rawPage[protocolDoc](ctx, protocols, listFilter, bson.E{Key: "name", Value: 1})
				if err != nil {
					return err
				}
				page := make(bson.A, len(rows))
				for i, d := range rows {
					page[i] = d.ID
				}
				cur, err := usage.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: page}}}})
				if err != nil {
					return err
				}
				var counts []usageDoc
				return cur.All(ctx, &counts)
			},
		},
	}
}

// measureNotification seeds the protocols and measures their operations
// (those named by -ops, or all); nil when -ops names none of them.
func (b *bench) measureNotification(ctx context.Context, setup, raw *mongo.Database) ([]result, error) {
	return b.measureGroup(ctx, "protocols", func(ctx context.Context) ([]string, error) { return b.seedProtocols(ctx, setup) },
		func(ids []string) []operation { return b.notificationOperations(raw, ids) })
}

// printNotificationTable is printTable's table for the protocols.
func (b *bench) printNotificationTable(w io.Writer, rs []result) {
	b.printGroup(w, fmt.Sprintf("%d notification protocols in the store", protocolCount), rs)
}
