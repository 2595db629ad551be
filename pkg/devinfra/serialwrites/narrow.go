package serialwrites

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// FerretDB 1.24 on SQLite finds a write's document by its _id index only
// when the filter is {_id: <value>} alone; {_id: x, version: 3} (a
// compare-and-set, a conditional $inc) scans the whole collection. The
// proxy holds the collection's turn while such a write runs, so it may
// narrow the write first: it reads the document by _id, decides the rest
// of the filter itself, and sends the write with {_id: x} (the document
// matches) or with an _id no document has (it does not). Nothing can
// change the document in between. A filter it cannot decide for sure
// (an operator it does not know, an array on the way, an upsert that
// would insert) goes to FerretDB as it came: slower, never wrong.

// noMatch is an _id no document has: a write narrowed to it matches
// nothing, by the index.
const noMatch = "\x00serialwrites:no-match"

// narrower reads documents by _id straight from FerretDB.
type narrower struct {
	client   *mongo.Client
	narrowed atomic.Int64 // statements sent with {_id} alone
}

// Narrowed is how many write statements the proxy sent narrowed.
func (p *Proxy) Narrowed() int64 { return p.narrower.narrowed.Load() }

// narrow returns req with the filters of its write statements narrowed
// to _id where it can decide them, or req itself.
func (n *narrower) narrow(req []byte) []byte {
	if n == nil {
		return req
	}
	m, err := parseMsg(req)
	if err != nil {
		return req
	}
	name, db, coll := command(req)
	c := n.client.Database(db).Collection(coll)
	changed := false
	switch name {
	case "findAndModify", "findandmodify":
		// One that answers the document as it was cannot be cleared first
		// (clearObjects): its answer would show the clearing.
		newDoc, _ := m.body.Lookup("new").BooleanOK()
		body, ok := n.narrowStatement(c, m.body, "query", "update", newDoc)
		if ok {
			m.body, changed = body, true
		}
	case "update", "delete":
		field := map[string]string{"update": "updates", "delete": "deletes"}[name]
		if arr, err := m.body.LookupErr(field); err == nil {
			stmts, ok := arr.ArrayOK()
			if !ok {
				return req
			}
			vals, _ := stmts.Values()
			out := bson.A{}
			for _, v := range vals {
				doc, ok := v.DocumentOK()
				if !ok {
					return req
				}
				nd, ok := n.narrowStatement(c, doc, "q", "u", true)
				changed = changed || ok
				out = append(out, nd)
			}
			if changed {
				m.body = replaceField(m.body, field, out)
			}
		}
		for i := range m.seqs {
			if m.seqs[i].id != field {
				continue
			}
			for j, doc := range m.seqs[i].docs {
				if nd, ok := n.narrowStatement(c, doc, "q", "u", true); ok {
					m.seqs[i].docs[j], changed = nd, true
				}
			}
		}
	}
	if !changed {
		return req
	}
	return m.encode()
}

// narrowStatement narrows the filter in field of stmt (a findAndModify,
// or one statement of an update or delete) and reports whether it did.
// The update in updateField of a document it matched has its objects
// cleared first when clear allows (clearObjects).
func (n *narrower) narrowStatement(c *mongo.Collection, stmt bson.Raw, field, updateField string, clear bool) (bson.Raw, bool) {
	if upsert, err := stmt.LookupErr("upsert"); err == nil && upsert.Type == bson.TypeBoolean && upsert.Boolean() {
		return stmt, false // an upsert that matches nothing inserts from the filter
	}
	fv, err := stmt.LookupErr(field)
	if err != nil {
		return stmt, false
	}
	filter, ok := fv.DocumentOK()
	if !ok {
		return stmt, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, rest, ok := splitID(filter)
	if !ok {
		// {_id: x} alone needs no narrowing, but its objects clearing.
		// Read only when the update sets an object field at all.
		if v, err := filter.LookupErr("_id"); err == nil && clear && len(mustElements(filter)) == 1 && setsObject(stmt, updateField) {
			if doc, err := c.FindOne(ctx, bson.D{{Key: "_id", Value: v}}).Raw(); err == nil {
				_ = n.clearObjects(ctx, c, doc, stmt, updateField)
			}
		}
		return stmt, false
	}
	doc, err := c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	var target any = id
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		// {_id: id} alone matches nothing either.
	case err != nil:
		return stmt, false
	default:
		matched, sure := matches(doc, rest)
		if !sure {
			return stmt, false
		}
		if !matched {
			target = noMatch
		} else if clear {
			if err := n.clearObjects(ctx, c, doc, stmt, updateField); err != nil {
				return stmt, false
			}
		}
	}
	n.narrowed.Add(1)
	return replaceField(stmt, field, bson.D{{Key: "_id", Value: target}}), true
}

