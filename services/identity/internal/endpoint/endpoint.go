package endpoint

import (
	"context"
	"maps"
	"slices"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

type endpointQuery struct {
	Service string `json:"service"`
}

// endpoint is one service of the suite and the base URL clients reach
// it at (the upstream CLI reads service and endpoint before it signs in).
type endpoint struct {
	Service  string `json:"service"`
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	State    string `json:"state"`
}

func (s *service) routes() []api.Route {
	return []api.Route{
		api.Op[endpointQuery, api.List[endpoint]]{Path: "/identity/v2/endpoint/list", Access: auth.Public(), Summary: "The services of the suite and where clients reach them: their gRPC endpoints when configured, else their HTTP base URLs (clients ask before signing in).", Handle: s.listEndpoints},
	}
}

// listEndpoints lists every service in service_urls, at its gRPC
// endpoint when it has one (grpc_service_urls, else grpc_endpoint_url):
// upstream's answer, which cfctl and spacectl dial, and which the
// console only shows (its API-key page). A service without one is
// answered at its HTTP base: endpoint_url when that is set (a cluster
// behind one Ingress, where service_urls are in-cluster addresses), else
// its service_urls address.
func (s *service) listEndpoints(_ context.Context, _ *auth.Principal, r *endpointQuery) (*api.List[endpoint], error) {
	names := slices.Collect(maps.Keys(s.Cfg.ServiceURLs))
	if (s.Cfg.EndpointURL != "" || s.Cfg.GRPCEndpointURL != "" || s.Cfg.GRPCServiceURLs["identity"] != "") && !slices.Contains(names, "identity") {
		names = append(names, "identity")
	}
	slices.Sort(names)
	out := &api.List[endpoint]{Results: []endpoint{}}
	for _, n := range names {
		if r.Service != "" && n != r.Service {
			continue
		}
		out.Results = append(out.Results, endpoint{Service: n, Name: n, Endpoint: s.endpointOf(n), State: core.Enabled})
	}
	out.TotalCount = int64(len(out.Results))
	return out, nil
}

func (s *service) endpointOf(name string) string {
	switch {
	case s.Cfg.GRPCServiceURLs[name] != "":
		return s.Cfg.GRPCServiceURLs[name]
	case s.Cfg.GRPCEndpointURL != "":
		return s.Cfg.GRPCEndpointURL
	case s.Cfg.EndpointURL != "":
		return s.Cfg.EndpointURL
	}
	return s.Cfg.ServiceURLs[name]
}

type service struct{ *core.Deps }

// Routes are the operations of the endpoint list.
func Routes(d *core.Deps) []api.Route { return (&service{Deps: d}).routes() }
