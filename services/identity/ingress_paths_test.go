package identity_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/server"
)

// TestSystemOnlyPathsStayInCluster: the chart's ingress.internalPaths
// (helm/nubes/values.yaml) are exactly identity's SYSTEM-only operations
// and their unversioned aliases, read from the declarations' Access: a
// new SYSTEM-only operation is kept off the Ingress, and no other
// operation is.
func TestSystemOnlyPathsStayInCluster(t *testing.T) {
	h := newHarness(t)
	routes := h.built.Service.Routes
	var want []string
	for _, r := range routes {
		if a := r.Meta().Access; a.IsService() || (len(a.RoleList()) == 1 && a.RoleList()[0] == auth.SystemAdmin) { // auth.Service: SYSTEM tokens only
			want = append(want, r.Meta().Path)
		}
	}
	for alias, target := range server.Aliases(routes) {
		if slices.Contains(want, target) {
			want = append(want, alias)
		}
	}
	slices.Sort(want)
	if len(want) == 0 {
		t.Fatal("no SYSTEM-only operation found")
	}

	raw, err := os.ReadFile("../../helm/nubes/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "\n  internalPaths:\n")
	if !ok {
		t.Fatal("helm/nubes/values.yaml has no ingress.internalPaths")
	}
	item := regexp.MustCompile(`^    - (\S+)$`)
	var got []string
	for _, line := range strings.Split(rest, "\n") {
		m := item.FindStringSubmatch(line)
		if m == nil {
			break
		}
		got = append(got, m[1])
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("ingress.internalPaths = %v\nSYSTEM-only operations = %v", got, want)
	}
}
