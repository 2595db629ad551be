package grpcapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Method is one operation as a gRPC method.
type Method struct {
	Service string // full service name: spaceone.api.identity.v2.User
	Name    string // upstream's verb: create, get_auth_info
	Route   api.Route
	In, Out protoreflect.MessageDescriptor
}

// FullMethod is the gRPC path of the method: /<service>/<verb>.
func (m Method) FullMethod() string { return "/" + m.Service + "/" + m.Name }

// Descriptors are the proto files built from routes, and their methods.
type Descriptors struct {
	Files   *protoregistry.Files // the generated files and their dependencies
	Methods []Method
	// Skipped are the paths not of the form /<service>/v<N>/<resource>/<verb>:
	// upstream has no gRPC name for them.
	Skipped []string
}

const (
	structName   = ".google.protobuf.Struct"
	valueName    = ".google.protobuf.Value"
	listName     = ".google.protobuf.ListValue"
	emptyName    = ".google.protobuf.Empty"
	structFile   = "google/protobuf/struct.proto"
	emptyFile    = "google/protobuf/empty.proto"
	upstreamRoot = "spaceone.api"
)

// Names returns the gRPC service and method of an operation's path, as
// upstream names them: /identity/v2/user-profile/get-workspaces is
// spaceone.api.identity.v2.UserProfile, get_workspaces. ok is false for a
// path of another shape.
func Names(path string) (pkg, service, method string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) != 4 || api.Version(path) == 0 {
		return "", "", "", false
	}
	for _, p := range parts {
		if p == "" {
			return "", "", "", false
		}
	}
	pkg = upstreamRoot + "." + snake(parts[0]) + "." + parts[1]
	return pkg, pkg + "." + pascal(parts[2]), snake(parts[3]), true
}

// names are an operation's gRPC package, service and method: those of
// its path (Names), the service as declared where upstream's package is
// another (api.Op.Service).
func names(m api.Meta) (pkg, service, method string, ok bool) {
	pkg, service, method, ok = Names(m.Path)
	if ok && m.Service != "" {
		service = m.Service
		pkg = service[:max(strings.LastIndexByte(service, '.'), 0)]
	}
	return pkg, service, method, ok
}

func snake(s string) string { return strings.ReplaceAll(s, "-", "_") }

