package inventory_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/inventory"
)

// TestBadInputEveryOperation: every operation refuses a body that is not
// a JSON object, an unknown member, and (where it has one) a missing
// required member, with 400 and its code, and stores nothing.
func TestBadInputEveryOperation(t *testing.T) {
	t.Parallel()
	s := setup(t)
	required := map[string]bool{ // operations with a required member
		"collector/create": true, "collector/update": true, "collector/update-plugin": true, "collector/verify-plugin": true,
		"collector/delete": true, "collector/get": true, "collector/stat": true, "collector/collect": true,
		"cloud-service-type/create": true, "cloud-service-type/update": true, "cloud-service-type/delete": true,
		"cloud-service-type/get": true, "cloud-service-type/stat": true,
		"job/delete": true, "job/get": true, "job/analyze": true, "job/stat": true,
		"job-task/delete": true, "job-task/get": true, "job-task/stat": true,
		"cloud-service/get": true, "cloud-service/stat": true,
	}
	all := []string{"collector/list", "cloud-service-type/list", "job/list", "job-task/list", "cloud-service/list"}
	for op := range required {
		all = append(all, op)
	}
	counts := func() map[string]int64 {
		cols, err := s.db.ListCollectionNames(context.Background(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, c := range cols {
			out[c] = s.count(c, nil)
		}
		return out
	}
	before := counts()
	for _, op := range all {
		path := "/inventory/v1/" + op
		t.Run(op, func(t *testing.T) {
			s.adminA.Call(path, "[]").Fails(http.StatusBadRequest, errs.JSONFormat)
			s.adminA.Call(path, `{"no_such_member": 1}`).Fails(http.StatusBadRequest, errs.InvalidParameter)
			if required[op] {
				s.adminA.Call(path, `{}`).Fails(http.StatusBadRequest, errs.RequiredParameter)
			}
			s.anon.Call(path, `{}`).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
			s.userA.Call(path, `{}`).Fails(http.StatusForbidden, errs.PermissionDenied)
			// The unversioned alias the console sends is the same operation.
			s.adminA.Call("/inventory/"+op, `{"no_such_member": 1}`).Fails(http.StatusBadRequest, errs.InvalidParameter)
		})
	}
	after := counts()
	for c, n := range after {
		if n != before[c] {
			t.Fatalf("%s: %d documents, %d before", c, n, before[c])
		}
	}
}

// TestScheduledCollect: a collector whose schedule holds the clock's hour
// collects once, whatever the number of replicas and ticks.
func TestScheduledCollect(t *testing.T) {
	t.Parallel()
	// Both replicas fire on the test's clock, stopped in an hour of the
	// schedule; ticks counts each replica's looks at it (one per tick).
	clock := testkit.StoppedClock(time.Date(2026, 5, 1, 5, 10, 0, 0, time.UTC))
	var ticks []*atomic.Int64
	s := setupWith(t, options{replicas: 2, cfg: func(c *inventory.Config) {
		n := &atomic.Int64{}
		ticks = append(ticks, n)
		c.ScheduleTick = 20 * time.Millisecond
		c.Clock = func() time.Time { n.Add(1); return clock.Now() }
	}})
	hour := clock.Now().Hour()
	on := s.createCollector(s.adminA, domainCollector(map[string]any{"schedule": map[string]any{"state": "ENABLED", "hours": []int{hour}}}))
	s.createCollector(s.adminA, domainCollector(map[string]any{"name": "off", "schedule": map[string]any{"state": "DISABLED", "hours": []int{hour}}}))
	var l list[jobOut]
	testkit.Eventually(t, time.Minute, "a scheduled job", func() bool {
		s.adminA.Call("/inventory/v1/job/list", nil).OK(&l)
		return l.TotalCount > 0
	})
	// Two more ticks of both replicas finished: a second job of the hour
	// would be there by now.
	for i, n := range ticks {
		from := n.Load()
		// Tick from+1 started, so tick from+2 finished.
		testkit.Eventually(t, time.Minute, fmt.Sprintf("replica %d's ticks", i), func() bool { return n.Load() >= from+3 })
	}
	s.adminA.Call("/inventory/v1/job/list", nil).OK(&l)
	if l.TotalCount != 1 || l.Results[0].CollectorID != on.CollectorID || l.Results[0].TotalTasks != 3 || l.Results[0].RequestWorkspaceID != "" {
		t.Fatalf("scheduled jobs: %+v", l)
	}
	s.wait(l.Results[0].JobID, time.Minute)
}
