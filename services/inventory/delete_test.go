package inventory_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// TestCollectorDeleteMarkedFirst: a collector delete whose second child
// delete (its jobs) fails answers 503 and leaves the collector marked:
// its tasks are gone, it is out of get, list and stat, refuses update and
// collect, and another domain cannot finish it; a retry deletes the jobs
// and the collector (404 from then on); the cloud services it collected
// stay, as upstream keeps them.
func TestCollectorDeleteMarkedFirst(t *testing.T) {
	s := setup(t)
	c := s.createCollector(s.adminA, domainCollector())
	other := s.createCollector(s.adminA, domainCollector(map[string]any{"name": "other"}))
	s.plugin.Script(collectMethod, fakeplugin.Reply{Stream: instances(1, 2)})
	if j := s.wait(s.collect(s.adminA, c.CollectorID, "").JobID, time.Minute); j.Status != "SUCCESS" {
		t.Fatalf("job %+v", j)
	}
	mine := bson.D{{Key: "collector_id", Value: c.CollectorID}}
	if s.count(jobsColl, mine) != 1 || s.count(tasksColl, mine) != 3 {
		t.Fatal("no job or tasks to delete")
	}
	services := s.count(servicesColl, nil)
	id := map[string]any{"collector_id": c.CollectorID}

	restore := store.FailChildDeletes(jobsColl)
	s.adminA.Call("/inventory/v1/collector/delete", id).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	restore()
	if s.count(tasksColl, mine) != 0 || s.count(jobsColl, mine) != 1 || s.count(collectorsColl, bson.D{{Key: "_id", Value: c.CollectorID}}) != 1 {
		t.Fatal("the failed delete did not stop between its children")
	}
	s.adminA.Call("/inventory/v1/collector/get", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	s.adminA.Call("/inventory/v1/collector/update", map[string]any{"collector_id": c.CollectorID, "name": "x"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	s.adminA.Call("/inventory/v1/collector/collect", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	var l list[collectorOut]
	s.adminA.Call("/inventory/v1/collector/list", nil).OK(&l)
	if l.TotalCount != 1 || l.Results[0].CollectorID != other.CollectorID {
		t.Fatalf("list shows %+v", l)
	}
	st := s.adminA.Call("/inventory/v1/collector/stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}).OK(nil).JSON()
	if fmt.Sprint(st["results"]) != "[map[n:1]]" {
		t.Fatalf("stat counts %v", st["results"])
	}
	s.adminB.Call("/inventory/v1/collector/delete", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	if s.count(jobsColl, mine) != 1 {
		t.Fatal("another domain's delete went on")
	}

	s.adminA.Call("/inventory/v1/collector/delete", id).OK(nil)
	if s.count(jobsColl, mine) != 0 || s.count(collectorsColl, bson.D{{Key: "_id", Value: c.CollectorID}}) != 0 {
		t.Fatal("the retry left jobs or the collector")
	}
	s.adminA.Call("/inventory/v1/collector/delete", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := s.count(servicesColl, nil); n != services {
		t.Fatalf("%d cloud services, %d before the delete", n, services)
	}
	s.adminA.Call("/inventory/v1/collector/get", map[string]any{"collector_id": other.CollectorID}).OK(nil)
}
