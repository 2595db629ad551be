package pluginref_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/pluginref"
)

// The request types as a kind declares them (see Request and Update).
type (
	kindInfo struct {
		pluginref.Request
		SecretData  map[string]any `json:"secret_data"`
		UpgradeMode string         `json:"upgrade_mode" v:"enum=AUTO|MANUAL"`
	}
	kindCreate struct {
		Name       string    `json:"name" v:"required"`
		PluginInfo *kindInfo `json:"plugin_info" v:"required"`
	}
	kindUpdate struct {
		ThingID string `json:"thing_id" v:"required"`
		pluginref.Update
		UpgradeMode string `json:"upgrade_mode" v:"enum=AUTO|MANUAL|NONE"`
	}
)

func (r *kindCreate) Validate() error { return r.PluginInfo.Check(r.PluginInfo.UpgradeMode) }

// The embedded members are the kind's own on the wire: decoded, checked
// under plugin_info.<member>, unknown members refused, and asked of the
// repository as given.
func TestRequestOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name, body, err string
		ask             pluginref.Ask
	}{
		{name: "all", body: `{"name": "n", "plugin_info": {"plugin_id": "p", "version": "1.0", "options": {"a.b": 1}, "metadata": {"x": 1}, "secret_data": {"k": "v"}, "upgrade_mode": "MANUAL"}}`,
			ask: pluginref.Ask{Version: "1.0", Options: map[string]any{"a.b": float64(1)}, UpgradeMode: "MANUAL"}},
		{name: "camel case", body: `{"name": "n", "pluginInfo": {"pluginId": "p", "upgradeMode": "AUTO"}}`, ask: pluginref.Ask{UpgradeMode: "AUTO"}},
		{name: "no plugin", body: `{"name": "n", "plugin_info": {"version": "1"}}`, err: "key = plugin_info.plugin_id"},
		{name: "long version", body: `{"name": "n", "plugin_info": {"plugin_id": "p", "version": "` + strings.Repeat("v", 256) + `"}}`, err: "key = plugin_info.version"},
		{name: "a mode of another kind", body: `{"name": "n", "plugin_info": {"plugin_id": "p", "upgrade_mode": "NONE"}}`, err: "key = plugin_info.upgrade_mode"},
		{name: "manual without version", body: `{"name": "n", "plugin_info": {"plugin_id": "p", "upgrade_mode": "MANUAL"}}`, err: "ERROR_REQUIRED_PARAMETER"},
		{name: "unknown member", body: `{"name": "n", "plugin_info": {"plugin_id": "p", "secret_id": "s"}}`, err: "secret_id"},
		{name: "options not an object", body: `{"name": "n", "plugin_info": {"plugin_id": "p", "options": []}}`, err: "plugin_info.options"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r kindCreate
			err := api.Decode([]byte(tc.body), &r)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.PluginInfo.Ask(r.PluginInfo.UpgradeMode); !reflect.DeepEqual(got, tc.ask) || r.PluginInfo.PluginID != "p" {
				t.Errorf("ask = %#v (plugin %q), want %#v", got, r.PluginInfo.PluginID, tc.ask)
			}
		})
	}
}

func TestUpdateOnTheWire(t *testing.T) {
	var u kindUpdate
	if err := api.Decode([]byte(`{"thing_id": "t", "version": "2", "options": {"o": true}, "upgrade_mode": "NONE"}`), &u); err != nil {
		t.Fatal(err)
	}
	want := pluginref.Ask{Version: "2", Options: map[string]any{"o": true}, UpgradeMode: "NONE"}
	if got := u.Ask(u.UpgradeMode); !reflect.DeepEqual(got, want) {
		t.Errorf("ask = %#v, want %#v", got, want)
	}
	if got := (pluginref.Update{}).Ask(""); got.Options != nil {
		t.Errorf("no options asked must leave the kept ones (nil), got %#v", got.Options)
	}
	if err := api.Decode([]byte(`{"thing_id": "t", "plugin_id": "p"}`), &u); err == nil {
		t.Error("plugin_id is not a member of update-plugin")
	}
}
