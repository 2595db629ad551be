package api

import (
	"slices"
	"strings"
)

// ReflectionPath is where the upstream console reads, by GET and without a
// credential, the list of operations it may call (spec/clients.md section
// 1, step 2b). It binds each listed path as a POST handler.
const ReflectionPath = "/console-api/api/reflection"

// Reflected is one operation in the reflection list.
type Reflected struct {
	Name   string `json:"name"`   // dotted form of the path, e.g. identity.domain.get-auth-info
	Path   string `json:"path"`   // the unversioned path the console posts to
	Method string `json:"method"` // always POST
}

// Reflection is the body of GET ReflectionPath.
type Reflection struct {
	APIs []Reflected `json:"apis"`
}

// Reflect lists the operations of routes under the unversioned paths the
// console posts to (the alias of a versioned path, the path itself when it
// has none), one entry per path, sorted by path. The console would bind a
// versioned path under a name its code never calls, so none is listed.
func Reflect(routes []Route) Reflection {
	var out []Reflected
	for _, r := range routes {
		p := r.Meta().Path
		if a := Alias(p); a != "" {
			p = a
		}
		out = append(out, Reflected{Name: strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "."), Path: p, Method: "POST"})
	}
	return MergeReflections(Reflection{APIs: out})
}

// MergeReflections joins lists (each service's own, in a cluster) into one,
// one entry per path, sorted by path; the first list naming a path wins.
func MergeReflections(lists ...Reflection) Reflection {
	seen := map[string]bool{}
	out := []Reflected{}
	for _, l := range lists {
		for _, a := range l.APIs {
			if !seen[a.Path] {
				seen[a.Path] = true
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, func(a, b Reflected) int { return strings.Compare(a.Path, b.Path) })
	return Reflection{APIs: out}
}
