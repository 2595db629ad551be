package jsonwire_test

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nubes-io/nubes/pkg/grpcapi/jsonwire"
)

// kinds is a message with a field of every scalar kind, singular,
// optional and repeated, an enum, and the well-known JSON types.
func kinds(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	var fields []*descriptorpb.FieldDescriptorProto
	var oneofs []*descriptorpb.OneofDescriptorProto
	n := int32(0)
	add := func(name string, typ descriptorpb.FieldDescriptorProto_Type, typeName string) {
		for _, v := range []string{"", "opt_", "rep_"} {
			n++
			fd := &descriptorpb.FieldDescriptorProto{Name: proto.String(v + name), Number: proto.Int32(n), Type: typ.Enum(),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()}
			if typeName != "" {
				fd.TypeName = proto.String(typeName)
			}
			switch v {
			case "opt_":
				if typ == descriptorpb.FieldDescriptorProto_TYPE_MESSAGE {
					continue
				}
				fd.Proto3Optional, fd.OneofIndex = proto.Bool(true), proto.Int32(int32(len(oneofs)))
				oneofs = append(oneofs, &descriptorpb.OneofDescriptorProto{Name: proto.String("_" + v + name)})
			case "rep_":
				fd.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
			}
			fields = append(fields, fd)
		}
	}
	T := descriptorpb.FieldDescriptorProto_Type_value
	for _, k := range []string{"int32", "sint32", "sfixed32", "uint32", "fixed32", "int64", "sint64", "sfixed64", "uint64", "fixed64", "float", "double", "bool", "string", "bytes"} {
		add(k, descriptorpb.FieldDescriptorProto_Type(T["TYPE_"+strings.ToUpper(k)]), "")
	}
	add("color", descriptorpb.FieldDescriptorProto_TYPE_ENUM, ".t.Color")
	add("free", descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.Struct")
	add("any", descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.Value")
	add("anys", descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.ListValue")
	add("child", descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".t.Kinds")
	file := &descriptorpb.FileDescriptorProto{Name: proto.String("t.proto"), Package: proto.String("t"), Syntax: proto.String("proto3"),
		Dependency: []string{"google/protobuf/struct.proto"},
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Color"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("NONE"), Number: proto.Int32(0)}, {Name: proto.String("RED"), Number: proto.Int32(1)}, {Name: proto.String("LOW"), Number: proto.Int32(-1)}}}},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Kinds"), Field: fields, OneofDecl: oneofs}}}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(structpb.File_google_protobuf_struct_proto); err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(file, files)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("Kinds")
}

