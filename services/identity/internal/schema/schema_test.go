package schema_test

import (
	"net/http"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/schema"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const sp = "/identity/schema/"

var schemaFields = []string{"schema_id", "name", "version", "schema_type", "schema", "provider", "related_schemas", "options", "tags",
	"is_managed", "domain_id", "created_at", "updated_at"}

type list struct {
	Results    []map[string]any `json:"results"`
	TotalCount int              `json:"total_count"`
}

func newHarness(t *testing.T) *identitytest.Harness {
	return identitytest.New(t, identitytest.Mount(schema.Routes, workspace.Routes, rolebinding.Routes))
}

// TestManagedSchemas: the 17 shipped schemas are in every domain, found
// as the console asks for them, and no caller changes them.
func TestManagedSchemas(t *testing.T) {
	h := newHarness(t)
	if n := identitytest.ListCount(t, h.Admin, sp+"list", map[string]any{}); n != 17 {
		t.Fatalf("%d schemas", n)
	}
	var aws list
	h.Admin.Call(sp+"list", map[string]any{"provider": "aws"}).OK(&aws)
	if aws.TotalCount != 6 {
		t.Fatalf("aws: %d", aws.TotalCount)
	}
	var sa map[string]any
	h.Admin.Call("/identity/v2/schema/get", map[string]any{"schema_id": "aws-service-account"}).OK(&sa)
	identitytest.SameFields(t, "get", sa, schemaFields...)
	props := sa["schema"].(map[string]any)["properties"].(map[string]any)
	if _, ok := props["account_id"]; !ok || sa["schema_type"] != "SERVICE_ACCOUNT" || sa["is_managed"] != true ||
		len(sa["related_schemas"].([]any)) != 2 || sa["options"].(map[string]any)["external_link"] == nil {
		t.Fatalf("aws-service-account = %v", sa)
	}
	// The credentials form's query (console op = with a list becomes in).
	var creds list
	h.Admin.Call(sp+"list", map[string]any{"query": map[string]any{"filter": []any{
		map[string]any{"k": "schema_type", "v": "SECRET", "o": "eq"},
		map[string]any{"k": "schema_id", "v": []any{"aws-secret-access-key", "aws-secret-assume-role"}, "o": "in"},
	}}}).OK(&creds)
	if creds.TotalCount != 1 || creds.Results[0]["schema_id"] != "aws-secret-access-key" {
		t.Fatalf("credential schemas = %v", creds.Results)
	}
	if n := identitytest.ListCount(t, h.Admin, sp+"list", map[string]any{"related_schema_id": "azure-secret-client-secret"}); n != 2 {
		t.Fatalf("related to azure-secret-client-secret: %d", n)
	}
	if n := identitytest.ListCount(t, h.Admin, sp+"list", map[string]any{"schema_type": "TRUSTING_SECRET"}); n != 5 {
		t.Fatalf("trusting secrets: %d", n)
	}
	frozen := h.DBFrozen(schema.Collection)
	h.Admin.Call(sp+"update", map[string]any{"schema_id": "aws-service-account", "name": "x"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Admin.Call(sp+"delete", map[string]any{"schema_id": "email-smtp"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Admin.Call(sp+"create", map[string]any{"schema_id": "email-smtp", "name": "x", "schema_type": "SECRET", "schema": map[string]any{},
		"provider": "aws"}).Fails(http.StatusConflict, errs.NotUnique)
	frozen()
}

// TestDomainSchemas: a domain admin's own schema, its bad inputs (400,
// nothing stored) and who else reaches it.
func TestDomainSchemas(t *testing.T) {
	h := newHarness(t)
	h.Admin.Call(sp+"list", map[string]any{}).OK(nil)
	frozen := h.DBFrozen(schema.Collection)
	good := func(edit func(m map[string]any)) map[string]any {
		m := map[string]any{"schema_id": "oci-secret", "name": "OCI key", "schema_type": "SECRET", "provider": "oci",
			"schema": map[string]any{"type": "object", "required": []any{"key"}, "properties": map[string]any{"key": map[string]any{"type": "string"}}}}
		edit(m)
		return m
	}
	for name, body := range map[string]map[string]any{
		"bad type":      good(func(m map[string]any) { m["schema_type"] = "KEY" }),
		"no schema":     good(func(m map[string]any) { delete(m, "schema") }),
		"not a schema":  good(func(m map[string]any) { m["schema"] = map[string]any{"type": 7} }),
		"long id":       good(func(m map[string]any) { m["schema_id"] = "o1234567890123456789012345678901234567890" }),
		"no provider":   good(func(m map[string]any) { delete(m, "provider") }),
		"unknown field": good(func(m map[string]any) { m["kind"] = "x" }),
	} {
		if r := h.Admin.Call(sp+"create", body); r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	frozen()
	var c map[string]any
	h.Admin.Call(sp+"create", good(func(map[string]any) {})).OK(&c)
	identitytest.SameFields(t, "create", c, schemaFields...)
	var u map[string]any
	h.Admin.Call(sp+"update", map[string]any{"schema_id": "oci-secret", "related_schemas": []string{"x"}}).OK(&u)
	if u["name"] != "OCI key" || len(u["related_schemas"].([]any)) != 1 {
		t.Fatalf("update = %v", u)
	}
	h.Admin.Call(sp+"update", map[string]any{"schema_id": "oci-secret", "schema": map[string]any{"type": 7}}).Fails(http.StatusBadRequest, errs.InvalidSchema)
	if n := identitytest.StatCount(h.Admin, sp+"stat", nil); n != 18 {
		t.Fatalf("stat %d", n)
	}
	_, owner, member := h.WorkspaceUsers("ws")
	for _, c := range []*testkit.Client{owner, member} {
		c.Call(sp+"get", map[string]any{"schema_id": "oci-secret"}).OK(nil)
		c.Call(sp+"delete", map[string]any{"schema_id": "oci-secret"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	_, boss := h.NewDomain("other")
	boss.Call(sp+"get", map[string]any{"schema_id": "oci-secret"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	boss.Call(sp+"delete", map[string]any{"schema_id": "oci-secret"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := identitytest.ListCount(t, boss, sp+"list", map[string]any{"provider": "oci"}); n != 0 {
		t.Fatalf("another domain lists %d", n)
	}
	h.Admin.Call(sp+"delete", map[string]any{"schema_id": "oci-secret"}).OK(nil)
	h.Admin.Call(sp+"get", map[string]any{"schema_id": "oci-secret"}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// TestSchemaTenancy: outsiders of the domain read and change nothing of
// its own schema.
func TestSchemaTenancy(t *testing.T) {
	h := newHarness(t)
	h.Admin.Call(sp+"create", map[string]any{"schema_id": "oci-secret", "name": "OCI", "schema_type": "SECRET", "provider": "oci",
		"schema": map[string]any{"type": "object"}}).OK(nil)
	testkit.Tenancy{
		Handler: h.Handler, Coll: h.DB.Collection(schema.Collection), ID: schema.Key(h.Domain, "oci-secret"), Domain: h.Domain,
		Get:  testkit.Req{Path: sp + "get", Body: map[string]any{"schema_id": "oci-secret"}},
		List: testkit.Req{Path: sp + "list", Body: map[string]any{"schema_id": "oci-secret"}},
		Changes: []testkit.Req{
			{Path: sp + "update", Body: map[string]any{"schema_id": "oci-secret", "name": "taken"}},
			{Path: sp + "delete", Body: map[string]any{"schema_id": "oci-secret"}},
		},
		Insider: auth.Principal{DomainID: h.Domain, UserID: "admin", Role: auth.DomainAdmin},
		Enroll:  h.Enroll,
		NoToken: true,
	}.Run(t)
}
