// Package strictjson decodes JSON the way every Nubes request is decoded,
// as upstream's protobuf JSON mapping does: each struct member answers to
// its json name (snake_case) and to that name's lowerCamelCase form
// (workspace_id, workspaceId), a null member means "not set", the same
// member under both names is refused, and so is any other unknown member.
// Every failure is an *errs.Error (400) that names the member at fault in
// wire terms, never in Go terms.
//
// Only the members of structs are renamed; the keys of maps (free-form
// tags, options, data) are kept verbatim, and a type with its own
// UnmarshalJSON decodes its members itself. It must not validate values:
// that is the api package's job.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Decode reads exactly one JSON value from b into v. at is the member path
// of b inside the request ("" for the body, "query" for a query).
func Decode(b []byte, v any, at string) error {
	d := json.NewDecoder(bytes.NewReader(b))
	var raw json.RawMessage
	if err := d.Decode(&raw); err != nil {
		return Error(err, at)
	}
	if d.More() {
		return errs.New(errs.JSONFormat, "JSON parsing error. (reason = more than one value)")
	}
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return fmt.Errorf("strictjson: Decode needs a pointer, got %T", v)
	}
	canon, err := canonical(raw, t.Elem(), at)
	if err != nil {
		return err
	}
	d = json.NewDecoder(bytes.NewReader(canon))
	// A backstop: canonical already refused every unknown member.
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			typ.Field = wirePath(t.Elem(), typ.Field)
		}
		return Error(err, at)
	}
	return nil
}

// wirePath is encoding/json's path of a member with a wrong type, as the
// wire names it: encoding/json (Go 1.24 on) names the embedded structs on
// the way (plugin_info.Request.options), which are no members on the wire.
func wirePath(t reflect.Type, path string) string {
	if path == "" {
		return path
	}
	var out []string
	for _, el := range strings.Split(path, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			t = t.Elem()
		}
		switch {
		case t == nil:
		case t.Kind() == reflect.Map:
			t = t.Elem() // el is a key
		case t.Kind() == reflect.Struct:
			if sf, ok := t.FieldByName(el); ok && sf.Anonymous && len(sf.Index) == 1 && sf.Tag.Get("json") == "" {
				t = sf.Type
				continue
			}
			if f := fieldsOf(t).byName[el]; f != nil {
				t = f.typ
			} else {
				t = nil
			}
		default:
			t = nil
		}
		out = append(out, el)
	}
	return strings.Join(out, ".")
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// custom reports whether t decodes itself (its members are its business).
func custom(t reflect.Type) bool {
	return t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)
}

var walkCache sync.Map // reflect.Type -> bool

// walks reports whether a value of type t may hold struct members that
// canonical must rename (a struct, or a container of one).
func walks(t reflect.Type) bool {
	if w, ok := walkCache.Load(t); ok {
		return w.(bool)
	}
	w := false
	switch {
	case custom(t):
	case t.Kind() == reflect.Struct:
		w = true // and the recursion ends here
	case t.Kind() == reflect.Pointer, t.Kind() == reflect.Slice, t.Kind() == reflect.Array:
		w = walks(t.Elem())
	case t.Kind() == reflect.Map:
		w = t.Key().Kind() == reflect.String && walks(t.Elem())
	}
	walkCache.Store(t, w)
	return w
}

// canonical rewrites raw (one valid JSON value) for type t: struct members
// under their json names, null members dropped, unknown and repeated
// members refused.
func canonical(raw json.RawMessage, t reflect.Type, at string) (json.RawMessage, error) {
	for t.Kind() == reflect.Pointer && !custom(t) {
		t = t.Elem()
	}
	if !walks(t) {
		return raw, nil
	}
	first := firstByte(raw)
	switch t.Kind() {
	case reflect.Struct:
		if first != '{' {
			return raw, nil // encoding/json reports the wrong type
		}
		return canonicalStruct(raw, fieldsOf(t), at)
	case reflect.Slice, reflect.Array:
		if first != '[' {
			return raw, nil
		}
		var b bytes.Buffer
		b.WriteByte('[')
		for i, it := range elements(raw) {
			c, err := canonical(it, t.Elem(), at)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(c)
		}
		b.WriteByte(']')
		return b.Bytes(), nil
	case reflect.Map:
		if first != '{' {
			return raw, nil
		}
		ms, err := members(raw)
		if err != nil {
			return nil, Error(err, at)
		}
		for i := range ms {
			if ms[i].val, err = canonical(ms[i].val, t.Elem(), join(at, ms[i].key)); err != nil {
				return nil, err
			}
		}
		return writeObject(ms), nil
	}
	return raw, nil
}

