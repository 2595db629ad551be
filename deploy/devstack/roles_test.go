package main

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
)

// roleNames are the abbreviations of docs/roles.md.
var roleNames = map[string]string{"SA": "SYSTEM_ADMIN", "DA": "DOMAIN_ADMIN", "WO": "WORKSPACE_OWNER", "WM": "WORKSPACE_MEMBER", "USER": "USER"}

// roleTable reads docs/roles.md: operation path -> sorted role names, or
// ["public"] for an operation that needs no credentials.
func roleTable(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/roles.md")
	if err != nil {
		t.Fatal(err)
	}
	table := map[string][]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| `/") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("docs/roles.md: bad row %q", line)
		}
		path := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if _, dup := table[path]; dup {
			t.Errorf("docs/roles.md lists %s twice", path)
		}
		var roles []string
		for _, r := range strings.Split(cells[2], ",") {
			r = strings.TrimSpace(r)
			switch name, ok := roleNames[r]; {
			case r == "public":
				roles = append(roles, "public")
			case r == "service": // auth.Service: a SYSTEM token only, no role
				continue
			case ok:
				roles = append(roles, name)
			default:
				t.Errorf("docs/roles.md, %s: unknown role %q", path, r)
			}
		}
		slices.Sort(roles)
		table[path] = roles
	}
	return table
}

// TestRoleTable: every operation the devstack routes declares exactly
// the roles docs/roles.md gives it, and the table names no operation that
// is not routed, nor misses one of docs/spec/operations.tsv.
func TestRoleTable(t *testing.T) {
	table := roleTable(t)
	t.Parallel()
	base, _ := sharedStack(t)
	resp, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]struct {
			Post struct {
				Roles    []string `json:"x-roles"`
				Security []any    `json:"security"`
			} `json:"post"`
		} `json:"paths"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || len(doc.Paths) < 190 {
		t.Fatalf("openapi.json: %d paths, %v", len(doc.Paths), err)
	}
	for path, item := range doc.Paths {
		declared := slices.Clone(item.Post.Roles)
		if len(item.Post.Security) == 0 {
			declared = []string{"public"}
		}
		slices.Sort(declared)
		want, ok := table[path]
		switch {
		case !ok:
			t.Errorf("%s (roles %v) has no row in docs/roles.md", path, declared)
		case !slices.Equal(declared, want):
			t.Errorf("%s declares %v, docs/roles.md gives %v", path, declared, want)
		}
	}
	for path := range table {
		if _, ok := doc.Paths[path]; !ok {
			t.Errorf("docs/roles.md lists %s, which is not routed", path)
		}
	}
	for _, path := range listedOperations(t) {
		if _, ok := table[path]; !ok {
			t.Errorf("%s of docs/spec/operations.tsv has no row in docs/roles.md", path)
		}
	}
}
