package jsonwire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// FromMessage writes a request message as the operation's JSON body: members
// under their proto (snake_case) names, only those set, numbers as JSON
// numbers (protojson quotes 64-bit ones, which the strict decoder would
// refuse as strings), the well-known Struct, Value and ListValue as the
// JSON they stand for.
func FromMessage(m protoreflect.Message) ([]byte, error) {
	var b bytes.Buffer
	if err := writeMessage(&b, m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeMessage(b *bytes.Buffer, m protoreflect.Message) error {
	switch m.Descriptor().FullName() {
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue":
		raw, err := protojson.Marshal(m.Interface())
		if err != nil {
			return err
		}
		b.Write(raw)
		return nil
	}
	b.WriteByte('{')
	first := true
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if !first {
			b.WriteByte(',')
		}
		first = false
		name, _ := json.Marshal(string(fd.Name()))
		b.Write(name)
		b.WriteByte(':')
		if fd.IsList() {
			l := v.List()
			b.WriteByte('[')
			for i := range l.Len() {
				if i > 0 {
					b.WriteByte(',')
				}
				if err = writeValue(b, fd, l.Get(i)); err != nil {
					return false
				}
			}
			b.WriteByte(']')
			return true
		}
		err = writeValue(b, fd, v)
		return err == nil
	})
	if err != nil {
		return err
	}
	b.WriteByte('}')
	return nil
}

func writeValue(b *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return writeMessage(b, v.Message())
	case protoreflect.BoolKind:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case protoreflect.StringKind:
		s, _ := json.Marshal(v.String())
		b.Write(s)
	case protoreflect.BytesKind:
		s, _ := json.Marshal(base64.StdEncoding.EncodeToString(v.Bytes()))
		b.Write(s)
	case protoreflect.EnumKind:
		b.WriteString(strconv.FormatInt(int64(v.Enum()), 10))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			// JSON has no such number: the decoder refuses the string.
			s, _ := json.Marshal(strconv.FormatFloat(f, 'g', -1, 64))
			b.Write(s)
			return nil
		}
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	}
	return nil
}
