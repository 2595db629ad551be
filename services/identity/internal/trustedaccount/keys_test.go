package trustedaccount_test

import (
	"encoding/json"
	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/trustedaccount"
	"github.com/nubes-io/nubes/services/identity/internal/trustedserviceaccount"
	"reflect"
	"testing"
)

// TestTrustedCloudKeys: a trusted account's data, sync_options and
// plugin_options and a trusted service account's data keep keys as
// clouds write them (dots, slashes, colons, a leading $), on create and
// on update, read back unchanged and filterable by a nested path.
func TestTrustedCloudKeys(t *testing.T) {
	h := identitytest.New(t, func(d *core.Deps) []api.Route {
		return append(trustedaccount.Routes(d), trustedserviceaccount.Routes(d)...)
	})
	same := func(what string, got, want any) {
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
	data := map[string]any{"account_id": "1", "labels": map[string]any{"kubernetes.io/cluster/prod": "owned", "app.kubernetes.io/name": "web"},
		"aws:createdBy": "alice", "$schema": "urn:x"}
	syncOpts := map[string]any{"single_workspace.id": "w", "$ref": "#/x"}
	pluginOpts := map[string]any{"regions": []any{map[string]any{"aws:region": "eu-west-1"}}}
	const ta = "/identity/v2/trusted-account/"
	var a map[string]any
	h.Admin.Call(ta+"create", map[string]any{"name": "K", "data": data, "provider": "aws", "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIAKEYS", "aws_secret_access_key": "keys-secret"}, "resource_group": "DOMAIN", "sync_options": syncOpts, "plugin_options": pluginOpts}).OK(&a)
	id := a["trusted_account_id"]
	var got map[string]any
	h.Admin.Call(ta+"get", map[string]any{"trusted_account_id": id}).OK(&got)
	same("data", got["data"], data)
	same("sync_options", got["sync_options"], syncOpts)
	same("plugin_options", got["plugin_options"], pluginOpts)
	var l struct {
		TotalCount int `json:"total_count"`
	}
	h.Admin.Call(ta+"list", map[string]any{"query": map[string]any{"filter": []any{
		map[string]any{"k": "data.aws:createdBy", "v": "alice", "o": "eq"}}}}).OK(&l)
	if l.TotalCount != 1 {
		t.Errorf("filter on data.aws:createdBy: %d", l.TotalCount)
	}
	changed := map[string]any{"$id": "urn:y", "team.name": "ops", "account_id": "2"}
	h.Admin.Call(ta+"update", map[string]any{"trusted_account_id": id, "tags": map[string]any{}, "data": changed,
		"sync_options": changed, "plugin_options": changed}).OK(nil)
	h.Admin.Call(ta+"get", map[string]any{"trusted_account_id": id}).OK(&got)
	for _, f := range []string{"data", "sync_options", "plugin_options"} {
		same("updated "+f, got[f], changed)
	}

	const tsa = "/identity/v2/trusted-service-account/"
	h.Admin.Call(tsa+"create", map[string]any{"name": "org", "data": data, "provider": "aws", "scope": "DOMAIN", "domain_id": h.Domain}).OK(&a)
	sid := a["trusted_service_account_id"]
	h.Admin.Call(tsa+"get", map[string]any{"trusted_service_account_id": sid, "domain_id": h.Domain}).OK(&got)
	same("tsa data", got["data"], data)
	h.Admin.Call(tsa+"update", map[string]any{"trusted_service_account_id": sid, "domain_id": h.Domain, "data": changed}).OK(nil)
	h.Admin.Call(tsa+"get", map[string]any{"trusted_service_account_id": sid, "domain_id": h.Domain}).OK(&got)
	same("updated tsa data", got["data"], changed)
}
