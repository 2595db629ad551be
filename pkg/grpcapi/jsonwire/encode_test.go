package jsonwire_test

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
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
