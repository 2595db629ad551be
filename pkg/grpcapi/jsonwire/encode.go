// Package jsonwire converts between an operation's JSON and the protobuf
// forms of its gRPC messages, by walking the message descriptor:
//
//   - Encode writes a JSON object (an answer, as the HTTP handler writes
//     it) straight into the wire form of a message, reading the JSON as
//     protojson does: proto or JSON member names, null as unset (a
//     Value's null as NullValue), an unknown member an error, numbers
//     bare or quoted. It replaces protojson.Unmarshal into a dynamic
//     message and that message's reflective Marshal, which took most of
//     a gRPC call's server time (docs/status.md, issue 39).
//   - FromWire writes a request's wire form as the operation's JSON body,
//     the JSON FromMessage writes of the message proto.Unmarshal makes of
//     it, where the two cannot differ (else the caller decodes and calls
//     FromMessage).
package jsonwire

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ErrUnsupported marks a descriptor Encode does not walk (a proto map
// field: grpcapi.Describe makes none); the caller falls back to protojson.
var ErrUnsupported = errors.New("jsonwire: not encoded directly")

// Encode is the protobuf encoding of the JSON object raw as a
// message of md.
func Encode(raw []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	s := &scanner{b: raw}
	s.ws()
	out, err := s.message(make([]byte, 0, len(raw)), md)
	if err != nil {
		return nil, err
	}
	s.ws()
	if s.i != len(s.b) {
		return nil, s.fail("trailing data")
	}
	return out, nil
}

// scanner reads JSON as encoding/json writes it (and any valid JSON).
type scanner struct {
	b []byte
	i int
}

func (s *scanner) fail(what string) error {
	return fmt.Errorf("jsonwire: answer JSON at %d: %s", s.i, what)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return s.fail("want " + string(c))
	}
	s.i++
	return nil
}

func (s *scanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.fail("want " + lit)
	}
	s.i += len(lit)
	return nil
}

// null consumes a null if one is next.
func (s *scanner) null() bool {
	if s.peek() == 'n' && s.literal("null") == nil {
		return true
	}
	return false
}

// str reads a string, unescaped; the common one without escapes is a
// slice of the input.
func (s *scanner) str() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			out := s.b[start:s.i]
			s.i++
			return out, nil
		case c == '\\':
			return s.escaped(start)
		case c < 0x20:
			return nil, s.fail("control character in string")
		}
		s.i++
	}
	return nil, s.fail("unterminated string")
}

func (s *scanner) escaped(start int) ([]byte, error) {
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return out, nil
		case c < 0x20:
			return nil, s.fail("control character in string")
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return nil, s.fail("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					if r2, ok = s.hex4(); !ok {
						return nil, s.fail("bad \\u escape")
					}
				}
				r = utf16.DecodeRune(r, r2)
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, s.fail("bad escape")
		}
	}
	return nil, s.fail("unterminated string")
}

func (s *scanner) hex4() (rune, bool) {
	if len(s.b)-s.i < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(n), true
}

// number reads a JSON number's text.
func (s *scanner) number() ([]byte, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			s.i++
			continue
		}
		break
	}
	if s.i == start {
		return nil, s.fail("want a value")
	}
	return s.b[start:s.i], nil
}

// each calls fn for each member of an object.
func (s *scanner) each(fn func(name []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		name, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := fn(name); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.fail("want , or }")
		}
	}
}

// elems calls fn for each element of an array.
func (s *scanner) elems(fn func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := fn(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.fail("want , or ]")
		}
	}
}

// beginLen starts a length-delimited body after its tag; endLen puts
// its length in front of it.
func beginLen(dst []byte) ([]byte, int) { return dst, len(dst) }

func endLen(dst []byte, at int) []byte {
	n := len(dst) - at
	size := protowire.SizeVarint(uint64(n))
	dst = append(dst, make([]byte, size)...)
	copy(dst[at+size:], dst[at:at+n])
	protowire.AppendVarint(dst[at:at], uint64(n))
	return dst
}

const (
	structFull    protoreflect.FullName = "google.protobuf.Struct"
	valueFull     protoreflect.FullName = "google.protobuf.Value"
	listValueFull protoreflect.FullName = "google.protobuf.ListValue"
)

// message appends the body of a message of md from a JSON object.
func (s *scanner) message(dst []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	switch md.FullName() {
	case structFull:
		return s.structBody(dst)
	case valueFull:
		return s.valueBody(dst)
	case listValueFull:
		return s.listBody(dst)
	}
	fields := md.Fields()
	err := s.each(func(name []byte) error {
		fd := fields.ByName(protoreflect.Name(name))
		if fd == nil {
			fd = fields.ByJSONName(string(name))
		}
		if fd == nil {
			return fmt.Errorf("jsonwire: %s has no field %q", md.FullName(), name)
		}
		var err error
		dst, err = s.field(dst, fd)
		return err
	})
	return dst, err
}

