package rows

import (
	"net/http"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// What the marks leave out, and a mark that changes while a read runs
// (staged by the read itself): the read runs again with the new marks,
// and answers 503 when they change during every attempt.
func TestVisibleReadsTheMarksAgain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testkit.Get().Database(t)
	r := New(db)
	set := func(coll string, id string, fields bson.D) {
		t.Helper()
		c := db.Collection(coll)
		if _, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
			t.Fatal(err)
		}
		if fields != nil {
			if _, err := c.InsertOne(ctx, append(bson.D{{Key: "_id", Value: id}}, fields...)); err != nil {
				t.Fatal(err)
			}
		}
	}
	job := func(id, status string, pending bool, swap ...core.Changed) {
		set(core.JobsCollection, id, bson.D{{Key: "job_id", Value: id}, {Key: "status", Value: status}, {Key: "pending", Value: pending},
			{Key: "data_source_id", Value: "ds-1"}, {Key: "domain_id", Value: "domain-a"}, {Key: "swap", Value: swap}})
	}
	row := func(id, jobID, dsID, month string) {
		set(core.CostsCollection, id, bson.D{{Key: "cost_id", Value: id}, {Key: "job_id", Value: jobID}, {Key: "data_source_id", Value: dsID},
			{Key: "billed_month", Value: month}, {Key: "billed_date", Value: month + "-01"}, {Key: "provider", Value: "aws"},
			{Key: "domain_id", Value: "domain-a"}, {Key: "workspace_id", Value: "*"}})
	}
	// job-old (settled) stored Jan and Feb; job-new is running and has
	// stored its Jan; ds-2 has a row too.
	job("job-old", core.Success, false)
	row("old-jan", "job-old", "ds-1", "2024-01")
	row("old-feb", "job-old", "ds-1", "2024-02")
	job("job-new", core.InProgress, true)
	row("new-jan", "job-new", "ds-1", "2024-01")
	row("other", "job-x", "ds-2", "2024-01")
	// Another domain's running job is no business of domain-a's reads.
	set(core.JobsCollection, "job-b", bson.D{{Key: "job_id", Value: "job-b"}, {Key: "status", Value: core.InProgress},
		{Key: "pending", Value: true}, {Key: "domain_id", Value: "domain-b"}})

	shown := func(scope bson.D) []string {
		cur, err := r.costs.Find(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		var docs []struct {
			CostID string `bson:"cost_id"`
		}
		if err := cur.All(ctx, &docs); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range docs {
			ids = append(ids, d.CostID)
		}
		slices.Sort(ids)
		return ids
	}
	jan := core.Changed{Start: "2024-01", End: "2024-01", Filter: core.Object{"provider": "aws"}}
	for _, c := range []struct {
		name   string
		during []func() // what happens during each read
		reads  int
		want   []string
		fails  bool
	}{
		{"running job", nil, 1, []string{"old-feb", "old-jan", "other"}, false},
		{"the job swaps January during the read", []func(){func() { job("job-new", core.Success, true, jan) }}, 2,
			[]string{"new-jan", "old-feb", "other"}, false},
		{"swap settled: old January deleted", []func(){func() { set(core.CostsCollection, "old-jan", nil); job("job-new", core.Success, false) }}, 2,
			[]string{"new-jan", "old-feb", "other"}, false},
		{"a deregister of ds-2 begins during the read", []func(){func() {
			set(core.DataSourcesCollection, "ds-2", bson.D{{Key: "domain_id", Value: "domain-a"}, {Key: "deleting", Value: true}})
		}}, 2, []string{"new-jan", "old-feb"}, false},
		{"jobs keep starting", []func(){
			func() { job("job-1", core.InProgress, true) }, func() { job("job-2", core.InProgress, true) },
			func() { job("job-3", core.InProgress, true) }, func() { job("job-4", core.InProgress, true) },
			func() { job("job-5", core.InProgress, true) },
		}, readAttempts, nil, true},
		{"a job fails: its rows stay left out until tidied", []func(){func() { job("job-5", core.Failure, true); row("five", "job-5", "ds-1", "2024-03") }}, 2,
			[]string{"new-jan", "old-feb"}, false},
	} {
		reads := 0
		got, err := Visible(ctx, r, "domain-a", func(m *Marks) ([]string, error) {
			if reads < len(c.during) {
				c.during[reads]()
			}
			reads++
			ids := shown(m.Scoped(bson.D{{Key: "domain_id", Value: "domain-a"}}))
			// The Go reading of the marks (get) agrees with the query's.
			var all []bson.M
			cur, err := r.costs.Find(ctx, bson.D{{Key: "domain_id", Value: "domain-a"}})
			if err != nil || cur.All(ctx, &all) != nil {
				t.Fatal(err)
			}
			var byGo []string
			for _, d := range all {
				if !m.Hides(d) {
					byGo = append(byGo, d["_id"].(string))
				}
			}
			slices.Sort(byGo)
			if !slices.Equal(ids, byGo) {
				t.Errorf("%s: the query shows %v, the Go reading %v", c.name, ids, byGo)
			}
			return ids, nil
		})
		if c.fails {
			if e, ok := errs.As(err); !ok || e.Status() != http.StatusServiceUnavailable || reads != c.reads {
				t.Errorf("%s: %v after %d reads, want 503 after %d", c.name, err, reads, c.reads)
			}
			continue
		}
		if err != nil || reads != c.reads || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v after %d reads (%v), want %v after %d", c.name, got, reads, err, c.want, c.reads)
		}
	}
}
