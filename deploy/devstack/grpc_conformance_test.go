package main

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nubes-io/nubes/pkg/testkit/cfctl"
)

// upstreamRow is one line of testdata/upstream-fields.tsv.
type upstreamRow struct{ path, service, method, request, field, kind string }

func readUpstream(t *testing.T) []upstreamRow {
	t.Helper()
	f, err := os.Open("testdata/upstream-fields.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []upstreamRow
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "path\t") {
			continue
		}
		c := strings.Split(line, "\t")
		if len(c) != 7 {
			t.Fatalf("upstream-fields.tsv: %q", line)
		}
		rows = append(rows, upstreamRow{c[0], c[1], c[2], c[3], c[4], c[5]})
	}
	return rows
}

// readDifferences reads testdata/upstream-differences.tsv: each line a
// group, a subject (an operation's path or a core message) and the
// difference, as conformance writes it.
func readDifferences(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("testdata/upstream-differences.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		group, diff, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("upstream-differences.tsv: %q", line)
		}
		out[diff] = group
	}
	return out
}

// jsonClass is what a kind means to a JSON client: an enum is sent as
// its name, every number as a number, a ListValue as a list of any
// values; a Struct (or map) is a free object, a message an object of its
// members only. The core query messages
// keep their full name: a query must be upstream's message itself.
func jsonClass(kind string) string {
	if rest, ok := strings.CutPrefix(kind, "repeated "); ok {
		return "list of " + jsonClass(rest)
	}
	switch {
	case kind == "string" || kind == "enum":
		return "string"
	case kind == "bool" || kind == "bytes":
		return kind
	case strings.Contains(kind, "int") || strings.Contains(kind, "fixed") || kind == "double" || kind == "float":
		return "number"
	case kind == "google.protobuf.Value":
		return "any"
	case kind == "google.protobuf.ListValue":
		return "list of any"
	case strings.HasPrefix(kind, "spaceone.api.core."):
		return kind
	case kind == "google.protobuf.Struct" || kind == "map":
		return "free object" // any member: a message would refuse unknown ones
	}
	return "object" // a message of the package
}

// protoKind is a field's kind as upstream-fields.tsv writes it.
func protoKind(fd protoreflect.FieldDescriptor) string {
	k := fd.Kind().String()
	switch fd.Kind() {
	case protoreflect.EnumKind:
		k = "enum"
	case protoreflect.MessageKind:
		k = "message"
		if n := string(fd.Message().FullName()); strings.HasPrefix(n, "google.protobuf.") || strings.HasPrefix(n, "spaceone.api.core.") {
			k = n
		}
		if fd.IsMap() {
			k = "map"
		}
	}
	if fd.IsList() {
		k = "repeated " + k
	}
	return k
}

// compareFields lists the differences between upstream's fields of a
// message and ours.
func compareFields(subject string, upstream map[string]string, ours protoreflect.MessageDescriptor) []string {
	var out []string
	for name, kind := range upstream {
		fd := ours.Fields().ByName(protoreflect.Name(name))
		switch {
		case fd == nil:
			out = append(out, subject+"\tno field "+name+" ("+kind+")")
		case jsonClass(protoKind(fd)) != jsonClass(kind):
			out = append(out, subject+"\tfield "+name+" is "+protoKind(fd)+", upstream's "+kind)
		}
	}
	for i := range ours.Fields().Len() {
		fd := ours.Fields().Get(i)
		if _, ok := upstream[string(fd.Name())]; !ok {
			out = append(out, subject+"\textra field "+string(fd.Name())+" ("+protoKind(fd)+")")
		}
	}
	return out
}

