package analyze

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/wire"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// job is one seeded document, kept typed so that the expected results
// are computed from it in plain Go, apart from the engine under test.
type job struct {
	ID, Domain, Collector, Status string
	Total, Remained               int64
	Cost                          *float64 // nil: the field is absent
	CreatedAt                     time.Time
	FinishedAt                    *time.Time // nil: absent (IN_PROGRESS)
	BilledDate, BilledMonth       string
	Provider                      string // data.provider
	Usage                         []int64
	Meta                          map[string]int64
}

var statuses = []string{"SUCCESS", "FAILURE", "IN_PROGRESS", "CANCELED"}

// jobs makes n jobs of domain dom; ages keep clear of timediff boundaries
// (job i was created 2i+0.5 hours before now).
func jobs(dom string, n int, now time.Time) []job {
	var out []job
	for i := range n {
		j := job{
			ID: fmt.Sprintf("job-%s-%03d", dom, i), Domain: dom,
			Collector: fmt.Sprintf("collector-%d", i%3), Status: statuses[i%4],
			Total: int64(i % 7), Remained: int64(i % 2),
			CreatedAt:   now.Add(-time.Duration(2*i)*time.Hour - 30*time.Minute).Truncate(time.Millisecond),
			Provider:    []string{"aws", "google_cloud"}[i%2],
			Usage:       []int64{int64(i % 3), int64(i % 5)}[:i%3],
			Meta:        map[string]int64{fmt.Sprintf("k%d", i%4): int64(i)},
			BilledDate:  time.Date(2023, 12, 20, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format("2006-01-02"),
			BilledMonth: time.Date(2023, 12, 20, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format("2006-01"),
		}
		if i%10 != 0 {
			c := float64(i) * 0.25
			j.Cost = &c
		}
		if j.Status != "IN_PROGRESS" {
			f := j.CreatedAt.Add(time.Duration(i) * time.Minute)
			j.FinishedAt = &f
		}
		out = append(out, j)
	}
	return out
}

func (j job) doc() bson.D {
	d := bson.D{{Key: "_id", Value: j.ID}, {Key: "job_id", Value: j.ID}, {Key: "domain_id", Value: j.Domain},
		{Key: "collector_id", Value: j.Collector}, {Key: "status", Value: j.Status},
		{Key: "total_tasks", Value: j.Total}, {Key: "remained_tasks", Value: j.Remained},
		{Key: "created_at", Value: j.CreatedAt},
		{Key: "billed_date", Value: j.BilledDate}, {Key: "billed_month", Value: j.BilledMonth},
		{Key: "data", Value: bson.D{{Key: "provider", Value: j.Provider}}}}
	if j.Cost != nil {
		d = append(d, bson.E{Key: "cost", Value: *j.Cost})
	}
	if j.FinishedAt != nil {
		d = append(d, bson.E{Key: "finished_at", Value: *j.FinishedAt})
	}
	usage := bson.A{}
	for _, u := range j.Usage {
		usage = append(usage, u)
	}
	meta := bson.D{}
	for k, v := range j.Meta {
		meta = append(meta, bson.E{Key: k, Value: v})
	}
	return append(d, bson.E{Key: "usage", Value: usage}, bson.E{Key: "meta", Value: meta})
}

var (
	scope    = bson.D{{Key: "domain_id", Value: "dom-a"}}
	resource = query.Resource{KeywordFields: []string{"job_id", "status"}}
)

// seed stores 60 jobs of dom-a, in _id order (the order push and first
// see them), and 9 of dom-b that no result may show.
func seed(t *testing.T) (*mongo.Collection, []job) {
	t.Helper()
	now := time.Now().UTC()
	mine := jobs("dom-a", 60, now)
	var docs []any
	for _, j := range append(slices.Clone(mine), jobs("dom-b", 9, now)...) {
		docs = append(docs, j.doc())
	}
	c := testkit.Get().Database(t).Collection("job")
	if _, err := c.InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	return c, mine
}

func analyze(c *mongo.Collection, q string) (map[string]any, error) {
	var query Query
	if err := json.Unmarshal([]byte(q), &query); err != nil {
		return nil, err
	}
	return Run(context.Background(), c, scope, resource, &query)
}

// sameJSON compares as JSON, so 2 and 2.0, or key order, do not matter.
func sameJSON(t *testing.T, got, want any) {
	t.Helper()
	g, w := asJSON(t, got), asJSON(t, want)
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		t.Errorf("got  %s\nwant %s", gb, wb)
	}
}

func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// groups splits js by key, the groups in ascending key order (the order
// the engine emits groups in when nothing is sorted), each in seed order.
func groups[K cmp.Ordered](js []job, key func(job) K) ([]K, map[K][]job) {
	m := map[K][]job{}
	for _, j := range js {
		m[key(j)] = append(m[key(j)], j)
	}
	return slices.Sorted(maps.Keys(m)), m
}

func where(js []job, keep func(job) bool) []job {
	var out []job
	for _, j := range js {
		if keep(j) {
			out = append(out, j)
		}
	}
	return out
}

func sum(js []job, v func(job) int64) int64 {
	var s int64
	for _, j := range js {
		s += v(j)
	}
	return s
}

type row = map[string]any

func reversed(rows []row) []row {
	out := slices.Clone(rows)
	slices.Reverse(out)
	return out
}

func results(rows ...row) map[string]any {
	if rows == nil {
		rows = []row{}
	}
	return map[string]any{"results": rows}
}

func page(rows []row, start, limit int) map[string]any {
	from := min(start-1, len(rows))
	to := min(from+limit, len(rows))
	return map[string]any{"results": rows[from:to], "more": len(rows) > to}
}

// TestCore covers what the services use first: group_by, count, sum,
// push (by key and with fields), sort and page with more.
func TestCore(t *testing.T) {
	t.Parallel()
	c, js := seed(t)
	byCollector := func(each func(string, []job) row) []row {
		keys, m := groups(js, func(j job) string { return j.Collector })
		var out []row
		for _, k := range keys {
			r := each(k, m[k])
			r["collector_id"] = k
			out = append(out, r)
		}
		return out
	}
	counts := byCollector(func(_ string, g []job) row { return row{"n": len(g)} })
	sortedByTotal := byCollector(func(_ string, g []job) row {
		return row{"total": sum(g, func(j job) int64 { return j.Total })}
	})
	slices.SortStableFunc(sortedByTotal, func(a, b row) int { return cmp.Compare(b["total"].(int64), a["total"].(int64)) })

	cases := []struct {
		name, query string
		want        any
	}{
		{"count by a key (the store groups)",
			`{"group_by":["collector_id"],"fields":{"n":{"operator":"count"}}}`,
			results(counts...)},
		{"sum by a key (the store groups)",
			`{"group_by":["status"],"fields":{"total":{"operator":"sum","key":"total_tasks"}}}`,
			func() any {
				keys, m := groups(js, func(j job) string { return j.Status })
				var out []row
				for _, k := range keys {
					out = append(out, row{"status": k, "total": sum(m[k], func(j job) int64 { return j.Total })})
				}
				return results(out...)
			}()},
		{"count and sum together (Go groups), two keys",
			`{"group_by":["collector_id","status"],"fields":{"n":{"operator":"count"},"left":{"operator":"sum","key":"remained_tasks"}}}`,
			func() any {
				keys, m := groups(js, func(j job) string { return j.Collector + "/" + j.Status })
				var out []row
				for _, k := range keys {
					g := m[k]
					out = append(out, row{"collector_id": g[0].Collector, "status": g[0].Status, "n": len(g),
						"left": sum(g, func(j job) int64 { return j.Remained })})
				}
				return results(out...)
			}()},
		{"push a key",
			`{"group_by":["collector_id"],"fields":{"ids":{"operator":"push","key":"job_id"}}}`,
			results(byCollector(func(_ string, g []job) row {
				var ids []string
				for _, j := range g {
					ids = append(ids, j.ID)
				}
				return row{"ids": ids}
			})...)},
		{"push objects from fields, as the console's job/analyze (missing members left out, times with ms)",
			`{"filter":[{"k":"created_at","v":"now - 1d","o":"timediff_gte"},{"k":"collector_id","v":["collector-0","collector-2"],"o":"in"}],
			  "group_by":["collector_id"],
			  "fields":{"job_status":{"operator":"push","fields":{"status":"status","job_id":"job_id","total_tasks":"total_tasks","remained_tasks":"remained_tasks","finished_at":"finished_at"}}}}`,
			func() any {
				recent := where(js, func(j job) bool {
					return time.Since(j.CreatedAt) < 24*time.Hour && j.Collector != "collector-1"
				})
				keys, m := groups(recent, func(j job) string { return j.Collector })
				var out []row
				for _, k := range keys {
					var list []row
					for _, j := range m[k] {
						o := row{"status": j.Status, "job_id": j.ID, "total_tasks": j.Total, "remained_tasks": j.Remained}
						if j.FinishedAt != nil {
							o["finished_at"] = wire.FormatTime(*j.FinishedAt)
						}
						list = append(list, o)
					}
					out = append(out, row{"collector_id": k, "job_status": list})
				}
				return results(out...)
			}()},
		{"sort by a field, desc",
			`{"group_by":["collector_id"],"fields":{"total":{"operator":"sum","key":"total_tasks"}},"sort":[{"key":"total","desc":true}]}`,
			results(sortedByTotal...)},
		{"sort by a group key, desc; page 2 of 1 row, more",
			`{"group_by":["collector_id"],"fields":{"n":{"operator":"count"}},"sort":[{"key":"collector_id","desc":true}],"page":{"start":2,"limit":1}}`,
			page(reversed(counts), 2, 1)},
		{"last page: no more",
			`{"group_by":["collector_id"],"fields":{"n":{"operator":"count"}},"page":{"start":2,"limit":2}}`,
			page(counts, 2, 2)},
		{"page past the end",
			`{"group_by":["collector_id"],"fields":{"n":{"operator":"count"}},"page":{"start":9,"limit":2}}`,
			map[string]any{"results": []any{}, "more": false}},
		{"start alone does not page",
			`{"group_by":["collector_id"],"fields":{"n":{"operator":"count"}},"page":{"start":2}}`,
			results(counts...)},
		{"no match: no rows",
			`{"filter":[{"k":"status","v":"NONE","o":"eq"}],"group_by":["collector_id"],"fields":{"n":{"operator":"count"}}}`,
			results()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := analyze(c, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, got, tc.want)
		})
	}
}