// setsObject reports whether the update in updateField of stmt has a
// $set of an object value, the only kind clearObjects may clear.
func setsObject(stmt bson.Raw, updateField string) bool {
	set, ok := stmt.Lookup(updateField).DocumentOK()
	if !ok {
		return false
	}
	fields, ok := set.Lookup("$set").DocumentOK()
	if !ok {
		return false
	}
	elems, err := fields.Elements()
	if err != nil {
		return true // unsure: let clearObjects look
	}
	for _, e := range elems {
		if e.Value().Type == bson.TypeEmbeddedDocument {
			return true
		}
	}
	return false
}

// FerretDB 1.24 skips a $set of an object field to an object holding the
// same values under other keys ({a: "x"} to {b: "x"}: it reports the
// document unmodified and keeps the old object), which MongoDB writes as
// any other change. The proxy, holding the collection's turn, clears such
// a field first (sets it to null, a write FerretDB does apply) so that
// the $set that follows replaces it. Nothing else writes in between; a
// reader may see the field null for that moment.
func (n *narrower) clearObjects(ctx context.Context, c *mongo.Collection, doc, stmt bson.Raw, updateField string) error {
	uv, err := stmt.LookupErr(updateField)
	if err != nil {
		return nil
	}
	update, ok := uv.DocumentOK()
	if !ok {
		return nil
	}
	sv, err := update.LookupErr("$set")
	if err != nil {
		return nil // a replacement, or no $set
	}
	set, ok := sv.DocumentOK()
	if !ok {
		return nil
	}
	elems, err := set.Elements()
	if err != nil {
		return nil
	}
	clear := bson.D{}
	for _, e := range elems {
		nv := e.Value()
		if nv.Type != bson.TypeEmbeddedDocument || strings.Contains(e.Key(), ".") {
			continue
		}
		old, err := doc.LookupErr(e.Key())
		if err != nil || old.Type != bson.TypeEmbeddedDocument || !sameValuesOtherKeys(old.Document(), nv.Document()) {
			continue
		}
		clear = append(clear, bson.E{Key: e.Key(), Value: nil})
	}
	if len(clear) == 0 {
		return nil
	}
	_, err = c.UpdateOne(ctx, bson.D{{Key: "_id", Value: doc.Lookup("_id")}}, bson.D{{Key: "$set", Value: clear}})
	return err
}

func mustElements(d bson.Raw) []bson.RawElement {
	els, _ := d.Elements()
	return els
}

// sameValuesOtherKeys reports whether b is another object than a with
// the same values (in order, or in another order): the change FerretDB
// skips. Any other change it applies, and is left alone, so a reader
// sees no cleared field for it.
func sameValuesOtherKeys(a, b bson.Raw) bool {
	if bytes.Equal(a, b) {
		return false
	}
	ae, err1 := a.Elements()
	be, err2 := b.Elements()
	if err1 != nil || err2 != nil || len(ae) != len(be) {
		return false
	}
	value := func(e bson.RawElement) string {
		v := e.Value()
		return string(append([]byte{byte(v.Type)}, v.Value...))
	}
	av, bv := make([]string, len(ae)), make([]string, len(be))
	inOrder := true
	for i := range ae {
		av[i], bv[i] = value(ae[i]), value(be[i])
		inOrder = inOrder && av[i] == bv[i]
	}
	if inOrder {
		return true
	}
	slices.Sort(av)
	slices.Sort(bv)
	return slices.Equal(av, bv)
}

// splitID splits a filter {_id: <scalar>, ...rest} whose rest is not
// empty; ok is false for any other filter.
func splitID(filter bson.Raw) (id bson.RawValue, rest bson.Raw, ok bool) {
	elems, err := filter.Elements()
	if err != nil || len(elems) < 2 {
		return id, nil, false
	}
	d := bson.D{}
	found := false
	for _, e := range elems {
		if e.Key() == "_id" {
			v := e.Value()
			switch v.Type {
			case bson.TypeString, bson.TypeObjectID, bson.TypeInt32, bson.TypeInt64:
			default:
				return id, nil, false
			}
			id, found = v, true
			continue
		}
		d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
	}
	if !found {
		return id, nil, false
	}
	rest, err = bson.Marshal(d)
	return id, rest, err == nil
}

// replaceField returns doc with field set to v (added when missing).
func replaceField(doc bson.Raw, field string, v any) bson.Raw {
	var d bson.D
	if err := bson.Unmarshal(doc, &d); err != nil {
		return doc
	}
	set := false
	for i := range d {
		if d[i].Key == field {
			d[i].Value, set = v, true
		}
	}
	if !set {
		d = append(d, bson.E{Key: field, Value: v})
	}
	out, err := bson.Marshal(d)
	if err != nil {
		return doc
	}
	return out
}

