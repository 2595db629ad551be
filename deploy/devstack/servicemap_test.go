package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/app"
)

var updateServiceMap = flag.Bool("update-service-map", false, "rewrite docs/service-map.md from the code")

const (
	module       = "github.com/nubes-io/nubes/"
	serviceMapMD = "../../docs/service-map.md"
)

// TestServiceMap rebuilds docs/service-map.md from the code and fails when
// the file differs, so the map cannot drift: the operations each service's
// constructor routes (grouped by resource, each under the package of its
// handler), and the collections and events each package of the service
// names (its *Collection constants, and pkg/events' subjects and the
// subjects of the payload types it uses). `go test ./deploy/devstack -run
// '^TestServiceMap$' -update-service-map` rewrites the file.
func TestServiceMap(t *testing.T) {
	t.Parallel()
	sharedStack(t)
	built := shared.built
	if len(built) != len(serviceNames) {
		t.Fatalf("built %d services, want %d", len(built), len(serviceNames))
	}
	got := serviceMap(t, built)
	if *updateServiceMap {
		if err := os.WriteFile(serviceMapMD, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(serviceMapMD)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("docs/service-map.md is not the map of the code; rewrite it with\n"+
			"  go test ./deploy/devstack -run '^TestServiceMap$' -update-service-map\n%s", firstDiff(string(want), got))
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n file: %s\n code: %s", i+1, x, y)
		}
	}
	return ""
}

// funcPackage is the import path of the package that declares fn.
func funcPackage(fn any) string {
	v := reflect.ValueOf(fn)
	if !v.IsValid() || v.Kind() != reflect.Func || v.IsNil() {
		return ""
	}
	f := runtime.FuncForPC(v.Pointer())
	if f == nil {
		return ""
	}
	name := f.Name() // path/to/pkg.Type.method-fm, path/to/pkg.Func.func1
	slash := strings.LastIndexByte(name, '/')
	dot := strings.IndexByte(name[slash+1:], '.')
	if dot < 0 {
		return name
	}
	return name[:slash+1+dot]
}

// routePackage is the package of a route's handler; a handler the kit
// wraps falls back to the package of the request, then of the response.
func routePackage(r api.Route, svcDir string) string {
	prefix := module + svcDir
	var candidates []string
	if h := reflect.ValueOf(r).FieldByName("Handle"); h.IsValid() {
		candidates = append(candidates, funcPackage(h.Interface()))
	}
	m := r.Meta()
	for _, typ := range []reflect.Type{m.Req, m.Resp} {
		for typ != nil && (typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice) {
			typ = typ.Elem()
		}
		if typ != nil {
			candidates = append(candidates, typ.PkgPath())
		}
	}
	for _, c := range candidates {
		if c == prefix || strings.HasPrefix(c, prefix+"/") {
			return c
		}
	}
	return "?"
}

// rel is a package's directory relative to its service, "." for the root.
func rel(pkgPath, svcDir string) string {
	r := strings.TrimPrefix(strings.TrimPrefix(pkgPath, module+svcDir), "/")
	if r == "" {
		return "."
	}
	return r
}

type pkgFacts struct {
	collections map[string]bool
	events      map[string]bool
}

