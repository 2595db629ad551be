package trustedaccount_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/trustedaccount"
)

// TestTrustedSecretData: get-secret-data answers a trusted account's
// secret data to SYSTEM callers only (the services that collect with it),
// and a SYSTEM caller lists the trusted accounts of any domain it names.
func TestTrustedSecretData(t *testing.T) {
	h := identitytest.New(t, trustedaccount.Routes)
	const ta = "/identity/v2/trusted-account/"
	other, otherAdmin := h.NewDomain("second")
	var a, b map[string]any
	h.Admin.Call(ta+"create", map[string]any{"name": "AWS", "data": map[string]any{"account_id": "111111111111"}, "provider": "aws", "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIA1", "aws_secret_access_key": "s3cr3t-root"}, "resource_group": "DOMAIN"}).OK(&a)
	otherAdmin.Call(ta+"create", map[string]any{"name": "AWS 2", "data": map[string]any{"account_id": "222222222222"}, "provider": "aws", "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIA2", "aws_secret_access_key": "s3cr3t-other"}, "resource_group": "DOMAIN"}).OK(&b)
	id, otherID := a["trusted_account_id"].(string), b["trusted_account_id"].(string)

	var got struct {
		TrustedAccountID string         `json:"trusted_account_id"`
		TrustedSecretID  string         `json:"trusted_secret_id"`
		DomainID         string         `json:"domain_id"`
		Provider         string         `json:"provider"`
		Data             map[string]any `json:"data"`
	}
	h.System.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": id, "domain_id": h.Domain}).OK(&got)
	if got.TrustedAccountID != id || got.TrustedSecretID != a["trusted_secret_id"] || got.DomainID != h.Domain || got.Provider != "aws" ||
		got.Data["aws_secret_access_key"] != "s3cr3t-root" || got.Data["aws_access_key_id"] != "AKIA1" {
		t.Fatalf("secret data: %+v", got)
	}
	// A SYSTEM caller reads any domain's, naming it.
	h.System.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": otherID, "domain_id": other}).OK(&got)
	if got.Data["aws_secret_access_key"] != "s3cr3t-other" {
		t.Fatalf("other domain's secret data: %+v", got)
	}
	h.Admin.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": id, "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	otherAdmin.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": otherID, "domain_id": other}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Anon.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": id, "domain_id": h.Domain}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	h.System.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": id, "domain_id": other}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.System.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": "ta-000000000000", "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.System.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": id}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.System.Call(ta+"get-secret-data", map[string]any{"domain_id": h.Domain}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.System.Call(ta+"get-secret-data", map[string]any{"trusted_account_id": id, "domain_id": h.Domain, "x": 1}).Fails(http.StatusBadRequest, errs.InvalidParameter)

	// No other answer carries it.
	for _, r := range []string{
		string(h.Admin.Call(ta+"get", map[string]any{"trusted_account_id": id}).Body),
		string(h.Admin.Call(ta+"list", nil).Body),
		string(h.System.Call(ta+"list", map[string]any{"domain_id": other}).Body),
	} {
		if strings.Contains(r, "s3cr3t") {
			t.Fatalf("secret data answered: %s", r)
		}
	}

	// list with domain_id: SYSTEM names any domain, others only their own.
	type listOut struct {
		Results []map[string]any `json:"results"`
	}
	var l listOut
	h.System.Call(ta+"list", map[string]any{"domain_id": other, "provider": "aws"}).OK(&l)
	if len(l.Results) != 1 || l.Results[0]["trusted_account_id"] != otherID {
		t.Fatalf("system lists the other domain: %v", l.Results)
	}
	h.System.Call(ta+"list", nil).OK(&l)
	if len(l.Results) != 1 || l.Results[0]["trusted_account_id"] != id {
		t.Fatalf("system lists its own domain by default: %v", l.Results)
	}
	h.Admin.Call(ta+"list", map[string]any{"domain_id": h.Domain}).OK(&l)
	if len(l.Results) != 1 {
		t.Fatalf("admin naming its own domain: %v", l.Results)
	}
	h.Admin.Call(ta+"list", map[string]any{"domain_id": other}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.System.Call(ta+"list", map[string]any{"domain_id": "domain-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
}