// pascal turns api-key into APIKey and user-profile into UserProfile.
func pascal(s string) string {
	var b strings.Builder
	for w := range strings.SplitSeq(s, "-") {
		if w == "api" {
			b.WriteString("API")
			continue
		}
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// Describe builds one proto file per upstream package (service and
// version) from the routes' request and response types, the way
// encoding/json sees them: a struct is a message of its JSON members, a
// free map google.protobuf.Struct, a value of any JSON
// google.protobuf.Value, a request without members or api.Empty
// google.protobuf.Empty, times strings. A type with its own JSON decoding
// is described by the JSON it accepts (the list, statistics and analyze
// queries by upstream's core messages, others as Value or Struct).
func Describe(routes []api.Route) (*Descriptors, error) {
	d := &Descriptors{Files: new(protoregistry.Files)}
	for _, fd := range []protoreflect.FileDescriptor{structpb.File_google_protobuf_struct_proto, emptypb.File_google_protobuf_empty_proto} {
		if err := d.Files.RegisterFile(fd); err != nil {
			return nil, err
		}
	}
	for _, path := range []string{coreV1File, coreV2File} {
		core, err := coreFile(path, d.Files)
		if err != nil {
			return nil, err
		}
		if err := d.Files.RegisterFile(core); err != nil {
			return nil, err
		}
	}
	type pending struct {
		route           api.Route
		service, method string
		in, out         string
	}
	files := map[string]*builder{}
	var order []string
	var calls []pending
	for _, r := range routes {
		m := r.Meta()
		pkg, svc, _, ok := names(m)
		if !ok {
			d.Skipped = append(d.Skipped, m.Path)
			continue
		}
		b := files[pkg]
		if b == nil {
			b = newBuilder(pkg, snake(strings.Split(m.Path, "/")[1]))
			files[pkg] = b
			order = append(order, pkg)
		}
		b.service(svc)
	}
	// Messages second: a service's name is taken before any message's.
	for _, r := range routes {
		m := r.Meta()
		pkg, svc, verb, ok := names(m)
		if !ok {
			continue
		}
		b := files[pkg]
		b.core = coreVersion(svc)
		resource := strings.TrimPrefix(svc, pkg+".")
		in := b.request(m.Req, pascal(strings.Split(m.Path, "/")[4])+resource+"Request")
		out := b.response(m.Resp, resource)
		b.method(svc, verb, in, out)
		calls = append(calls, pending{r, svc, verb, in, out})
	}
	for _, pkg := range order {
		fdp := files[pkg].file
		fd, err := protodesc.NewFile(fdp, d.Files)
		if err != nil {
			return nil, fmt.Errorf("grpcapi: %s: %w", pkg, err)
		}
		if err := d.Files.RegisterFile(fd); err != nil {
			return nil, err
		}
	}
	for _, c := range calls {
		in, err := d.message(c.in)
		if err != nil {
			return nil, err
		}
		out, err := d.message(c.out)
		if err != nil {
			return nil, err
		}
		d.Methods = append(d.Methods, Method{Service: c.service, Name: c.method, Route: c.route, In: in, Out: out})
	}
	return d, nil
}

func (d *Descriptors) message(full string) (protoreflect.MessageDescriptor, error) {
	desc, err := d.Files.FindDescriptorByName(protoreflect.FullName(strings.TrimPrefix(full, ".")))
	if err != nil {
		return nil, err
	}
	md, ok := desc.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("grpcapi: %s is not a message", full)
	}
	return md, nil
}

// builder collects one package's file.
type builder struct {
	pkg      string
	file     *descriptorpb.FileDescriptorProto
	services map[string]*descriptorpb.ServiceDescriptorProto
	byType   map[typeKey]string // Go type -> full message name
	// core is the core query version of the service whose messages are
	// being built (coreVersion); a Go type reaching a query is described
	// once per version.
	core      int
	withQuery map[reflect.Type]bool
	taken     map[string]bool // message names used in the package
	isService map[string]bool
	deps      map[string]bool
}

// newBuilder starts the file of a package: spaceone/api/identity/v2/identity.proto.
func newBuilder(pkg, service string) *builder {
	path := strings.ReplaceAll(pkg, ".", "/") + "/" + service + ".proto"
	return &builder{
		pkg: pkg,
		file: &descriptorpb.FileDescriptorProto{
			Name: proto.String(path), Package: proto.String(pkg), Syntax: proto.String("proto3"),
		},
		services:  map[string]*descriptorpb.ServiceDescriptorProto{},
		byType:    map[typeKey]string{},
		withQuery: map[reflect.Type]bool{},
		taken:     map[string]bool{},
		isService: map[string]bool{},
		deps:      map[string]bool{},
	}
}

func (b *builder) dep(file string) {
	if !b.deps[file] {
		b.deps[file] = true
		b.file.Dependency = append(b.file.Dependency, file)
	}
}

func (b *builder) service(full string) {
	if b.services[full] != nil {
		return
	}
	name := strings.TrimPrefix(full, b.pkg+".")
	b.taken[name], b.isService[name] = true, true
	s := &descriptorpb.ServiceDescriptorProto{Name: proto.String(name)}
	b.services[full] = s
	b.file.Service = append(b.file.Service, s)
}

func (b *builder) method(svc, verb, in, out string) {
	s := b.services[svc]
	s.Method = append(s.Method, &descriptorpb.MethodDescriptorProto{Name: proto.String(verb), InputType: proto.String(in), OutputType: proto.String(out)})
}

// typeKey is a Go type and the core version its message was built for
// (0 for a type that reaches no query).
type typeKey struct {
	t    reflect.Type
	core int
}

func (b *builder) key(t reflect.Type) typeKey {
	if b.reachesQuery(t, map[reflect.Type]bool{}) {
		return typeKey{t, b.core}
	}
	return typeKey{t, 0}
}

// reachesQuery reports a type whose message holds a core query message.
func (b *builder) reachesQuery(t reflect.Type, seen map[reflect.Type]bool) bool {
	t = deref(t)
	if v, ok := b.withQuery[t]; ok {
		return v
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	found := coreMessages[t] != ""
	switch t.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		found = found || b.reachesQuery(t.Elem(), seen)
	case reflect.Struct:
		if !found && !custom(t) {
			for _, f := range jsonFields(t) {
				if (f.name == "query" && isQuerySubset(deref(f.typ))) || b.reachesQuery(f.typ, seen) {
					found = true
					break
				}
			}
		}
	}
	b.withQuery[t] = found
	return found
}

// isQuerySubset reports a struct whose JSON members are all members of
// the list query's.
func isQuerySubset(t reflect.Type) bool {
	t = deref(t)
	if t.Kind() != reflect.Struct || custom(t) || coreMessages[t] != "" {
		return false
	}
	fs := jsonFields(t)
	if len(fs) == 0 {
		return false
	}
	names := map[string]bool{}
	for _, f := range jsonFields(reflect.TypeFor[query.Query]()) {
		names[f.name] = true
	}
	for _, f := range fs {
		if !names[f.name] {
			return false
		}
	}
	return true
}

// coreRef names a core query message of the builder's version and
// records its file.
func (b *builder) coreRef(name string) string {
	full, file := coreMessage(name, b.core)
	b.dep(file)
	return full
}

// wellKnown names a well-known message and records its file.
func (b *builder) wellKnown(name string) string {
	if name == emptyName {
		b.dep(emptyFile)
	} else {
		b.dep(structFile)
	}
	return name
}

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	timeTypes       = []reflect.Type{reflect.TypeFor[time.Time](), reflect.TypeFor[wire.Time]()}
)

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// request is the input message of an operation.
func (b *builder) request(t reflect.Type, name string) string {
	t = deref(t)
	if name, ok := coreMessages[t]; ok {
		return b.coreRef(name)
	}
	if ownDecoding(t) || t.Kind() != reflect.Struct {
		return b.wellKnown(structName)
	}
	if len(jsonFields(t)) == 0 {
		return b.wellKnown(emptyName)
	}
	return b.messageOf(t, name)
}

