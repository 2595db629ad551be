package repository_test

import (
	"testing"

	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/repository"
)

type M = map[string]any

// The kit's tenancy matrix over each repository resource of a domain: an
// admin of another domain and a workspace owner without a workspace read
// nothing and change nothing; a plain user of the domain reads (every
// role reads the repository) but changes nothing.
func TestTenancyMatrix(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	insider := adminOf("domain-a")
	group := M{"group": M{"keys": []any{M{"key": "name", "name": "n"}}}}
	eq := func(k, v string) []any { return []any{M{"k": k, "v": v, "o": "eq"}} }

	t.Run("plugin", func(t *testing.T) {
		p := h.register(t, h.adminA, ec2)
		id := M{"plugin_id": p.PluginID}
		testkit.Tenancy{
			Handler: h.handler, Coll: h.db.Collection(repository.PluginsCollection), ID: p.PluginID, Domain: "domain-a",
			Get:  testkit.Req{Path: "/repository/v1/plugin/get", Body: id},
			List: testkit.Req{Path: "/repository/v1/plugin/list", Body: id},
			Changes: []testkit.Req{
				{Path: "/repository/v1/plugin/update", Body: M{"plugin_id": p.PluginID, "name": "taken"}},
				{Path: "/repository/v1/plugin/disable", Body: id},
				{Path: "/repository/v1/plugin/enable", Body: id},
				{Path: "/repository/v1/plugin/deregister", Body: id},
				{Path: "/repository/v1/plugin/get-versions", Body: id},
			},
			Insider: insider, UserReads: true,
		}.Run(t)
	})

	t.Run("policy", func(t *testing.T) {
		h.adminA.Call("/repository/v1/policy/create", M{"policy_id": "matrix", "name": "Matrix", "permissions": []string{"*"}, "domain_id": "domain-a"}).OK(nil)
		testkit.Tenancy{
			Handler: h.handler, Coll: h.db.Collection(repository.PoliciesCollection), ID: "domain-a/matrix", Domain: "domain-a",
			Get:  testkit.Req{Path: "/repository/v1/policy/get", Body: M{"policy_id": "matrix"}},
			List: testkit.Req{Path: "/repository/v1/policy/list", Body: M{"repository_id": h.local, "policy_id": "matrix"}},
			Stat: &testkit.Req{Path: "/repository/v1/policy/stat", Body: M{"repository_id": h.local,
				"query": M{"filter": eq("policy_id", "matrix"), "aggregate": []any{group}}}},
			Changes: []testkit.Req{
				{Path: "/repository/v1/policy/update", Body: M{"policy_id": "matrix", "name": "taken"}},
				{Path: "/repository/v1/policy/delete", Body: M{"policy_id": "matrix"}},
			},
			Insider: insider, UserReads: true, NamesDomain: true,
		}.Run(t)
	})

	t.Run("schema", func(t *testing.T) {
		h.adminA.Call("/repository/v1/schema/create", M{"name": "matrix-form", "service_type": "secret.credentials", "schema_id": "matrix",
			"schema": M{"type": "object"}, "domain_id": "domain-a"}).OK(nil)
		testkit.Tenancy{
			Handler: h.handler, Coll: h.db.Collection(repository.SchemasCollection), ID: "domain-a/matrix-form", Domain: "domain-a",
			Get:  testkit.Req{Path: "/repository/v1/schema/get", Body: M{"name": "matrix-form"}},
			List: testkit.Req{Path: "/repository/v1/schema/list", Body: M{"repository_id": h.local, "project_id": "*", "name": "matrix-form"}},
			Stat: &testkit.Req{Path: "/repository/v1/schema/stat", Body: M{"repository_id": h.local,
				"query": M{"filter": eq("name", "matrix-form"), "aggregate": []any{group}}}},
			Changes: []testkit.Req{
				{Path: "/repository/v1/schema/update", Body: M{"name": "matrix-form", "tags": M{"x": "y"}}},
				{Path: "/repository/v1/schema/delete", Body: M{"name": "matrix-form"}},
			},
			Insider: insider, UserReads: true, NamesDomain: true,
		}.Run(t)
	})
}
