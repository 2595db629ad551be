package jsonwire

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// FromWire writes a request's wire form as the JSON FromMessage writes
// of the message proto.Unmarshal makes of it, without making that
// message. It goes only where the two cannot differ: ok is false for
// input a client's encoder does not write, where the message's own
// rules decide (a singular field or a oneof sent twice, a repeated field
// interrupted by another, an unknown field, a wire type that is not the
// field's, invalid UTF-8, a Value without a kind or not a finite number,
// a Struct key twice, malformed bytes); the caller then decodes the
// message and calls FromMessage.
func FromWire(b []byte, md protoreflect.MessageDescriptor) (out []byte, ok bool) {
	w := fromWire{out: make([]byte, 0, 2*len(b)+2)}
	if !w.message(b, md) {
		return nil, false
	}
	return w.out, true
}

type fromWire struct{ out []byte }

func (w *fromWire) message(b []byte, md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case structFull:
		return w.structJSON(b)
	case valueFull:
		return w.valueJSON(b)
	case listValueFull:
		return w.listJSON(b)
	}
	fields := md.Fields()
	w.out = append(w.out, '{')
	first := true
	var seen []protowire.Number // fields written or skipped as zero
	oneofs := map[protoreflect.OneofDescriptor]bool{}
	var open protoreflect.FieldDescriptor // the repeated field being written
	openAt, openFirst, openCount := 0, false, 0
	closeList := func() {
		if open == nil {
			return
		}
		if openCount == 0 { // an empty packed list: not set
			w.out, first = w.out[:openAt], openFirst
		} else {
			w.out = append(w.out, ']')
		}
		open = nil
	}
	key := func(fd protoreflect.FieldDescriptor) {
		if !first {
			w.out = append(w.out, ',')
		}
		first = false
		w.out = append(w.out, '"')
		w.out = append(w.out, fd.Name()...)
		w.out = append(w.out, '"', ':')
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		fd := fields.ByNumber(num)
		if fd == nil || fd.IsMap() {
			return false
		}
		if open != nil && open != fd {
			closeList()
		}
		if fd.IsList() {
			if open == nil {
				for _, s := range seen {
					if s == num {
						return false // interrupted, sent again
					}
				}
				seen = append(seen, num)
				openAt, openFirst, openCount = len(w.out), first, 0
				key(fd)
				w.out = append(w.out, '[')
				open = fd
			}
			if typ == protowire.BytesType && packable(fd.Kind()) {
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					return false
				}
				b = b[n:]
				for len(v) > 0 {
					m := w.scalarOf(fd, wireType(fd.Kind()), v, openCount > 0)
					if m < 0 {
						return false
					}
					v = v[m:]
					openCount++
				}
				continue
			}
			n := w.element(fd, typ, b, openCount > 0)
			if n < 0 {
				return false
			}
			b = b[n:]
			openCount++
			continue
		}
		for _, s := range seen {
			if s == num {
				return false // last wins, or messages merge: the message decides
			}
		}
		seen = append(seen, num)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if oneofs[od] {
				return false
			}
			oneofs[od] = true
		}
		at, wasFirst := len(w.out), first
		key(fd)
		valueAt := len(w.out)
		n = w.element(fd, typ, b, false)
		if n < 0 {
			return false
		}
		b = b[n:]
		if !fd.HasPresence() && isZeroJSON(fd.Kind(), w.out[valueAt:]) {
			w.out, first = w.out[:at], wasFirst // a zero without presence is not set
		}
	}
	closeList()
	w.out = append(w.out, '}')
	return true
}

// isZeroJSON reports the JSON FromMessage never writes for a field
// without presence: its zero value (a negative zero is not zero).
func isZeroJSON(k protoreflect.Kind, v []byte) bool {
	switch k {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return false
	case protoreflect.StringKind, protoreflect.BytesKind:
		return string(v) == `""`
	case protoreflect.BoolKind:
		return string(v) == "false"
	}
	return string(v) == "0"
}

// element writes one value of fd (a list's element after a comma when
// comma) and returns the bytes it took of b, or -1.
func (w *fromWire) element(fd protoreflect.FieldDescriptor, typ protowire.Type, b []byte, comma bool) int {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.StringKind, protoreflect.BytesKind:
		if typ != protowire.BytesType {
			return -1
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return -1
		}
		if comma {
			w.out = append(w.out, ',')
		}
		switch fd.Kind() {
		case protoreflect.MessageKind:
			if !w.message(v, fd.Message()) {
				return -1
			}
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return -1
			}
			w.str(v)
		default:
			w.out = append(w.out, '"')
			w.out = base64.StdEncoding.AppendEncode(w.out, v)
			w.out = append(w.out, '"')
		}
		return n
	case protoreflect.GroupKind:
		return -1
	}
	if typ != wireType(fd.Kind()) {
		return -1
	}
	return w.scalarOf(fd, typ, b, comma)
}

