package repository_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/repository"
)

// Issue 21: the platform's records (domain_id "*") and other domains' are
// a service's to write. A person's SYSTEM_ADMIN grant is refused (403)
// and changes nothing; the service credential does the same calls.
func TestSystemScopeIsForServices(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	plugin := h.register(t, h.system, merge(ec2, map[string]any{"image": "cloudforet/plugin-global"}))
	h.system.Call("/repository/v1/policy/create", M{"policy_id": "global", "name": "Global", "permissions": []string{"*"}, "domain_id": "*"}).OK(nil)
	h.system.Call("/repository/v1/schema/create", M{"name": "global-form", "service_type": "secret.credentials", "schema_id": "g",
		"schema": M{"type": "object"}, "domain_id": "*"}).OK(nil)
	h.adminB.Call("/repository/v1/policy/create", M{"policy_id": "of-b", "name": "B", "permissions": []string{"*"}, "domain_id": "domain-b"}).OK(nil)

	colls := []string{repository.PluginsCollection, repository.PoliciesCollection, repository.SchemasCollection}
	snapshot := func() [][]any {
		var out [][]any
		for _, c := range colls {
			docs := h.snapshot(t, c)
			row := make([]any, len(docs))
			for i, d := range docs {
				row[i] = d
			}
			out = append(out, row)
		}
		return out
	}
	before := snapshot()
	refused := []struct {
		name string
		as   *testkit.Client
		path string
		body M
	}{
		{"a person's SYSTEM grant registers a plugin", h.sysAdmin, "/repository/v1/plugin/register", merge(ec2, map[string]any{"image": "cloudforet/plugin-sa"})},
		{"a person's SYSTEM grant renames a global plugin", h.sysAdmin, "/repository/v1/plugin/update", M{"plugin_id": plugin.PluginID, "name": "taken"}},
		{"a person's SYSTEM grant disables a global plugin", h.sysAdmin, "/repository/v1/plugin/disable", M{"plugin_id": plugin.PluginID}},
		{"a person's SYSTEM grant deregisters a global plugin", h.sysAdmin, "/repository/v1/plugin/deregister", M{"plugin_id": plugin.PluginID}},
		{"a person's SYSTEM grant creates a global policy", h.sysAdmin, "/repository/v1/policy/create", M{"policy_id": "sa", "name": "SA", "permissions": []string{"*"}, "domain_id": "*"}},
		{"a person's SYSTEM grant changes a global policy", h.sysAdmin, "/repository/v1/policy/update", M{"policy_id": "global", "name": "taken", "domain_id": "*"}},
		{"a person's SYSTEM grant deletes another domain's policy", h.sysAdmin, "/repository/v1/policy/delete", M{"policy_id": "of-b", "domain_id": "domain-b"}},
		{"a person's SYSTEM grant creates in another domain", h.sysAdmin, "/repository/v1/schema/create", M{"name": "sa-form", "service_type": "x", "schema_id": "x", "schema": M{"type": "object"}, "domain_id": "domain-b"}},
		{"a person's SYSTEM grant deletes a global schema", h.sysAdmin, "/repository/v1/schema/delete", M{"name": "global-form", "domain_id": "*"}},
		{"a domain admin changes a global policy", h.adminB, "/repository/v1/policy/update", M{"policy_id": "global", "name": "taken", "domain_id": "*"}},
		{"a domain admin deletes a global policy", h.adminB, "/repository/v1/policy/delete", M{"policy_id": "global", "domain_id": "*"}},
		{"a domain admin creates a global schema", h.adminA, "/repository/v1/schema/create", M{"name": "mine", "service_type": "x", "schema_id": "x", "schema": M{"type": "object"}, "domain_id": "*"}},
		{"a domain admin changes a global schema", h.adminA, "/repository/v1/schema/update", M{"name": "global-form", "tags": M{"x": "y"}, "domain_id": "*"}},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			r.as.Call(r.path, r.body).Fails(http.StatusForbidden, errs.PermissionDenied)
			if !reflect.DeepEqual(snapshot(), before) {
				t.Fatal("a refused call changed the store")
			}
		})
	}
	// Nor does the grant read across domains by naming one.
	h.sysAdmin.Call("/repository/v1/policy/get", M{"policy_id": "of-b", "domain_id": "domain-b"}).Fails(http.StatusNotFound, errs.NotFoundCode)

	// Every domain reads the platform's records: get finds the global
	// record of the name, list and stat answer it with the domain's own.
	var pol policyInfo
	h.adminB.Call("/repository/v1/policy/get", M{"policy_id": "global", "domain_id": "domain-b"}).OK(&pol)
	if pol.DomainID != "*" {
		t.Fatalf("global policy read by B = %+v", pol)
	}
	var pl list[policyInfo]
	h.userA.Call("/repository/v1/policy/list", M{"repository_id": h.local, "domain_id": "domain-a"}).OK(&pl)
	if pl.TotalCount != 1 || pl.Results[0].PolicyID != "global" {
		t.Fatalf("A's policies = %+v", pl)
	}
	var sch schemaInfo
	h.userA.Call("/repository/v1/schema/get", M{"name": "global-form", "domain_id": "domain-a"}).OK(&sch)
	var pg pluginInfo
	h.sysAdmin.Call("/repository/v1/plugin/get", M{"plugin_id": plugin.PluginID}).OK(&pg)

	// The service credential writes them, and acts inside a domain it names.
	h.system.Call("/repository/v1/policy/update", M{"policy_id": "global", "name": "Renamed", "domain_id": "*"}).OK(&pol)
	if pol.Name != "Renamed" {
		t.Fatalf("service update = %+v", pol)
	}
	h.system.Call("/repository/v1/plugin/disable", M{"plugin_id": plugin.PluginID}).OK(&pg)
	if pg.State != "DISABLED" {
		t.Fatalf("service disable = %+v", pg)
	}
	h.system.Call("/repository/v1/schema/delete", M{"name": "global-form", "domain_id": "*"}).OK(nil)
	h.system.Call("/repository/v1/policy/delete", M{"policy_id": "of-b", "domain_id": "domain-b"}).OK(nil)
	if n := h.count(t, repository.SchemasCollection) + h.count(t, repository.PoliciesCollection); n != 1 {
		t.Fatalf("%d policies and schemas left, want the global policy", n)
	}
}
