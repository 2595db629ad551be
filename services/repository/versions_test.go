package repository_test

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/outward"
	"github.com/nubes-io/nubes/services/repository"
)

// pushed tags in an order unlike both the registry's (lexical) and the
// versions'; want is newest first, then the other tags in registry order.
var (
	pushed = []string{"1.0.0", "1.10.0", "latest", "1.2.0", "v2.0.0-rc.1", "2.0.0", "dev", "1.2.0-beta"}
	want   = []string{"2.0.0", "v2.0.0-rc.1", "1.10.0", "1.2.0", "1.2.0-beta", "1.0.0", "dev", "latest"}
)

func private(url, image string, cfg map[string]any) map[string]any {
	body := map[string]any{"name": image, "resource_type": "inventory.Collector", "image": image,
		"registry_type": "PRIVATE_REGISTRY", "registry_url": url}
	if cfg != nil {
		body["registry_config"] = cfg
	}
	return body
}

func versions(t *testing.T, h *harness, pluginID string) versionsInfo {
	t.Helper()
	var v versionsInfo
	h.memberA.Call("/repository/plugin/get-versions", map[string]any{"plugin_id": pluginID}).OK(&v)
	return v
}

func TestGetVersionsFromARegistry(t *testing.T) {
	t.Parallel()
	open := startRegistry(t, "")
	open.pushTags(t, "cloudforet/plugin-open", pushed...)
	// Two tags a page: the list takes several pages (Link headers).
	h := setup(t, repository.Config{Outward: loopback, RegistryPageSize: 2, PublicHubURL: open.URL})

	p := h.register(t, h.adminA, private(open.URL, "cloudforet/plugin-open", nil))
	v := versions(t, h, p.PluginID)
	if !reflect.DeepEqual(v.Results, want) || v.TotalCount != len(want) || !reflect.DeepEqual(v.Version, want) {
		t.Fatalf("versions = %+v, want %v", v, want)
	}
	// The same image from the public hub of the configuration, by its
	// registry host in the image name as well.
	hub := h.register(t, h.adminA, map[string]any{"name": "hub", "resource_type": "x.Y", "image": "cloudforet/plugin-open", "plugin_id": "from-hub"})
	if v := versions(t, h, hub.PluginID); !reflect.DeepEqual(v.Results, want) {
		t.Fatalf("public hub versions = %v", v.Results)
	}
	host := strings.TrimPrefix(open.URL, "http://")
	open.pushTags(t, "c/o", pushed...)
	named := h.register(t, h.adminA, private(open.URL, host+"/c/o:1.0.0", nil))
	if v := versions(t, h, named.PluginID); !reflect.DeepEqual(v.Results, want) {
		t.Fatalf("versions of an image named with its registry = %v", v.Results)
	}
	// A domain admin, a workspace owner and a SYSTEM token of the domain
	// may read versions too.
	var got versionsInfo
	h.ownerA.Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": p.PluginID, "repository_id": h.local}).OK(&got)
	h.adminA.Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": p.PluginID}).OK(&got)
	h.system.For(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-a", UserID: "root", Role: auth.SystemAdmin}).
		Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": p.PluginID}).OK(&got)
	if !reflect.DeepEqual(got.Results, want) {
		t.Fatalf("system versions = %v", got.Results)
	}

	// An image with no tags pushed yet.
	missing := h.register(t, h.adminA, private(open.URL, "cloudforet/plugin-missing", nil))
	h.memberA.Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": missing.PluginID}).Fails(http.StatusNotFound, errs.NoImageInRegistry)
	h.memberA.Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": "unknown"}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

func TestGetVersionsWithCredentials(t *testing.T) {
	t.Parallel()
	basicReg := startRegistry(t, "basic")
	basicReg.pushTags(t, "team/plugin-basic", "0.9.0", "1.0.0")
	bearerReg := startRegistry(t, "bearer")
	bearerReg.pushTags(t, "team/plugin-bearer", "3.0.0", "3.1.0")
	h := setup(t, repository.Config{Outward: loopback})

	good := map[string]any{"username": regUser, "password": regPassword}
	bad := map[string]any{"username": regUser, "password": "wrong"}
	cases := []struct {
		name string
		body map[string]any
		want []string // nil: 503 ERROR_REGISTRY_UNAVAILABLE
	}{
		{"basic with the right password", private(basicReg.URL, "team/plugin-basic", good), []string{"1.0.0", "0.9.0"}},
		{"basic with a wrong password", private(basicReg.URL, "team/plugin-basic", bad), nil},
		{"basic without credentials", private(basicReg.URL, "team/plugin-basic", nil), nil},
		{"bearer realm with the right password", private(bearerReg.URL, "team/plugin-bearer", good), []string{"3.1.0", "3.0.0"}},
		{"bearer realm with a wrong password", private(bearerReg.URL, "team/plugin-bearer", bad), nil},
		{"bearer realm anonymously", private(bearerReg.URL, "team/plugin-bearer", nil), nil},
		{"a configured bearer token", private(bearerReg.URL, "team/plugin-bearer", map[string]any{"token": regToken}), []string{"3.1.0", "3.0.0"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.body["plugin_id"] = "p" + string(rune('a'+i))
			p := h.register(t, h.adminA, tc.body)
			if tc.want == nil {
				h.memberA.Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": p.PluginID}).Fails(http.StatusServiceUnavailable, errs.RegistryUnavailable)
				return
			}
			if v := versions(t, h, p.PluginID); !reflect.DeepEqual(v.Results, tc.want) {
				t.Fatalf("versions = %v, want %v", v.Results, tc.want)
			}
		})
	}
	// The token realm was asked for pull access to the image.
	if bearerReg.tokenCalls.Load() == 0 {
		t.Fatal("the token realm was never asked")
	}
	if scope := <-bearerReg.scopes; scope != "repository:team/plugin-bearer:pull" {
		t.Fatalf("token scope %q", scope)
	}
}

func TestGetVersionsRegistryFailures(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // nothing listens there any more
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	t.Cleanup(broken.Close)
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<html>not json"))
	}))
	t.Cleanup(garbage.Close)
	strange := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Negotiate abc`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(strange.Close)
	escaping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", `<http://169.254.169.254/v2/x/tags/list?last=a>; rel="next"`)
		_, _ = w.Write([]byte(`{"tags": ["1.0.0"]}`))
	}))
	t.Cleanup(escaping.Close)

	h := setup(t, repository.Config{Outward: loopback, PublicHubURL: downURL})
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"nothing listens", private(downURL, "team/a", nil)},
		{"the registry answers 500", private(broken.URL, "team/b", nil)},
		{"the registry answers no JSON", private(garbage.URL, "team/c", nil)},
		{"an unknown challenge", private(strange.URL, "team/d", nil)},
		{"a next page on another host", private(escaping.URL, "team/e", nil)},
		{"the public hub is down", map[string]any{"name": "f", "resource_type": "x.Y", "image": "team/f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := h.register(t, h.adminA, tc.body)
			h.memberA.Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": p.PluginID}).Fails(http.StatusServiceUnavailable, errs.RegistryUnavailable)
		})
	}
}