// scalarOf writes one number, bool or enum of fd read from b.
func (w *fromWire) scalarOf(fd protoreflect.FieldDescriptor, typ protowire.Type, b []byte, comma bool) int {
	var u uint64
	var n int
	switch typ {
	case protowire.VarintType:
		u, n = protowire.ConsumeVarint(b)
	case protowire.Fixed32Type:
		var v uint32
		v, n = protowire.ConsumeFixed32(b)
		u = uint64(v)
	case protowire.Fixed64Type:
		u, n = protowire.ConsumeFixed64(b)
	default:
		return -1
	}
	if n < 0 {
		return -1
	}
	if comma {
		w.out = append(w.out, ',')
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		w.out = strconv.AppendBool(w.out, u != 0)
	case protoreflect.EnumKind, protoreflect.Int32Kind:
		w.out = strconv.AppendInt(w.out, int64(int32(u)), 10)
	case protoreflect.Sint32Kind:
		w.out = strconv.AppendInt(w.out, int64(int32(protowire.DecodeZigZag(u&math.MaxUint32))), 10)
	case protoreflect.Sfixed32Kind:
		w.out = strconv.AppendInt(w.out, int64(int32(uint32(u))), 10)
	case protoreflect.Int64Kind, protoreflect.Sfixed64Kind:
		w.out = strconv.AppendInt(w.out, int64(u), 10)
	case protoreflect.Sint64Kind:
		w.out = strconv.AppendInt(w.out, protowire.DecodeZigZag(u), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		w.out = strconv.AppendUint(w.out, uint64(uint32(u)), 10)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		w.out = strconv.AppendUint(w.out, u, 10)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := math.Float64frombits(u)
		if fd.Kind() == protoreflect.FloatKind {
			f = float64(math.Float32frombits(uint32(u)))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			w.out = strconv.AppendQuote(w.out, strconv.FormatFloat(f, 'g', -1, 64))
		} else {
			w.out = strconv.AppendFloat(w.out, f, 'g', -1, 64)
		}
	default:
		return -1
	}
	return n
}

// str writes a JSON string (valid UTF-8).
func (w *fromWire) str(v []byte) {
	for _, c := range v {
		if c < 0x20 || c == '"' || c == '\\' {
			q, _ := json.Marshal(string(v))
			w.out = append(w.out, q...)
			return
		}
	}
	w.out = append(w.out, '"')
	w.out = append(w.out, v...)
	w.out = append(w.out, '"')
}

// each reads the fields of a well-known message: fn gets each one's
// number, wire type and value, and returns the bytes it took or -1.
func each(b []byte, fn func(num protowire.Number, typ protowire.Type, b []byte) int) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		m := fn(num, typ, b)
		if m < 0 {
			return false
		}
		b = b[m:]
	}
	return true
}

// structJSON writes a Struct as protojson does: its entries as members.
func (w *fromWire) structJSON(b []byte) bool {
	w.out = append(w.out, '{')
	var keys map[string]bool
	first := true
	ok := each(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		if num != 1 || typ != protowire.BytesType {
			return -1
		}
		entry, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return -1
		}
		var k, v []byte
		var hasK, hasV bool
		if !each(entry, func(num protowire.Number, typ protowire.Type, b []byte) int {
			if typ != protowire.BytesType || (num != 1 && num != 2) || (num == 1 && hasK) || (num == 2 && hasV) {
				return -1
			}
			x, n := protowire.ConsumeBytes(b)
			if num == 1 {
				k, hasK = x, true
			} else {
				v, hasV = x, true
			}
			return n
		}) || !hasV || !utf8.Valid(k) {
			return -1 // a missing Value has no kind: the message decides
		}
		if keys == nil {
			keys = map[string]bool{}
		}
		if keys[string(k)] {
			return -1
		}
		keys[string(k)] = true
		if !first {
			w.out = append(w.out, ',')
		}
		first = false
		w.str(k)
		w.out = append(w.out, ':')
		if !w.valueJSON(v) {
			return -1
		}
		return n
	})
	w.out = append(w.out, '}')
	return ok
}

// listJSON writes a ListValue as a JSON array.
func (w *fromWire) listJSON(b []byte) bool {
	w.out = append(w.out, '[')
	first := true
	ok := each(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		if num != 1 || typ != protowire.BytesType {
			return -1
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return -1
		}
		if !first {
			w.out = append(w.out, ',')
		}
		first = false
		if !w.valueJSON(v) {
			return -1
		}
		return n
	})
	w.out = append(w.out, ']')
	return ok
}

// valueJSON writes a Value of exactly one kind as protojson does.
func (w *fromWire) valueJSON(b []byte) bool {
	kinds := 0
	return each(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		if kinds++; kinds > 1 {
			return -1
		}
		switch num {
		case 1, 4: // null_value, bool_value
			if typ != protowire.VarintType {
				return -1
			}
			u, n := protowire.ConsumeVarint(b)
			if n >= 0 {
				switch {
				case num == 1:
					w.out = append(w.out, "null"...)
				default:
					w.out = strconv.AppendBool(w.out, u != 0)
				}
			}
			return n
		case 2: // number_value
			if typ != protowire.Fixed64Type {
				return -1
			}
			u, n := protowire.ConsumeFixed64(b)
			f := math.Float64frombits(u)
			if n < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
				return -1
			}
			w.out = appendNumber(w.out, f)
			return n
		case 3, 5, 6: // string_value, struct_value, list_value
			if typ != protowire.BytesType {
				return -1
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return -1
			}
			switch num {
			case 3:
				if !utf8.Valid(v) {
					return -1
				}
				w.str(v)
			case 5:
				if !w.structJSON(v) {
					return -1
				}
			default:
				if !w.listJSON(v) {
					return -1
				}
			}
			return n
		}
		return -1
	}) && kinds == 1
}

// appendNumber formats a Value's number as protojson (and encoding/json)
// do: plain unless very small or large.
func appendNumber(out []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if format == 'e' {
		// e-07 as e-7
		if n := len(out); n >= 4 && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
	}
	return out
}
