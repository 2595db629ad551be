package plugin

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// structName is google.protobuf.Struct.
const structName protoreflect.FullName = "google.protobuf.Struct"

// alwaysStructs are the Struct fields sent empty rather than absent on every
// method whose request has them: plugins read them as required keys
// (plugin-protocols.md §10 hazard 3).
var alwaysStructs = []protoreflect.Name{"options", "secret_data"}

// methodStructs are further Struct fields a plugin requires on one method.
var methodStructs = map[Method][]protoreflect.Name{
	CollectorCollect:     {"filter"},
	CostGetData:          {"task_options"},
	NotificationDispatch: {"message", "channel_data"},
	EventParse:           {"data"},
}

// encodeRequest builds the request message of md from req by field name
// (proto or JSON name, as upstream's ParseDict): fields the plugin's
// descriptor lacks are dropped; Go values of any JSON-encodable type are
// accepted (they pass through encoding/json, so []string, time.Time and
// integers need no conversion).
func encodeRequest(md protoreflect.MethodDescriptor, m Method, req map[string]any) (*dynamicpb.Message, error) {
	msg := dynamicpb.NewMessage(md.Input())
	if len(req) > 0 {
		raw, err := json.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("request is not JSON-encodable: %w", err)
		}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, msg); err != nil {
			return nil, fmt.Errorf("request does not fit the plugin's %s: %w", md.Input().FullName(), err)
		}
	}
	fields := md.Input().Fields()
	for _, names := range [][]protoreflect.Name{alwaysStructs, methodStructs[m]} {
		for _, n := range names {
			fd := fields.ByName(n)
			if fd == nil || fd.IsList() || fd.Message() == nil || fd.Message().FullName() != structName {
				continue
			}
			if !msg.Has(fd) {
				msg.Set(fd, protoreflect.ValueOfMessage(msg.NewField(fd).Message()))
			}
		}
	}
	return msg, nil
}

// decodeReply renders a reply as upstream's MessageToDict with
// preserving_proto_field_name does: proto field names, enums by name,
// unset fields and zero scalars absent, 64-bit integers as strings,
// Struct numbers as float64. It walks the message directly: the same
// values protojson's output read back by encoding/json gives, without
// the JSON text between (the cost and collect streams decode every row).
func decodeReply(msg protoreflect.ProtoMessage) (map[string]any, error) {
	m := msg.ProtoReflect()
	if wellKnown(m.Descriptor().FullName()) {
		// A reply that is itself a well-known type is not an object in
		// JSON (or is one of protojson's own shapes): the slow path.
		return decodeViaJSON(msg)
	}
	return decodeMessage(m)
}

// decodeViaJSON is protojson's rendering read back by encoding/json, the
// reference decodeReply equals.
func decodeViaJSON(msg protoreflect.ProtoMessage) (map[string]any, error) {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// wellKnown reports the google.protobuf messages protojson renders in a
// shape of their own.
func wellKnown(n protoreflect.FullName) bool {
	return n.Parent() == "google.protobuf" && n != "google.protobuf.Empty"
}

func decodeMessage(m protoreflect.Message) (map[string]any, error) {
	out := make(map[string]any, m.Descriptor().Fields().Len())
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := fd.TextName()
		if fd.IsExtension() {
			name = "[" + string(fd.FullName()) + "]"
		}
		var val any
		switch {
		case fd.IsList():
			val, err = decodeList(fd, v.List())
		case fd.IsMap():
			val, err = decodeMap(fd, v.Map())
		default:
			val, err = decodeSingular(fd, v)
		}
		if err != nil {
			return false
		}
		out[name] = val
		return true
	})
	return out, err
}

func decodeList(fd protoreflect.FieldDescriptor, l protoreflect.List) (any, error) {
	out := make([]any, l.Len())
	for i := range out {
		v, err := decodeSingular(fd, l.Get(i))
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func decodeMap(fd protoreflect.FieldDescriptor, mp protoreflect.Map) (any, error) {
	out := make(map[string]any, mp.Len())
	var err error
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		var val any
		if val, err = decodeSingular(fd.MapValue(), v); err != nil {
			return false
		}
		out[k.String()] = val
		return true
	})
	return out, err
}