// matches decides whether doc matches the filter cond, for the part of
// MongoDB's query language it knows: equality, $eq, $ne, $in, $nin,
// $exists, $gt, $gte, $lt, $lte on top-level and dotted fields of
// scalars (numbers, strings, booleans, dates, null, object ids) and of
// arrays of them. sure is false wherever it does not know.
func matches(doc, cond bson.Raw) (matched, sure bool) {
	elems, err := cond.Elements()
	if err != nil {
		return false, false
	}
	all := true
	for _, e := range elems {
		key := e.Key()
		if strings.HasPrefix(key, "$") {
			return false, false
		}
		vals, present, ok := lookup(doc, key)
		if !ok {
			return false, false
		}
		want := e.Value()
		ops, isOps := operators(want)
		if !isOps {
			ops = []op{{"$eq", want}}
		}
		for _, o := range ops {
			m, ok := apply(o, vals, present)
			if !ok {
				return false, false
			}
			all = all && m
		}
	}
	return all, true
}

type op struct {
	name string
	arg  bson.RawValue
}

// operators returns v's operators when v is {$op: arg, ...}.
func operators(v bson.RawValue) ([]op, bool) {
	d, ok := v.DocumentOK()
	if !ok {
		return nil, false
	}
	elems, err := d.Elements()
	if err != nil || len(elems) == 0 || !strings.HasPrefix(elems[0].Key(), "$") {
		return nil, false
	}
	var ops []op
	for _, e := range elems {
		ops = append(ops, op{e.Key(), e.Value()})
	}
	return ops, true
}

// lookup returns the values a filter on path compares with: the value,
// and an array's elements besides the array itself. ok is false where
// an array lies on the way (MongoDB's rules there are not kept here).
func lookup(doc bson.Raw, path string) (vals []bson.RawValue, present, ok bool) {
	parts := strings.Split(path, ".")
	cur := doc
	for i, p := range parts {
		v, err := cur.LookupErr(p)
		if err != nil {
			return nil, false, true
		}
		if i < len(parts)-1 {
			switch v.Type {
			case bson.TypeEmbeddedDocument:
				cur = v.Document()
				continue
			case bson.TypeArray:
				return nil, false, false
			default:
				return nil, false, true // a scalar on the way: no such field
			}
		}
		if v.Type == bson.TypeArray {
			elems, err := v.Array().Values()
			if err != nil {
				return nil, false, false
			}
			return append([]bson.RawValue{v}, elems...), true, true
		}
		return []bson.RawValue{v}, true, true
	}
	return nil, false, true
}

func apply(o op, vals []bson.RawValue, present bool) (matched, sure bool) {
	switch o.name {
	case "$eq":
		return equalAny(vals, present, o.arg)
	case "$ne":
		m, ok := equalAny(vals, present, o.arg)
		return !m, ok
	case "$in", "$nin":
		arr, ok := o.arg.ArrayOK()
		if !ok {
			return false, false
		}
		args, err := arr.Values()
		if err != nil {
			return false, false
		}
		in := false
		for _, a := range args {
			m, ok := equalAny(vals, present, a)
			if !ok {
				return false, false
			}
			in = in || m
		}
		if o.name == "$nin" {
			return !in, true
		}
		return in, true
	case "$exists":
		want, ok := truthy(o.arg)
		return present == want, ok
	case "$gt", "$gte", "$lt", "$lte":
		if o.arg.Type == bson.TypeNull || o.arg.Type == bson.TypeArray || o.arg.Type == bson.TypeEmbeddedDocument {
			return false, false
		}
		for _, v := range vals {
			c, comparable, ok := compare(v, o.arg)
			if !ok {
				return false, false
			}
			if comparable && ((o.name == "$gt" && c > 0) || (o.name == "$gte" && c >= 0) || (o.name == "$lt" && c < 0) || (o.name == "$lte" && c <= 0)) {
				return true, true
			}
		}
		return false, true
	}
	return false, false
}

func truthy(v bson.RawValue) (bool, bool) {
	switch v.Type {
	case bson.TypeBoolean:
		return v.Boolean(), true
	case bson.TypeInt32:
		return v.Int32() != 0, true
	case bson.TypeInt64:
		return v.Int64() != 0, true
	case bson.TypeDouble:
		return v.Double() != 0, true
	}
	return false, false
}

// equalAny is MongoDB's equality of a field with want: a missing field
// equals null, an array equals want when one of its elements does.
func equalAny(vals []bson.RawValue, present bool, want bson.RawValue) (bool, bool) {
	if want.Type == bson.TypeArray || want.Type == bson.TypeEmbeddedDocument || want.Type == bson.TypeRegex {
		return false, false
	}
	if !present {
		return want.Type == bson.TypeNull || want.Type == bson.TypeUndefined, true
	}
	for _, v := range vals {
		if v.Type == bson.TypeNull && want.Type == bson.TypeNull {
			return true, true
		}
		c, comparable, ok := compare(v, want)
		if !ok {
			return false, false
		}
		if comparable && c == 0 {
			return true, true
		}
	}
	return false, true
}

