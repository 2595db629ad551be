package costanalysis_test

import (
	"net/http"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
)

type Rate struct {
	Currency  string  `json:"currency"`
	Rate      float64 `json:"rate"`
	State     string  `json:"state"`
	IsDefault bool    `json:"is_default"`
	DomainID  string  `json:"domain_id"`
}

func TestExchangeRateLifecycle(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var r Rate
	e.adminA.Call(rateBase+"get", M{"currency": "KRW"}).OK(&r)
	if r != (Rate{Currency: "KRW", Rate: 1300, State: "ENABLED", IsDefault: true, DomainID: "domain-a"}) {
		t.Fatalf("default %+v", r)
	}
	e.adminA.Call(rateBase+"set", M{"currency": "KRW", "rate": 1400.5, "domain_id": "domain-a"}).OK(&r)
	if r != (Rate{Currency: "KRW", Rate: 1400.5, State: "ENABLED", DomainID: "domain-a"}) {
		t.Fatalf("set %+v", r)
	}
	e.memberA1.Call(rateBase+"get", M{"currency": "krw"}).OK(&r)
	if r.Rate != 1400.5 || r.IsDefault {
		t.Fatalf("get after set %+v", r)
	}
	// Another domain keeps the default.
	e.adminB.Call(rateBase+"get", M{"currency": "KRW"}).OK(&r)
	if r.Rate != 1300 || !r.IsDefault || r.DomainID != "domain-b" {
		t.Fatalf("domain-b %+v", r)
	}
	// disable keeps the rate; set keeps the state; enable returns it.
	e.adminA.Call(rateBase+"disable", M{"currency": "KRW"}).OK(&r)
	if r.State != "DISABLED" || r.Rate != 1400.5 {
		t.Fatalf("disable %+v", r)
	}
	e.adminA.Call(rateBase+"disable", M{"currency": "KRW"}).OK(&r) // again: harmless
	e.adminA.Call(rateBase+"set", M{"currency": "KRW", "rate": 1500}).OK(&r)
	if r.State != "DISABLED" || r.Rate != 1500 {
		t.Fatalf("set while disabled %+v", r)
	}
	e.adminA.Call(rateBase+"enable", M{"currency": "KRW"}).OK(&r)
	if r.State != "ENABLED" || r.Rate != 1500 || r.IsDefault {
		t.Fatalf("enable %+v", r)
	}
	// disable without an override: a rate-0 row; enable drops it.
	e.adminA.Call(rateBase+"disable", M{"currency": "JPY"}).OK(&r)
	if r.State != "DISABLED" || r.Rate != 0 || r.IsDefault {
		t.Fatalf("disable default %+v", r)
	}
	if e.count(t, rates) != 2 {
		t.Fatalf("rows %d, want 2", e.count(t, rates))
	}
	e.adminA.Call(rateBase+"enable", M{"currency": "JPY"}).OK(&r)
	if r != (Rate{Currency: "JPY", Rate: 150, State: "ENABLED", IsDefault: true, DomainID: "domain-a"}) || e.count(t, rates) != 1 {
		t.Fatalf("enable of a rate-0 row %+v (rows %d)", r, e.count(t, rates))
	}
	// list: every supported currency, overrides where the domain has them.
	var l struct {
		Results    []Rate `json:"results"`
		TotalCount int    `json:"total_count"`
	}
	e.ownerA1.Call(rateBase+"list", M{"domain_id": "domain-a", "query": M{}}).OK(&l)
	if l.TotalCount != 5 || len(l.Results) != 5 {
		t.Fatalf("list %+v", l)
	}
	for _, x := range l.Results {
		want := x.Currency != "KRW"
		if x.IsDefault != want {
			t.Errorf("list entry %+v", x)
		}
	}
	// reset: back to the default, the row gone.
	e.adminA.Call(rateBase+"reset", M{"currency": "KRW"}).OK(&r)
	if r != (Rate{Currency: "KRW", Rate: 1300, State: "ENABLED", IsDefault: true, DomainID: "domain-a"}) || e.count(t, rates) != 0 {
		t.Fatalf("reset %+v", r)
	}
	// A service credential may act for a domain it names.
	e.system.Call(rateBase+"set", M{"currency": "EUR", "rate": 0.9, "domain_id": "domain-b"}).OK(&r)
	e.adminB.Call(rateBase+"get", M{"currency": "EUR"}).OK(&r)
	if r.Rate != 0.9 {
		t.Fatalf("system set for domain-b: %+v", r)
	}
}

func TestExchangeRateRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cases := []struct {
		name   string
		c      *testkit.Client
		path   string
		body   any
		status int
		code   string
	}{
		{"unsupported currency set", e.adminA, "set", M{"currency": "XYZ", "rate": 2}, http.StatusBadRequest, errs.UnsupportedCurrency},
		{"unsupported currency get", e.adminA, "get", M{"currency": "XYZ"}, http.StatusBadRequest, errs.UnsupportedCurrency},
		{"unsupported currency reset", e.adminA, "reset", M{"currency": "XYZ"}, http.StatusBadRequest, errs.UnsupportedCurrency},
		{"unsupported currency enable", e.adminA, "enable", M{"currency": "XYZ"}, http.StatusBadRequest, errs.UnsupportedCurrency},
		{"unsupported currency disable", e.adminA, "disable", M{"currency": "XYZ"}, http.StatusBadRequest, errs.UnsupportedCurrency},
		{"rate zero", e.adminA, "set", M{"currency": "KRW", "rate": 0}, http.StatusBadRequest, errs.InvalidParameter},
		{"rate negative", e.adminA, "set", M{"currency": "KRW", "rate": -3}, http.StatusBadRequest, errs.InvalidParameter},
		{"rate missing", e.adminA, "set", M{"currency": "KRW"}, http.StatusBadRequest, errs.RequiredParameter},
		{"rate a string", e.adminA, "set", M{"currency": "KRW", "rate": "5"}, http.StatusBadRequest, errs.InvalidParameterType},
		{"currency missing", e.adminA, "get", M{}, http.StatusBadRequest, errs.RequiredParameter},
		{"currency too long", e.adminA, "get", M{"currency": "ABCDEFGHIJ"}, http.StatusBadRequest, errs.InvalidParameter},
		{"unknown field", e.adminA, "set", M{"currency": "KRW", "rate": 2, "bogus": 1}, http.StatusBadRequest, errs.InvalidParameter},
		{"malformed", e.adminA, "set", `{"currency":`, http.StatusBadRequest, errs.JSONFormat},
		{"list unknown field", e.adminA, "list", M{"x": 1}, http.StatusBadRequest, errs.InvalidParameter},
		{"another domain named", e.adminA, "set", M{"currency": "KRW", "rate": 2, "domain_id": "domain-b"}, http.StatusForbidden, errs.PermissionDenied},
		{"another domain listed", e.adminA, "list", M{"domain_id": "domain-b"}, http.StatusForbidden, errs.PermissionDenied},
		// Issue 21: acting in another domain needs a service credential.
		{"a person's SYSTEM grant names another domain", e.anon.For(auth.Principal{DomainID: "domain-root", UserID: "sa", Role: auth.SystemAdmin}),
			"set", M{"currency": "KRW", "rate": 2, "domain_id": "domain-a"}, http.StatusForbidden, errs.PermissionDenied},
		{"workspace owner sets", e.ownerA1, "set", M{"currency": "KRW", "rate": 2}, http.StatusForbidden, errs.PermissionDenied},
		{"member disables", e.memberA1, "disable", M{"currency": "KRW"}, http.StatusForbidden, errs.PermissionDenied},
		{"anonymous", e.anon, "get", M{"currency": "KRW"}, http.StatusUnauthorized, errs.AuthenticateFailure},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Call(rateBase+tc.path, tc.body).Fails(tc.status, tc.code)
			if n := e.count(t, rates); n != 0 {
				t.Fatalf("%d rows stored", n)
			}
		})
	}
	// No stat route.
	e.adminA.Call(rateBase+"stat", M{"query": M{}}).Fails(http.StatusNotFound, errs.UnsupportedAPI)
}
