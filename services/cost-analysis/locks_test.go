package costanalysis_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/worker"
)

// TestLocksPurged: every scheduled fire leaves a lease claim in
// cost_locks; the worker purges the ended ones, so over many jobs the
// collection does not grow with them. The jobs here are
// scheduled ones, one an hour over four hours on two replicas: after
// each hour's purge, the hour does not fire again (its marker
// schedule#<id>#<hour> is no claim, and stays).
func TestLocksPurged(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, logs: true, workers: func(c *worker.Config) {
		// A keep this short, far below the hour lease.Purge asks for,
		// lets a purge race takers of keys still in use (a job's key is
		// taken again by Settle, Tidy and the sweeper): a take whose
		// latest claim was purged under it withdraws and takes again,
		// and each purge is a write on the store's one writer (SQLite).
		// A job's takers then waited out their 15 s and an hour's run
		// was lost (9 of 44 runs purging every 100 ms, 1 of 27 every
		// second): a take that lost to a stale taker's claim left its
		// own live with no holder (pkg/lease, fixed in 5d6f460).
		c.PurgeEvery, c.KeepLocks = time.Second, 100*time.Millisecond
	}})
	e.stopWorkers() // the two replicas below schedule on the test's clock
	day := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{Clock: testkit.StoppedClock(day.Add(-time.Hour))} // no hour of the schedule's yet
	hourly := e.register(t, e.adminA, withKey(domainSource("hourly"), "schedule", M{"state": "ENABLED", "hours": []int{0, 1, 2, 3}}))
	e.plugin.Script(getTasksMethod, tasksReply(2))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(2, "2024-01", "hourly")}})
	for range 2 {
		e.cfg.SyncSchedule = clock.replica()
		e.start(t)
	}
	claims := func() int64 {
		return e.count(t, "cost_locks", bson.E{Key: "lease", Value: bson.D{{Key: "$exists", Value: true}}})
	}
	const hours = 4
	for h := range hours {
		clock.set(day.Add(time.Duration(h)*time.Hour + 10*time.Minute))
		var js []Job
		if err := testkit.Within(waitBound, func() bool {
			js = e.jobsOf(t, hourly.DataSourceID)
			if len(js) > h+1 {
				t.Fatalf("hour %d: %d jobs", h, len(js))
			}
			if len(js) == h+1 && js[h].Status != "IN_PROGRESS" {
				if js[h].Status != "SUCCESS" {
					t.Fatalf("hour %d: job %+v", h, js[h])
				}
				return true
			}
			return false
		}); err != nil {
			t.Fatalf("hour %d: no job ended: jobs %+v; the service's warnings and schedule lines:\n%s", h, js, notable(e.logs.String()))
		}
		// Every lease ended: the purge leaves none of this hour's fire.
		if err := testkit.Within(waitBound, func() bool { return claims() == 0 }); err != nil {
			t.Fatalf("hour %d: %d lease claims left after the jobs ended (%v)", h, claims(), err)
		}
		// Purged, the hour still does not fire again.
		clock.settle(t)
		if js := e.jobsOf(t, hourly.DataSourceID); len(js) != h+1 {
			t.Fatalf("hour %d fired again after the purge: %d jobs", h, len(js))
		}
	}
	if n := e.count(t, "cost_locks", bson.E{Key: "_id", Value: bson.D{{Key: "$regex", Value: "^schedule#" + hourly.DataSourceID + "#"}}}); n != hours {
		t.Fatalf("fire-once markers: %d, want %d", n, hours)
	}
}

// notable is the lines of a JSON log that a failure is explained by.
func notable(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, "schedule") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