func canonicalStruct(raw json.RawMessage, fs *fields, at string) (json.RawMessage, error) {
	ms, err := members(raw)
	if err != nil {
		return nil, Error(err, at)
	}
	seen := make(map[string]string, len(ms)) // json name -> name as sent
	out := ms[:0]
	for _, m := range ms {
		f, ok := fs.byName[m.key]
		if !ok {
			return nil, errs.Invalid(join(at, m.key), "unknown field")
		}
		if prev, dup := seen[f.name]; dup {
			if prev == m.key {
				return nil, errs.Invalid(join(at, f.name), "given twice")
			}
			return nil, errs.Invalid(join(at, f.name), "given as both "+prev+" and "+m.key)
		}
		seen[f.name] = m.key
		if isNull(m.val) {
			continue // null: not set, as protobuf's JSON mapping reads it
		}
		v, err := canonical(m.val, f.typ, join(at, f.name))
		if err != nil {
			return nil, err
		}
		out = append(out, member{key: f.name, val: v})
	}
	return writeObject(out), nil
}

type member struct {
	key string
	val json.RawMessage
}

// members splits a JSON object into its members, in order. raw is one
// valid JSON object (Decode checked it), so a plain scan finds the bounds.
func members(raw json.RawMessage) ([]member, error) {
	var ms []member
	i := skipSpace(raw, 0) + 1 // past {
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == '}' {
			return ms, nil
		}
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		end := scanValue(raw, i)
		key, err := unquote(raw[i:end])
		if err != nil {
			return nil, err
		}
		i = skipSpace(raw, end) + 1 // past :
		i = skipSpace(raw, i)
		end = scanValue(raw, i)
		ms = append(ms, member{key: key, val: raw[i:end]})
		i = end
	}
}

// elements splits a valid JSON array into its elements.
func elements(raw json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	i := skipSpace(raw, 0) + 1 // past [
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == ']' {
			return out
		}
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		end := scanValue(raw, i)
		out = append(out, raw[i:end])
		i = end
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanValue returns the end of the valid JSON value starting at b[i].
func scanValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a number, true, false or null
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		default:
			if depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
				return i // the end of a number, true, false or null
			}
		}
	}
	return i
}

// unquote decodes a JSON string, quickly when it has no escapes.
func unquote(q []byte) (string, error) {
	if bytes.IndexByte(q, '\\') < 0 && len(q) >= 2 {
		return string(q[1 : len(q)-1]), nil
	}
	var s string
	err := json.Unmarshal(q, &s)
	return s, err
}

func writeObject(ms []member) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key) // json names need no escaping, map keys may
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func firstByte(raw []byte) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }

// field is one member of a struct as the wire names it.
type field struct {
	name string // json name
	typ  reflect.Type
}

type fields struct {
	byName map[string]*field // json names and their lowerCamelCase forms
}

var fieldsCache sync.Map // reflect.Type -> *fields

// fieldsOf lists the members of struct type t as encoding/json sees them
// (embedded structs without a json name promote their members; an outer
// member wins over a promoted one), each under its json name and its
// lowerCamelCase form.
func fieldsOf(t reflect.Type) *fields {
	if fs, ok := fieldsCache.Load(t); ok {
		return fs.(*fields)
	}
	var list []*field
	taken := map[string]bool{}
	var collect func(t reflect.Type, depth int)
	collect = func(t reflect.Type, depth int) {
		var embedded []reflect.Type
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if sf.Anonymous && name == "" {
				et := sf.Type
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					embedded = append(embedded, et)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if !taken[name] {
				taken[name] = true
				list = append(list, &field{name: name, typ: sf.Type})
			}
		}
		if depth < 8 {
			for _, et := range embedded {
				collect(et, depth+1)
			}
		}
	}
	collect(t, 0)
	fs := &fields{byName: make(map[string]*field, 2*len(list))}
	for _, f := range list {
		fs.byName[f.name] = f
	}
	for _, f := range list {
		if c := LowerCamel(f.name); !taken[c] {
			fs.byName[c] = f
		}
	}
	fieldsCache.Store(t, fs)
	return fs
}

// LowerCamel is protobuf's json_name of a field name: each underscore
// dropped and the letter after it upper-cased (workspace_id ->
// workspaceId).
func LowerCamel(name string) string {
	if !strings.Contains(name, "_") {
		return name
	}
	var b strings.Builder
	up := false
	for _, r := range name {
		switch {
		case r == '_':
			up = true
		case up && 'a' <= r && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			up = false
		default:
			b.WriteRune(r)
			up = false
		}
	}
	return b.String()
}

// Error maps an encoding/json error onto the errs codes; an *errs.Error
// from a nested UnmarshalJSON is kept as it is.
func Error(err error, at string) error {
	if e, ok := errs.As(err); ok {
		return e
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errs.New(errs.JSONFormat, "JSON parsing error. (reason = %s)", err.Error())
	case errors.As(err, &typ):
		return errs.InvalidType(join(at, typ.Field), Kind(typ.Type))
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return errs.Invalid(join(at, strings.Trim(f, `"`)), "unknown field")
	}
	return errs.New(errs.JSONFormat, "JSON parsing error. (reason = %s)", err.Error())
}

func join(at, field string) string {
	switch {
	case at == "":
		return field
	case field == "":
		return at
	}
	return at + "." + field
}

// Kind names a Go type as its JSON kind.
func Kind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "list"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Pointer:
		return Kind(t.Elem())
	}
	return "JSON value"
}