// compare orders two values of one kind; comparable is false for two
// kinds MongoDB never finds equal or ordered in a filter; ok is false
// for a kind this package does not compare.
func compare(a, b bson.RawValue) (c int, comparable, ok bool) {
	na, aNum := number(a)
	nb, bNum := number(b)
	switch {
	case aNum && bNum:
		ia, aInt := integer(a)
		ib, bInt := integer(b)
		if aInt && bInt {
			return cmp(ia, ib), true, true
		}
		return cmpFloat(na, nb), true, true
	case aNum || bNum:
		return 0, false, known(a) && known(b)
	}
	if !known(a) || !known(b) {
		return 0, false, false
	}
	if a.Type != b.Type {
		return 0, false, true
	}
	switch a.Type {
	case bson.TypeString:
		return strings.Compare(a.StringValue(), b.StringValue()), true, true
	case bson.TypeBoolean:
		x, y := 0, 0
		if a.Boolean() {
			x = 1
		}
		if b.Boolean() {
			y = 1
		}
		return x - y, true, true
	case bson.TypeDateTime:
		return cmp(a.DateTime(), b.DateTime()), true, true
	case bson.TypeObjectID:
		x, y := a.ObjectID(), b.ObjectID()
		return bytes.Compare(x[:], y[:]), true, true
	case bson.TypeNull:
		return 0, true, true
	}
	return 0, false, false
}

func known(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeString, bson.TypeBoolean, bson.TypeDateTime, bson.TypeObjectID, bson.TypeNull,
		bson.TypeDouble, bson.TypeInt32, bson.TypeInt64, bson.TypeArray:
		return true
	}
	return false
}

func number(v bson.RawValue) (float64, bool) {
	switch v.Type {
	case bson.TypeDouble:
		return v.Double(), true
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	}
	return 0, false
}

func integer(v bson.RawValue) (int64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return int64(v.Int32()), true
	case bson.TypeInt64:
		return v.Int64(), true
	}
	return 0, false
}

func cmp[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpFloat(a, b float64) int { return cmp(a, b) }

// msg is an OP_MSG taken apart: its header, flags, command document
// and document sequences.
type msg struct {
	header [headerLength]byte
	flags  uint32
	body   bson.Raw
	seqs   []sequence
}

type sequence struct {
	id   string
	docs []bson.Raw
}

func parseMsg(b []byte) (*msg, error) {
	if opCode(b) != opMsg || len(b) < headerLength+5 {
		return nil, errBSON
	}
	m := &msg{flags: flags(b)}
	copy(m.header[:], b[:headerLength])
	end := len(b)
	if m.flags&checksum != 0 {
		end -= 4
	}
	for i := headerLength + 4; i < end; {
		kind := b[i]
		i++
		if i+4 > end {
			return nil, errBSON
		}
		n := int(binary.LittleEndian.Uint32(b[i:]))
		if n < 5 || i+n > end {
			return nil, errBSON
		}
		switch kind {
		case 0:
			m.body = bson.Raw(b[i : i+n])
		case 1:
			s, j := sequence{}, i+4
			k := bytes.IndexByte(b[j:i+n], 0)
			if k < 0 {
				return nil, errBSON
			}
			s.id, j = string(b[j:j+k]), j+k+1
			for j < i+n {
				if j+4 > i+n {
					return nil, errBSON
				}
				dn := int(binary.LittleEndian.Uint32(b[j:]))
				if dn < 5 || j+dn > i+n {
					return nil, errBSON
				}
				s.docs = append(s.docs, bson.Raw(b[j:j+dn]))
				j += dn
			}
			m.seqs = append(m.seqs, s)
		default:
			return nil, errBSON
		}
		i += n
	}
	if m.body == nil {
		return nil, errBSON
	}
	return m, nil
}

// encode writes the message again, without a checksum (the one it came
// with is not the new body's).
func (m *msg) encode() []byte {
	out := make([]byte, headerLength, headerLength+5+len(m.body))
	copy(out, m.header[:])
	out = binary.LittleEndian.AppendUint32(out, m.flags&^checksum)
	out = append(out, 0)
	out = append(out, m.body...)
	for _, s := range m.seqs {
		size := 4 + len(s.id) + 1
		for _, d := range s.docs {
			size += len(d)
		}
		out = append(out, 1)
		out = binary.LittleEndian.AppendUint32(out, uint32(size))
		out = append(out, s.id...)
		out = append(out, 0)
		for _, d := range s.docs {
			out = append(out, d...)
		}
	}
	binary.LittleEndian.PutUint32(out[0:], uint32(len(out)))
	return out
}
