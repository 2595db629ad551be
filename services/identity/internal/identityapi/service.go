package identityapi

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// New builds identity's shared dependencies (core.New) and returns the
// service.
func New(ctx context.Context, db *mongo.Database, bus *events.Bus, log *slog.Logger, cfg core.Config) (*Service, error) {
	d, err := core.New(ctx, db, bus, log, cfg)
	if err != nil {
		return nil, err
	}
	return &Service{Deps: d, spentRefresh: store.Slots{C: db.Collection(core.CountersCollection), Max: 1, TTL: d.Cfg.RefreshTTL + time.Minute}}, nil
}

// Service holds the collections and collaborators of every handler.
type Service struct {
	*core.Deps
	spentRefresh store.Slots // refresh tokens token/refresh exchanged (sessions.go)
}

// Routes are every operation of the service.
func (s *Service) Routes() []api.Route {
	var r []api.Route
	for _, part := range [][]api.Route{
		s.tokenRoutes(), s.domainRoutes(), s.workspaceRoutes(), s.projectRoutes(), s.roleRoutes(),
		s.userRoutesV2(), s.profileRoutes(), s.userRoutesV1(), s.apiKeyRoutes(), s.trustedRoutes(), s.endpointRoutes(), s.consoleRoutes(),
	} {
		r = append(r, part...)
	}
	return r
}

// Workers run beside the server: the mail outbox relay.
func (s *Service) Workers() []func(context.Context) error {
	return []func(context.Context) error{s.Outbox.Run, s.runSyncJobs, s.runSyncSchedule}
}
