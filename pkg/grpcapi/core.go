package grpcapi

import (
	"fmt"
	"reflect"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/nubes-io/nubes/pkg/analyze"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
)

// The query messages of upstream's packages spaceone.api.core.v1 and v2,
// which every list, stat and analyze request's `query` is. Upstream's
// protos of a service import one of the two: identity v1 and the
// resources upstream removed before core v2 (their last protos) import
// v1, every other service v2 (docs/decisions.md, issue 39).
const (
	coreV1File = "spaceone/api/core/v1/query.proto"
	coreV2File = "spaceone/api/core/v2/query.proto"
)

// coreV1 are the packages and services whose upstream protos take core
// v1's messages; all others take v2's.
var coreV1 = map[string]bool{
	"spaceone.api.identity.v1":                       true,
	"spaceone.api.identity.v2.TrustedServiceAccount": true,
	"spaceone.api.repository.v1.Policy":              true,
	"spaceone.api.repository.v1.Schema":              true,
	"spaceone.api.board.v1.Board":                    true,
	"spaceone.api.dashboard.v1.ProjectDashboard":     true,
}

// coreVersion is the core query package a service's messages use.
func coreVersion(service string) int {
	pkg := service[:strings.LastIndexByte(service, '.')]
	if coreV1[service] || coreV1[pkg] {
		return 1
	}
	return 2
}

// coreMessages are the Go types described by upstream's core messages
// instead of their own fields: the JSON they accept is upstream's (and
// the few members Nubes accepts besides, coreFiles).
var coreMessages = map[reflect.Type]string{
	reflect.TypeFor[query.Query]():             "Query",
	reflect.TypeFor[stat.Query]():              "StatisticsQuery",
	reflect.TypeFor[analyze.Query]():           "AnalyzeQuery",
	reflect.TypeFor[analyze.TimeSeriesQuery](): "TimeSeriesAnalyzeQuery",
}

// coreMessage is the full name of a core message in a version; the
// analyze queries exist in v2 only among the services Nubes serves.
func coreMessage(name string, version int) (full, file string) {
	if version == 1 && name != "AnalyzeQuery" && name != "TimeSeriesAnalyzeQuery" {
		return ".spaceone.api.core.v1." + name, coreV1File
	}
	return ".spaceone.api.core.v2." + name, coreV2File
}

// cf is one field of a core message: its name, upstream's number, its
// type (a scalar, a well-known type, or a message of the same package),
// repeated, and the alias oneof it belongs to.
type cf struct {
	name   string
	number int32
	typ    string
	rep    bool
	oneof  string
}

type cm struct {
	name   string
	fields []cf
}

// alias is upstream's pair of a long and a short name for one member
// (key/k), a oneof so that only one is sent.
func alias(long, short string, n int32, typ string) []cf {
	return []cf{{long, n, typ, false, long + "_alias"}, {short, n + 1, typ, false, long + "_alias"}}
}

