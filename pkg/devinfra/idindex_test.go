package devinfra

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestIDLookupUsesIndex checks, in SQLite's own query plan, that FerretDB's
// lookup by _id searches an index once the sweep has run, and that the
// lookup still answers the right document.
func TestIDLookupUsesIndex(t *testing.T) {
	dir := t.TempDir()
	defer func(d time.Duration) { IDIndexInterval = d }(IDIndexInterval)
	IDIndexInterval = time.Hour // only the explicit sweep below
	m, err := StartMongo(dir, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	c := client.Database("idx").Collection("posts")
	for i := range 50 {
		if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("post-%03d", i)}, {Key: "n", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}

	plan := func(collection string) string {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "idx.sqlite")+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var table string
		if err := db.QueryRow(`SELECT name FROM sqlite_master WHERE type='table' AND name LIKE ?`, collection+"%").Scan(&table); err != nil {
			t.Fatal(err)
		}
		rows, err := db.Query(fmt.Sprintf(`EXPLAIN QUERY PLAN SELECT _ferretdb_sjson FROM %q WHERE %s = ?`, table, idExpr), `"post-007"`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			out = append(out, detail)
		}
		return strings.Join(out, "; ")
	}
	indexed := func(collection string) {
		t.Helper()
		if p := plan(collection); !strings.Contains(p, "SCAN") {
			t.Fatalf("%s: query plan before the sweep = %q, want FerretDB's own index unused (a scan)", collection, p)
		}
		if err := m.IndexIDs(ctx); err != nil {
			t.Fatal(err)
		}
		if p := plan(collection); !strings.Contains(p, "USING INDEX") || !strings.Contains(p, idIndexSuffix) {
			t.Fatalf("%s: query plan after the sweep = %q, want a search using the %s index", collection, p, idIndexSuffix)
		}
	}
	indexed("posts")
	var got bson.M
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "post-007"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["n"] != int32(7) {
		t.Fatalf("found %v, want n=7", got)
	}
	// The sweep keeps its connection to the file: a collection created
	// in it later (a change of its schema) is indexed too.
	if _, err := client.Database("idx").Collection("boards").InsertOne(ctx, bson.D{{Key: "_id", Value: "post-007"}}); err != nil {
		t.Fatal(err)
	}
	indexed("boards")
	// A dropped database is not recreated by the sweep.
	if err := client.Database("idx").Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.IndexIDs(ctx); err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "idx.sqlite")); len(files) != 0 {
		t.Fatalf("the sweep recreated %v", files)
	}
	// Created again, it is another file: its tables are indexed too.
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "post-007"}, {Key: "n", Value: 7}}); err != nil {
		t.Fatal(err)
	}
	indexed("posts")
	// Dropped and created again between two sweeps: the kept connection
	// is to the file dropped, and the new one is indexed.
	if err := client.Database("idx").Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "post-007"}, {Key: "n", Value: 7}}); err != nil {
		t.Fatal(err)
	}
	indexed("posts")
}
