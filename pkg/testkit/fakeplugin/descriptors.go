package fakeplugin

import (
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Variant is the proto build a fake plugin serves.
type Variant int

const (
	// Upstream numbers every message as the upstream protos do at the
	// commits plugin-protocols.md read.
	Upstream Variant = iota
	// Skewed is a plugin built from another version of the protos: every
	// field renumbered (reverse order, from 100), fields an older build
	// lacks removed (cost domain_id, EventInfo.resources,
	// TaskInfo.task_changed), cost and usage_quantity as float (before
	// 2024-04), an extra CostInfo.currency, NotificationType numbered
	// differently and ResourceInfo.State without SKIP. A client that
	// encodes by number instead of by name breaks on it.
	Skewed
)

func (v Variant) String() string {
	if v == Skewed {
		return "skewed"
	}
	return "upstream"
}

const (
	tStr    = descriptorpb.FieldDescriptorProto_TYPE_STRING
	tBool   = descriptorpb.FieldDescriptorProto_TYPE_BOOL
	tInt32  = descriptorpb.FieldDescriptorProto_TYPE_INT32
	tDouble = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE
	tFloat  = descriptorpb.FieldDescriptorProto_TYPE_FLOAT
	tMsg    = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	tEnum   = descriptorpb.FieldDescriptorProto_TYPE_ENUM
)

type fld struct {
	name     string
	num      int32
	typ      descriptorpb.FieldDescriptorProto_Type
	typeName string // for messages and enums: ".pkg.Name"
	repeated bool
}

func s(name string, n int32) fld { return fld{name: name, num: n, typ: tStr} }
func st(name string, n int32) fld {
	return fld{name: name, num: n, typ: tMsg, typeName: ".google.protobuf.Struct"}
}
func m(name string, n int32, t string) fld {
	return fld{name: name, num: n, typ: tMsg, typeName: t}
}
func rep(f fld) fld { f.repeated = true; return f }

type msg struct {
	name   string
	fields []fld
	enums  []enum // nested
}

type enum struct {
	name   string
	values []string // numbered in order from 0
}

type rpc struct {
	name, in, out string // in/out: ".pkg.Name"
	stream        bool
}

type svc struct {
	name string
	rpcs []rpc
}

type file struct {
	path, pkg string
	msgs      []msg
	enums     []enum
	svcs      []svc
}

const empty = ".google.protobuf.Empty"

// files are the plugin proto packages (plugin-protocols.md §3–7).
func files() []file {
	const inv, mon, cost, noti = ".spaceone.api.inventory.plugin.", ".spaceone.api.monitoring.plugin.", ".spaceone.api.cost_analysis.plugin.", ".spaceone.api.notification.plugin."
	const idp = ".spaceone.api.identity.plugin."
	return []file{{
		path: "spaceone/api/inventory/plugin/collector.proto", pkg: "spaceone.api.inventory.plugin",
		msgs: []msg{
			{name: "InitRequest", fields: []fld{st("options", 1)}},
			{name: "PluginInfo", fields: []fld{st("metadata", 1)}},
			{name: "VerifyRequest", fields: []fld{st("options", 1), st("secret_data", 2)}},
			{name: "CollectRequest", fields: []fld{st("options", 1), st("secret_data", 2), st("filter", 3), st("task_options", 4)}},
			{name: "ResourceInfo", fields: []fld{
				{name: "state", num: 1, typ: tEnum, typeName: inv + "ResourceInfo.State"}, s("message", 2), s("resource_type", 3),
				st("match_rules", 4), st("resource", 6), st("options", 7)},
				enums: []enum{{name: "State", values: []string{"NONE", "CREATED", "PENDING", "INPROGRESS", "SUCCESS", "FAILURE", "TIMEOUT", "IDLE", "SKIP"}}}},
			{name: "TaskFilter", fields: []fld{rep(s("providers", 1)), rep(s("cloud_service_groups", 2)), rep(s("cloud_service_types", 3)),
				rep(s("region_codes", 4)), rep(s("resources", 5))}},
			{name: "GetTaskRequest", fields: []fld{st("secret_data", 1), st("options", 2), m("task_filter", 3, inv+"TaskFilter")}},
			{name: "TaskInfo", fields: []fld{st("task_options", 1)}},
			{name: "TasksInfo", fields: []fld{rep(m("tasks", 1, inv+"TaskInfo"))}},
		},
		svcs: []svc{
			{name: "Collector", rpcs: []rpc{{"init", inv + "InitRequest", inv + "PluginInfo", false}, {"verify", inv + "VerifyRequest", empty, false},
				{"collect", inv + "CollectRequest", inv + "ResourceInfo", true}}},
			{name: "Job", rpcs: []rpc{{"get_tasks", inv + "GetTaskRequest", inv + "TasksInfo", false}}},
		},
	}, {
		path: "spaceone/api/monitoring/plugin/plugin.proto", pkg: "spaceone.api.monitoring.plugin",
		enums: []enum{{name: "Severity", values: []string{"NONE", "CRITICAL", "ERROR", "WARNING", "INFO", "NOT_AVAILABLE"}}},
		msgs: []msg{
			{name: "WebhookInitRequest", fields: []fld{st("options", 1)}},
			{name: "WebhookPluginInfo", fields: []fld{st("metadata", 1)}},
			{name: "WebhookPluginVerifyRequest", fields: []fld{st("options", 1)}},
			{name: "ParseRequest", fields: []fld{st("options", 1), st("data", 2)}},
			{name: "EventInfo", fields: []fld{s("event_key", 1), s("event_type", 2), s("title", 3), s("description", 4),
				{name: "severity", num: 5, typ: tEnum, typeName: mon + "Severity"}, st("resource", 6), s("rule", 7), s("occurred_at", 8),
				st("additional_info", 9), s("image_url", 10), s("provider", 11), s("account", 12), rep(s("resources", 13))}},
			{name: "EventsInfo", fields: []fld{rep(m("results", 1, mon+"EventInfo"))}},
			{name: "InitRequest", fields: []fld{st("options", 1)}},
			{name: "PluginInfo", fields: []fld{st("metadata", 1)}},
			{name: "PluginVerifyRequest", fields: []fld{st("options", 1), st("secret_data", 2), s("schema", 3)}},
			{name: "MetricRequest", fields: []fld{st("options", 1), st("secret_data", 2), st("query", 3), s("schema", 4)}},
			{name: "MetricInfo", fields: []fld{s("key", 1), s("name", 2), s("group", 3), st("unit", 4), st("metric_query", 5)}},
			{name: "MetricsInfo", fields: []fld{rep(m("metrics", 1, mon+"MetricInfo"))}},
			{name: "MetricDataRequest", fields: []fld{st("options", 1), st("secret_data", 2), st("metric_query", 3), s("metric", 4),
				s("start", 5), s("end", 6), {name: "period", num: 7, typ: tInt32}, s("stat", 8), s("schema", 9)}},
			{name: "MetricDataInfo", fields: []fld{m("labels", 1, ".google.protobuf.ListValue"), st("values", 2)}},
			{name: "Sort", fields: []fld{s("key", 1), {name: "desc", num: 2, typ: tBool}}},
			{name: "LogRequest", fields: []fld{st("options", 1), st("secret_data", 2), s("schema", 3), st("query", 4), s("keyword", 5),
				s("start", 10), s("end", 11), m("sort", 12, mon+"Sort"), {name: "limit", num: 13, typ: tInt32}}},
			{name: "LogsDataInfo", fields: []fld{rep(st("results", 1))}},
		},
		svcs: []svc{
			{name: "Webhook", rpcs: []rpc{{"init", mon + "WebhookInitRequest", mon + "WebhookPluginInfo", false},
				{"verify", mon + "WebhookPluginVerifyRequest", empty, false}}},
			{name: "Event", rpcs: []rpc{{"parse", mon + "ParseRequest", mon + "EventsInfo", false}}},
			{name: "DataSource", rpcs: []rpc{{"init", mon + "InitRequest", mon + "PluginInfo", false}, {"verify", mon + "PluginVerifyRequest", empty, false}}},
			{name: "Metric", rpcs: []rpc{{"list", mon + "MetricRequest", mon + "MetricsInfo", false}, {"get_data", mon + "MetricDataRequest", mon + "MetricDataInfo", false}}},
			{name: "Log", rpcs: []rpc{{"list", mon + "LogRequest", mon + "LogsDataInfo", true}}},
		},
	}, {
		path: "spaceone/api/cost_analysis/plugin/plugin.proto", pkg: "spaceone.api.cost_analysis.plugin",
		msgs: []msg{
			{name: "InitRequest", fields: []fld{st("options", 1), s("domain_id", 2)}},
			{name: "PluginInfo", fields: []fld{st("metadata", 1)}},
			{name: "PluginVerifyRequest", fields: []fld{st("options", 1), st("secret_data", 2), s("schema", 3), s("domain_id", 4)}},
			{name: "GetTasksRequest", fields: []fld{st("options", 1), st("secret_data", 2), s("schema", 3), s("start", 4),
				s("last_synchronized_at", 5), s("domain_id", 6), rep(st("linked_accounts", 7))}},
			{name: "ChangedInfo", fields: []fld{s("start", 1), s("end", 2), st("filter", 3)}},
			{name: "TaskInfo", fields: []fld{st("task_options", 1), m("task_changed", 2, cost+"ChangedInfo")}},
			{name: "SyncedAccountInfo", fields: []fld{s("account_id", 1), s("name", 2)}},
			{name: "TasksInfo", fields: []fld{rep(m("tasks", 1, cost+"TaskInfo")), rep(m("changed", 2, cost+"ChangedInfo")),
				rep(m("synced_accounts", 3, cost+"SyncedAccountInfo"))}},
			{name: "GetLinkedAccountsRequest", fields: []fld{st("options", 1), s("schema", 2), st("secret_data", 3), s("domain_id", 21)}},
			{name: "AccountInfo", fields: []fld{s("account_id", 1), s("name", 2)}},
			{name: "AccountsInfo", fields: []fld{rep(m("results", 1, cost+"AccountInfo"))}},
			{name: "GetDataRequest", fields: []fld{st("options", 1), st("secret_data", 2), s("schema", 3), st("task_options", 4), s("domain_id", 5)}},
			{name: "CostInfo", fields: []fld{{name: "cost", num: 1, typ: tDouble}, {name: "usage_quantity", num: 2, typ: tDouble},
				s("usage_unit", 3), s("provider", 4), s("region_code", 5), s("product", 6), s("usage_type", 7), s("resource", 8),
				st("tags", 12), st("additional_info", 13), st("data", 14), s("billed_date", 21)}},
			{name: "CostsInfo", fields: []fld{rep(m("results", 1, cost+"CostInfo"))}},
		},
		svcs: []svc{
			{name: "DataSource", rpcs: []rpc{{"init", cost + "InitRequest", cost + "PluginInfo", false}, {"verify", cost + "PluginVerifyRequest", empty, false}}},
			{name: "Job", rpcs: []rpc{{"get_tasks", cost + "GetTasksRequest", cost + "TasksInfo", false}}},
			{name: "Cost", rpcs: []rpc{{"get_linked_accounts", cost + "GetLinkedAccountsRequest", cost + "AccountsInfo", false},
				{"get_data", cost + "GetDataRequest", cost + "CostsInfo", true}}},
		},
	}, {
		path: "spaceone/api/notification/plugin/plugin.proto", pkg: "spaceone.api.notification.plugin",
		enums: []enum{{name: "NotificationType", values: []string{"NOTIFICATION_TYPE_NONE", "INFO", "ERROR", "SUCCESS", "WARNING"}}},
		msgs: []msg{
			{name: "InitRequest", fields: []fld{st("options", 1)}},
			{name: "PluginInfo", fields: []fld{st("metadata", 1)}},
			{name: "PluginVerifyRequest", fields: []fld{st("options", 1), st("secret_data", 2)}},
			{name: "PluginDispatchRequest", fields: []fld{st("options", 1), st("message", 2),
				{name: "notification_type", num: 3, typ: tEnum, typeName: noti + "NotificationType"}, st("secret_data", 4), st("channel_data", 5)}},
		},
		svcs: []svc{
			{name: "Protocol", rpcs: []rpc{{"init", noti + "InitRequest", noti + "PluginInfo", false}, {"verify", noti + "PluginVerifyRequest", empty, false}}},
			{name: "Notification", rpcs: []rpc{{"dispatch", noti + "PluginDispatchRequest", empty, false}}},
		},
	}, {
		path: "spaceone/api/identity/plugin/account_collector.proto", pkg: "spaceone.api.identity.plugin",
		msgs: []msg{
			{name: "InitRequest", fields: []fld{st("options", 1), s("domain_id", 21)}},
			{name: "PluginInfo", fields: []fld{st("metadata", 1)}},
			{name: "SyncRequest", fields: []fld{st("options", 1), s("schema_id", 2), st("secret_data", 3), s("domain_id", 21)}},
			{name: "AccountInfo", fields: []fld{s("name", 1), st("data", 2), s("resource_id", 3), s("secret_schema_id", 4),
				st("secret_data", 5), st("tags", 6), rep(st("location", 7))}},
			{name: "AccountsInfo", fields: []fld{rep(m("results", 1, idp+"AccountInfo"))}},
		},
		svcs: []svc{
			{name: "AccountCollector", rpcs: []rpc{{"init", idp + "InitRequest", idp + "PluginInfo", false}, {"sync", idp + "SyncRequest", idp + "AccountsInfo", false}}},
		},
	}}
}

// skew turns the upstream files into the Skewed variant.
func skew(fs []file) []file {
	drop := map[string]bool{
		"spaceone.api.cost_analysis.plugin.InitRequest.domain_id":         true,
		"spaceone.api.cost_analysis.plugin.PluginVerifyRequest.domain_id": true,
		"spaceone.api.cost_analysis.plugin.GetTasksRequest.domain_id":     true,
		"spaceone.api.cost_analysis.plugin.GetDataRequest.domain_id":      true,
		"spaceone.api.cost_analysis.plugin.TaskInfo.task_changed":         true,
		"spaceone.api.monitoring.plugin.EventInfo.resources":              true,
	}
	out := make([]file, len(fs))
	for i, f := range fs {
		f.msgs = slices.Clone(f.msgs)
		for j, mg := range f.msgs {
			var kept []fld
			for _, fl := range mg.fields {
				if drop[f.pkg+"."+mg.name+"."+fl.name] {
					continue
				}
				if f.pkg == "spaceone.api.cost_analysis.plugin" && mg.name == "CostInfo" && fl.typ == tDouble {
					fl.typ = tFloat
				}
				kept = append(kept, fl)
			}
			if f.pkg == "spaceone.api.cost_analysis.plugin" && mg.name == "CostInfo" {
				kept = append(kept, s("currency", 30))
			}
			sort.Slice(kept, func(a, b int) bool { return kept[a].num < kept[b].num })
			for k := range kept {
				kept[k].num = int32(100 + len(kept) - k)
			}
			mg.fields = kept
			mg.enums = slices.Clone(mg.enums)
			for k, e := range mg.enums {
				if e.name == "State" {
					e.values = slices.DeleteFunc(slices.Clone(e.values), func(v string) bool { return v == "SKIP" })
					mg.enums[k] = e
				}
			}
			f.msgs[j] = mg
		}
		f.enums = slices.Clone(f.enums)
		for k, e := range f.enums {
			if e.name == "NotificationType" { // the alert-manager numbering
				e.values = []string{"NOTIFICATION_TYPE_NONE", "ERROR", "WARNING", "SUCCESS", "INFO"}
				f.enums[k] = e
			}
		}
		out[i] = f
	}
	return out
}

func enumProto(e enum) *descriptorpb.EnumDescriptorProto {
	ep := &descriptorpb.EnumDescriptorProto{Name: proto.String(e.name)}
	for i, v := range e.values {
		ep.Value = append(ep.Value, &descriptorpb.EnumValueDescriptorProto{Name: proto.String(v), Number: proto.Int32(int32(i))})
	}
	return ep
}

func (f file) proto() *descriptorpb.FileDescriptorProto {
	fp := &descriptorpb.FileDescriptorProto{
		Name: proto.String(f.path), Package: proto.String(f.pkg), Syntax: proto.String("proto3"),
		Dependency: []string{"google/protobuf/struct.proto", "google/protobuf/empty.proto"},
	}
	for _, e := range f.enums {
		fp.EnumType = append(fp.EnumType, enumProto(e))
	}
	for _, mg := range f.msgs {
		mp := &descriptorpb.DescriptorProto{Name: proto.String(mg.name)}
		for _, fl := range mg.fields {
			label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
			if fl.repeated {
				label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
			}
			fdp := &descriptorpb.FieldDescriptorProto{Name: proto.String(fl.name), Number: proto.Int32(fl.num),
				Label: label.Enum(), Type: fl.typ.Enum(), JsonName: proto.String(jsonName(fl.name))}
			if fl.typeName != "" {
				fdp.TypeName = proto.String(fl.typeName)
			}
			mp.Field = append(mp.Field, fdp)
		}
		for _, e := range mg.enums {
			mp.EnumType = append(mp.EnumType, enumProto(e))
		}
		fp.MessageType = append(fp.MessageType, mp)
	}
	for _, sv := range f.svcs {
		sp := &descriptorpb.ServiceDescriptorProto{Name: proto.String(sv.name)}
		for _, r := range sv.rpcs {
			mp := &descriptorpb.MethodDescriptorProto{Name: proto.String(r.name), InputType: proto.String(r.in), OutputType: proto.String(r.out)}
			if r.stream {
				mp.ServerStreaming = proto.Bool(true)
			}
			sp.Method = append(sp.Method, mp)
		}
		fp.Service = append(fp.Service, sp)
	}
	return fp
}

// jsonName is protoc's lowerCamelCase JSON name.
func jsonName(n string) string {
	out := make([]byte, 0, len(n))
	up := false
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}

// Registry is the descriptors of every plugin kind in one variant, with
// the well-known files they import: what a fake plugin serves through
// reflection.
func Registry(v Variant) (*protoregistry.Files, error) {
	fs := files()
	if v == Skewed {
		fs = skew(fs)
	}
	reg := new(protoregistry.Files)
	for _, wk := range []protoreflect.FileDescriptor{structpb.File_google_protobuf_struct_proto, emptypb.File_google_protobuf_empty_proto} {
		if err := reg.RegisterFile(wk); err != nil {
			return nil, err
		}
	}
	for _, f := range fs {
		fd, err := protodesc.NewFile(f.proto(), reg)
		if err != nil {
			return nil, fmt.Errorf("fakeplugin: %s: %w", f.path, err)
		}
		if err := reg.RegisterFile(fd); err != nil {
			return nil, err
		}
	}
	return reg, nil
}