// response is the output message of an operation.
func (b *builder) response(t reflect.Type, resource string) string {
	t = deref(t)
	if t == reflect.TypeFor[api.Empty]() {
		return b.wellKnown(emptyName)
	}
	if elem, ok := listElem(t); ok {
		return b.listOf(t, elem)
	}
	if t.Kind() != reflect.Struct || (ownDecoding(t) && !reflect.PointerTo(t).Implements(jsonMarshaler) && !t.Implements(jsonMarshaler)) {
		return b.wellKnown(structName)
	}
	if t.Kind() == reflect.Struct && t.Implements(jsonMarshaler) && len(jsonFields(t)) == 0 {
		return b.wellKnown(structName)
	}
	return b.messageOf(t, resource+"Info")
}

// ownDecoding reports a type that decodes JSON its own way.
func ownDecoding(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(jsonUnmarshaler) || t.Implements(jsonUnmarshaler)
}

// listElem reports api.List[T] and its T.
func listElem(t reflect.Type) (reflect.Type, bool) {
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[api.Empty]().PkgPath() || !strings.HasPrefix(t.Name(), "List[") {
		return nil, false
	}
	f, ok := t.FieldByName("Results")
	if !ok || f.Type.Kind() != reflect.Slice {
		return nil, false
	}
	return f.Type.Elem(), true
}

