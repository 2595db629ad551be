package serialwrites

import (
	"encoding/binary"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// opMsgOf is an OP_MSG carrying doc, with a kind-1 section before it
// when docs is set, as drivers send inserts.
func opMsgOf(t *testing.T, doc bson.D, flagBits uint32, docs ...bson.D) []byte {
	t.Helper()
	b, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 16, 64)
	msg = binary.LittleEndian.AppendUint32(msg, flagBits)
	if len(docs) > 0 {
		var seq []byte
		seq = append(seq, "documents\x00"...)
		for _, d := range docs {
			db, _ := bson.Marshal(d)
			seq = append(seq, db...)
		}
		msg = append(msg, 1)
		msg = binary.LittleEndian.AppendUint32(msg, uint32(4+len(seq)))
		msg = append(msg, seq...)
	}
	msg = append(msg, 0)
	msg = append(msg, b...)
	if flagBits&checksum != 0 {
		msg = append(msg, 0, 0, 0, 0)
	}
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[12:], opMsg)
	return msg
}

// opQueryOf is a legacy OP_QUERY of doc on collection (db.coll).
func opQueryOf(t *testing.T, collection string, doc bson.D) []byte {
	t.Helper()
	b, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 16, 64)
	msg = binary.LittleEndian.AppendUint32(msg, 0) // flags
	msg = append(msg, collection...)
	msg = append(msg, 0)
	msg = binary.LittleEndian.AppendUint32(msg, 0)          // numberToSkip
	msg = binary.LittleEndian.AppendUint32(msg, ^uint32(0)) // numberToReturn: -1
	msg = append(msg, b...)
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[12:], opQuery)
	return msg
}

func must(s scope, _, _ string) scope { return s }

func TestCommandAndItsOrder(t *testing.T) {
	d := func(kv ...any) bson.D {
		var out bson.D
		for i := 0; i < len(kv); i += 2 {
			out = append(out, bson.E{Key: kv[i].(string), Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		msg      []byte
		cmd, col string
		order    string // none, collection, database, all
	}{
		{"find", opMsgOf(t, d("find", "posts", "filter", d("a", 1), "$db", "b"), 0), "find", "posts", "none"},
		{"getMore", opMsgOf(t, d("getMore", int64(7), "collection", "posts", "$db", "b"), 0), "getMore", "", "none"},
		{"insert with a document sequence", opMsgOf(t, d("insert", "posts", "ordered", true, "$db", "b"), 0, d("_id", 1), d("_id", 2)), "insert", "posts", "collection"},
		{"update", opMsgOf(t, d("update", "posts", "updates", bson.A{d("q", d(), "u", d("$inc", d("n", 1)))}, "$db", "b"), 0), "update", "posts", "collection"},
		{"findAndModify with a checksum", opMsgOf(t, d("findAndModify", "posts", "query", d("_id", 1), "$db", "b"), checksum), "findAndModify", "posts", "collection"},
		{"delete", opMsgOf(t, d("delete", "posts", "$db", "b"), 0), "delete", "posts", "collection"},
		{"createIndexes", opMsgOf(t, d("createIndexes", "posts", "$db", "b"), 0), "createIndexes", "posts", "database"},
		{"dropDatabase", opMsgOf(t, d("dropDatabase", int32(1), "$db", "b"), 0), "dropDatabase", "", "database"},
		{"dropDatabase on admin", opMsgOf(t, d("dropDatabase", int32(1), "$db", "admin"), 0), "dropDatabase", "", "all"},
		{"aggregate that reads", opMsgOf(t, d("aggregate", "posts", "pipeline", bson.A{d("$match", d("a", 1)), d("$group", d("_id", nil))}, "$db", "b"), 0), "aggregate", "posts", "none"},
		{"aggregate with $out", opMsgOf(t, d("aggregate", "posts", "pipeline", bson.A{d("$match", d()), d("$out", "copy")}, "$db", "b"), 0), "aggregate", "posts", "all"},
		{"an unknown command", opMsgOf(t, d("compact", "posts", "$db", "b"), 0), "compact", "posts", "all"},
		{"an insert without a collection", opMsgOf(t, d("insert", int32(1), "$db", "b"), 0), "insert", "", "all"},
		{"not an OP_MSG", func() []byte {
			m := opMsgOf(t, d("find", "x"), 0)
			binary.LittleEndian.PutUint32(m[12:], 2004)
			return m
		}(), "", "", "all"},
		{"a truncated body", opMsgOf(t, d("find", "posts"), 0)[:24], "", "", "all"},
		{"a legacy hello, as a connection opens", opQueryOf(t, "admin.$cmd", d("hello", int32(1), "helloOk", true)), "", "", "none"},
		{"a legacy isMaster", opQueryOf(t, "admin.$cmd", d("isMaster", int32(1))), "", "", "none"},
		{"a legacy command that is no handshake", opQueryOf(t, "b.$cmd", d("insert", "posts")), "", "", "all"},
		{"a legacy query of a collection", opQueryOf(t, "b.posts", d("hello", int32(1))), "", "", "all"},
		{"a truncated legacy hello", opQueryOf(t, "admin.$cmd", d("hello", int32(1)))[:40], "", "", "all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, db, coll := command(tc.msg)
			if name != tc.cmd || coll != tc.col {
				t.Fatalf("command = %q %q %q, want %q on %q", name, db, coll, tc.cmd, tc.col)
			}
			if name != "" && db != "b" && db != "admin" {
				t.Fatalf("$db = %q", db)
			}
			order := map[scope]string{unordered: "none", oneCollection: "collection", oneDatabase: "database", everything: "all"}[must(scopeOf(tc.msg, false))]
			if order != tc.order {
				t.Fatalf("ordered on %s, want %s", order, tc.order)
			}
			if s, key, db := scopeOf(tc.msg, true); (s == oneCollection || s == oneDatabase) && (key != "b" || db != "b") {
				t.Fatalf("a database's turn keyed %q in %q, want the database", key, db)
			}
			if s, _, db := scopeOf(tc.msg, false); (s == oneCollection || s == oneDatabase) && db != "b" {
				t.Fatalf("written in %q, want the database", db)
			}
		})
	}
}