// checkUpstreamConformance compares the descriptors the server reflects
// with upstream's protos (testdata/upstream-fields.tsv) for every
// operation of the spec: the service's full name, the method, each field
// of the request and its JSON kind, and the core query messages field
// for field. Every difference must be listed in
// testdata/upstream-differences.tsv (docs/decisions.md, issue 39, says
// why), and every listed one must still be one.
func checkUpstreamConformance(t *testing.T, c *cfctl.Client, services []string) {
	rows := readUpstream(t)
	type op struct {
		service, method string
		fields          map[string]string
	}
	ops := map[string]*op{}
	var order []string
	core := map[string]map[string]string{}
	for _, r := range rows {
		if r.path == "core" {
			if core[r.request] == nil {
				core[r.request] = map[string]string{}
			}
			core[r.request][r.field] = r.kind
			continue
		}
		o := ops[r.path]
		if o == nil {
			o = &op{service: r.service, method: r.method, fields: map[string]string{}}
			ops[r.path] = o
			order = append(order, r.path)
		}
		if r.field != "-" {
			o.fields[r.field] = r.kind
		}
	}
	listed := listedOperations(t)
	responses := specResponses(t)
	for _, p := range listed {
		if ops[p] == nil {
			t.Errorf("upstream-fields.tsv has no row for %s of operations.tsv", p)
		}
	}
	var diffs []string
	queries := map[string]bool{}
	for _, path := range order {
		o := ops[path]
		if !slices.Contains(services, o.service) {
			diffs = append(diffs, path+"\tno service "+o.service)
			continue
		}
		md := c.Resolve(o.service).Methods().ByName(protoreflect.Name(o.method))
		if md == nil {
			diffs = append(diffs, path+"\tno method "+o.method)
			continue
		}
		// The spec's Empty and Struct answers are the well-known messages.
		if want := responses[path]; (want == "Empty" || want == "Struct") && md.Output().FullName() != protoreflect.FullName("google.protobuf."+want) {
			diffs = append(diffs, path+"	answers "+string(md.Output().FullName())+", not google.protobuf."+want)
		}
		in := md.Input()
		if in.FullName() == "google.protobuf.Empty" {
			for name, kind := range o.fields {
				diffs = append(diffs, path+"\tno field "+name+" ("+kind+")")
			}
			continue
		}
		diffs = append(diffs, compareFields(path, o.fields, in)...)
		for i := range in.Fields().Len() {
			if m := in.Fields().Get(i).Message(); m != nil && strings.HasPrefix(string(m.FullName()), "spaceone.api.core.") {
				queries[string(m.FullName())] = true
			}
		}
	}
	// The core messages the requests use, and those they hold.
	var walk func(name string)
	walk = func(name string) {
		md := c.Message(name)
		for i := range md.Fields().Len() {
			if m := md.Fields().Get(i).Message(); m != nil && strings.HasPrefix(string(m.FullName()), "spaceone.api.core.") && !queries[string(m.FullName())] {
				queries[string(m.FullName())] = true
				walk(string(m.FullName()))
			}
		}
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range queries {
			if !yield(n) {
				return
			}
		}
	}) {
		walk(name)
	}
	for name := range queries {
		if core[name] == nil {
			diffs = append(diffs, name+"\tnot in upstream's core")
			continue
		}
		diffs = append(diffs, compareFields(name, core[name], c.Message(name))...)
	}
	slices.Sort(diffs)
	known := readDifferences(t)
	for _, d := range diffs {
		if _, ok := known[d]; !ok {
			t.Errorf("a difference from upstream's protos not in testdata/upstream-differences.tsv:\n%s", d)
		}
	}
	for d := range known {
		if !slices.Contains(diffs, d) {
			t.Errorf("testdata/upstream-differences.tsv lists what is no longer a difference:\n%s", d)
		}
	}
	t.Logf("conformance: %d operations, %d core messages, %d differences listed", len(order), len(queries), len(diffs))
}

// specResponses reads the response column of docs/spec/operations.tsv.
func specResponses(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/spec/operations.tsv")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n")[1:] {
		if c := strings.Split(line, "\t"); len(c) == 3 {
			out[c[0]] = c[2]
		}
	}
	return out
}
