package provider_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/provider"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/schema"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const pp = "/identity/provider/"

var providerFields = []string{"provider", "name", "alias", "color", "icon", "order", "options", "plugin_info", "tags", "is_managed",
	"domain_id", "created_at", "updated_at"}

type list struct {
	Results    []map[string]any `json:"results"`
	TotalCount int              `json:"total_count"`
}

func newHarness(t *testing.T) *identitytest.Harness {
	return identitytest.New(t, identitytest.Mount(provider.Routes, schema.Routes, workspace.Routes, rolebinding.Routes))
}

// TestManagedProviders: the four shipped providers are in every domain,
// ordered as upstream orders them, with what the console reads, and no
// caller changes them (403, nothing stored).
func TestManagedProviders(t *testing.T) {
	h := newHarness(t)
	var l list
	h.Admin.Call(pp+"list", map[string]any{"query": map[string]any{"only": []string{"provider", "name", "icon", "alias", "color", "options", "plugin_info"}}}).OK(&l)
	var names []string
	for _, r := range l.Results {
		names = append(names, r["provider"].(string))
	}
	if !slices.Equal(names, []string{"aws", "azure", "google_cloud", "kubernetes"}) || l.TotalCount != 4 {
		t.Fatalf("list = %v (%d)", names, l.TotalCount)
	}
	if g := l.Results[2]; g["alias"] != "Google" || g["color"] != "#4285F4" || g["options"].(map[string]any)["support_auto_sync"] != true ||
		g["plugin_info"].(map[string]any)["plugin_id"] != "plugin-google-cloud-account-collector" {
		t.Fatalf("google_cloud = %v", g)
	}
	var aws map[string]any
	h.Admin.Call("/identity/v2/provider/get", map[string]any{"provider": "aws"}).OK(&aws)
	identitytest.SameFields(t, "get", aws, providerFields...)
	if aws["is_managed"] != true || aws["order"] != float64(1) || aws["domain_id"] != h.Domain {
		t.Fatalf("aws = %v", aws)
	}
	frozen := h.DBFrozen(provider.Collection)
	h.Admin.Call(pp+"update", map[string]any{"provider": "aws", "name": "Mine"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Admin.Call(pp+"delete", map[string]any{"provider": "kubernetes"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Admin.Call(pp+"create", map[string]any{"provider": "aws", "name": "Again"}).Fails(http.StatusConflict, errs.NotUnique)
	frozen()

	// Another domain has its own copies.
	other, boss := h.NewDomain("other")
	var o map[string]any
	boss.Call(pp+"get", map[string]any{"provider": "azure"}).OK(&o)
	if o["domain_id"] != other || o["is_managed"] != true {
		t.Fatalf("other domain's azure = %v", o)
	}
}

// TestDomainProviders: a domain admin creates, changes, lists, counts and
// deletes its own; bad input is 400 with nothing stored; workspace roles
// read and write nothing; another domain does not see it.
func TestDomainProviders(t *testing.T) {
	h := newHarness(t)
	h.Admin.Call(pp+"list", map[string]any{}).OK(nil) // the managed ones are stored
	frozen := h.DBFrozen(provider.Collection)
	for name, body := range map[string]map[string]any{
		"no name":        {"provider": "oci"},
		"bad colour":     {"provider": "oci", "name": "OCI", "color": "red"},
		"long colour":    {"provider": "oci", "name": "OCI", "color": "#1234567"},
		"order 0":        {"provider": "oci", "name": "OCI", "order": 0},
		"long provider":  {"provider": "o123456789012345678901234567890123456789x", "name": "OCI"},
		"auto sync only": {"provider": "oci", "name": "OCI", "options": map[string]any{"support_auto_sync": true}},
		"no plugin": {"provider": "oci", "name": "OCI", "options": map[string]any{"support_auto_sync": true,
			"support_trusted_account": true}},
		"unknown field": {"provider": "oci", "name": "OCI", "colour": "#000000"},
	} {
		if r := h.Admin.Call(pp+"create", body); r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	frozen()
	var c map[string]any
	h.Admin.Call("/identity/v2/provider/create", map[string]any{"provider": "oci", "name": "OCI", "color": "#C74634", "tags": map[string]any{"a": "b"}}).OK(&c)
	identitytest.SameFields(t, "create", c, providerFields...)
	if c["order"] != float64(10) || c["is_managed"] != false || c["alias"] != "" {
		t.Fatalf("create = %v", c)
	}
	var u map[string]any
	h.Admin.Call(pp+"update", map[string]any{"provider": "oci", "alias": "Oracle"}).OK(&u)
	if u["alias"] != "Oracle" || u["name"] != "OCI" || u["color"] != "#C74634" || u["tags"].(map[string]any)["a"] != "b" {
		t.Fatalf("update = %v", u)
	}
	if n := identitytest.ListCount(t, h.Admin, pp+"list", map[string]any{"is_managed": false}); n != 1 {
		t.Fatalf("own providers: %d", n)
	}
	if n := identitytest.StatCount(h.Admin, pp+"stat", nil); n != 5 {
		t.Fatalf("stat: %d", n)
	}
	_, owner, member := h.WorkspaceUsers("ws")
	for _, c := range []*testkit.Client{owner, member} {
		if n := identitytest.ListCount(t, c, pp+"list", map[string]any{}); n != 5 {
			t.Fatalf("a workspace role lists %d", n)
		}
		c.Call(pp+"update", map[string]any{"provider": "oci", "name": "x"}).Fails(http.StatusForbidden, errs.PermissionDenied)
		c.Call(pp+"delete", map[string]any{"provider": "oci"}).Fails(http.StatusForbidden, errs.PermissionDenied)
		c.Call(pp+"create", map[string]any{"provider": "ibm", "name": "IBM"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	_, boss := h.NewDomain("other")
	boss.Call(pp+"get", map[string]any{"provider": "oci"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	boss.Call(pp+"update", map[string]any{"provider": "oci", "name": "x"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	boss.Call(pp+"delete", map[string]any{"provider": "oci"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := identitytest.ListCount(t, boss, pp+"list", map[string]any{"provider": "oci"}); n != 0 {
		t.Fatalf("another domain lists %d", n)
	}
	h.Anon.Call(pp+"list", map[string]any{}).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	h.Admin.Call(pp+"delete", map[string]any{"provider": "oci"}).OK(nil)
	h.Admin.Call(pp+"get", map[string]any{"provider": "oci"}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

// TestProviderTenancy: another domain's admin, a plain user and a
// workspace owner without a workspace read and change nothing of a
// domain's provider.
func TestProviderTenancy(t *testing.T) {
	h := newHarness(t)
	h.Admin.Call(pp+"create", map[string]any{"provider": "oci", "name": "OCI"}).OK(nil)
	testkit.Tenancy{
		Handler: h.Handler, Coll: h.DB.Collection(provider.Collection), ID: provider.Key(h.Domain, "oci"), Domain: h.Domain,
		Get:  testkit.Req{Path: pp + "get", Body: map[string]any{"provider": "oci"}},
		List: testkit.Req{Path: pp + "list", Body: map[string]any{"provider": "oci"}},
		Changes: []testkit.Req{
			{Path: pp + "update", Body: map[string]any{"provider": "oci", "name": "taken"}},
			{Path: pp + "delete", Body: map[string]any{"provider": "oci"}},
		},
		Insider: auth.Principal{DomainID: h.Domain, UserID: "admin", Role: auth.DomainAdmin},
		Enroll:  h.Enroll,
		NoToken: true,
	}.Run(t)
}
