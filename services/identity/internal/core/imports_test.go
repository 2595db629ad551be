package core

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// importOrder is doc.go's order of identity's internal packages: each
// imports only packages of earlier levels.
var importOrder = [][]string{
	{"password"},
	{"core"},
	{"session"},
	{"login"},
	{"verification"},
	{"credential"},
	{"takeover"},
	{"domainadmin"},
	{"managed"},
	{"projectgroup"},
	{"domain", "workspace", "project", "role", "rolebinding", "token", "apikey", "trustedserviceaccount", "endpoint", "userprofile",
		"provider", "schema", "workspaceuser"},
	{"user", "serviceaccount"},
	{"trustedaccount"},
	{"job"},
	{"bootstrap"},
	{"identitytest"},
}

// TestImportOrder: no package of identity imports one of its own level
// or above, every package has a level, and doc.go names each.
func TestImportOrder(t *testing.T) {
	const prefix = "github.com/nubes-io/nubes/services/identity/internal/"
	level := map[string]int{}
	for i, names := range importOrder {
		for _, n := range names {
			level[n] = i
		}
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		pkg := d.Name()
		l, ok := level[pkg]
		if !ok {
			t.Errorf("internal/%s has no level in importOrder (and doc.go)", pkg)
			continue
		}
		if !strings.Contains(string(doc), pkg) {
			t.Errorf("doc.go does not name %s in the import order", pkg)
		}
		files, _ := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				dep, ok := strings.CutPrefix(path, prefix)
				if !ok {
					continue
				}
				if dl, known := level[dep]; !known || dl >= l {
					t.Errorf("%s imports %s, which is not of an earlier level", f, dep)
				}
			}
		}
	}
}
