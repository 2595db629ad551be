package costanalysis_test

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	costanalysis "github.com/nubes-io/nubes/services/cost-analysis"
)

// testClock is the scheduler's clock, moved by the test; ticks counts the
// looks of each replica at it (one per tick).
type testClock struct {
	*testkit.Clock
	ticks []*atomic.Int64
}

func (c *testClock) set(t time.Time) { c.Set(t) }

// replica is the schedule config of one more replica reading the clock.
func (c *testClock) replica() costanalysis.SyncSchedule {
	n := &atomic.Int64{}
	c.ticks = append(c.ticks, n)
	return costanalysis.SyncSchedule{Tick: 20 * time.Millisecond, Now: func() time.Time {
		n.Add(1)
		return c.Now()
	}}
}

// settle waits until every replica has finished two more ticks: what was
// due has fired, and a second fire of it would have happened by then.
func (c *testClock) settle(t *testing.T) {
	t.Helper()
	from := make([]int64, len(c.ticks))
	for i, n := range c.ticks {
		from[i] = n.Load()
	}
	for i, n := range c.ticks {
		// Tick from+1 started, so tick from+2 finished.
		testkit.Eventually(t, waitBound, fmt.Sprintf("replica %d's ticks", i), func() bool { return n.Load() >= from[i]+3 })
	}
}

type jobList struct {
	Results    []Job `json:"results"`
	TotalCount int   `json:"total_count"`
}

func (e *env) jobsOf(t *testing.T, dsID string) []Job {
	t.Helper()
	var l jobList
	e.adminA.Call(jobBase+"list", M{"data_source_id": dsID}).OK(&l)
	slices.SortFunc(l.Results, func(a, b Job) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
	return l.Results
}

// TestScheduledSync: a data source whose schedule is ENABLED syncs by
// itself at each of its hours, once across two replicas, with nobody
// calling sync; a DISABLED schedule, a disabled data source, another hour
// and a data source with a job still running do not get a job.
func TestScheduledSync(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, workers: heldTasks})
	// The harness's replica schedules on the wall clock: these two on the test's.
	e.stopWorkers()
	clock := &testClock{Clock: testkit.StoppedClock(time.Date(2026, 5, 1, 5, 10, 0, 0, time.UTC))}

	// on: its schedule enabled by update; off: disabled by update;
	// disabled: the data source disabled; other: another hour.
	on := e.register(t, e.adminA, withKey(domainSource("on"), "schedule", M{"state": "DISABLED", "hours": []int{5}}))
	var got DataSource
	e.adminA.Call(dsBase+"update", M{"data_source_id": on.DataSourceID, "schedule": M{"state": "ENABLED", "hours": []int{5, 20}}}).OK(&got)
	if got.Schedule.State != "ENABLED" || !slices.Equal(got.Schedule.Hours, []int{5, 20}) {
		t.Fatalf("update schedule: %+v", got.Schedule)
	}
	off := e.register(t, e.adminA, withKey(domainSource("off"), "schedule", M{"state": "ENABLED", "hours": []int{5}}))
	e.adminA.Call(dsBase+"update", M{"data_source_id": off.DataSourceID, "schedule": M{"state": "DISABLED", "hours": []int{5}}}).OK(&got)
	if got.Schedule.State != "DISABLED" {
		t.Fatalf("update schedule: %+v", got.Schedule)
	}
	disabled := e.register(t, e.adminA, withKey(domainSource("disabled"), "schedule", M{"state": "ENABLED", "hours": []int{5}}))
	e.adminA.Call(dsBase+"disable", M{"data_source_id": disabled.DataSourceID}).OK(nil)
	other := e.register(t, e.adminA, withKey(domainSource("other"), "schedule", M{"hours": []int{6}})) // state defaults to ENABLED
	none := e.register(t, e.adminA, domainSource("none"))

	e.plugin.Script(getTasksMethod, tasksReply(1))
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Stream: []M{rows(3, "2024-01", "scheduled")}})
	for range 2 {
		e.cfg.SyncSchedule = clock.replica()
		e.start(t)
	}

	// 05:10: on syncs and stores its costs.
	var first Job
	testkit.Eventually(t, waitBound, "no scheduled job of on", func() bool {
		if js := e.jobsOf(t, on.DataSourceID); len(js) > 0 && js[0].Status != "IN_PROGRESS" {
			first = js[0]
			return true
		}
		return false
	})
	if first.Status != "SUCCESS" || first.TotalTasks != 1 || first.Options["start"] != nil {
		t.Fatalf("scheduled job %+v", first)
	}
	if l := e.costs(t, e.adminA, on.DataSourceID, M{}); l.TotalCount != 3 || l.Results[0].JobID != first.JobID {
		t.Fatalf("costs of the scheduled job: %+v", l)
	}
	clock.settle(t)
	want := map[string]int{on.DataSourceID: 1, off.DataSourceID: 0, disabled.DataSourceID: 0, other.DataSourceID: 0, none.DataSourceID: 0}
	for id, n := range want {
		if js := e.jobsOf(t, id); len(js) != n {
			t.Fatalf("05:10: %s has %d jobs, want %d", id, len(js), n)
		}
	}
	// The disabled data source was due, and skipped for the hour.
	if n := e.count(t, "cost_locks", bson.E{Key: "_id", Value: "schedule#" + disabled.DataSourceID + "#2026-05-01T05"}); n != 1 {
		t.Fatalf("disabled's lease: %d", n)
	}

	// 06:10, other's hour, while a sync of other that someone started
	// still runs: the scheduled one is skipped (ERROR_DUPLICATE_JOB).
	e.plugin.Script(getDataMethod, fakeplugin.Reply{Hang: true})
	running := e.sync(t, e.adminA, other.DataSourceID, "")
	clock.set(time.Date(2026, 5, 1, 6, 10, 0, 0, time.UTC))
	clock.settle(t)
	if js := e.jobsOf(t, other.DataSourceID); len(js) != 1 || js[0].JobID != running.JobID || js[0].Status != "IN_PROGRESS" {
		t.Fatalf("06:10: jobs of other %+v", js)
	}
	if n := e.count(t, "cost_locks", bson.E{Key: "_id", Value: "schedule#" + other.DataSourceID + "#2026-05-01T06"}); n != 1 {
		t.Fatalf("other's lease: %d", n)
	}
	e.adminA.Call(jobBase+"cancel", M{"job_id": running.JobID}).OK(nil)

	// The next day at 05: on syncs again (a plugin with no task this time).
	e.plugin.Script(getTasksMethod, tasksReply(0))
	clock.set(time.Date(2026, 5, 2, 5, 0, 0, 0, time.UTC))
	clock.settle(t)
	js := e.jobsOf(t, on.DataSourceID)
	if len(js) != 2 || js[0].JobID != first.JobID || js[1].Status != "SUCCESS" || js[1].TotalTasks != 0 {
		t.Fatalf("the next day: jobs of on %+v", js)
	}
	for _, id := range []string{off.DataSourceID, disabled.DataSourceID, none.DataSourceID} {
		if js := e.jobsOf(t, id); len(js) != 0 {
			t.Fatalf("the next day: %s has jobs %+v", id, js)
		}
	}
	if js := e.jobsOf(t, other.DataSourceID); len(js) != 1 {
		t.Fatalf("the next day: jobs of other %+v", js)
	}
}

