package plugin_test

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// TestDecodeReplyEqualsProtojson: the direct decoder gives what protojson's
// rendering read back by encoding/json gives, for replies shaped as the
// plugins send them (both proto builds) and for the scalar kinds no plugin
// proto uses yet.
func TestDecodeReplyEqualsProtojson(t *testing.T) {
	cases := []struct{ name, msg, json string }{
		{"cost rows", "spaceone.api.cost_analysis.plugin.CostsInfo", `{"results":[
			{"cost":0.25,"usage_quantity":1,"usage_unit":"Hrs","provider":"aws","region_code":"us-east-1","product":"Amazon EC2",
			 "resource":"i-1","tags":{"env":"prod","Name":"웹 서버 🚀","empty":""},"additional_info":{"Account ID":"111","n":1e21,"neg":-0.5,
			 "null":null,"list":[1,"two",true,null,{"x":[]}],"nested":{"a":{"b":{"c":3.141592653589793}}}},"data":{},"billed_date":"2024-01-01"},
			{"cost":0,"usage_quantity":-1.5e-7,"resource":"\u00e9\u0000\t\"q\""}]}`},
		{"cost tasks", "spaceone.api.cost_analysis.plugin.TasksInfo", `{"tasks":[{"task_options":{"part":0,"start":"2024-01"},
			"task_changed":{"start":"2024-01","filter":{}}},{"task_options":{}}],"changed":[{"start":"2023-12","end":"2024-01"}],
			"synced_accounts":[{"account_id":"1","name":"n"}]}`},
		{"empty tasks", "spaceone.api.cost_analysis.plugin.TasksInfo", `{}`},
		{"resource", "spaceone.api.inventory.plugin.ResourceInfo", `{"state":"SUCCESS","resource_type":"inventory.CloudService",
			"match_rules":{"1":["reference.resource_id","provider"]},"resource":{"name":"vm-1","data":{"n":7,"state":"running","ips":[]},
			"reference":{"resource_id":"i-00000001"},"tags":{"env":"prod"}},"options":{"update_mode":"MERGE"}}`},
		{"resource zero state", "spaceone.api.inventory.plugin.ResourceInfo", `{"state":"NONE","message":"日本語"}`},
		{"events", "spaceone.api.monitoring.plugin.EventsInfo", `{"results":[{"event_key":"k","severity":"CRITICAL","resources":["a","b"],
			"additional_info":{"x":null},"resource":{}}]}`},
	}
	for _, v := range []fakeplugin.Variant{fakeplugin.Upstream, fakeplugin.Skewed} {
		reg, err := fakeplugin.Registry(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			d, err := reg.FindDescriptorByName(protoreflect.FullName(c.msg))
			if err != nil {
				t.Fatal(err)
			}
			msg := dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(c.json), msg); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			same(t, c.name, msg)
		}
	}
	// Every scalar kind, maps, an unknown enum number, a NullValue field and
	// well-known types, on a message built by hand.
	md := scalarsDescriptor(t)
	full := func(set func(m *dynamicpb.Message, f func(string) protoreflect.FieldDescriptor)) *dynamicpb.Message {
		m := dynamicpb.NewMessage(md)
		set(m, func(n string) protoreflect.FieldDescriptor { return md.Fields().ByName(protoreflect.Name(n)) })
		return m
	}
	same(t, "scalars", full(func(m *dynamicpb.Message, f func(string) protoreflect.FieldDescriptor) {
		m.Set(f("i32"), protoreflect.ValueOfInt32(-7))
		m.Set(f("u32"), protoreflect.ValueOfUint32(4000000000))
		m.Set(f("i64"), protoreflect.ValueOfInt64(-9007199254740993))
		m.Set(f("u64"), protoreflect.ValueOfUint64(18446744073709551615))
		m.Set(f("f32"), protoreflect.ValueOfFloat32(0.1))
		m.Set(f("f64"), protoreflect.ValueOfFloat64(1.0/3))
		m.Set(f("b"), protoreflect.ValueOfBool(true))
		m.Set(f("raw"), protoreflect.ValueOfBytes([]byte{0, 0xff, 'a'}))
		m.Set(f("color"), protoreflect.ValueOfEnum(42))
		m.Set(f("nothing"), protoreflect.ValueOfEnum(0))
		l := m.Mutable(f("nums")).List()
		l.Append(protoreflect.ValueOfInt64(1))
		l.Append(protoreflect.ValueOfInt64(-2))
		mp := m.Mutable(f("counts")).Map()
		mp.Set(protoreflect.ValueOfString("a").MapKey(), protoreflect.ValueOfInt64(5))
		bm := m.Mutable(f("flags")).Map()
		bm.Set(protoreflect.ValueOfBool(true).MapKey(), protoreflect.ValueOfString("yes"))
		ts := timestamppb.New(timestamppb.Now().AsTime())
		m.Set(f("at"), protoreflect.ValueOfMessage(ts.ProtoReflect()))
		m.Set(f("wrapped"), protoreflect.ValueOfMessage(wrapperspb.Int64(12).ProtoReflect()))
		val, _ := structpb.NewValue(map[string]any{"k": []any{1.5, nil, "s"}})
		m.Set(f("value"), protoreflect.ValueOfMessage(val.ProtoReflect()))
		lv, _ := structpb.NewList([]any{"x", 2.0})
		m.Set(f("list"), protoreflect.ValueOfMessage(lv.ProtoReflect()))
	}))
	same(t, "non-finite floats", full(func(m *dynamicpb.Message, f func(string) protoreflect.FieldDescriptor) {
		m.Set(f("f32"), protoreflect.ValueOfFloat32(float32(posInf())))
		m.Set(f("f64"), protoreflect.ValueOfFloat64(-posInf()))
	}))
	same(t, "zero values absent", full(func(m *dynamicpb.Message, f func(string) protoreflect.FieldDescriptor) {
		m.Set(f("i64"), protoreflect.ValueOfInt64(0))
		m.Set(f("raw"), protoreflect.ValueOfBytes(nil))
	}))
	// What protojson refuses, the decoder refuses.
	for name, bad := range map[string]func(m *dynamicpb.Message, f func(string) protoreflect.FieldDescriptor){
		"value without kind": func(m *dynamicpb.Message, f func(string) protoreflect.FieldDescriptor) {
			m.Set(f("value"), protoreflect.ValueOfMessage((&structpb.Value{}).ProtoReflect()))
		},
		"invalid utf-8": func(m *dynamicpb.Message, f func(string) protoreflect.FieldDescriptor) {
			m.Set(f("s"), protoreflect.ValueOfString("\xff"))
		},
		"NaN in a struct": func(m *dynamicpb.Message, f func(string) protoreflect.FieldDescriptor) {
			m.Set(f("value"), protoreflect.ValueOfMessage(structpb.NewNumberValue(posInf()-posInf()).ProtoReflect()))
		},
	} {
		m := full(bad)
		if _, err := plugin.DecodeViaJSON(m); err == nil {
			t.Fatalf("%s: protojson accepted it", name)
		}
		if got, err := plugin.DecodeReply(m); err == nil {
			t.Errorf("%s: decoded as %v, want an error as protojson gives", name, got)
		}
	}
}

