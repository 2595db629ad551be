package config

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/config/internal/core"
)

// cleanup is the config service's share of identity's deletes
// (events.ConsumeDeletions): a deleted user's user configs, a deleted
// workspace's or project's shared configs.
func cleanup(db *mongo.Database) events.Cleanup {
	return func(ctx context.Context, d events.Deleted) error {
		name := core.UserConfigs
		if d.Scoped() {
			name = core.SharedConfigs
		}
		return store.DeleteOwned(ctx, db.Collection(name), d.Owner())
	}
}
