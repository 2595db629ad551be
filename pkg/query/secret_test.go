package query

import (
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
)

func TestSecretFieldsAreRefusedEverywhere(t *testing.T) {
	r := Resource{Secret: []string{"registry_config", "auth.key"}, KeywordFields: []string{"name"}}
	cond := func(k string) []Condition { return []Condition{{Key: k, Operator: "regex", Value: "^a"}} }
	for _, tc := range []struct {
		name string
		q    Query
		path string
	}{
		{"filter on the field", Query{Filter: cond("registry_config"), CountOnly: true}, "registry_config"},
		{"filter under it", Query{Filter: cond("registry_config.password"), CountOnly: true}, "registry_config.password"},
		{"filter above it", Query{Filter: []Condition{{Key: "auth", Operator: "eq", Value: map[string]any{"key": "x"}}}}, "auth"},
		{"filter_or", Query{FilterOr: cond("auth.key")}, "auth.key"},
		{"sort", Query{Sort: Sort{{Key: "auth.key.x"}}}, "auth.key.x"},
		{"only", Query{Only: []string{"registry_config"}}, "registry_config"},
		// A bad value or operator after a secret path still answers the secret.
		{"bad regex", Query{Filter: []Condition{{Key: "registry_config.password", Operator: "regex", Value: "("}}}, "registry_config.password"},
		{"unknown operator", Query{Filter: []Condition{{Key: "registry_config.password", Operator: "nope", Value: 1}}}, "registry_config.password"},
	} {
		_, err := Compile(&tc.q, r, nil)
		e, ok := errs.As(err)
		if !ok || e.Code != errs.InvalidParameter || e.Status() != 400 || !strings.Contains(e.Message, tc.path) {
			t.Errorf("%s: %v, want 400 %s naming %s", tc.name, err, errs.InvalidParameter, tc.path)
		}
	}
	// Neighbours are not secrets.
	for _, p := range []string{"registry_configs", "registry", "auth.keys", "auth_key", "name"} {
		if _, err := Compile(&Query{Filter: cond(p), Sort: Sort{{Key: p}}, Only: []string{p}}, r, nil); err != nil {
			t.Errorf("%s: %v, want it allowed", p, err)
		}
	}
	// A resource that searches or sorts its own secret is a bug (500).
	for _, bad := range []Resource{
		{Secret: []string{"k"}, KeywordFields: []string{"k"}},
		{Secret: []string{"k.v"}, DefaultSort: []SortKey{{Key: "k"}}},
		{Secret: []string{"k"}, MinimalFields: []string{"k.v"}},
	} {
		if _, err := Compile(&Query{}, bad, nil); err == nil {
			t.Errorf("%+v: compiled", bad)
		} else if _, isAPI := errs.As(err); isAPI {
			t.Errorf("%+v: %v is the caller's error, want a plain one", bad, err)
		}
	}
}
