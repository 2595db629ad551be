package plugin

import (
	"encoding/json"
	"fmt"

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
// Struct numbers as float64.
func decodeReply(msg protoreflect.ProtoMessage) (map[string]any, error) {
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
