package core

import (
	"fmt"
	"testing"

	"github.com/nubes-io/nubes/pkg/trusted"
)

// Owner is the collector's tenancy: which trusted accounts it reaches
// (trusted.Select has the table of what is picked).
func TestOwner(t *testing.T) {
	t.Parallel()
	c := &Collector{DomainID: "d", ResourceGroup: GroupWorkspace, WorkspaceID: "w1"}
	if o := Owner(c); o.DomainID != "d" || o.ResourceGroup != GroupWorkspace || o.WorkspaceID != "w1" {
		t.Fatalf("Owner = %+v", o)
	}
	if !Owner(c).Reaches(trusted.Account{DomainID: "d", WorkspaceID: Global, TrustedSecretID: "s"}) ||
		Owner(c).Reaches(trusted.Account{DomainID: "d", WorkspaceID: "w2", TrustedSecretID: "s"}) {
		t.Fatal("a WORKSPACE collector reaches its workspace's and the domain-wide accounts only")
	}
}

func TestCheckSchedule(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   *Schedule
		want string
		bad  bool
	}{
		{nil, "DISABLED []", false},
		{&Schedule{State: "ENABLED", Hours: []int{23, 0, 23}}, "ENABLED [0 23]", false},
		{&Schedule{Hours: []int{5}}, "DISABLED [5]", false},
		{&Schedule{Hours: []int{24}}, "", true},
		{&Schedule{Hours: []int{-1}}, "", true},
		{&Schedule{Hours: []int{1, 2, 3}}, "", true},
	} {
		got, err := CheckSchedule(tt.in)
		if (err != nil) != tt.bad {
			t.Fatalf("%+v: err %v", tt.in, err)
		}
		if !tt.bad {
			if s := fmt.Sprintf("%s %v", got.State, got.Hours); s != tt.want {
				t.Fatalf("%+v: got %q, want %q", tt.in, s, tt.want)
			}
		}
	}
}

func TestCheckKeys(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		v   any
		bad bool
	}{
		{map[string]any{"a": map[string]any{"b": []any{map[string]any{"c": 1}}}}, false},
		{map[string]any{"$a": 1}, false}, // kept, escaped in the store (pkg/freeform)
		{map[string]any{"a.b": 1}, false},
		{map[string]any{"": 1}, true},
		{map[string]any{"a": []any{map[string]any{"": 1}}}, true},
		{map[string]any{"a\x00b": 1}, true},
	} {
		if err := CheckKeys("f", tt.v); (err != nil) != tt.bad {
			t.Fatalf("%v: %v", tt.v, err)
		}
	}
	if HashKey("k", "a", "bc") == HashKey("k", "ab", "c") {
		t.Fatal("HashKey must separate its parts")
	}
}
