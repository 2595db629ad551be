package repository

import (
	"encoding/json"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Doc is a free-form JSON object kept in the store as its JSON text: JSON
// Schemas (a schema, a plugin's template) hold keys such as $schema, $ref
// or dotted property names that MongoDB refuses or reads as operators.
// On the wire it is the object itself.
type Doc map[string]any

// MarshalBSONValue stores the object as a JSON string.
func (d Doc) MarshalBSONValue() (byte, []byte, error) {
	m := map[string]any(d)
	if m == nil {
		m = map[string]any{}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return 0, nil, err
	}
	return byte(bson.TypeString), bsoncore.AppendString(nil, string(raw)), nil
}

// UnmarshalBSONValue reads the JSON string back.
func (d *Doc) UnmarshalBSONValue(t byte, data []byte) error {
	switch bson.Type(t) {
	case bson.TypeNull, bson.TypeUndefined:
		*d = Doc{}
		return nil
	case bson.TypeString:
	default:
		return fmt.Errorf("repository.Doc: stored as BSON type %s, want a JSON string", bson.Type(t))
	}
	s, _, ok := bsoncore.ReadString(data)
	if !ok {
		return fmt.Errorf("repository.Doc: malformed string")
	}
	m := map[string]any{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return fmt.Errorf("repository.Doc: %w", err)
	}
	*d = m
	return nil
}