// withKey is body with key set.
func withKey(body M, key string, v any) M { body[key] = v; return body }

// TestScheduleValidation: register and update refuse a schedule that is
// not hours of the day each once with state ENABLED or DISABLED, and
// store nothing.
func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.register(t, e.adminA, withKey(domainSource("kept"), "schedule", M{"state": "ENABLED", "hours": []int{0, 23}}))
	if d.Schedule.State != "ENABLED" || !slices.Equal(d.Schedule.Hours, []int{0, 23}) {
		t.Fatalf("registered schedule %+v", d.Schedule)
	}
	all := make([]int, 25)
	for i := range all {
		all[i] = i % 24
	}
	bad := []struct {
		name     string
		schedule any
		code     string
	}{
		{"hour 24", M{"state": "ENABLED", "hours": []int{24}}, errs.InvalidParameter},
		{"hour -1", M{"state": "ENABLED", "hours": []int{-1}}, errs.InvalidParameter},
		{"an hour twice", M{"state": "ENABLED", "hours": []int{4, 4}}, errs.InvalidParameter},
		{"25 hours", M{"state": "ENABLED", "hours": all}, errs.InvalidParameter},
		{"state ON", M{"state": "ON", "hours": []int{1}}, errs.InvalidParameter},
		{"state lower case", M{"state": "enabled", "hours": []int{1}}, errs.InvalidParameter},
		{"hours a string", M{"state": "ENABLED", "hours": "1"}, errs.InvalidParameterType},
		{"an hour a string", M{"state": "ENABLED", "hours": []any{"1"}}, errs.InvalidParameterType},
		{"schedule a list", []any{1}, errs.InvalidParameterType},
		{"unknown field", M{"state": "ENABLED", "hours": []int{1}, "timezone": "UTC"}, errs.InvalidParameter},
	}
	before := e.count(t, dataSources)
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			e.adminA.Call(dsBase+"register", withKey(domainSource("x"), "schedule", tc.schedule)).Fails(http.StatusBadRequest, tc.code)
			if n := e.count(t, dataSources); n != before {
				t.Fatalf("register stored: %d data sources, want %d", n, before)
			}
			e.adminA.Call(dsBase+"update", M{"data_source_id": d.DataSourceID, "schedule": tc.schedule}).Fails(http.StatusBadRequest, tc.code)
			var got DataSource
			e.adminA.Call(dsBase+"get", M{"data_source_id": d.DataSourceID}).OK(&got)
			if got.Schedule.State != "ENABLED" || !slices.Equal(got.Schedule.Hours, []int{0, 23}) {
				t.Fatalf("update changed the schedule: %+v", got.Schedule)
			}
		})
	}
	// update without a state keeps it, and empties the hours when told.
	var got DataSource
	e.adminA.Call(dsBase+"update", M{"data_source_id": d.DataSourceID, "schedule": M{"hours": []int{}}}).OK(&got)
	if got.Schedule.State != "ENABLED" || len(got.Schedule.Hours) != 0 {
		t.Fatalf("update hours only: %+v", got.Schedule)
	}
}
