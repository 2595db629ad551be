// Package dashboard is the dashboard service: versioned dashboards
// attached to a project of identity (spec part 3, /dashboard/v1
// project-dashboard).
//
// New is its only public surface; everything else is internal. It calls
// identity (service_urls) to check that a dashboard's project exists in
// the caller's domain and never reads identity's collections.
package dashboard

import (
	"context"
	"log/slog"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/services/dashboard/internal/projectdashboard"
)

// Name is the service name.
const Name = "dashboard"

// New builds the dashboard service on d.DB, creating its indexes.
func New(ctx context.Context, d app.Deps) (*app.Service, error) {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	routes, err := projectdashboard.Routes(ctx, d.DB, d.Services, log)
	if err != nil {
		return nil, err
	}
	// The console's 2.x dashboards answer 501 until built (pkg/api NotBuilt).
	routes = append(routes, api.PendingRoutes(Name)...)
	return &app.Service{Name: Name, Routes: routes, Workers: events.DeletionWorkers(d.Events, Name, events.DeadRecords(d.DB.Collection(DeadLettersCollection)), log, cleanup(d.DB))}, nil
}