func posInf() float64 { var z float64; return 1 / z }

func same(t *testing.T, name string, msg proto.Message) {
	t.Helper()
	want, err := plugin.DecodeViaJSON(msg)
	if err != nil {
		t.Fatalf("%s: protojson: %v", name, err)
	}
	got, err := plugin.DecodeReply(msg)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %#v\nwant %#v", name, got, want)
	}
}

// scalarsDescriptor is a message with a field of each kind a plugin
// proto could add.
func scalarsDescriptor(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	type F = descriptorpb.FieldDescriptorProto
	opt, rep := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	fld := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, typeName string, label *descriptorpb.FieldDescriptorProto_Label) *F {
		f := &F{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(), Label: label, JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	entry := func(name string, k, v descriptorpb.FieldDescriptorProto_Type) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			Field: []*F{fld("key", 1, k, "", opt), fld("value", 2, v, "", opt)}}
	}
	fdp := &descriptorpb.FileDescriptorProto{Name: proto.String("nubes/test/scalars.proto"), Package: proto.String("nubes.test"), Syntax: proto.String("proto3"),
		Dependency: []string{"google/protobuf/struct.proto", "google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"},
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Color"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("NONE"), Number: proto.Int32(0)}, {Name: proto.String("RED"), Number: proto.Int32(1)}}}},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Scalars"),
			NestedType: []*descriptorpb.DescriptorProto{
				entry("CountsEntry", descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_INT64),
				entry("FlagsEntry", descriptorpb.FieldDescriptorProto_TYPE_BOOL, descriptorpb.FieldDescriptorProto_TYPE_STRING)},
			Field: []*F{
				fld("i32", 1, descriptorpb.FieldDescriptorProto_TYPE_SINT32, "", opt),
				fld("u32", 2, descriptorpb.FieldDescriptorProto_TYPE_FIXED32, "", opt),
				fld("i64", 3, descriptorpb.FieldDescriptorProto_TYPE_INT64, "", opt),
				fld("u64", 4, descriptorpb.FieldDescriptorProto_TYPE_UINT64, "", opt),
				fld("f32", 5, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, "", opt),
				fld("f64", 6, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "", opt),
				fld("b", 7, descriptorpb.FieldDescriptorProto_TYPE_BOOL, "", opt),
				fld("raw", 8, descriptorpb.FieldDescriptorProto_TYPE_BYTES, "", opt),
				fld("color", 9, descriptorpb.FieldDescriptorProto_TYPE_ENUM, ".nubes.test.Color", opt),
				fld("nothing", 10, descriptorpb.FieldDescriptorProto_TYPE_ENUM, ".google.protobuf.NullValue", opt),
				fld("nums", 11, descriptorpb.FieldDescriptorProto_TYPE_SFIXED64, "", rep),
				fld("counts", 12, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".nubes.test.Scalars.CountsEntry", rep),
				fld("flags", 13, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".nubes.test.Scalars.FlagsEntry", rep),
				fld("at", 14, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.Timestamp", opt),
				fld("wrapped", 15, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.Int64Value", opt),
				fld("value", 16, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.Value", opt),
				fld("list", 17, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.ListValue", opt),
				fld("s", 18, descriptorpb.FieldDescriptorProto_TYPE_STRING, "", opt),
			}}}}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("Scalars")
}