// TestEncode: JSON encoded straight into wire form is the message
// protojson.Unmarshal makes of it, for every kind, and what protojson
// refuses is refused.
func TestEncode(t *testing.T) {
	st, empty := (&structpb.Struct{}).ProtoReflect().Descriptor(), (&emptypb.Empty{}).ProtoReflect().Descriptor()
	k := kinds(t)
	cases := []struct {
		md   protoreflect.MessageDescriptor
		json string
	}{
		{st, `{"results":[{"n":1,"s":"x","b":false,"z":null,"l":[1,"a",{"q":[]}],"o":{}}],"more":true}`},
		{st, `{}`},
		{st, `[]`},
		{st, `{"a":}`},
		{empty, `{}`},
		{empty, `{"x":1}`},
		{k, `{"string":"camel \u00e9\"\\\/\b\f\n\r\t\ud83d\ude00 é","int64":"9007199254740993","int32":1e2}`},
		{k, `{"rep_child":[null]}`},
		{k, `{"unknown":1}`},
		{k, `{"string":1}`},
		{k, `{"int32":1.5}`},
		{k, `{"int32":true}`},
		{k, `{"int32":2147483648}`},
		{k, `null`},
		{k, `{"string":"a"} x`},
		{k, `{"string":"a",}`},
		{k, `{"child":null,"free":null,"anys":null,"any":null,"rep_int32":null}`},
		{k, `{"int32":-5,"sint32":-5,"sfixed32":-5,"uint32":5,"fixed32":5,"int64":-9007199254740993,"sint64":"-7","sfixed64":-8,"uint64":"18446744073709551615","fixed64":9,
			"float":1.5,"double":-0.0,"bool":true,"string":"s","bytes":"aGk=","color":"RED","free":{"a":1},"any":null,"anys":[1,null],"child":{"int32":1,"child":{}}}`},
		{k, `{"int32":0,"sint32":0,"sfixed32":0,"uint32":0,"fixed32":0,"int64":0,"sint64":0,"sfixed64":0,"uint64":0,"fixed64":0,"float":0,"double":0,"bool":false,"string":"","bytes":"","color":"NONE",
			"opt_int32":0,"opt_sint32":0,"opt_sfixed32":0,"opt_uint32":0,"opt_fixed32":0,"opt_int64":0,"opt_sint64":0,"opt_sfixed64":0,"opt_uint64":0,"opt_fixed64":0,"opt_float":0,"opt_double":0,"opt_bool":false,"opt_string":"","opt_bytes":"","opt_color":0}`},
		{k, `{"rep_int32":[1,-2,0],"rep_sint32":[-1,0],"rep_sfixed32":[-1],"rep_uint32":[4294967295],"rep_fixed32":[1],"rep_int64":["-1"],"rep_sint64":[-3],"rep_sfixed64":[3],"rep_uint64":[1],"rep_fixed64":[2],
			"rep_float":[1.25,"NaN","-Infinity"],"rep_double":["Infinity",1e308],"rep_bool":[true,false],"rep_string":["","a"],"rep_bytes":["aGk","-_8="],"rep_color":["LOW",1],
			"rep_free":[{},{"a":null}],"rep_any":[null,1,"a",[],{}],"rep_anys":[[],[1]],"rep_child":[{},{"rep_int32":[]}]}`},
		{k, `{"int32":"12","uint32":-1}`},
		{k, `{"float":3.5e38}`},
		{k, `{"color":"BLUE"}`},
		{k, `{"rep_int32":[null]}`},
		{k, `{"int64":9223372036854775808}`},
	}
	for _, c := range cases {
		want := dynamicpb.NewMessage(c.md)
		errWant := protojson.Unmarshal([]byte(c.json), want)
		b, err := jsonwire.Encode([]byte(c.json), c.md)
		if (err == nil) != (errWant == nil) {
			t.Errorf("%s: Encode %v, protojson %v", c.json, err, errWant)
			continue
		}
		if err != nil {
			t.Logf("refused alike: %s: %v", c.json, errWant)
			continue
		}
		got := dynamicpb.NewMessage(c.md)
		if err := proto.Unmarshal(b, got); err != nil {
			t.Fatalf("%s: %v", c.json, err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("%s:\nwire  %v\nproto %v", c.json, got, want)
		}
	}
	// A NaN double is never equal to itself: checked apart.
	b, _ := jsonwire.Encode([]byte(`{"double":"NaN"}`), k)
	got := dynamicpb.NewMessage(k)
	if proto.Unmarshal(b, got) != nil || !math.IsNaN(got.Get(k.Fields().ByName("double")).Float()) {
		t.Errorf("NaN: %v", got)
	}
}

// TestFromWire: a request's wire form read straight is the JSON
// FromMessage writes of its message, and what a client's encoder does
// not write is left to the message (ok false).
func TestFromWire(t *testing.T) {
	k := kinds(t)
	for _, js := range []string{
		`{}`,
		`{"int32":-5,"sint32":-5,"sfixed32":-5,"uint32":5,"fixed32":5,"int64":-9007199254740993,"sint64":"-7","sfixed64":-8,"uint64":"18446744073709551615","fixed64":9,
			"float":0.1,"double":-0.0,"bool":true,"string":"s \"q\" \\ \n é <&>","bytes":"aGk=","color":"LOW","free":{"a":1,"b":[null,true,"x",{"c":1e-7}],"d":1e21},"any":null,"anys":[1,null],"child":{"int32":1,"child":{}}}`,
		`{"int32":0,"string":"","bool":false,"double":0,"opt_int32":0,"opt_string":"","opt_bool":false,"opt_double":0,"opt_color":"NONE","free":{},"anys":[],"child":{}}`,
		`{"rep_int32":[1,-2,0],"rep_sint32":[-1,0],"rep_sfixed32":[-1],"rep_uint32":[4294967295],"rep_fixed32":[1],"rep_int64":["-1"],"rep_sint64":[-3],"rep_sfixed64":[3],"rep_uint64":[1],"rep_fixed64":[2],
			"rep_float":[1.25,"-Infinity"],"rep_double":["Infinity",1e308,"NaN"],"rep_bool":[true,false],"rep_string":["","a"],"rep_bytes":["aGk","-_8="],"rep_color":["LOW",1],
			"rep_free":[{},{"a":null}],"rep_any":[null,1,"a",[],{}],"rep_anys":[[],[1]],"rep_child":[{},{"rep_int32":[]}]}`,
		`{"any":123456789}`, `{"any":"x"}`, `{"any":{"n":-1.5e-10}}`, `{"rep_int32":[]}`,
	} {
		m := dynamicpb.NewMessage(k)
		if err := protojson.Unmarshal([]byte(js), m); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := jsonwire.FromMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := jsonwire.FromWire(b, k)
		if !ok {
			t.Errorf("%s: not read straight", js)
			continue
		}
		if g, w := decoded(t, got), decoded(t, want); !reflect.DeepEqual(g, w) {
			t.Errorf("%s:\nFromWire    %s\nFromMessage %s", js, got, want)
		}
	}
	num := func(name string) protowire.Number { return k.Fields().ByName(protoreflect.Name(name)).Number() }
	str := func(b []byte, name, v string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num(name), protowire.BytesType), v)
	}
	vint := func(b []byte, name string, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, num(name), protowire.VarintType), v)
	}
	value := func(fields ...[]byte) []byte {
		var v []byte
		for _, f := range fields {
			v = append(v, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, num("any"), protowire.BytesType), v)
	}
	entry := func(key string) []byte {
		e := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), key)
		e = protowire.AppendBytes(protowire.AppendTag(e, 2, protowire.BytesType), []byte{0x08, 0x00})
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), e)
	}
	free := func(entries ...[]byte) []byte {
		var v []byte
		for _, e := range entries {
			v = append(v, e...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, num("free"), protowire.BytesType), v)
	}
	// Zeros sent explicitly are not set (proto3 without presence), but for
	// optional fields; an empty packed list is no list.
	zeros := str(vint(vint(str(nil, "string", ""), "int32", 0), "opt_int32", 0), "opt_string", "")
	zeros = protowire.AppendBytes(protowire.AppendTag(zeros, num("rep_int32"), protowire.BytesType), nil)
	if got, ok := jsonwire.FromWire(zeros, k); !ok || !reflect.DeepEqual(decoded(t, got), map[string]any{"opt_int32": int64(0), "opt_string": ""}) {
		t.Errorf("explicit zeros: %s %v", got, ok)
	}
	for name, b := range map[string][]byte{
		"a singular field twice":   str(str(nil, "string", "a"), "string", "b"),
		"a message twice":          append(free(entry("a")), free(entry("b"))...),
		"an interrupted list":      str(vint(str(nil, "rep_string", "a"), "int32", 1), "rep_string", "b"),
		"an unknown field":         protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1),
		"a wrong wire type":        protowire.AppendFixed32(protowire.AppendTag(nil, num("int32"), protowire.Fixed32Type), 1),
		"invalid UTF-8":            str(nil, "string", "\xff"),
		"a Value of two kinds":     value([]byte{0x08, 0x00}, []byte{0x20, 0x01}),
		"a Value of no kind":       value(),
		"a NaN Value":              value(protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), math.Float64bits(math.NaN()))),
		"a Struct key twice":       free(entry("a"), entry("a")),
		"a truncated field":        str(nil, "string", "abc")[:3],
		"two members of one oneof": vint(vint(nil, "opt_int32", 1), "opt_int32", 2),
	} {
		if got, ok := jsonwire.FromWire(b, k); ok {
			t.Errorf("%s: read straight as %s", name, got)
		}
	}
}

// decoded is JSON as the strict decoder sees it: integers exact, other
// numbers as float64.
func decoded(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var norm func(v any) any
	norm = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			if i, err := x.Int64(); err == nil {
				return i
			}
			f, _ := x.Float64()
			return f
		case []any:
			for i := range x {
				x[i] = norm(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = norm(x[k])
			}
		}
		return v
	}
	return norm(v)
}