// loopback lets the registry_url of a test reach its 127.0.0.1 registry.
var loopback = outward.Allow{Loopback: true}

// A registry_url is user input: by default it may not reach inside the
// deployment (loopback, private, link-local, by name or by address), and
// a refusal or a failure never carries what the other side answered.
func TestRegistryURLCannotReachInside(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t, "")
	reg.pushTags(t, "team/plugin-inside", "1.0.0")
	const marker = "internal-admin-page-content"
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Weird realm="`+marker+`"`)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(marker))
	}))
	t.Cleanup(inside.Close)
	port := reg.URL[strings.LastIndex(reg.URL, ":"):]
	h := setup(t, repository.Config{})
	for _, u := range []string{reg.URL, "http://localhost" + port, "http://169.254.169.254", "http://10.0.0.1:5000"} {
		p := h.register(t, h.adminA, merge(private(u, "team/plugin-inside", nil), map[string]any{"plugin_id": "p" + strings.NewReplacer(":", "", "/", "", ".", "").Replace(u)}))
		r := h.memberA.Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": p.PluginID})
		r.Fails(http.StatusServiceUnavailable, errs.RegistryUnavailable)
		if !strings.Contains(string(r.Body), "inside the deployment") {
			t.Errorf("%s: %s, want the outward rule named", u, r.Body)
		}
	}
	// Allowed to reach loopback, a server that is no registry: its answer
	// is not echoed.
	lo := setup(t, repository.Config{Outward: loopback})
	p := lo.register(t, lo.adminA, private(inside.URL, "team/x", nil))
	r := lo.memberA.Call("/repository/v1/plugin/get-versions", map[string]any{"plugin_id": p.PluginID})
	r.Fails(http.StatusServiceUnavailable, errs.RegistryUnavailable)
	if strings.Contains(string(r.Body), marker) {
		t.Fatalf("the failure echoes what the other side answered: %s", r.Body)
	}
}