func isValue(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind && fd.Message().FullName() == valueFull
}

// field appends one member's value as field fd.
func (s *scanner) field(dst []byte, fd protoreflect.FieldDescriptor) ([]byte, error) {
	if fd.IsMap() {
		return nil, ErrUnsupported
	}
	if s.peek() == 'n' && !(isValue(fd) && !fd.IsList()) {
		// null is unset, but for a Value (its NullValue).
		return dst, s.literal("null")
	}
	num := fd.Number()
	if !fd.IsList() {
		return s.single(dst, fd, num, fd.HasPresence())
	}
	if packable(fd.Kind()) {
		start := len(dst)
		dst = protowire.AppendTag(dst, num, protowire.BytesType)
		dst, at := beginLen(dst)
		n := 0
		err := s.elems(func() error {
			n++
			var err error
			dst, err = s.scalar(dst, fd)
			return err
		})
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return dst[:start], nil
		}
		return endLen(dst, at), nil
	}
	err := s.elems(func() error {
		if s.peek() == 'n' && !isValue(fd) {
			return s.fail("null in a list")
		}
		var err error
		dst, err = s.single(dst, fd, num, true)
		return err
	})
	return dst, err
}

// packable kinds go packed in a repeated field, as proto3 sends them.
func packable(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind, protoreflect.GroupKind:
		return false
	}
	return true
}

// single appends one value of fd with its tag; a scalar without presence
// is left out when zero, as proto3 leaves it.
func (s *scanner) single(dst []byte, fd protoreflect.FieldDescriptor, num protowire.Number, always bool) ([]byte, error) {
	start := len(dst)
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		dst = protowire.AppendTag(dst, num, protowire.BytesType)
		dst, at := beginLen(dst)
		dst, err := s.message(dst, fd.Message())
		if err != nil {
			return nil, err
		}
		return endLen(dst, at), nil
	case protoreflect.StringKind, protoreflect.BytesKind:
		v, err := s.str()
		if err != nil {
			return nil, err
		}
		if fd.Kind() == protoreflect.BytesKind {
			if v, err = decodeBase64(v); err != nil {
				return nil, err
			}
		} else if !utf8.Valid(v) {
			return nil, s.fail("invalid UTF-8")
		}
		if len(v) == 0 && !always {
			return dst, nil
		}
		dst = protowire.AppendTag(dst, num, protowire.BytesType)
		return protowire.AppendBytes(dst, v), nil
	}
	dst = protowire.AppendTag(dst, num, wireType(fd.Kind()))
	tagEnd := len(dst)
	dst, err := s.scalar(dst, fd)
	if err != nil {
		return nil, err
	}
	if !always && zero(dst[tagEnd:]) {
		return dst[:start], nil
	}
	return dst, nil
}

// zero reports an encoded scalar of value zero (a negative zero float
// has its sign bit set, and proto3 sends it).
func zero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

func decodeBase64(v []byte) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if out, err := enc.DecodeString(string(v)); err == nil {
			return out, nil
		}
	}
	return nil, errors.New("jsonwire: answer JSON: bad base64")
}

// scalar appends one scalar value of fd without its tag.
func (s *scanner) scalar(dst []byte, fd protoreflect.FieldDescriptor) ([]byte, error) {
	k := fd.Kind()
	switch k {
	case protoreflect.BoolKind:
		switch s.peek() {
		case 't':
			return protowire.AppendVarint(dst, 1), s.literal("true")
		case 'f':
			return protowire.AppendVarint(dst, 0), s.literal("false")
		}
		return nil, s.fail("want a bool")
	case protoreflect.EnumKind:
		if s.peek() == '"' {
			name, err := s.str()
			if err != nil {
				return nil, err
			}
			ev := fd.Enum().Values().ByName(protoreflect.Name(name))
			if ev == nil {
				return nil, s.fail("unknown enum value")
			}
			return protowire.AppendVarint(dst, uint64(int64(ev.Number()))), nil
		}
	}
	text, err := s.numberText()
	if err != nil {
		return nil, err
	}
	switch k {
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f, err := parseFloat(text, k == protoreflect.FloatKind)
		if err != nil {
			return nil, s.fail(err.Error())
		}
		if k == protoreflect.FloatKind {
			return protowire.AppendFixed32(dst, math.Float32bits(float32(f))), nil
		}
		return protowire.AppendFixed64(dst, math.Float64bits(f)), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		bits := 64
		if k == protoreflect.Uint32Kind || k == protoreflect.Fixed32Kind {
			bits = 32
		}
		u, err := parseUint(text, bits)
		if err != nil {
			return nil, s.fail(err.Error())
		}
		if k == protoreflect.Fixed32Kind {
			return protowire.AppendFixed32(dst, uint32(u)), nil
		}
		if k == protoreflect.Fixed64Kind {
			return protowire.AppendFixed64(dst, u), nil
		}
		return protowire.AppendVarint(dst, u), nil
	}
	bits := 64
	switch k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind, protoreflect.EnumKind:
		bits = 32
	}
	n, err := parseInt(text, bits)
	if err != nil {
		return nil, s.fail(err.Error())
	}
	switch k {
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.AppendVarint(dst, protowire.EncodeZigZag(n)), nil
	case protoreflect.Sfixed32Kind:
		return protowire.AppendFixed32(dst, uint32(int32(n))), nil
	case protoreflect.Sfixed64Kind:
		return protowire.AppendFixed64(dst, uint64(n)), nil
	}
	return protowire.AppendVarint(dst, uint64(n)), nil
}