// listOf is {results: repeated T, total_count: int32}, upstream's
// <Resource>sInfo.
func (b *builder) listOf(t, elem reflect.Type) string {
	key := b.key(t)
	if full, ok := b.byType[key]; ok {
		return full
	}
	name := typeName(deref(elem)) + "s"
	if b.isService[typeName(deref(elem))] {
		name += "Info" // upstream's UsersInfo
	}
	name = b.reserve(name)
	full := "." + b.pkg + "." + name
	b.byType[key] = full
	msg := &descriptorpb.DescriptorProto{Name: proto.String(name)}
	b.file.MessageType = append(b.file.MessageType, msg)
	results := b.field("results", 1, reflect.SliceOf(elem), name)
	total := &descriptorpb.FieldDescriptorProto{Name: proto.String("total_count"), Number: proto.Int32(2),
		Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum()}
	msg.Field = []*descriptorpb.FieldDescriptorProto{results, total}
	return full
}

// reserve returns a message name not yet used in the package.
func (b *builder) reserve(name string) string {
	base := name
	for i := 2; b.taken[name]; i++ {
		name = fmt.Sprintf("%s%d", base, i)
	}
	b.taken[name] = true
	return name
}

// typeName is a Go type's name as a message name: exported, generic
// arguments folded in (Page[pkg.Item] -> PageItem).
func typeName(t reflect.Type) string {
	n := t.Name()
	if i := strings.IndexByte(n, '['); i >= 0 {
		args := n[i+1 : len(n)-1]
		n = n[:i]
		for a := range strings.SplitSeq(args, ",") {
			a = a[strings.LastIndexAny(a, "./*")+1:]
			n += a
		}
	}
	var out []rune
	for _, r := range n {
		if r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return "Message"
	}
	out[0] = unicode.ToUpper(out[0])
	return string(out)
}

// messageOf describes a struct as a message, once per Go type; name is the
// name to use when the type itself has none worth keeping (an anonymous
// struct, a top-level request).
func (b *builder) messageOf(t reflect.Type, name string) string {
	key := b.key(t)
	if full, ok := b.byType[key]; ok {
		return full
	}
	if t.Name() != "" && !strings.HasSuffix(name, "Request") {
		name = typeName(t)
		if b.isService[name] {
			// The resource's own record, as upstream names it: UserInfo.
			name += "Info"
		}
	}
	name = b.reserve(name)
	full := "." + b.pkg + "." + name
	b.byType[key] = full
	msg := &descriptorpb.DescriptorProto{Name: proto.String(name)}
	b.file.MessageType = append(b.file.MessageType, msg)
	for i, f := range jsonFields(t) {
		fd := b.field(f.name, int32(i+1), f.typ, name+pascalField(f.name))
		if f.typ.Kind() == reflect.Pointer && fd.GetLabel() != descriptorpb.FieldDescriptorProto_LABEL_REPEATED && fd.TypeName == nil {
			// A pointer to a scalar tells "not sent" from its zero value:
			// proto3 optional keeps the difference on the wire.
			fd.Proto3Optional = proto.Bool(true)
			fd.OneofIndex = proto.Int32(int32(len(msg.OneofDecl)))
			msg.OneofDecl = append(msg.OneofDecl, &descriptorpb.OneofDescriptorProto{Name: proto.String("_" + f.name)})
		}
		msg.Field = append(msg.Field, fd)
	}
	// Synthetic oneofs must follow the real ones (there are none) and be
	// in field order, which they are.
	return full
}

func pascalField(s string) string {
	var b strings.Builder
	for w := range strings.SplitSeq(s, "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// field describes one member of JSON type t.
func (b *builder) field(name string, number int32, t reflect.Type, anon string) *descriptorpb.FieldDescriptorProto {
	fd := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(number),
		Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(lowerCamel(name))}
	et := deref(t)
	if (et.Kind() == reflect.Slice || et.Kind() == reflect.Array) && et.Elem().Kind() != reflect.Uint8 && !custom(et) {
		fd.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
		elem := deref(et.Elem())
		if (elem.Kind() == reflect.Slice || elem.Kind() == reflect.Array) && !custom(elem) {
			// No repeated of repeated in proto: a list of lists.
			b.setMessage(fd, b.wellKnown(listName))
			return fd
		}
		b.setKind(fd, elem, anon)
		if fd.GetTypeName() == valueName {
			// A list of any values is a ListValue: protojson reads a null
			// repeated Value as an error, a null ListValue as unset.
			fd.Label = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
			fd.TypeName = proto.String(b.wellKnown(listName))
		}
		return fd
	}
	b.setKind(fd, et, anon)
	return fd
}

// custom reports a type whose JSON is its own (not its Go shape).
func custom(t reflect.Type) bool {
	return slices.Contains(timeTypes, t) || ownDecoding(t) || t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler)
}

