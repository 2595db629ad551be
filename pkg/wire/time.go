package wire

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// Time is a timestamp that is a BSON datetime in the store and an ISO 8601
// string with milliseconds and Z on the wire, so one struct can serve both
// where the stored and the wire shapes are the same. The zero Time is ""
// on the wire and null in the store.
type Time struct{ time.Time }

// T wraps t, truncated to milliseconds.
func T(t time.Time) Time { return Time{t.UTC().Truncate(time.Millisecond)} }

// MarshalJSON implements json.Marshaler. The text needs no escaping, so
// it is formatted straight into the quotes.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte(`""`), nil
	}
	b := make([]byte, 0, len(TimeLayout)+2)
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, TimeLayout)
	return append(b, '"'), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		*t = Time{}
		return nil
	}
	p, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = T(p)
	return nil
}

const (
	bsonDateTime = 0x09
	bsonNull     = 0x0A
)

// MarshalBSONValue implements bson.ValueMarshaler.
func (t Time) MarshalBSONValue() (byte, []byte, error) {
	if t.IsZero() {
		return bsonNull, nil, nil
	}
	return bsonDateTime, binary.LittleEndian.AppendUint64(nil, uint64(t.UnixMilli())), nil
}

// UnmarshalBSONValue implements bson.ValueUnmarshaler.
func (t *Time) UnmarshalBSONValue(typ byte, data []byte) error {
	switch typ {
	case bsonNull:
		*t = Time{}
	case bsonDateTime:
		if len(data) != 8 {
			return fmt.Errorf("bad BSON datetime of %d bytes", len(data))
		}
		*t = Time{time.UnixMilli(int64(binary.LittleEndian.Uint64(data))).UTC()}
	default:
		return fmt.Errorf("BSON type %#x is not a datetime", typ)
	}
	return nil
}