func serviceMap(t *testing.T, built []*app.Service) string {
	subjects, payloads := eventNames(t)
	var b strings.Builder
	b.WriteString("# Service map\n\n" +
		"Generated from the code by `TestServiceMap` (deploy/devstack), which fails\n" +
		"when this file differs; rewrite it with\n" +
		"`go test ./deploy/devstack -run '^TestServiceMap$' -update-service-map`.\n\n" +
		"For each service: each resource (its operations' path) with its operations and\n" +
		"the package whose handlers serve them; then each package with the collections\n" +
		"(`*Collection` constants) and the JetStream subjects (pkg/events' subjects and\n" +
		"payload types) it names. A package of the service that is not listed names none.\n" +
		"Naming: docs/writing-a-service.md \"Naming the rooms\".\n")
	byName := map[string]*app.Service{}
	for _, s := range built {
		byName[s.Name] = s
	}
	names := slices.Clone(serviceNames)
	slices.Sort(names)
	for _, name := range names {
		svc := byName[name]
		if svc == nil {
			t.Fatalf("service %s not built", name)
		}
		svcDir := "services/" + name
		fmt.Fprintf(&b, "\n## %s\n\n", name)
		type resource struct {
			verbs    []string
			packages map[string]bool
		}
		resources := map[string]*resource{}
		for _, r := range svc.Routes {
			p := r.Meta().Path
			i := strings.LastIndexByte(p, '/')
			res := resources[p[:i]]
			if res == nil {
				res = &resource{packages: map[string]bool{}}
				resources[p[:i]] = res
			}
			res.verbs = append(res.verbs, p[i+1:])
			res.packages["`"+rel(routePackage(r, svcDir), svcDir)+"`"] = true
		}
		for _, r := range svc.Raw {
			key := r.Method + " " + r.Path
			resources[key] = &resource{packages: map[string]bool{"`" + rel(funcPackage(r.Handle), svcDir) + "`": true}}
		}
		if len(resources) > 0 {
			b.WriteString("| resource | operations | package |\n|---|---|---|\n")
			for _, key := range sortedKeys(resources) {
				res := resources[key]
				slices.Sort(res.verbs)
				ops := strings.Join(res.verbs, ", ")
				if ops == "" {
					ops = "(raw HTTP)"
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s |\n", key, ops, strings.Join(sortedKeys(res.packages), ", "))
			}
			b.WriteString("\n")
		}
		facts := scanService(t, filepath.Join("../..", svcDir), module+svcDir, subjects, payloads)
		b.WriteString("| package | collections | events |\n|---|---|---|\n")
		for _, dir := range sortedKeys(facts) {
			f := facts[dir]
			if len(f.collections) == 0 && len(f.events) == 0 {
				continue
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", dir, codeList(f.collections), codeList(f.events))
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func codeList(set map[string]bool) string {
	var out []string
	for _, k := range sortedKeys(set) {
		out = append(out, "`"+k+"`")
	}
	return strings.Join(out, ", ")
}

var payloadRE = regexp.MustCompile(`payload:? (?:events\.)?([A-Z][A-Za-z]+)`)

// eventNames reads pkg/events: its subject constants (name -> subject)
// and the payload types their comments name (type -> subject).
func eventNames(t *testing.T) (subjects, payloads map[string]string) {
	subjects, payloads = map[string]string{}, map[string]string{}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../pkg/events/events.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasSuffix(n.Name, "Subject") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				subjects[n.Name] = v
				var text string
				if vs.Doc != nil {
					text += vs.Doc.Text()
				}
				if vs.Comment != nil {
					text += vs.Comment.Text()
				}
				for _, m := range payloadRE.FindAllStringSubmatch(text, -1) {
					payloads[m[1]] = v
				}
			}
		}
	}
	return subjects, payloads
}

// scanService reads every package of a service (test files aside): the
// *Collection string constants declared, then what each package names.
func scanService(t *testing.T, root, rootPath string, subjects, payloads map[string]string) map[string]*pkgFacts {
	type file struct {
		dir string
		f   *ast.File
	}
	var files []file
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || (path != root && d.Name() == "cmd")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		files = append(files, file{filepath.ToSlash(dir), f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]map[string]string{} // package dir -> constant -> collection
	for _, fl := range files {
		for _, d := range fl.f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasSuffix(n.Name, "Collection") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						if declared[fl.dir] == nil {
							declared[fl.dir] = map[string]string{}
						}
						declared[fl.dir][n.Name] = v
					}
				}
			}
		}
	}
	facts := map[string]*pkgFacts{}
	for _, fl := range files {
		pf := facts[fl.dir]
		if pf == nil {
			pf = &pkgFacts{collections: map[string]bool{}, events: map[string]bool{}}
			facts[fl.dir] = pf
		}
		imports := map[string]string{} // name in the file -> service package dir, or "events"
		for _, im := range fl.f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			name := p[strings.LastIndexByte(p, '/')+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			switch {
			case p == module+"pkg/events":
				imports[name] = "events"
			case p == rootPath:
				imports[name] = "."
			case strings.HasPrefix(p, rootPath+"/"):
				imports[name] = strings.TrimPrefix(p, rootPath+"/")
			}
		}
		ast.Inspect(fl.f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				// A declaration names no collection; its values may.
				for _, v := range n.Values {
					ast.Inspect(v, func(m ast.Node) bool {
						if id, ok := m.(*ast.Ident); ok {
							if c, ok := declared[fl.dir][id.Name]; ok {
								pf.collections[c] = true
							}
						}
						return true
					})
				}
				return false
			case *ast.SelectorExpr:
				x, ok := n.X.(*ast.Ident)
				if !ok {
					return true
				}
				switch dir := imports[x.Name]; dir {
				case "":
				case "events":
					if s, ok := subjects[n.Sel.Name]; ok {
						pf.events[s] = true
					} else if s, ok := payloads[n.Sel.Name]; ok {
						pf.events[s] = true
					}
				default:
					if c, ok := declared[dir][n.Sel.Name]; ok {
						pf.collections[c] = true
					}
				}
				return false
			case *ast.Ident:
				if c, ok := declared[fl.dir][n.Name]; ok {
					pf.collections[c] = true
				}
			}
			return true
		})
	}
	return facts
}
