// Package config is the config service (upstream's config, /config/v1 and
// /config/v2): named records of free-form data that the web console keeps
// for a user (user-config), shares in a domain, workspace or project
// (shared-config), sets for a whole domain (domain-config) or shows before
// sign-in (public-config).
//
// New is its only public surface; everything else is internal. It calls
// identity (service_urls) to place a shared config in a project or a named
// workspace, and never reads identity's collections.
package config

import (
	"context"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/services/config/internal/core"
	"github.com/nubes-io/nubes/services/config/internal/domainconfig"
	"github.com/nubes-io/nubes/services/config/internal/publicconfig"
	"github.com/nubes-io/nubes/services/config/internal/sharedconfig"
	"github.com/nubes-io/nubes/services/config/internal/userconfig"
)

// Name is the service name.
const Name = "config"

// Limits bound what a caller stores (data size, user configs per user).
type Limits = core.Limits

// DefaultLimits are the bounds the binary and the devstack run with.
func DefaultLimits() Limits { return core.DefaultLimits() }

// New builds the config service on d.DB with DefaultLimits.
func New(ctx context.Context, d app.Deps) (*app.Service, error) {
	return Build(ctx, d, DefaultLimits())
}

// Build builds the config service with limits (zero fields: the defaults).
func Build(ctx context.Context, d app.Deps, limits Limits) (*app.Service, error) {
	var routes []api.Route
	for _, build := range []func() ([]api.Route, error){
		func() ([]api.Route, error) { return userconfig.Routes(ctx, d.DB, limits) },
		func() ([]api.Route, error) {
			return sharedconfig.Routes(ctx, d.DB, d.Services.Client("identity"), limits)
		},
		func() ([]api.Route, error) { return domainconfig.Routes(ctx, d.DB, limits) },
		func() ([]api.Route, error) { return publicconfig.Routes(ctx, d.DB, limits) },
	} {
		rs, err := build()
		if err != nil {
			return nil, err
		}
		routes = append(routes, rs...)
	}
	return &app.Service{Name: Name, Routes: routes, Workers: events.DeletionWorkers(d.Events, Name, events.DeadRecords(d.DB.Collection(core.DeadLettersCollection)), d.Log, cleanup(d.DB))}, nil
}
