package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/outward"
)

func TestSort(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want []string }{
		{[]string{"1.0.0", "1.10.0", "1.2.0"}, []string{"1.10.0", "1.2.0", "1.0.0"}},
		{[]string{"latest", "v1.0.0", "dev", "2.0.0"}, []string{"2.0.0", "v1.0.0", "latest", "dev"}},
		{[]string{"1.0.0-rc.1", "1.0.0", "1.0.0-beta"}, []string{"1.0.0", "1.0.0-rc.1", "1.0.0-beta"}},
		{[]string{"1.0", "1.1", "0.9.1"}, []string{"1.1", "1.0", "0.9.1"}},
		{[]string{"v1.0.0", "1.0.0"}, []string{"1.0.0", "v1.0.0"}},
		{[]string{"1.0.0+build.2", "1.0.0+build.1"}, []string{"1.0.0+build.1", "1.0.0+build.2"}},
		{[]string{"x", "01.0.0", "y"}, []string{"x", "01.0.0", "y"}},
		{nil, nil},
	}
	for _, tc := range cases {
		if got := Sort(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Sort(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestBaseURLAndName(t *testing.T) {
	t.Parallel()
	bases := []struct{ in, want string }{
		{"registry.example.com", "https://registry.example.com"},
		{"registry.example.com:5000/", "https://registry.example.com:5000"},
		{"http://127.0.0.1:5000", "http://127.0.0.1:5000"},
		{"docker.io", "https://registry-1.docker.io"},
		{"https://index.docker.io", "https://registry-1.docker.io"},
	}
	for _, b := range bases {
		if got, err := BaseURL(b.in); err != nil || got != b.want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", b.in, got, err, b.want)
		}
	}
	for _, bad := range []string{"", "ftp://r.example.com", "https://u:p@r.example.com", "https://r.example.com?x=1", "https://"} {
		if got, err := BaseURL(bad); err == nil {
			t.Errorf("BaseURL(%q) = %q, want an error", bad, got)
		}
	}
	names := []struct{ base, image, want string }{
		{"https://r.example.com", "team/plugin", "team/plugin"},
		{"https://r.example.com", "team/plugin:1.0", "team/plugin"},
		{"https://r.example.com", "team/plugin@sha256:abc", "team/plugin"},
		{"https://r.example.com", "r.example.com:5000/team/plugin:1.0", "team/plugin"},
		{"https://r.example.com", "localhost/plugin", "plugin"},
		{"https://r.example.com", "plugin", "plugin"},
		{"https://registry-1.docker.io", "plugin", "library/plugin"},
		{"https://registry-1.docker.io", "cloudforet/plugin", "cloudforet/plugin"},
	}
	for _, n := range names {
		if got := RepositoryName(n.base, n.image); got != n.want {
			t.Errorf("RepositoryName(%q, %q) = %q, want %q", n.base, n.image, got, n.want)
		}
	}
}

func TestParseChallenge(t *testing.T) {
	t.Parallel()
	scheme, p := parseChallenge(`Bearer realm="https://auth.example.com/token",service="registry",scope="repository:a/b:pull,push"`)
	want := map[string]string{"realm": "https://auth.example.com/token", "service": "registry", "scope": "repository:a/b:pull,push"}
	if scheme != "Bearer" || !reflect.DeepEqual(p, want) {
		t.Fatalf("parseChallenge = %q %v", scheme, p)
	}
	scheme, p = parseChallenge(`Basic realm=registry`)
	if scheme != "Basic" || p["realm"] != "registry" {
		t.Fatalf("parseChallenge = %q %v", scheme, p)
	}
}

// TestPages: every page of a long tag list is read, following Link.
func TestPages(t *testing.T) {
	t.Parallel()
	var requests int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		start, _ := strconv.Atoi(r.URL.Query().Get("last"))
		var tags []string
		for i := start; i < start+n && i < 25; i++ {
			tags = append(tags, fmt.Sprintf("1.%d.0", i))
		}
		if start+n < 25 {
			w.Header().Set("Link", fmt.Sprintf(`</v2/a/tags/list?n=%d&last=%d>; rel="next"`, n, start+n))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"name": "a", "tags": tags})
	}))
	defer srv.Close()
	tags, err := New(outward.Allow{Loopback: true}, 10).Tags(context.Background(), srv.URL, "a", Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tags) != 25 || tags[0] != "1.24.0" || tags[24] != "1.0.0" || requests != 3 {
		t.Fatalf("%d tags in %d requests: %v", len(tags), requests, tags)
	}
	c := New(outward.Allow{Loopback: true}, 10)
	c.maxPages = 2
	_, err = c.Tags(context.Background(), srv.URL, "a", Credentials{})
	if e, ok := errs.As(err); !ok || e.Code != errs.RegistryUnavailable {
		t.Fatalf("endless pages: %v", err)
	}
}
