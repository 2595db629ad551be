package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Index is one index of a collection.
type Index struct {
	Keys   bson.D
	Unique bool
}

// EnsureIndexes creates the missing indexes at service start. Existing
// ones (matched by MongoDB's default name) are left alone: asking FerretDB
// 1.24 to create an index that exists makes it drop the connection.
//
// A store that serves no filter but {_id: x} from an index (FerretDB 1.24
// on SQLite, the embedded store of make run, the e2e suite and the bench:
// its explain answers filterPushdown false) never reads a plain index,
// and each costs every insert and update of the collection one JSON
// extraction per key. There only the unique indexes, which enforce a
// rule, are made, and a plain one an earlier start made is dropped.
// MongoDB and FerretDB on PostgreSQL get every index.
//
// Replicas starting together on a new database race to create the same
// indexes, and FerretDB may drop a connection then: a failure is retried
// a few times before it is returned.
func EnsureIndexes(ctx context.Context, c *mongo.Collection, idx ...Index) error {
	var err error
	for attempt := range 4 {
		if err = ensureIndexes(ctx, c, idx, ReadsPlainIndexes(ctx, c)); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * 250 * time.Millisecond):
		}
	}
	return err
}

// Declared is the part of idx a store makes: all of it where the store
// reads indexes for its filters (pushdown), else the unique ones only.
func Declared(idx []Index, pushdown bool) []Index {
	if pushdown {
		return idx
	}
	var out []Index
	for _, x := range idx {
		if x.Unique {
			out = append(out, x)
		}
	}
	return out
}

// ensureIndexes makes the part of idx the store reads (Declared) and,
// where it reads no plain index, drops the plain ones it holds.
func ensureIndexes(ctx context.Context, c *mongo.Collection, idx []Index, readsPlain bool) error {
	cur, err := c.Indexes().List(ctx)
	if err != nil {
		return fmt.Errorf("indexes of %s: %w", c.Name(), err)
	}
	var existing []struct {
		Name   string `bson:"name"`
		Unique bool   `bson:"unique"`
	}
	if err := cur.All(ctx, &existing); err != nil {
		return fmt.Errorf("indexes of %s: %w", c.Name(), err)
	}
	have := map[string]bool{}
	for _, e := range existing {
		have[e.Name] = true
	}
	if !readsPlain {
		// Made by an earlier start, or before this rule: dropped, as it is
		// never read here.
		for _, e := range existing {
			if e.Name != "_id_" && !e.Unique {
				if err := c.Indexes().DropOne(ctx, e.Name); err != nil {
					return fmt.Errorf("index %s of %s: %w", e.Name, c.Name(), err)
				}
			}
		}
	}
	var models []mongo.IndexModel
	for _, x := range Declared(idx, readsPlain) {
		if have[indexName(x.Keys)] {
			continue
		}
		models = append(models, mongo.IndexModel{Keys: x.Keys, Options: options.Index().SetUnique(x.Unique).SetName(indexName(x.Keys))})
	}
	if len(models) == 0 {
		return nil
	}
	if _, err := c.Indexes().CreateMany(ctx, models); err != nil {
		return fmt.Errorf("indexes of %s: %w", c.Name(), err)
	}
	return nil
}

// pushdowns remembers, per client, whether its store reads plain
// indexes: asked once (ReadsPlainIndexes).
var pushdowns sync.Map // *mongo.Client -> bool

// ReadsPlainIndexes reports whether c's store serves a filter on a field
// other than _id from an index. FerretDB answers filterPushdown in
// explain (false on SQLite); MongoDB does not answer it, and reads them.
// An explain that fails counts as yes (every index is made), and is asked
// again next time.
func ReadsPlainIndexes(ctx context.Context, c *mongo.Collection) bool {
	client := c.Database().Client()
	if v, ok := pushdowns.Load(client); ok {
		return v.(bool)
	}
	var res bson.M
	err := c.Database().RunCommand(ctx, bson.D{
		{Key: "explain", Value: bson.D{{Key: "find", Value: c.Name()}, {Key: "filter", Value: bson.D{{Key: "domain_id", Value: ""}}}}},
		{Key: "verbosity", Value: "queryPlanner"},
	}).Decode(&res)
	if err != nil {
		return true
	}
	pushed, ok := res["filterPushdown"].(bool)
	reads := !ok || pushed
	pushdowns.Store(client, reads)
	return reads
}

// indexName is MongoDB's default index name: field_dir joined by "_".
func indexName(keys bson.D) string {
	parts := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		parts = append(parts, k.Key, fmt.Sprint(k.Value))
	}
	return strings.Join(parts, "_")
}
