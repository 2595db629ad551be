package api

import (
	"context"
	"reflect"
	"slices"
	"strings"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
)

// NotBuilt lists, by service, the operations the upstream web console
// binds at start-up or on its main pages that Nubes does not build yet
// (docs/spec/console-2x.md sections 0 to 4). The console builds its API
// client from the reflection list with no fallback: a resource it does
// not find is undefined and its page throws before sending anything
// (section 0). Each of these is therefore listed and answers 501
// ERROR_NOT_IMPLEMENTED naming the operation, never 403 or 404
// (PendingRoutes). docs/status.md lists them; a service that builds one
// removes it here.
//
// One line per resource: its versioned path prefix, then its verbs (the
// upstream service's methods). "search" has no Nubes service: identity
// serves its line.
var NotBuilt = map[string][]string{
	"dashboard": {
		"/dashboard/v1/public-dashboard/ create update change-folder share unshare delete get list stat",
		"/dashboard/v1/private-dashboard/ create update change-folder delete get list stat",
		"/dashboard/v1/public-folder/ create update share unshare delete get list stat",
		"/dashboard/v1/private-folder/ create update delete get list stat",
		"/dashboard/v1/public-widget/ create update delete load load-sum get list",
		"/dashboard/v1/private-widget/ create update delete load load-sum get list",
		"/dashboard/v1/public-data-table/ add transform update delete load get list",
		"/dashboard/v1/private-data-table/ add transform update delete load get list",
	},
	"inventory": {
		"/inventory/v2/metric/ create update delete run test get list stat",
		"/inventory/v2/metric-data/ list stat analyze",
		"/inventory/v2/metric-example/ create update delete get list stat",
		"/inventory/v2/namespace/ create update delete get list stat",
		"/inventory/v1/region/ create update delete get list stat",
		"/inventory/v1/cloud-service-query-set/ create update delete run test enable disable get list stat",
	},
	"cost-analysis": {
		"/cost-analysis/v1/unified-cost/ get list analyze stat",
		"/cost-analysis/v1/cost-report-config/ create update update-recipients enable disable delete run get list stat",
		"/cost-analysis/v1/cost-report/ send get list stat",
		"/cost-analysis/v1/cost-report-data/ list analyze stat",
		"/cost-analysis/v1/cost-query-set/ create update delete get list stat",
	},
	"repository": {
		"/repository/v1/dashboard-template/ register update deregister enable disable get list stat",
	},
	"identity": {
		"/identity/v2/app/ create update generate-client-secret enable disable delete get list stat",
		"/identity/v2/user-group/ create update delete add-users remove-users get list stat",
		"/identity/v2/workspace-group/ create update delete add-users remove-users update-role get list stat",
		"/identity/v2/workspace-group-user/ add remove update-role find get list stat",
		"/identity/v2/agent/ create enable disable regenerate delete get list",
		"/identity/v2/project-group/ add-users remove-users",
		"/identity/v2/workspace-user/ create stat",
		"/identity/v2/provider/ update-plugin",
	},
	"search": {
		"/search/v1/resource/ search",
	},
	"secret": {
		"/secret/v1/secret/ enable disable",
		"/secret/v1/trusted-secret/ create update update-data delete stat",
	},
}

// NotBuiltPaths are the versioned paths of NotBuilt[service], sorted.
func NotBuiltPaths(service string) []string {
	var out []string
	for _, line := range NotBuilt[service] {
		f := strings.Fields(line)
		for _, verb := range f[1:] {
			out = append(out, f[0]+verb)
		}
	}
	slices.Sort(out)
	return out
}

// PendingRoutes are the routes of NotBuilt[service]: each answers 501.
func PendingRoutes(service string) []Route {
	var out []Route
	for _, p := range NotBuiltPaths(service) {
		out = append(out, Pending{Path: p})
	}
	return out
}

// Pending is an operation Nubes lists but does not build yet: any
// signed-in caller gets 501 ERROR_NOT_IMPLEMENTED naming it (no
// credential is still 401, so the console's session logic stays as it
// is); the body is not read.
type Pending struct {
	Path string // versioned, e.g. /dashboard/v1/public-dashboard/list
}

// PendingRequest documents a Pending operation's body: any object.
type PendingRequest map[string]any

// signedIn is every role: a Pending operation never answers 403.
var signedIn = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)

// Meta implements Route.
func (p Pending) Meta() Meta {
	return Meta{Path: p.Path, Access: signedIn, Summary: "Not implemented yet: answers 501 ERROR_NOT_IMPLEMENTED (docs/status.md).",
		Req: reflect.TypeFor[PendingRequest](), Resp: reflect.TypeFor[Empty]()}
}

// Serve implements Route.
func (p Pending) Serve(context.Context, *auth.Principal, []byte) (any, error) {
	return nil, errs.New(errs.NotImplemented, "%s is not implemented in Nubes yet. (path = %s)", OperationName(p.Path), p.Path)
}

// OperationName is upstream's name of the operation at path:
// /dashboard/v1/public-dashboard/load-sum -> PublicDashboard.load_sum.
func OperationName(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) < 2 {
		return path
	}
	resource, verb := parts[len(parts)-2], parts[len(parts)-1]
	var b strings.Builder
	for _, w := range strings.Split(resource, "-") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String() + "." + strings.ReplaceAll(verb, "-", "_")
}
