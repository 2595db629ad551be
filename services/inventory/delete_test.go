package inventory_test

import (
	"fmt"
	"net/http"
	"sync"
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
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
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

// TestCollectorUpdateRacingDelete: updates racing a delete that fails
// after its mark never write the collector back without the mark
// (FerretDB writes an update back whole, so an update that read the
// collector before the mark would drop it): in every round each update
// answers 200 (it landed before the mark), 404 or 503 (nothing
// written: the lease waited out or a fence refused), the collector stays
// marked and out of get and list, and the retry deletes it. Updates that
// $set without the collector's lease fail this within a few rounds.
func TestCollectorUpdateRacingDelete(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	s := setup(t)
	const rounds, writers = 6, 4
	for round := range rounds {
		c := s.createCollector(s.adminA, domainCollector())
		id := map[string]any{"collector_id": c.CollectorID}
		restore := store.FailChildDeletes(jobsColl)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range 3 {
					r := s.adminA.CallQueued("/inventory/v1/collector/update", map[string]any{"collector_id": c.CollectorID,
						"name": fmt.Sprintf("w%d-%d", w, i), "tags": map[string]any{"round": round}})
					if r.Status == http.StatusNotFound {
						return
					}
					// A fence refusing a holder whose lease ran short (or a
					// lease waited out 20 times): nothing was written.
					if r.Status == http.StatusServiceUnavailable {
						t.Logf("round %d: update: %s", round, r.Body)
						continue
					}
					if r.Status != http.StatusOK {
						t.Errorf("round %d: update: %d %s", round, r.Status, r.Body)
						return
					}
				}
			}()
		}
		close(start)
		// Queued: a lease waited out marks nothing; the child step does fail.
		s.adminA.CallQueued("/inventory/v1/collector/delete", id).Fails(http.StatusServiceUnavailable, errs.Unavailable)
		wg.Wait()
		restore()
		if r := s.adminA.Call("/inventory/v1/collector/get", id); r.Status != http.StatusNotFound {
			t.Fatalf("round %d: the collector shows after its mark (an update wrote it back without it): %d", round, r.Status)
		}
		s.adminA.Call("/inventory/v1/collector/delete", id).OK(nil)
	}
	if n := s.count(collectorsColl, nil); n != 0 {
		t.Fatalf("%d collectors left", n)
	}
}
