package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/tenancy"
)

// Diff is the update that turns before into after, both the same Go type
// as stored: a $set of every top-level field whose stored form differs
// and an $unset of every field after leaves out (an omitempty emptied),
// nil when they are the same. _id, the version and the delete mark are
// never in it. Documents compare by content, not key order, so a map
// marshalled in another order is no change.
func Diff[T any](before, after *T) (bson.D, error) { return diff(before, after, VersionField) }

// diff is Diff leaving versionField (the compare-and-set's) out.
func diff[T any](before, after *T, versionField string) (bson.D, error) {
	b, err := bson.Marshal(before)
	if err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	a, err := bson.Marshal(after)
	if err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	was, err := bson.Raw(b).Elements()
	if err != nil {
		return nil, err
	}
	now, err := bson.Raw(a).Elements()
	if err != nil {
		return nil, err
	}
	old := make(map[string]bson.RawValue, len(was))
	for _, e := range was {
		old[e.Key()] = e.Value()
	}
	var set, unset bson.D
	for _, e := range now {
		k := e.Key()
		if fixed(k, versionField) {
			continue
		}
		if ov, ok := old[k]; !ok || !sameValue(ov, e.Value()) {
			set = append(set, bson.E{Key: k, Value: e.Value()})
		}
		delete(old, k)
	}
	for _, e := range was {
		if _, gone := old[e.Key()]; gone && !fixed(e.Key(), versionField) {
			unset = append(unset, bson.E{Key: e.Key(), Value: ""})
		}
	}
	var update bson.D
	if len(set) > 0 {
		update = append(update, bson.E{Key: "$set", Value: set})
	}
	if len(unset) > 0 {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	return update, nil
}

// fixed are the fields a change never writes.
func fixed(key, versionField string) bool {
	return key == "_id" || key == versionField || key == tenancy.MarkField
}

// withStamp adds stamp's fields to update's $set.
func withStamp(update bson.D, stamp []bson.E) bson.D {
	if len(stamp) == 0 {
		return update
	}
	for i, op := range update {
		if op.Key == "$set" {
			update[i].Value = append(op.Value.(bson.D), stamp...)
			return update
		}
	}
	return append(update, bson.E{Key: "$set", Value: bson.D(stamp)})
}

// sameValue compares two stored values by content: equal bytes, or
// documents with the same fields in another order (a Go map's).
func sameValue(a, b bson.RawValue) bool {
	if a.Type == b.Type && bytes.Equal(a.Value, b.Value) {
		return true
	}
	if a.Type != b.Type || (a.Type != bson.TypeEmbeddedDocument && a.Type != bson.TypeArray) {
		return false
	}
	return bytes.Equal(canonical(a), canonical(b))
}

// canonical is a value's bytes with every embedded document's fields
// sorted by key, recursively; each part is length-prefixed, so two
// different values never have the same canonical bytes.
func canonical(v bson.RawValue) []byte {
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		els, err := bson.Raw(v.Value).Elements()
		if err != nil {
			return v.Value
		}
		slices.SortFunc(els, func(x, y bson.RawElement) int { return bytes.Compare([]byte(x.Key()), []byte(y.Key())) })
		var buf bytes.Buffer
		buf.WriteByte(byte(v.Type))
		for _, e := range els {
			part(&buf, []byte(e.Key()))
			part(&buf, canonical(e.Value()))
		}
		return buf.Bytes()
	case bson.TypeArray:
		vals, err := bson.Raw(v.Value).Values()
		if err != nil {
			return v.Value
		}
		var buf bytes.Buffer
		buf.WriteByte(byte(v.Type))
		for _, x := range vals {
			part(&buf, canonical(x))
		}
		return buf.Bytes()
	default:
		out := append([]byte{byte(v.Type)}, v.Value...)
		return out
	}
}

func part(buf *bytes.Buffer, b []byte) {
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(b))))
	buf.Write(b)
}
