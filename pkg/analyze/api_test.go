package analyze

import (
	"encoding/json"
	"testing"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/errs"
)

// TestAPIDecode: the queries inside a request, as services declare them,
// decode and validate through api.Decode, and say what is wrong with the
// member's wire name.
func TestAPIDecode(t *testing.T) {
	t.Parallel()
	type analyzeReq struct {
		Query *Query `json:"query" v:"required"`
	}
	type seriesReq struct {
		Query        *TimeSeriesQuery `json:"query" v:"required"`
		DataSourceID string           `json:"data_source_id"`
	}
	var a analyzeReq
	if err := api.Decode([]byte(`{"query":{"groupBy":["collector_id"],"fields":{"n":{"operator":"count"}}}}`), &a); err != nil {
		t.Fatal(err)
	}
	if a.Query.GroupBy[0].Name != "collector_id" {
		t.Errorf("decoded %+v", a.Query)
	}
	var s seriesReq
	body := `{"query":{"granularity":"MONTHLY","start":"2024-01","end":"2024-02","group_by":["provider"],"field_group":["date"],
		"fields":{"cost":{"operator":"sum","key":"cost"}}},"data_source_id":"ds-1"}`
	if err := api.Decode([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if s.Query.Granularity != "MONTHLY" || s.Query.FieldGroup[0] != "date" || s.DataSourceID != "ds-1" {
		t.Errorf("decoded %+v", s.Query)
	}
	// what it marshals back decodes to the same query
	b, err := json.Marshal(s.Query)
	if err != nil {
		t.Fatal(err)
	}
	var again TimeSeriesQuery
	if err := json.Unmarshal(b, &again); err != nil || again.Start != "2024-01" || again.Fields["cost"].Key != "cost" {
		t.Errorf("round trip %s: %+v, %v", b, again, err)
	}

	for body, code := range map[string]string{
		`{}`:           errs.RequiredParameter,
		`{"query":{}}`: errs.RequiredParameter,
		`{"query":{"fields":{"n":{"operator":"count"}},"granularity":"DAILY"}}`: errs.InvalidParameter,
		`{"query":{"fields":{"n":{"operator":"sum"}}}}`:                         errs.RequiredParameter,
	} {
		wantErr(t, body, api.Decode([]byte(body), &analyzeReq{}), code, 400)
	}
	wantErr(t, "series", api.Decode([]byte(`{"query":{"fields":{"n":{"operator":"count"}},"granularity":"HOURLY"}}`), &seriesReq{}), errs.InvalidParameter, 400)
}
