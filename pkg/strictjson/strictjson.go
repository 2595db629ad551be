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
	raw := bytes.TrimSpace(b)
	if !json.Valid(raw) {
		// The decoder says what is wrong, as it always has; what it reads
		// (one value, the rest ignored unless More sees another) stays.
		d := json.NewDecoder(bytes.NewReader(b))
		var first json.RawMessage
		if err := d.Decode(&first); err != nil {
			return Error(err, at)
		}
		if d.More() {
			return errs.New(errs.JSONFormat, "JSON parsing error. (reason = more than one value)")
		}
		raw = first
	}
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return fmt.Errorf("strictjson: Decode needs a pointer, got %T", v)
	}
	canon := raw
	if walks(bareType(t.Elem())) {
		var err error
		if canon, err = appendCanonical(make([]byte, 0, len(raw)+64), raw, t.Elem(), at); err != nil {
			return err
		}
	}
	d := json.NewDecoder(bytes.NewReader(canon))
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

// bareType is t without the pointers canonical looks through.
func bareType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer && !custom(t) {
		t = t.Elem()
	}
	return t
}

// canonical rewrites raw (one valid JSON value) for type t: struct members
// under their json names, null members dropped, unknown and repeated
// members refused.
func canonical(raw json.RawMessage, t reflect.Type, at string) (json.RawMessage, error) {
	if !walks(bareType(t)) {
		return raw, nil
	}
	return appendCanonical(make([]byte, 0, len(raw)+64), raw, t, at)
}

// appendCanonical appends canonical(raw, t, at) to dst, so a body is
// rewritten into one buffer whatever its depth.
func appendCanonical(dst []byte, raw []byte, t reflect.Type, at string) ([]byte, error) {
	t = bareType(t)
	if !walks(t) {
		return append(dst, raw...), nil
	}
	switch first := firstByte(raw); t.Kind() {
	case reflect.Struct:
		if first != '{' {
			return append(dst, raw...), nil // encoding/json reports the wrong type
		}
		return appendStruct(dst, raw, fieldsOf(t), at)
	case reflect.Slice, reflect.Array:
		if first != '[' {
			return append(dst, raw...), nil
		}
		dst = append(dst, '[')
		n := 0
		err := eachElement(raw, func(it []byte) error {
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			var err error
			dst, err = appendCanonical(dst, it, t.Elem(), at)
			return err
		})
		if err != nil {
			return nil, err
		}
		return append(dst, ']'), nil
	case reflect.Map:
		if first != '{' {
			return append(dst, raw...), nil
		}
		dst = append(dst, '{')
		n := 0
		err := eachMember(raw, func(qkey, val []byte) error {
			key, err := unquote(qkey)
			if err != nil {
				return Error(err, at)
			}
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			dst = appendKey(dst, key)
			dst = append(dst, ':')
			dst, err = appendCanonical(dst, val, t.Elem(), join(at, key))
			return err
		})
		if err != nil {
			return nil, err
		}
		return append(dst, '}'), nil
	}
	return append(dst, raw...), nil
}

// seenMember is a struct member already read: its json name and its key
// as sent. A few are searched in a list; a long body gets a map.
type seenMember struct {
	name string
	sent []byte
}

func appendStruct(dst []byte, raw []byte, fs *fields, at string) ([]byte, error) {
	var (
		few  [16]seenMember
		seen = few[:0]
		many map[string][]byte
	)
	dst = append(dst, '{')
	n := 0
	err := eachMember(raw, func(qkey, val []byte) error {
		var f *field
		if inner := qkey[1 : len(qkey)-1]; bytes.IndexByte(inner, '\\') < 0 {
			f = fs.byName[string(inner)] // no copy of the key
		} else {
			key, err := unquote(qkey)
			if err != nil {
				return Error(err, at)
			}
			f = fs.byName[key]
		}
		if f == nil {
			key, err := unquote(qkey)
			if err != nil {
				return Error(err, at)
			}
			return errs.Invalid(join(at, key), "unknown field")
		}
		prev, dup := []byte(nil), false
		if many != nil {
			prev, dup = many[f.name]
		} else {
			for _, s := range seen {
				if s.name == f.name {
					prev, dup = s.sent, true
					break
				}
			}
		}
		if dup {
			if bytes.Equal(prev, qkey) {
				return errs.Invalid(join(at, f.name), "given twice")
			}
			p, _ := unquote(prev)
			k, _ := unquote(qkey)
			return errs.Invalid(join(at, f.name), "given as both "+p+" and "+k)
		}
		switch {
		case many != nil:
			many[f.name] = qkey
		case len(seen) < len(few):
			seen = append(seen, seenMember{f.name, qkey})
		default:
			many = make(map[string][]byte, 2*len(seen))
			for _, s := range seen {
				many[s.name] = s.sent
			}
			many[f.name] = qkey
		}
		if isNull(val) {
			return nil // null: not set, as protobuf's JSON mapping reads it
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendKey(dst, f.name)
		dst = append(dst, ':')
		if !walks(bareType(f.typ)) {
			dst = append(dst, val...)
			return nil
		}
		var err error
		dst, err = appendCanonical(dst, val, f.typ, join(at, f.name))
		return err
	})
	if err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

// appendKey appends key as encoding/json writes a string: most keys need
// no escaping and are copied; the others go through json.Marshal.
func appendKey(dst []byte, key string) []byte {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			k, _ := json.Marshal(key)
			return append(dst, k...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, '"')
}

type member struct {
	key string
	val json.RawMessage
}

// members splits a JSON object into its members, in order.
func members(raw json.RawMessage) ([]member, error) {
	var ms []member
	err := eachMember(raw, func(qkey, val []byte) error {
		key, err := unquote(qkey)
		if err == nil {
			ms = append(ms, member{key: key, val: val})
		}
		return err
	})
	return ms, err
}

// eachMember calls fn with each member of a JSON object, in order: its key
// as sent (quoted) and its value. raw is one valid JSON object (Decode
// checked it), so a plain scan finds the bounds.
func eachMember(raw []byte, fn func(qkey, val []byte) error) error {
	i := skipSpace(raw, 0) + 1 // past {
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == '}' {
			return nil
		}
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		end := scanValue(raw, i)
		qkey := raw[i:end]
		i = skipSpace(raw, end) + 1 // past :
		i = skipSpace(raw, i)
		end = scanValue(raw, i)
		if err := fn(qkey, raw[i:end]); err != nil {
			return err
		}
		i = end
	}
}

// elements splits a valid JSON array into its elements.
func elements(raw json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	_ = eachElement(raw, func(it []byte) error {
		out = append(out, it)
		return nil
	})
	return out
}

// eachElement calls fn with each element of a valid JSON array, in order.
func eachElement(raw []byte, fn func(it []byte) error) error {
	i := skipSpace(raw, 0) + 1 // past [
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == ']' {
			return nil
		}
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		end := scanValue(raw, i)
		if err := fn(raw[i:end]); err != nil {
			return err
		}
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