func fields(groups ...[]cf) []cf {
	var out []cf
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func one(name string, n int32, typ string) []cf  { return []cf{{name, n, typ, false, ""}} }
func many(name string, n int32, typ string) []cf { return []cf{{name, n, typ, true, ""}} }

// stage is one member of StatisticsAggregate's aggregate_alias oneof.
func stage(name string, n int32, typ string) []cf {
	return []cf{{name, n, typ, false, "aggregate_alias"}}
}

// Members Nubes accepts that upstream's messages lack take numbers from
// nubesField up, clear of upstream's.
const nubesField = 100

// coreFiles are upstream's core query messages field for field (names,
// numbers, types, the alias oneofs), less the members Nubes' queries do
// not take (Query's unwind, lookup and add_fields, and the analyze
// queries'), plus those it takes besides (a project field's operands
// `fields`/`f`; core v1's aggregate unwind `filter`). Enums are strings
// (the JSON is the same). docs/decisions.md, issue 39, lists them.
var coreFiles = map[string][]cm{
	coreV2File: {
		{"Filter", fields(alias("key", "k", 1, "string"), alias("value", "v", 3, "Value"), alias("operator", "o", 5, "string"))},
		{"Sort", fields(one("key", 1, "string"), one("desc", 2, "bool"))},
		{"Page", fields(one("start", 1, "uint32"), one("limit", 2, "uint32"))},
		{"Unwind", fields(one("path", 1, "string"), many("filter", 2, "Filter"))},
		{"Query", fields(many("filter", 1, "Filter"), many("filter_or", 2, "Filter"), many("sort", 3, "Sort"), one("page", 4, "Page"),
			one("minimal", 5, "bool"), one("count_only", 6, "bool"), many("only", 7, "string"), one("keyword", 8, "string"))},
		{"AggregateGroupKey", fields(alias("key", "k", 1, "string"), alias("name", "n", 3, "string"), one("date_format", 5, "string"))},
		{"AggregateGroupSubField", fields(alias("key", "k", 1, "string"), alias("name", "n", 3, "string"))},
		{"AggregateSubCondition", fields(alias("key", "k", 1, "string"), alias("value", "v", 3, "Value"), alias("operator", "o", 5, "string"))},
		{"AggregateGroupField", fields(alias("key", "k", 1, "string"), alias("name", "n", 3, "string"), alias("operator", "o", 5, "string"),
			many("fields", 7, "AggregateGroupSubField"), many("conditions", 8, "AggregateSubCondition"))},
		{"AggregateGroup", fields(many("keys", 1, "AggregateGroupKey"), many("fields", 2, "AggregateGroupField"))},
		{"AggregateProjectField", fields(alias("key", "k", 1, "string"), alias("name", "n", 3, "string"), alias("operator", "o", 5, "string"),
			alias("fields", "f", nubesField, "ListValue"))},
		{"AggregateProject", fields(many("fields", 1, "AggregateProjectField"), one("exclude_keys", 2, "bool"))},
		{"AggregateCount", fields(one("name", 1, "string"))},
		{"StatisticsAggregate", fields(stage("unwind", 1, "Unwind"), stage("group", 2, "AggregateGroup"), stage("count", 3, "AggregateCount"),
			stage("sort", 4, "ListValue"), stage("project", 5, "AggregateProject"), stage("limit", 6, "int32"), stage("skip", 7, "int32"))},
		{"StatisticsQuery", fields(many("filter", 1, "Filter"), many("filter_or", 2, "Filter"), many("aggregate", 3, "StatisticsAggregate"),
			one("page", 4, "Page"), one("distinct", 5, "string"), one("keyword", 6, "string"))},
		{"TimeSeriesAnalyzeQuery", fields(one("granularity", 1, "string"), one("start", 2, "string"), one("end", 3, "string"),
			one("group_by", 4, "ListValue"), many("field_group", 5, "string"), many("filter", 6, "Filter"), many("filter_or", 7, "Filter"),
			one("page", 8, "Page"), many("sort", 9, "Sort"), one("fields", 10, "Struct"), one("select", 11, "Struct"), one("keyword", 12, "string"))},
		{"AnalyzeQuery", fields(one("group_by", 1, "ListValue"), many("field_group", 2, "string"), many("filter", 3, "Filter"),
			many("filter_or", 4, "Filter"), one("page", 5, "Page"), many("sort", 6, "Sort"), one("fields", 7, "Struct"), one("select", 8, "Struct"),
			one("keyword", 9, "string"))},
	},
	coreV1File: {
		{"Filter", fields(alias("key", "k", 1, "string"), alias("value", "v", 3, "Value"), alias("operator", "o", 5, "string"))},
		{"SortKey", fields(one("key", 1, "string"), one("desc", 2, "bool"))},
		{"Sort", fields(one("key", 1, "string"), one("desc", 2, "bool"), many("keys", 3, "SortKey"))},
		{"Page", fields(one("start", 1, "uint32"), one("limit", 2, "uint32"))},
		{"Query", fields(many("filter", 1, "Filter"), many("filter_or", 2, "Filter"), one("sort", 3, "Sort"), one("page", 4, "Page"),
			one("minimal", 5, "bool"), one("count_only", 6, "bool"), many("only", 7, "string"), one("keyword", 8, "string"))},
		{"AggregateGroupKey", fields(alias("key", "k", 1, "string"), alias("name", "n", 3, "string"), one("date_format", 5, "string"))},
		{"AggregateGroupSubField", fields(alias("key", "k", 1, "string"), alias("name", "n", 3, "string"))},
		{"AggregateSubCondition", fields(alias("key", "k", 1, "string"), alias("value", "v", 3, "Value"), alias("operator", "o", 5, "string"))},
		{"AggregateGroupField", fields(alias("key", "k", 1, "string"), alias("name", "n", 3, "string"), alias("operator", "o", 5, "string"),
			many("fields", 7, "AggregateGroupSubField"), many("conditions", 8, "AggregateSubCondition"))},
		{"AggregateGroup", fields(many("keys", 1, "AggregateGroupKey"), many("fields", 2, "AggregateGroupField"))},
		{"AggregateProjectField", fields(alias("key", "k", 1, "string"), alias("name", "n", 3, "string"), alias("operator", "o", 5, "string"),
			alias("fields", "f", nubesField, "ListValue"))},
		{"AggregateProject", fields(many("fields", 1, "AggregateProjectField"), one("exclude_keys", 2, "bool"))},
		{"AggregateUnwind", fields(one("path", 1, "string"), many("filter", nubesField, "Filter"))},
		{"AggregateCount", fields(one("name", 1, "string"))},
		{"AggregateSort", fields(one("key", 1, "string"), one("desc", 2, "bool"), many("keys", 3, "SortKey"))},
		{"StatisticsAggregate", fields(stage("unwind", 1, "AggregateUnwind"), stage("group", 2, "AggregateGroup"), stage("count", 3, "AggregateCount"),
			stage("sort", 4, "AggregateSort"), stage("project", 5, "AggregateProject"), stage("limit", 6, "int32"), stage("skip", 7, "int32"))},
		{"StatisticsQuery", fields(many("filter", 1, "Filter"), many("filter_or", 2, "Filter"), many("aggregate", 3, "StatisticsAggregate"),
			one("page", 4, "Page"), one("distinct", 5, "string"), one("keyword", 6, "string"))},
	},
}

var scalarTypes = map[string]descriptorpb.FieldDescriptorProto_Type{
	"string": descriptorpb.FieldDescriptorProto_TYPE_STRING,
	"bool":   descriptorpb.FieldDescriptorProto_TYPE_BOOL,
	"uint32": descriptorpb.FieldDescriptorProto_TYPE_UINT32,
	"int32":  descriptorpb.FieldDescriptorProto_TYPE_INT32,
}

// coreFile builds one of the core query files.
func coreFile(path string, deps *protoregistry.Files) (protoreflect.FileDescriptor, error) {
	pkg := strings.ReplaceAll(strings.TrimSuffix(path, "/query.proto"), "/", ".")
	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String(path), Package: proto.String(pkg), Syntax: proto.String("proto3"),
		Dependency: []string{structFile},
	}
	for _, m := range coreFiles[path] {
		msg := &descriptorpb.DescriptorProto{Name: proto.String(m.name)}
		oneofs := map[string]int32{}
		for _, f := range m.fields {
			fd := &descriptorpb.FieldDescriptorProto{Name: proto.String(f.name), Number: proto.Int32(f.number),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(lowerCamel(f.name))}
			if f.rep {
				fd.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
			}
			switch t, ok := scalarTypes[f.typ]; {
			case ok:
				fd.Type = t.Enum()
			case f.typ == "Value" || f.typ == "ListValue" || f.typ == "Struct":
				fd.Type, fd.TypeName = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), proto.String(".google.protobuf."+f.typ)
			default:
				fd.Type, fd.TypeName = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), proto.String("."+pkg+"."+f.typ)
			}
			if f.oneof != "" {
				i, ok := oneofs[f.oneof]
				if !ok {
					i = int32(len(msg.OneofDecl))
					oneofs[f.oneof] = i
					msg.OneofDecl = append(msg.OneofDecl, &descriptorpb.OneofDescriptorProto{Name: proto.String(f.oneof)})
				}
				fd.OneofIndex = proto.Int32(i)
			}
			msg.Field = append(msg.Field, fd)
		}
		file.MessageType = append(file.MessageType, msg)
	}
	fd, err := protodesc.NewFile(file, deps)
	if err != nil {
		return nil, fmt.Errorf("grpcapi: %s: %w", path, err)
	}
	return fd, nil
}