// decodeSingular renders one value of fd as protojson then encoding/json
// would: every JSON number a float64, 64-bit integers and bytes as
// strings (decimal, base64), non-finite floats as their JSON names.
func decodeSingular(fd protoreflect.FieldDescriptor, v protoreflect.Value) (any, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return v.Bool(), nil
	case protoreflect.StringKind:
		s := v.String()
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("field %s: invalid UTF-8", fd.FullName())
		}
		return s, nil
	case protoreflect.BytesKind:
		return base64.StdEncoding.EncodeToString(v.Bytes()), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return float64(v.Int()), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return float64(v.Uint()), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.FormatInt(v.Int(), 10), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.FormatUint(v.Uint(), 10), nil
	case protoreflect.FloatKind:
		return decodeFloat(v.Float(), 32), nil
	case protoreflect.DoubleKind:
		return decodeFloat(v.Float(), 64), nil
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return nil, nil
		}
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name()), nil
		}
		return float64(v.Enum()), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return decodeNested(v.Message())
	}
	return nil, fmt.Errorf("field %s: unknown kind %v", fd.FullName(), fd.Kind())
}

// decodeFloat is a float as protojson writes it (shortest form at the
// field's precision) and encoding/json reads it back.
func decodeFloat(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if bits == 32 {
		f, _ = strconv.ParseFloat(strconv.FormatFloat(f, 'g', -1, 32), 64)
	}
	return f
}

// decodeNested renders a message field: Struct, Value and ListValue (the
// shapes plugins send) directly, other well-known types through protojson.
func decodeNested(m protoreflect.Message) (any, error) {
	switch m.Descriptor().FullName() {
	case "google.protobuf.Struct":
		return decodeStruct(m)
	case "google.protobuf.Value":
		return decodeValue(m)
	case "google.protobuf.ListValue":
		return decodeListValue(m)
	}
	if !wellKnown(m.Descriptor().FullName()) {
		return decodeMessage(m)
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m.Interface())
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(raw, &out)
}

func decodeStruct(m protoreflect.Message) (any, error) {
	fields := m.Get(m.Descriptor().Fields().ByName("fields")).Map()
	out := make(map[string]any, fields.Len())
	var err error
	fields.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		var val any
		if val, err = decodeValue(v.Message()); err != nil {
			return false
		}
		out[k.String()] = val
		return true
	})
	return out, err
}

func decodeListValue(m protoreflect.Message) (any, error) {
	l := m.Get(m.Descriptor().Fields().ByName("values")).List()
	out := make([]any, l.Len())
	for i := range out {
		v, err := decodeValue(l.Get(i).Message())
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// decodeValue is one google.protobuf.Value; protojson refuses a Value with
// no kind set and a non-finite number, and so does this.
func decodeValue(m protoreflect.Message) (any, error) {
	od := m.Descriptor().Oneofs().ByName("kind")
	fd := m.WhichOneof(od)
	if fd == nil {
		return nil, errors.New("google.protobuf.Value: none of the oneof fields is set")
	}
	v := m.Get(fd)
	switch fd.Name() {
	case "null_value":
		return nil, nil
	case "number_value":
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("google.protobuf.Value: invalid number %v", f)
		}
		return f, nil
	case "string_value":
		s := v.String()
		if !utf8.ValidString(s) {
			return nil, errors.New("google.protobuf.Value: invalid UTF-8 in string_value")
		}
		return s, nil
	case "bool_value":
		return v.Bool(), nil
	case "struct_value":
		return decodeStruct(v.Message())
	case "list_value":
		return decodeListValue(v.Message())
	}
	return nil, fmt.Errorf("google.protobuf.Value: unknown kind %s", fd.Name())
}
