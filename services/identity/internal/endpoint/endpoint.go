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
		api.Op[endpointQuery, api.List[endpoint]]{Path: "/identity/v2/endpoint/list", Access: auth.Public(), Summary: "The services of the suite and their base URLs (clients ask before signing in).", Handle: s.listEndpoints},
	}
}

// listEndpoints lists every service in service_urls, under endpoint_url
// when that is set (a cluster behind one Ingress, where service_urls are
// in-cluster addresses), else under its service_urls address.
func (s *service) listEndpoints(_ context.Context, _ *auth.Principal, r *endpointQuery) (*api.List[endpoint], error) {
	names := slices.Collect(maps.Keys(s.Cfg.ServiceURLs))
	if s.Cfg.EndpointURL != "" && !slices.Contains(names, "identity") {
		names = append(names, "identity")
	}
	slices.Sort(names)
	out := &api.List[endpoint]{Results: []endpoint{}}
	for _, n := range names {
		if r.Service != "" && n != r.Service {
			continue
		}
		url := s.Cfg.EndpointURL
		if url == "" {
			url = s.Cfg.ServiceURLs[n]
		}
		out.Results = append(out.Results, endpoint{Service: n, Name: n, Endpoint: url, State: core.Enabled})
	}
	out.TotalCount = int64(len(out.Results))
	return out, nil
}

type service struct{ *core.Deps }

// Routes are the operations of the endpoint list.
func Routes(d *core.Deps) []api.Route { return (&service{Deps: d}).routes() }
