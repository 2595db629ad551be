package repository_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/nubes-io/nubes/services/repository"
)

// Keys as clouds and schemas write them: a plugin's capability, labels
// and registry_config, a policy's and a schema's labels keep keys with
// dots, slashes, colons and a leading $ (a JSON schema's "$schema" and
// "$ref" included), stored and read back unchanged.
func TestFreeFormKeysKept(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{PublicHubURL: "hub.example.com"})
	capability := map[string]any{
		"supported_schema": []any{"aws_access_key"},
		"$schema":          "http://json-schema.org/draft-07/schema#",
		"options_schema": map[string]any{"$ref": "#/$defs/opts", "$defs": map[string]any{"opts": map[string]any{"type": "object"}},
			"properties": map[string]any{"kubernetes.io/cluster/prod": map[string]any{"type": "string"}}},
		"app.kubernetes.io/name": "ec2", "aws:createdBy": "ops",
	}
	labels := []any{"compute", map[string]any{"app.kubernetes.io/name": "web", "$owner": "ops", "aws:createdBy": "x"}}
	registry := map[string]any{"docker.io/mirror": "https://m.example.com", "username": "u"}
	roundTrip := func(what string, got any, want any) {
		t.Helper()
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		var x, y any
		_ = json.Unmarshal(a, &x)
		_ = json.Unmarshal(b, &y)
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%s: %s, want %s", what, a, b)
		}
	}

	p := h.register(t, h.adminA, map[string]any{"name": "K", "resource_type": "inventory.Collector", "image": "team/plugin-keys",
		"registry_type": "PRIVATE_REGISTRY", "registry_url": "https://r.example.com", "registry_config": registry,
		"capability": capability, "labels": labels, "tags": map[string]any{"kubernetes.io/cluster/prod": "yes"}})
	var got pluginInfo
	h.adminA.Call("/repository/v1/plugin/get", map[string]any{"plugin_id": p.PluginID}).OK(&got)
	roundTrip("plugin capability", got.Capability, capability)
	roundTrip("plugin labels", got.Labels, labels)
	roundTrip("plugin registry_config", got.RegistryConfig, registry)
	// An update keeps them too.
	capability["$id"] = "urn:x"
	h.adminA.Call("/repository/v1/plugin/update", map[string]any{"plugin_id": p.PluginID, "capability": capability, "labels": labels}).OK(nil)
	h.adminA.Call("/repository/v1/plugin/get", map[string]any{"plugin_id": p.PluginID}).OK(&got)
	roundTrip("updated plugin capability", got.Capability, capability)
	roundTrip("updated plugin labels", got.Labels, labels)

	var pol policyInfo
	h.adminA.Call("/repository/v1/policy/create", map[string]any{"policy_id": "keys-1", "name": "K", "permissions": []string{"*"},
		"domain_id": "domain-a", "labels": labels}).OK(nil)
	h.adminA.Call("/repository/v1/policy/get", map[string]any{"policy_id": "keys-1", "domain_id": "domain-a"}).OK(&pol)
	roundTrip("policy labels", pol.Labels, labels)
	h.adminA.Call("/repository/v1/policy/update", map[string]any{"policy_id": "keys-1", "domain_id": "domain-a", "labels": labels[1:]}).OK(nil)
	h.adminA.Call("/repository/v1/policy/get", map[string]any{"policy_id": "keys-1", "domain_id": "domain-a"}).OK(&pol)
	roundTrip("updated policy labels", pol.Labels, labels[1:])

	var s schemaInfo
	h.adminA.Call("/repository/v1/schema/create", map[string]any{"name": "keys", "service_type": "secret.credentials", "schema_id": "k",
		"schema": credentialForm, "domain_id": "domain-a", "labels": labels}).OK(nil)
	h.adminA.Call("/repository/v1/schema/get", map[string]any{"name": "keys", "domain_id": "domain-a"}).OK(&s)
	roundTrip("schema labels", s.Labels, labels)
	roundTrip("schema document", s.Schema, credentialForm)
}
