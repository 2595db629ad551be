package freeform

import (
	"fmt"
	"reflect"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Map is a free-form object whose nested objects are paths in a query:
// `data.hardware.core` reads core inside hardware (data, metadata,
// options, resource, ...). Its keys, at any depth, are stored escaped.
type Map map[string]any

// Flat is a free-form object of keys and values, as tags are: in a query
// everything after the field's name is one key, so
// `tags.kubernetes.io/cluster/prod` reads the tag of that name, as
// upstream's tag filters mean it. Stored like Map.
type Flat map[string]any

// List is a free-form list (labels) whose objects' keys are stored
// escaped.
type List []any

// MarshalBSONValue stores m with its keys escaped; nil is null.
func (m Map) MarshalBSONValue() (byte, []byte, error) { return marshalObject(m) }

// UnmarshalBSONValue reads a stored object back with its keys as
// written; nested objects and lists come back as map[string]any and []any.
func (m *Map) UnmarshalBSONValue(typ byte, data []byte) error {
	d, err := unmarshalObject(typ, data)
	*m = d
	return err
}

// MarshalBSONValue stores f with its keys escaped; nil is null.
func (f Flat) MarshalBSONValue() (byte, []byte, error) { return marshalObject(f) }

// UnmarshalBSONValue reads a stored object back with its keys as written.
func (f *Flat) UnmarshalBSONValue(typ byte, data []byte) error {
	d, err := unmarshalObject(typ, data)
	*f = d
	return err
}

// MarshalBSONValue stores l with its objects' keys escaped; nil is null.
func (l List) MarshalBSONValue() (byte, []byte, error) {
	if l == nil {
		return byte(bson.TypeNull), nil, nil
	}
	var v any = []any(l)
	if needs(v, 0) {
		v = escaped(v, 0)
	}
	t, b, err := bson.MarshalValue(v)
	return byte(t), b, err
}

// UnmarshalBSONValue reads a stored list back with its objects' keys as
// written.
func (l *List) UnmarshalBSONValue(typ byte, data []byte) error {
	switch bson.Type(typ) {
	case bson.TypeNull, bson.TypeUndefined:
		*l = nil
		return nil
	case bson.TypeArray:
		v, err := decodeArray(bson.RawArray(data))
		*l = v
		return err
	}
	return fmt.Errorf("freeform: BSON %s is not a list", bson.Type(typ))
}

func marshalObject(m map[string]any) (byte, []byte, error) {
	if m == nil {
		return byte(bson.TypeNull), nil, nil
	}
	var v any = m
	if needs(v, 0) {
		v = escaped(v, 0)
	}
	t, b, err := bson.MarshalValue(v)
	return byte(t), b, err
}

func unmarshalObject(typ byte, data []byte) (map[string]any, error) {
	switch bson.Type(typ) {
	case bson.TypeNull, bson.TypeUndefined:
		return nil, nil
	case bson.TypeEmbeddedDocument:
		return decodeDoc(bson.Raw(data))
	}
	return nil, fmt.Errorf("freeform: BSON %s is not an object", bson.Type(typ))
}

// maxDepth stops a walk of a self-referencing value; Check refuses such
// nesting at the API already.
const maxDepth = 100

// needs reports whether any key in v, at any depth, needs escaping.
func needs(v any, depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch x := v.(type) {
	case nil, string, bool, int, int32, int64, float64, time.Time, bson.DateTime:
		return false
	case map[string]any:
		return needsMap(x, depth)
	case Map:
		return needsMap(x, depth)
	case Flat:
		return needsMap(x, depth)
	case bson.M:
		return needsMap(x, depth)
	case []any:
		return needsList(x, depth)
	case List:
		return needsList(x, depth)
	case bson.A:
		return needsList(x, depth)
	case bson.D:
		for _, e := range x {
			if needsEscape(e.Key) || needs(e.Value, depth+1) {
				return true
			}
		}
		return false
	}
	rv := reflect.ValueOf(v)
	switch {
	case rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String:
		for it := rv.MapRange(); it.Next(); {
			if needsEscape(it.Key().String()) || needs(it.Value().Interface(), depth+1) {
				return true
			}
		}
	case (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array) && rv.Type().Elem().Kind() != reflect.Uint8:
		for i := range rv.Len() {
			if needs(rv.Index(i).Interface(), depth+1) {
				return true
			}
		}
	}
	return false
}

func needsMap(m map[string]any, depth int) bool {
	for k, e := range m {
		if needsEscape(k) || needs(e, depth+1) {
			return true
		}
	}
	return false
}

func needsList(l []any, depth int) bool {
	for _, e := range l {
		if needs(e, depth+1) {
			return true
		}
	}
	return false
}

// escaped is v with every key escaped, as plain maps and lists (other
// values as they are).
func escaped(v any, depth int) any {
	if depth > maxDepth {
		return v
	}
	switch x := v.(type) {
	case nil, string, bool, int, int32, int64, float64, time.Time, bson.DateTime:
		return v
	case map[string]any:
		return escapedMap(x, depth)
	case Map:
		return escapedMap(x, depth)
	case Flat:
		return escapedMap(x, depth)
	case bson.M:
		return escapedMap(x, depth)
	case []any:
		return escapedList(x, depth)
	case List:
		return escapedList(x, depth)
	case bson.A:
		return escapedList(x, depth)
	case bson.D:
		out := make(bson.D, len(x))
		for i, e := range x {
			out[i] = bson.E{Key: EscapeKey(e.Key), Value: escaped(e.Value, depth+1)}
		}
		return out
	}
	rv := reflect.ValueOf(v)
	switch {
	case rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String:
		if rv.IsNil() {
			return v
		}
		out := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			out[EscapeKey(it.Key().String())] = escaped(it.Value().Interface(), depth+1)
		}
		return out
	case (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array) && rv.Type().Elem().Kind() != reflect.Uint8:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return v
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = escaped(rv.Index(i).Interface(), depth+1)
		}
		return out
	}
	return v
}

