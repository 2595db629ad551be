package query

import (
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ElemMatch is a compiled match condition: some element of the array at
// Path meets every condition of Cond. Keys of Cond are relative to the
// element; its $-operators apply to the element itself.
//
// It stands in a compiled filter as {Path: ElemMatch} rather than as
// {Path: {$elemMatch: Cond}}, because FerretDB 1.x evaluates $elemMatch
// against the whole array instead of each element: a condition on a member
// of an array of objects never matches (or fails with "unknown operator"),
// and two bounds on an array of scalars may hold on two different elements.
// store.Resolve replaces it with {_id: {$in: [...]}}, found by an $unwind
// aggregation that gives the same rows on MongoDB and FerretDB. A filter
// that still holds one cannot be encoded, so sending it unresolved fails
// loudly instead of matching nothing.
type ElemMatch struct {
	Path string
	Cond bson.D
}

// MarshalBSONValue refuses to encode an unresolved match.
func (m ElemMatch) MarshalBSONValue() (byte, []byte, error) {
	return 0, nil, fmt.Errorf("query: the match condition on %s was not resolved (call store.Resolve)", m.Path)
}

// Unwound is Cond on one element after `$unwind: "$<Path>"`, when the
// field at Path holds that element alone.
func (m ElemMatch) Unwound() bson.D {
	ops := bson.D{}
	fields := bson.D{}
	for _, e := range m.Cond {
		if strings.HasPrefix(e.Key, "$") {
			ops = append(ops, e)
			continue
		}
		fields = append(fields, bson.E{Key: m.Path + "." + e.Key, Value: e.Value})
	}
	if len(ops) == 0 {
		return fields
	}
	return append(bson.D{{Key: m.Path, Value: ops}}, fields...)
}

// ElemMatches lists the match conditions of a compiled filter.
func ElemMatches(filter bson.D) []ElemMatch {
	var out []ElemMatch
	_ = ReplaceElemMatch(filter, func(m ElemMatch) bson.D {
		out = append(out, m)
		return nil
	})
	return out
}

// ReplaceElemMatch returns a copy of a compiled filter in which each match
// condition is replaced by the elements fn returns for it. Filter puts
// match conditions only where a row must meet them (in $and and $or, never
// in $nor).
func ReplaceElemMatch(filter bson.D, fn func(ElemMatch) bson.D) bson.D {
	out := make(bson.D, 0, len(filter))
	for _, e := range filter {
		switch v := e.Value.(type) {
		case ElemMatch:
			out = append(out, fn(v)...)
			continue
		case bson.A:
			if e.Key == "$and" || e.Key == "$or" || e.Key == "$nor" {
				a := make(bson.A, len(v))
				for i, x := range v {
					if d, ok := x.(bson.D); ok {
						x = ReplaceElemMatch(d, fn)
					}
					a[i] = x
				}
				e.Value = a
			}
		}
		out = append(out, e)
	}
	return out
}
