package grpcapi

import (
	"reflect"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/nubes-io/nubes/pkg/query"
)

// coreFileName holds upstream's list query messages (package
// spaceone.api.core.v2), which every list request's `query` is.
const coreFileName = "spaceone/api/core/v2/query.proto"

// coreMessages are the Go types described by upstream's core messages
// instead of their own fields: the JSON they accept is upstream's. The
// statistics and analyze queries are not here: Nubes accepts more shapes
// than upstream's messages have (docs/decisions.md, issue 39), so they are
// google.protobuf.Value fields.
var coreMessages = map[reflect.Type]string{
	reflect.TypeFor[query.Query](): ".spaceone.api.core.v2.Query",
}

// coreFile is upstream's Query with its Filter, Sort and Page, field for
// field (names, numbers, types and the alias oneofs of Filter).
func coreFile(deps *protoregistry.Files) (protoreflect.FileDescriptor, error) {
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	f := func(name string, n int32, label *descriptorpb.FieldDescriptorProto_Label, typ *descriptorpb.FieldDescriptorProto_Type, typeName string, oneof ...int32) *descriptorpb.FieldDescriptorProto {
		fd := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Label: label, Type: typ, JsonName: proto.String(lowerCamel(name))}
		if typeName != "" {
			fd.TypeName = proto.String(typeName)
		}
		if len(oneof) > 0 {
			fd.OneofIndex = proto.Int32(oneof[0])
		}
		return fd
	}
	oneofs := func(names ...string) []*descriptorpb.OneofDescriptorProto {
		var out []*descriptorpb.OneofDescriptorProto
		for _, n := range names {
			out = append(out, &descriptorpb.OneofDescriptorProto{Name: proto.String(n)})
		}
		return out
	}
	u32 := descriptorpb.FieldDescriptorProto_TYPE_UINT32.Enum()
	boolean := descriptorpb.FieldDescriptorProto_TYPE_BOOL.Enum()
	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String(coreFileName), Package: proto.String("spaceone.api.core.v2"), Syntax: proto.String("proto3"),
		Dependency: []string{structFile},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Filter"), OneofDecl: oneofs("key_alias", "value_alias", "operator_alias"), Field: []*descriptorpb.FieldDescriptorProto{
				f("key", 1, opt, str, "", 0), f("k", 2, opt, str, "", 0),
				f("value", 3, opt, msg, valueName, 1), f("v", 4, opt, msg, valueName, 1),
				f("operator", 5, opt, str, "", 2), f("o", 6, opt, str, "", 2),
			}},
			{Name: proto.String("Sort"), Field: []*descriptorpb.FieldDescriptorProto{f("key", 1, opt, str, ""), f("desc", 2, opt, boolean, "")}},
			{Name: proto.String("Page"), Field: []*descriptorpb.FieldDescriptorProto{f("start", 1, opt, u32, ""), f("limit", 2, opt, u32, "")}},
			{Name: proto.String("Query"), Field: []*descriptorpb.FieldDescriptorProto{
				f("filter", 1, rep, msg, ".spaceone.api.core.v2.Filter"), f("filter_or", 2, rep, msg, ".spaceone.api.core.v2.Filter"),
				f("sort", 3, rep, msg, ".spaceone.api.core.v2.Sort"), f("page", 4, opt, msg, ".spaceone.api.core.v2.Page"),
				f("minimal", 5, opt, boolean, ""), f("count_only", 6, opt, boolean, ""),
				f("only", 7, rep, str, ""), f("keyword", 8, opt, str, ""),
			}},
		},
	}
	return protodesc.NewFile(file, deps)
}