func escapedMap(m map[string]any, depth int) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, e := range m {
		out[EscapeKey(k)] = escaped(e, depth+1)
	}
	return out
}

func escapedList(l []any, depth int) []any {
	if l == nil {
		return nil
	}
	out := make([]any, len(l))
	for i, e := range l {
		out[i] = escaped(e, depth+1)
	}
	return out
}

func decodeDoc(raw bson.Raw) (map[string]any, error) {
	elems, err := raw.Elements()
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(elems))
	for _, e := range elems {
		v, err := decodeValue(e.Value())
		if err != nil {
			return nil, err
		}
		out[UnescapeKey(e.Key())] = v
	}
	return out, nil
}

func decodeArray(raw bson.RawArray) ([]any, error) {
	vals, err := raw.Values()
	if err != nil {
		return nil, err
	}
	out := make([]any, len(vals))
	for i, rv := range vals {
		if out[i], err = decodeValue(rv); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeValue reads a value as the client reads one into an interface,
// but nested objects and lists as map[string]any and []any with their
// keys unescaped.
func decodeValue(rv bson.RawValue) (any, error) {
	switch rv.Type {
	case bson.TypeEmbeddedDocument:
		return decodeDoc(rv.Document())
	case bson.TypeArray:
		return decodeArray(rv.Array())
	case bson.TypeString:
		return rv.StringValue(), nil
	case bson.TypeInt32:
		return rv.Int32(), nil
	case bson.TypeInt64:
		return rv.Int64(), nil
	case bson.TypeDouble:
		return rv.Double(), nil
	case bson.TypeBoolean:
		return rv.Boolean(), nil
	case bson.TypeNull:
		return nil, nil
	}
	var x any
	err := rv.Unmarshal(&x)
	return x, err
}
