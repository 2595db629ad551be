package analyze

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/nubes-io/nubes/pkg/wire"
)

// perCollector builds one expected row per collector (in key order).
func perCollector(js []job, each func([]job) row) []row {
	keys, m := groups(js, func(j job) string { return j.Collector })
	var out []row
	for _, k := range keys {
		r := each(m[k])
		r["collector_id"] = k
		out = append(out, r)
	}
	return out
}

func costs(g []job) []float64 {
	var out []float64
	for _, j := range g {
		if j.Cost != nil {
			out = append(out, *j.Cost)
		}
	}
	return out
}

func avg(xs []float64) any {
	if len(xs) == 0 {
		return nil
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// TestOperators runs each accumulator on the embedded store against
// results computed from the seed in plain Go.
func TestOperators(t *testing.T) {
	t.Parallel()
	c, js := seed(t)
	cases := []struct {
		name, query string
		want        []row
	}{
		{"average skips missing values",
			`{"group_by":["collector_id"],"fields":{"avg":{"operator":"average","key":"cost"}}}`,
			perCollector(js, func(g []job) row { return row{"avg": avg(costs(g))} })},
		{"max and min of numbers and of times; null where no value",
			`{"group_by":["status"],"fields":{"max":{"operator":"max","key":"cost"},"min":{"operator":"min","key":"total_tasks"},
				"latest":{"operator":"max","key":"created_at"},"first_done":{"operator":"min","key":"finished_at"}}}`,
			func() []row {
				keys, m := groups(js, func(j job) string { return j.Status })
				var out []row
				for _, k := range keys {
					g := m[k]
					r := row{"status": k, "max": slices.Max(costs(g)), "first_done": nil}
					r["min"] = slices.MinFunc(g, func(a, b job) int { return cmp.Compare(a.Total, b.Total) }).Total
					r["latest"] = wire.FormatTime(slices.MaxFunc(g, func(a, b job) int { return a.CreatedAt.Compare(b.CreatedAt) }).CreatedAt)
					for _, j := range g {
						if j.FinishedAt != nil && (r["first_done"] == nil || wire.FormatTime(*j.FinishedAt) < r["first_done"].(string)) {
							r["first_done"] = wire.FormatTime(*j.FinishedAt)
						}
					}
					out = append(out, r)
				}
				return out
			}()},
		{"first and last in store order; first of a missing value is null",
			`{"group_by":["collector_id"],"fields":{"first":{"operator":"first","key":"job_id"},"last":{"operator":"last","key":"job_id"},
				"first_cost":{"operator":"first","key":"cost"}}}`,
			perCollector(js, func(g []job) row {
				var fc any
				if g[0].Cost != nil {
					fc = *g[0].Cost
				}
				return row{"first": g[0].ID, "last": g[len(g)-1].ID, "first_cost": fc}
			})},
		{"add_to_set: distinct values, sorted",
			`{"group_by":["collector_id"],"fields":{"statuses":{"operator":"add_to_set","key":"status"},"clouds":{"operator":"add_to_set","key":"data.provider"}}}`,
			perCollector(js, func(g []job) row {
				st, cl := map[string]bool{}, map[string]bool{}
				for _, j := range g {
					st[j.Status], cl[j.Provider] = true, true
				}
				return row{"statuses": slices.Sorted(maps.Keys(st)), "clouds": slices.Sorted(maps.Keys(cl))}
			})},
		{"merge_objects: later rows win",
			`{"group_by":["collector_id"],"fields":{"meta":{"operator":"merge_objects","key":"meta"}}}`,
			perCollector(js, func(g []job) row {
				m := map[string]int64{}
				for _, j := range g {
					maps.Copy(m, j.Meta)
				}
				return row{"meta": m}
			})},
		{"data_type array: sum, max and average over each row's array first",
			`{"group_by":["collector_id"],"fields":{"s":{"operator":"sum","key":"usage","data_type":"array"},
				"mx":{"operator":"max","key":"usage","data_type":"array"},"av":{"operator":"average","key":"usage","dataType":"array"}}}`,
			perCollector(js, func(g []job) row {
				var s int64
				var mx any
				var rowAvgs []float64
				for _, j := range g {
					for _, u := range j.Usage {
						s += u
						if mx == nil || u > mx.(int64) {
							mx = u
						}
					}
					if len(j.Usage) > 0 {
						var rs int64
						for _, u := range j.Usage {
							rs += u
						}
						rowAvgs = append(rowAvgs, float64(rs)/float64(len(j.Usage)))
					}
				}
				return row{"s": s, "mx": mx, "av": avg(rowAvgs)}
			})},
		{"group_by a dotted path (named by its last segment) and {key, name}",
			`{"group_by":["data.provider",{"key":"status","name":"state"}],"fields":{"n":{"operator":"count"}}}`,
			func() []row {
				keys, m := groups(js, func(j job) string { return j.Provider + "/" + j.Status })
				var out []row
				for _, k := range keys {
					g := m[k]
					out = append(out, row{"provider": g[0].Provider, "state": g[0].Status, "n": len(g)})
				}
				return out
			}()},
		{"no group_by: one row over everything",
			`{"fields":{"n":{"operator":"count"},"total":{"operator":"sum","key":"total_tasks"},"top":{"operator":"max","key":"cost"}}}`,
			[]row{{"n": len(js), "total": sum(js, func(j job) int64 { return j.Total }), "top": slices.Max(costs(js))}}},
		{"group_by alone: the distinct combinations",
			`{"group_by":["collector_id"]}`,
			perCollector(js, func([]job) row { return row{} })},
		{"keyword (case-insensitive, over the keyword fields)",
			`{"keyword":"fail","group_by":["status"],"fields":{"n":{"operator":"count"}}}`,
			[]row{{"status": "FAILURE", "n": len(where(js, func(j job) bool { return j.Status == "FAILURE" }))}}},
		{"filter and filter_or",
			`{"filter":[{"k":"total_tasks","v":3,"o":"gte"}],"filter_or":[{"k":"status","v":"SUCCESS","o":"eq"},{"k":"collector_id","v":"collector-1","o":"eq"}],
			  "group_by":["status"],"fields":{"n":{"operator":"count"}}}`,
			func() []row {
				keys, m := groups(where(js, func(j job) bool {
					return j.Total >= 3 && (j.Status == "SUCCESS" || j.Collector == "collector-1")
				}), func(j job) string { return j.Status })
				var out []row
				for _, k := range keys {
					out = append(out, row{"status": k, "n": len(m[k])})
				}
				return out
			}()},
		{"the tenancy scope cannot be widened by filter_or",
			`{"filter_or":[{"k":"domain_id","v":"dom-b","o":"eq"},{"k":"status","v":"SUCCESS","o":"eq"}],"fields":{"n":{"operator":"count"}}}`,
			[]row{{"n": len(where(js, func(j job) bool { return j.Status == "SUCCESS" }))}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := analyze(c, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, got, results(tc.want...))
		})
	}
}

// TestSelect checks each select operator and that only the selected
// names come back.
func TestSelect(t *testing.T) {
	t.Parallel()
	c, js := seed(t)
	want := perCollector(js, func(g []job) row {
		n := int64(len(g))
		total := sum(g, func(j job) int64 { return j.Total })
		var totals []int64
		for _, j := range g {
			totals = append(totals, j.Total)
		}
		return row{"per": float64(total) / float64(n), "plus": total + 1 + 2*n, "diff": total - n,
			"times": total * n, "n_ids": n, "summed": total, "copy": n, "zero": nil}
	})
	for _, r := range want { // the key comes back only when selected, renamed
		r["collector"] = r["collector_id"]
		delete(r, "collector_id")
	}
	got, err := analyze(c, `{"group_by":["collector_id"],
		"fields":{"n":{"operator":"count"},"total":{"operator":"sum","key":"total_tasks"},
			"ids":{"operator":"push","key":"job_id"},"totals":{"operator":"push","key":"total_tasks"}},
		"select":{"collector":"collector_id","copy":"n",
			"per":{"operator":"divide","fields":["total","n"]},
			"plus":{"operator":"add","fields":["total",1,{"operator":"multiply","fields":["n",2]}]},
			"diff":{"operator":"subtract","fields":["total","n"]},
			"times":{"operator":"multiply","fields":["total","n"]},
			"zero":{"operator":"divide","fields":["n",0]},
			"n_ids":{"operator":"size","key":"ids"},
			"summed":{"operator":"sum","key":"totals"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, got, results(want...))

	// select, then sort by a selected name, then page
	got, err = analyze(c, `{"group_by":["collector_id"],"fields":{"total":{"operator":"sum","key":"total_tasks"}},
		"select":{"c":"collector_id","t":"total"},"sort":[{"key":"t","desc":true}],"page":{"limit":2}}`)
	if err != nil {
		t.Fatal(err)
	}
	var rows []row
	for _, r := range perCollector(js, func(g []job) row { return row{"t": sum(g, func(j job) int64 { return j.Total })} }) {
		rows = append(rows, row{"c": r["collector_id"], "t": r["t"]})
	}
	slices.SortStableFunc(rows, func(a, b row) int { return cmp.Compare(b["t"].(int64), a["t"].(int64)) })
	sameJSON(t, got, page(rows, 1, 2))
}

// TestFieldGroup checks the pivot: lists of {value, <keys>}, totals, and
// a sort on a field that goes to its total.
func TestFieldGroup(t *testing.T) {
	t.Parallel()
	c, js := seed(t)
	type cell struct {
		status string
		g      []job
	}
	keys, m := groups(js, func(j job) string { return j.Collector })
	var want []row
	for _, k := range keys {
		sk, sm := groups(m[k], func(j job) string { return j.Status })
		r := row{"collector_id": k}
		var n, total, ids, avgs, mx []row
		var totN, totTotal int64
		var avgVals []float64
		var totMx int64 = -1
		for _, s := range sk {
			g := sm[s]
			tt := sum(g, func(j job) int64 { return j.Total })
			a := avg(costs(g))
			top := slices.MaxFunc(g, func(a, b job) int { return cmp.Compare(a.Total, b.Total) }).Total
			var idList []string
			for _, j := range g {
				idList = append(idList, j.ID)
			}
			n = append(n, row{"value": len(g), "status": s})
			total = append(total, row{"value": tt, "status": s})
			ids = append(ids, row{"value": idList, "status": s})
			avgs = append(avgs, row{"value": a, "status": s})
			mx = append(mx, row{"value": top, "status": s})
			totN, totTotal, totMx = totN+int64(len(g)), totTotal+tt, max(totMx, top)
			if a != nil {
				avgVals = append(avgVals, a.(float64))
			}
		}
		r["n"], r["total"], r["ids"], r["avg"], r["mx"] = n, total, ids, avgs, mx
		r["_total_n"], r["_total_total"], r["_total_avg"], r["_total_mx"] = totN, totTotal, avg(avgVals), totMx
		want = append(want, r)
	}
	slices.SortStableFunc(want, func(a, b row) int { return cmp.Compare(b["_total_total"].(int64), a["_total_total"].(int64)) })

	got, err := analyze(c, `{"group_by":["collector_id","status"],"field_group":["status"],
		"fields":{"n":{"operator":"count"},"total":{"operator":"sum","key":"total_tasks"},"ids":{"operator":"push","key":"job_id"},
			"avg":{"operator":"average","key":"cost"},"mx":{"operator":"max","key":"total_tasks"}},
		"sort":[{"key":"total","desc":true}]}`)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, got, results(want...))

	// every key pivoted: one row
	got, err = analyze(c, `{"group_by":["status"],"field_group":["status"],"fields":{"n":{"operator":"count"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	sk, sm := groups(js, func(j job) string { return j.Status })
	var cells []row
	for _, s := range sk {
		cells = append(cells, row{"value": len(sm[s]), "status": s})
	}
	sameJSON(t, got, results(row{"n": cells, "_total_n": len(js)}))
}

// TestTimeSeries checks granularity (the date key), start and end (the
// end's whole period included) on string dates of two formats.
func TestTimeSeries(t *testing.T) {
	t.Parallel()
	c, js := seed(t)
	run := func(q string, df DateField) map[string]any {
		t.Helper()
		var tq TimeSeriesQuery
		if err := json.Unmarshal([]byte(q), &tq); err != nil {
			t.Fatal(err)
		}
		got, err := RunTimeSeries(context.Background(), c, scope, resource, &tq, df)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	daily := DateField{Key: "billed_date", Format: "%Y-%m-%d"}
	monthly := DateField{Key: "billed_month", Format: "%Y-%m"}

	inWindow := func(field func(job) string, from, to string) []job {
		return where(js, func(j job) bool { return field(j) >= from && field(j) < to })
	}
	date := func(j job) string { return j.BilledDate }
	month := func(j job) string { return j.BilledMonth }
	perDate := func(sel []job, field func(job) string) []row {
		keys, m := groups(sel, field)
		var out []row
		for _, k := range keys {
			out = append(out, row{"date": k, "cost": totalTasks(m[k])})
		}
		return out
	}

	got := run(`{"granularity":"DAILY","start":"2024-01-05","end":"2024-01-07","fields":{"cost":{"operator":"sum","key":"total_tasks"}}}`, daily)
	sameJSON(t, got, results(perDate(inWindow(date, "2024-01-05", "2024-01-08"), date)...))

	got = run(`{"granularity":"MONTHLY","start":"2023-12","end":"2024-01","fields":{"cost":{"operator":"sum","key":"total_tasks"}}}`, monthly)
	sameJSON(t, got, results(perDate(inWindow(month, "2023-12", "2024-02"), month)...))

	// a year bound on a daily field; the date pivoted into the row
	got = run(`{"granularity":"DAILY","start":"2024","end":"2024","group_by":["collector_id"],"field_group":["date"],
		"fields":{"n":{"operator":"count"}},"page":{"limit":1}}`, daily)
	sel := inWindow(date, "2024-01-01", "2025-01-01")
	first := where(sel, func(j job) bool { return j.Collector == "collector-0" })
	var cells []row
	for _, j := range first { // one job per day
		cells = append(cells, row{"value": 1, "date": j.BilledDate})
	}
	sameJSON(t, got, map[string]any{"results": []row{{"collector_id": "collector-0", "n": cells, "_total_n": len(first)}}, "more": true})

	// no granularity: the window alone
	got = run(`{"end":"2023-12","fields":{"n":{"operator":"count"}}}`, daily)
	sameJSON(t, got, results(row{"n": len(where(js, func(j job) bool { return j.BilledDate < "2024-01-01" }))}))
}

func totalTasks(g []job) int64 { return sum(g, func(j job) int64 { return j.Total }) }

// TestReadable checks that a resource's Fields bound what group_by and
// fields may read, named in the query's terms.
func TestReadable(t *testing.T) {
	t.Parallel()
	c, js := seed(t)
	r := resource
	r.Fields = []string{"job_id", "status", "collector_id", "total_tasks", "created_at"}
	for _, q := range []string{
		`{"group_by":["cost"],"fields":{"n":{"operator":"count"}}}`,
		`{"fields":{"m":{"operator":"max","key":"meta.k1"}}}`,
		`{"fields":{"p":{"operator":"push","fields":{"a":"job_id","b":"billed_date"}}}}`,
	} {
		var query Query
		if err := json.Unmarshal([]byte(q), &query); err != nil {
			t.Fatal(err)
		}
		_, err := Run(context.Background(), c, scope, r, &query)
		wantErr(t, q, err, "ERROR_INVALID_PARAMETER", 400)
	}
	// A filter on a field not shown answers as for a field no row has,
	// though every row stores cost: gt matches none, exists false all.
	for q, want := range map[string]map[string]any{
		`{"filter":[{"k":"cost","v":0,"o":"gt"}],"fields":{"n":{"operator":"count"}}}`:         results(),
		`{"filter":[{"k":"cost","v":false,"o":"exists"}],"fields":{"n":{"operator":"count"}}}`: results(row{"n": len(js)}),
	} {
		var query Query
		if err := json.Unmarshal([]byte(q), &query); err != nil {
			t.Fatal(err)
		}
		got, err := Run(context.Background(), c, scope, r, &query)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		sameJSON(t, got, want)
	}
	var query Query
	if err := json.Unmarshal([]byte(`{"group_by":["status"],"fields":{"n":{"operator":"count"}},"sort":[{"key":"n"}]}`), &query); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), c, scope, r, &query); err != nil {
		t.Fatalf("sort by an output name is no read: %v", err)
	}
}
