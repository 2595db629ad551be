package secret

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/secret/internal/accountsecret"
	"github.com/nubes-io/nubes/services/secret/internal/usersecret"
)

// cleanup is the secret service's share of identity's deletes
// (events.ConsumeDeletions): a user's secrets; a workspace's or a
// project's secrets (those of its service accounts). Trusted accounts'
// secrets are identity's own, deleted with the workspace there.
// DeadLettersCollection keeps the messages its consumers gave up on
// (events.DeadRecords).
const DeadLettersCollection = "secret_dead_letters"

func cleanup(db *mongo.Database) events.Cleanup {
	return func(ctx context.Context, d events.Deleted) error {
		if d.Scoped() {
			return store.DeleteOwned(ctx, db.Collection(accountsecret.Collection), d.Owner())
		}
		return store.DeleteOwned(ctx, db.Collection(usersecret.Collection), d.Owner())
	}
}
