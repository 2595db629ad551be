package notification_test

import (
	"net/http"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Issue 18 point 5: when the repository cannot reach a plugin's registry
// (offline), a protocol is created and its plugin updated with the
// version asked, or none; a registry that answers without the version
// asked is still 400, and nothing is stored.
func TestPluginVersionsOffline(t *testing.T) {
	t.Parallel()
	e := setup(t)
	offline := func(name, version string) M {
		b := emailProtocol(name)
		pi := b["plugin_info"].(M)
		pi["plugin_id"] = "plugin-offline-protocol"
		if version != "" {
			pi["version"] = version
		}
		return b
	}
	p := e.create(t, e.adminA, offline("Offline asked", "3.0.0"))
	if p.PluginInfo.Version != "3.0.0" || p.PluginInfo.PluginID != "plugin-offline-protocol" {
		t.Fatalf("created offline with a version: %+v", p.PluginInfo)
	}
	none := e.create(t, e.adminA, offline("Offline newest", ""))
	if none.PluginInfo.Version != "" {
		t.Fatalf("created offline without a version: %+v", none.PluginInfo)
	}
	var got Protocol
	e.adminA.Call(base+"update-plugin", M{"protocol_id": p.ProtocolID, "version": "3.1.0", "domain_id": "domain-a"}).OK(&got)
	if got.PluginInfo.Version != "3.1.0" {
		t.Fatalf("updated offline: %+v", got.PluginInfo)
	}
	if v := e.raw(t, "notification_protocols", p.ProtocolID)["plugin_info"].(bson.M)["version"]; v != "3.1.0" {
		t.Fatalf("stored version %v", v)
	}

	// The registry answers: a version it does not list is 400.
	online := e.create(t, e.adminA, emailProtocol("Online"))
	n := e.external(t)
	before := e.raw(t, "notification_protocols", online.ProtocolID)
	b := emailProtocol("Unlisted")
	b["plugin_info"].(M)["version"] = "9.9.9"
	e.adminA.Call(base+"create", b).Fails(http.StatusBadRequest, errs.InvalidParameter)
	e.adminA.Call(base+"update-plugin", M{"protocol_id": online.ProtocolID, "version": "9.9.9", "domain_id": "domain-a"}).
		Fails(http.StatusBadRequest, errs.InvalidParameter)
	if e.external(t) != n || !reflect.DeepEqual(e.raw(t, "notification_protocols", online.ProtocolID), before) {
		t.Fatal("a refused version changed the store")
	}
}