func (b *builder) setMessage(fd *descriptorpb.FieldDescriptorProto, name string) {
	fd.Type = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	fd.TypeName = proto.String(name)
}

func (b *builder) setScalar(fd *descriptorpb.FieldDescriptorProto, k descriptorpb.FieldDescriptorProto_Type) {
	fd.Type = k.Enum()
}

// setKind gives fd the type of a single value of Go type t.
func (b *builder) setKind(fd *descriptorpb.FieldDescriptorProto, t reflect.Type, anon string) {
	t = deref(t)
	switch {
	case slices.Contains(timeTypes, t):
		b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_STRING)
		return
	case coreMessages[t] != "":
		b.setMessage(fd, b.coreRef(coreMessages[t]))
		return
	case fd.GetName() == "query" && isQuerySubset(t):
		// A narrower list query is still upstream's Query on the wire: its
		// decoding refuses what it does not take, as over HTTP.
		b.setMessage(fd, b.coreRef("Query"))
		return
	case ownDecoding(t):
		// Its own JSON: any value.
		b.setMessage(fd, b.wellKnown(valueName))
		return
	case t.Kind() == reflect.Struct && (t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler)) && len(jsonFields(t)) == 0:
		b.setMessage(fd, b.wellKnown(valueName))
		return
	case t.Kind() != reflect.Struct && t.Kind() != reflect.Map && (t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler)):
		b.setMessage(fd, b.wellKnown(valueName))
		return
	}
	switch t.Kind() {
	case reflect.Bool:
		b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_BOOL)
	case reflect.String:
		b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_STRING)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32:
		b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_INT32)
	case reflect.Int64:
		b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_INT64)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_UINT32)
	case reflect.Uint64:
		b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_UINT64)
	case reflect.Float32:
		b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_FLOAT)
	case reflect.Float64:
		b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE)
	case reflect.Map:
		b.setMessage(fd, b.wellKnown(structName))
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			b.setScalar(fd, descriptorpb.FieldDescriptorProto_TYPE_BYTES)
		} else {
			b.setMessage(fd, b.wellKnown(listName))
		}
	case reflect.Struct:
		if elem, ok := listElem(t); ok {
			b.setMessage(fd, b.listOf(t, elem))
			return
		}
		b.setMessage(fd, b.messageOf(t, anon))
	default: // interface and anything else: any JSON value
		b.setMessage(fd, b.wellKnown(valueName))
	}
}

// jsonField is one member of a struct as encoding/json writes it.
type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields lists a struct's JSON members in order, embedded structs'
// promoted, a shallower member hiding a deeper one of the same name.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	seen := map[string]bool{}
	// Outer members first, then each embedded struct's: a name taken
	// stays with the shallower member, as encoding/json keeps it.
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		var embedded []reflect.Type
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				ft := deref(f.Type)
				if ft.Kind() == reflect.Struct {
					embedded = append(embedded, ft)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if !seen[name] {
				seen[name] = true
				out = append(out, jsonField{name, f.Type})
			}
		}
		for _, e := range embedded {
			walk(e)
		}
	}
	walk(t)
	return out
}

func lowerCamel(s string) string {
	var b strings.Builder
	up := false
	for i, r := range s {
		switch {
		case r == '_' && i > 0:
			up = true
		case up:
			b.WriteRune(unicode.ToUpper(r))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