// numberText is a number's text, bare or quoted (protojson takes both).
func (s *scanner) numberText() (string, error) {
	if s.peek() == '"' {
		v, err := s.str()
		return string(v), err
	}
	v, err := s.number()
	return string(v), err
}

func parseInt(text string, bits int) (int64, error) {
	if n, err := strconv.ParseInt(text, 10, bits); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || f != math.Trunc(f) || f < -math.Pow(2, float64(bits-1)) || f >= math.Pow(2, float64(bits-1)) {
		return 0, fmt.Errorf("%q is no int%d", text, bits)
	}
	return int64(f), nil
}

func parseUint(text string, bits int) (uint64, error) {
	if n, err := strconv.ParseUint(text, 10, bits); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || f != math.Trunc(f) || f < 0 || f >= math.Pow(2, float64(bits)) {
		return 0, fmt.Errorf("%q is no uint%d", text, bits)
	}
	return uint64(f), nil
}

func parseFloat(text string, single bool) (float64, error) {
	switch text {
	case "NaN":
		return math.NaN(), nil
	case "Infinity":
		return math.Inf(1), nil
	case "-Infinity":
		return math.Inf(-1), nil
	}
	bits := 64
	if single {
		bits = 32
	}
	f, err := strconv.ParseFloat(text, bits)
	if err != nil {
		return 0, fmt.Errorf("%q is no number", text)
	}
	return f, nil
}

// structBody appends a Struct's fields from a JSON object: entries of
// {1: key, 2: Value}.
func (s *scanner) structBody(dst []byte) ([]byte, error) {
	err := s.each(func(name []byte) error {
		if !utf8.Valid(name) {
			return s.fail("invalid UTF-8")
		}
		dst = protowire.AppendTag(dst, 1, protowire.BytesType)
		var at int
		dst, at = beginLen(dst)
		dst = protowire.AppendTag(dst, 1, protowire.BytesType)
		dst = protowire.AppendBytes(dst, name)
		dst = protowire.AppendTag(dst, 2, protowire.BytesType)
		var vat int
		dst, vat = beginLen(dst)
		var err error
		if dst, err = s.valueBody(dst); err != nil {
			return err
		}
		dst = endLen(dst, vat)
		dst = endLen(dst, at)
		return nil
	})
	return dst, err
}

// listBody appends a ListValue's values from a JSON array.
func (s *scanner) listBody(dst []byte) ([]byte, error) {
	err := s.elems(func() error {
		dst = protowire.AppendTag(dst, 1, protowire.BytesType)
		var at int
		dst, at = beginLen(dst)
		var err error
		if dst, err = s.valueBody(dst); err != nil {
			return err
		}
		dst = endLen(dst, at)
		return nil
	})
	return dst, err
}

// valueBody appends a Value's one member from any JSON value.
func (s *scanner) valueBody(dst []byte) ([]byte, error) {
	switch c := s.peek(); {
	case c == 'n':
		return protowire.AppendVarint(protowire.AppendTag(dst, 1, protowire.VarintType), 0), s.literal("null")
	case c == 't' || c == 'f':
		v := uint64(0)
		lit := "false"
		if c == 't' {
			v, lit = 1, "true"
		}
		return protowire.AppendVarint(protowire.AppendTag(dst, 4, protowire.VarintType), v), s.literal(lit)
	case c == '"':
		v, err := s.str()
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(v) {
			return nil, s.fail("invalid UTF-8")
		}
		return protowire.AppendBytes(protowire.AppendTag(dst, 3, protowire.BytesType), v), nil
	case c == '{' || c == '[':
		num := protowire.Number(5)
		if c == '[' {
			num = 6
		}
		dst = protowire.AppendTag(dst, num, protowire.BytesType)
		dst, at := beginLen(dst)
		var err error
		if c == '{' {
			dst, err = s.structBody(dst)
		} else {
			dst, err = s.listBody(dst)
		}
		if err != nil {
			return nil, err
		}
		return endLen(dst, at), nil
	}
	text, err := s.number()
	if err != nil {
		return nil, err
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return nil, s.fail("bad number")
	}
	return protowire.AppendFixed64(protowire.AppendTag(dst, 2, protowire.Fixed64Type), math.Float64bits(f)), nil
}
