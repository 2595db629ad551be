package model

import (
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Object is a free-form JSON object as stored (tags, options, metadata,
// additional_info, ...). The driver reads nested documents back as
// bson.D and arrays as bson.A, which JSON and the plugins' Structs would
// render wrongly; an Object reads them back as plain maps and slices.
type Object map[string]any

// UnmarshalBSONValue reads an embedded document as plain maps and slices.
func (o *Object) UnmarshalBSONValue(typ byte, data []byte) error {
	if bson.Type(typ) == bson.TypeNull || bson.Type(typ) == bson.TypeUndefined {
		*o = nil
		return nil
	}
	var d bson.D
	if err := bson.Unmarshal(data, &d); err != nil {
		return err
	}
	*o = Plain(d).(map[string]any)
	return nil
}

// Plain turns bson.D, bson.M and bson.A, at any depth, into
// map[string]any and []any.
func Plain(v any) any {
	switch x := v.(type) {
	case bson.D:
		m := make(map[string]any, len(x))
		for _, e := range x {
			m[e.Key] = Plain(e.Value)
		}
		return m
	case bson.M:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = Plain(e)
		}
		return m
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = Plain(e)
		}
		return m
	case bson.A:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Plain(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Plain(e)
		}
		return out
	}
	return v
}
