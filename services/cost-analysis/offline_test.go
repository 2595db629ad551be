package costanalysis_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Issue 18 point 5: when the repository cannot reach a plugin's registry
// (offline), a data source is registered and its plugin updated with the
// version asked, or none, and the gap is logged; a registry that answers
// without the version asked is still 400, and nothing is stored.
func TestPluginVersionsOffline(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{logs: true})
	offline := func(name string, pi M) M {
		b := domainSource(name)
		for k, v := range pi {
			b["plugin_info"].(M)[k] = v
		}
		return b
	}
	d := e.register(t, e.adminA, offline("Offline asked", M{"plugin_id": offlineCE, "version": "3.0.0", "upgrade_mode": "MANUAL"}))
	if d.PluginInfo.Version != "3.0.0" || d.PluginInfo.PluginID != offlineCE {
		t.Fatalf("registered offline with a version: %+v", d.PluginInfo)
	}
	none := e.register(t, e.adminA, offline("Offline newest", M{"plugin_id": offlineCE}))
	if none.PluginInfo.Version != "" {
		t.Fatalf("registered offline without a version: %+v", none.PluginInfo)
	}
	var got DataSource
	e.adminA.Call(dsBase+"update-plugin", M{"data_source_id": d.DataSourceID, "version": "3.1.0"}).OK(&got)
	if got.PluginInfo.Version != "3.1.0" {
		t.Fatalf("updated offline: %+v", got.PluginInfo)
	}
	if v := e.raw(t, dataSources, d.DataSourceID)["plugin_info"].(bson.M)["version"]; v != "3.1.0" {
		t.Fatalf("stored version %v", v)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "keeps version 3.1.0 unchecked") || !strings.Contains(logs, offlineCE) {
		t.Fatalf("the offline version is not logged: %s", logs)
	}

	// The registry answers: a version it does not list is 400.
	online := e.register(t, e.adminA, domainSource("Online"))
	n := e.count(t, dataSources)
	before := e.raw(t, dataSources, online.DataSourceID)
	e.adminA.Call(dsBase+"register", offline("Unlisted", M{"version": "9.9.9"})).Fails(http.StatusBadRequest, errs.InvalidParameter)
	e.adminA.Call(dsBase+"update-plugin", M{"data_source_id": online.DataSourceID, "version": "9.9.9"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	if e.count(t, dataSources) != n || !reflect.DeepEqual(e.raw(t, dataSources, online.DataSourceID), before) {
		t.Fatal("a refused version changed the store")
	}
}
