package boardapi

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/store"
)

// Collections owned by the board service.
const (
	BoardsCollection = "board_boards"
	PostsCollection  = "board_posts"
	LeasesCollection = "board_leases" // a post's writers take turns (pkg/lease)
)

// ViewFlush is how often buffered post views are written.
const ViewFlush = 250 * time.Millisecond

// Routes creates the service's indexes and returns its operations and its
// worker (the view-count writer).
func Routes(ctx context.Context, db *mongo.Database, log *slog.Logger) ([]api.Route, func(context.Context) error, error) {
	b := boards{c: db.Collection(BoardsCollection)}
	p := posts{c: db.Collection(PostsCollection), boards: b.c}
	p.views = &views{c: p.c, leases: db.Collection(LeasesCollection), pending: map[string]int32{}}
	worker := func(ctx context.Context) error { return p.views.run(ctx, ViewFlush, log) }
	if err := store.EnsureIndexes(ctx, b.c,
		store.Index{Keys: bson.D{{Key: "name", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "created_at", Value: -1}}},
	); err != nil {
		return nil, nil, err
	}
	// Every post query starts with the tenant, then the usual filters.
	if err := store.EnsureIndexes(ctx, p.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "board_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "category", Value: 1}}},
	); err != nil {
		return nil, nil, err
	}
	return append(b.routes(), p.routes()...), worker, nil
}
