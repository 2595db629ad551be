package costanalysis_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/stat"
)

// seedCosts stores cost rows directly (what a job would have stored).
func (e *env) seedCosts(t *testing.T) {
	t.Helper()
	var docs []any
	add := func(id, domain, ws, provider, date string, cost float64) {
		docs = append(docs, M{"_id": id, "cost_id": id, "cost": cost, "provider": provider, "billed_date": date, "billed_month": date[:7],
			"billed_year": date[:4], "domain_id": domain, "workspace_id": ws, "data_source_id": "ds-1", "tags": M{}, "additional_info": M{}, "data": M{}})
	}
	add("cost-1", "domain-a", "workspace-1", "aws", "2024-01-05", 10)
	add("cost-2", "domain-a", "workspace-1", "aws", "2024-02-05", 20)
	add("cost-3", "domain-a", "workspace-2", "gcp", "2024-02-07", 5)
	add("cost-4", "domain-a", "*", "aws", "2024-02-09", 1)
	add("cost-5", "domain-b", "workspace-9", "aws", "2024-02-09", 1000)
	if _, err := e.db.Collection(costs).InsertMany(t.Context(), docs); err != nil {
		t.Fatal(err)
	}
}

func TestCostAnalyze(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.seedCosts(t)
	q := M{"data_source_id": "ds-1", "query": M{"granularity": "MONTHLY", "start": "2024-01", "end": "2024-02", "group_by": []string{"provider"},
		"fields": M{"total": M{"key": "cost", "operator": "sum"}}, "sort": []M{{"key": "date"}, {"key": "provider"}}}}
	res := e.adminA.Call(costBase+"analyze", q).OK(nil).JSON()
	if got := fmt.Sprint(res["results"]); got != "[map[date:2024-01 provider:aws total:10] map[date:2024-02 provider:aws total:21] map[date:2024-02 provider:gcp total:5]]" {
		t.Errorf("domain admin: %s", got)
	}
	res = e.ownerA1.Call(costBase+"analyze", q).OK(nil).JSON()
	if got := fmt.Sprint(res["results"]); got != "[map[date:2024-01 provider:aws total:10] map[date:2024-02 provider:aws total:20]]" {
		t.Errorf("workspace-1: %s", got)
	}
	res = e.adminB.Call(costBase+"analyze", M{"data_source_id": "ds-1", "query": M{"granularity": "YEARLY", "fields": M{"n": M{"operator": "count"}}}}).OK(nil).JSON()
	if got := fmt.Sprint(res["results"]); got != "[map[date:2024 n:1]]" {
		t.Errorf("domain-b: %s", got)
	}
	// a window narrows it
	res = e.adminA.Call(costBase+"analyze", M{"data_source_id": "ds-1", "query": M{"granularity": "DAILY", "start": "2024-02-06", "end": "2024-02-07",
		"fields": M{"total": M{"key": "cost", "operator": "sum"}}}}).OK(nil).JSON()
	if got := fmt.Sprint(res["results"]); got != "[map[date:2024-02-07 total:5]]" {
		t.Errorf("window: %s", got)
	}
	for _, bad := range []struct {
		body any
		code string
	}{
		{M{}, errs.RequiredParameter},
		{M{"query": M{"fields": M{"n": M{"operator": "count"}}}}, errs.RequiredParameter}, // no data source
		{M{"data_source_id": 5, "query": M{"fields": M{"n": M{"operator": "count"}}}}, errs.InvalidParameterType},
		{M{"data_source_id": "ds-1", "query": M{"granularity": "HOURLY", "fields": M{"n": M{"operator": "count"}}}}, errs.InvalidParameter},
		{M{"data_source_id": "ds-1", "query": M{"start": "January", "fields": M{"n": M{"operator": "count"}}}}, errs.InvalidParameterType},
		{M{"data_source_id": "ds-1", "query": M{"fields": M{"n": M{"key": "secret", "operator": "sum"}}}}, errs.InvalidParameter},
		{M{"data_source_id": "ds-1", "query": M{"fields": M{"n": M{"key": "cost", "operator": "median"}}}}, errs.DBQuery},
	} {
		e.adminA.Call(costBase+"analyze", bad.body).Fails(http.StatusBadRequest, bad.code)
	}
	e.anon.Call(costBase+"analyze", q).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	// list and get are confined the same way.
	if n := e.costs(t, e.ownerA2, "ds-1", M{}).TotalCount; n != 1 {
		t.Errorf("workspace-2 lists %d", n)
	}
	e.ownerA2.Call(costBase+"get", M{"cost_id": "cost-1"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.ownerA2.Call(costBase+"get", M{"cost_id": "cost-4"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.adminA.Call(costBase+"get", M{"cost_id": "cost-4"}).OK(nil)
}

// A member's analyze grouped by cost_id with push over more rows than the
// stat limits allow answers 400 (the rows past the limit are not read);
// within the limits it answers in full.
func TestCostAnalyzeBounded(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var docs []any
	for i := range 30 {
		id := fmt.Sprintf("cost-%02d", i)
		docs = append(docs, M{"_id": id, "cost_id": id, "cost": 1.0, "provider": "aws", "billed_date": "2024-01-05", "billed_month": "2024-01",
			"billed_year": "2024", "domain_id": "domain-a", "workspace_id": "workspace-1", "data_source_id": "ds-1", "tags": M{}, "additional_info": M{}, "data": M{}})
	}
	if _, err := e.db.Collection(costs).InsertMany(t.Context(), docs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stat.SetLimits(stat.Limits{}) })
	byCost := M{"data_source_id": "ds-1", "query": M{"granularity": "MONTHLY", "group_by": []string{"cost_id"},
		"fields": M{"costs": M{"key": "cost", "operator": "push"}}}}
	byProvider := M{"data_source_id": "ds-1", "query": M{"granularity": "MONTHLY", "group_by": []string{"provider"},
		"fields": M{"costs": M{"key": "cost", "operator": "push"}}}}
	stat.SetLimits(stat.Limits{MaxGroups: 20, MaxPushed: 1000})
	e.memberA1.Call(costBase+"analyze", byCost).Fails(http.StatusBadRequest, errs.InvalidParameter)
	e.memberA1.Call(costBase+"analyze", byProvider).OK(nil)
	stat.SetLimits(stat.Limits{MaxGroups: 1000, MaxPushed: 20})
	e.memberA1.Call(costBase+"analyze", byProvider).Fails(http.StatusBadRequest, errs.InvalidParameter)
	e.memberA1.Call(costBase+"stat", M{"data_source_id": "ds-1", "query": M{"aggregate": []M{{"group": M{"fields": []M{{"key": "cost", "name": "c", "operator": "push"}}}}}}}).
		Fails(http.StatusBadRequest, errs.InvalidParameter)
	stat.SetLimits(stat.Limits{MaxGroups: 1000, MaxPushed: 1000})
	if got := e.memberA1.Call(costBase+"analyze", byCost).OK(nil).JSON()["results"].([]any); len(got) != 30 {
		t.Errorf("%d groups", len(got))
	}
}
