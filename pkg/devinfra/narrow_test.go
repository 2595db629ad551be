package devinfra

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestNarrowedWritesMatchFerretDB: conditional writes sent through the
// proxy, which narrows their filters to _id where it can decide them
// (serialwrites/narrow.go), match and change exactly what FerretDB alone
// matches and changes, for every filter shape of the kit's atomic
// writes and more.
func TestNarrowedWritesMatchFerretDB(t *testing.T) {
	m, err := StartMongo(t.TempDir(), "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	ctx := testContext(t)
	connect := func(uri string) *mongo.Database {
		c, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Disconnect(ctx) })
		return c.Database("narrow")
	}
	proxied, direct := connect(m.URI).Collection("proxied"), connect("mongodb://"+m.backend+"/").Collection("direct")
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	seed := bson.D{{Key: "_id", Value: "d"}, {Key: "version", Value: int64(3)}, {Key: "n", Value: int32(7)}, {Key: "state", Value: "OPEN"},
		{Key: "tags", Value: bson.A{"a", "b"}}, {Key: "expires_at", Value: at}, {Key: "nested", Value: bson.D{{Key: "k", Value: "v"}}},
		{Key: "none", Value: nil}, {Key: "ratio", Value: 0.5}}
	filters := []bson.D{
		{{Key: "version", Value: int64(3)}},
		{{Key: "version", Value: int32(3)}},
		{{Key: "version", Value: 3.0}},
		{{Key: "version", Value: int64(2)}},
		{{Key: "version", Value: bson.D{{Key: "$in", Value: bson.A{nil, int64(0)}}}}},
		{{Key: "missing", Value: bson.D{{Key: "$in", Value: bson.A{nil, int64(0)}}}}},
		{{Key: "missing", Value: nil}},
		{{Key: "none", Value: nil}},
		{{Key: "none", Value: bson.D{{Key: "$ne", Value: nil}}}},
		{{Key: "state", Value: bson.D{{Key: "$ne", Value: "RESOLVED"}}}},
		{{Key: "state", Value: bson.D{{Key: "$ne", Value: "OPEN"}}}},
		{{Key: "deleting", Value: bson.D{{Key: "$ne", Value: true}}}},
		{{Key: "tags", Value: bson.D{{Key: "$ne", Value: "a"}}}},
		{{Key: "tags", Value: bson.D{{Key: "$ne", Value: "c"}}}},
		{{Key: "tags", Value: "b"}},
		{{Key: "tags", Value: bson.D{{Key: "$nin", Value: bson.A{"x", "b"}}}}},
		{{Key: "n", Value: bson.D{{Key: "$lt", Value: 10}}}},
		{{Key: "n", Value: bson.D{{Key: "$lt", Value: 7}}}},
		{{Key: "n", Value: bson.D{{Key: "$lte", Value: 7}}}},
		{{Key: "n", Value: bson.D{{Key: "$gt", Value: "7"}}}},
		{{Key: "ratio", Value: bson.D{{Key: "$gte", Value: 0.5}, {Key: "$lt", Value: 1}}}},
		{{Key: "expires_at", Value: bson.D{{Key: "$gt", Value: at.Add(-time.Second)}}}},
		{{Key: "expires_at", Value: bson.D{{Key: "$lte", Value: at.Add(-time.Second)}}}},
		{{Key: "nested.k", Value: "v"}},
		{{Key: "nested.k", Value: "w"}},
		{{Key: "nested.missing", Value: bson.D{{Key: "$exists", Value: false}}}},
		{{Key: "state", Value: bson.D{{Key: "$exists", Value: true}}}},
		{{Key: "state", Value: "OPEN"}, {Key: "n", Value: bson.D{{Key: "$gte", Value: 8}}}},
		{{Key: "$or", Value: bson.A{bson.D{{Key: "n", Value: 7}}, bson.D{{Key: "n", Value: 8}}}}},
		{{Key: "state", Value: bson.D{{Key: "$regex", Value: "^OP"}}}},
	}
	before := m.proxy.Narrowed()
	for i, f := range filters {
		for _, c := range []*mongo.Collection{proxied, direct} {
			if _, err := c.DeleteMany(ctx, bson.D{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.InsertOne(ctx, seed); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(fmt.Sprint(i, f), func(t *testing.T) {
			filter := append(bson.D{{Key: "_id", Value: "d"}}, f...)
			update := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
			var got [2]int64
			var docs [2]bson.Raw
			for j, c := range []*mongo.Collection{proxied, direct} {
				res, err := c.UpdateOne(ctx, filter, update)
				if err != nil {
					t.Fatal(err)
				}
				fm := c.FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After))
				if err := fm.Err(); err != nil && err != mongo.ErrNoDocuments {
					t.Fatal(err)
				}
				del, err := c.DeleteOne(ctx, append(filter, bson.E{Key: "n", Value: bson.D{{Key: "$gt", Value: 100}}}))
				if err != nil {
					t.Fatal(err)
				}
				got[j] = res.MatchedCount*10 + del.DeletedCount
				docs[j], err = c.FindOne(ctx, bson.D{{Key: "_id", Value: "d"}}).Raw()
				if err != nil {
					t.Fatal(err)
				}
			}
			if got[0] != got[1] || docs[0].String() != docs[1].String() {
				t.Fatalf("through the proxy: %d %s\nFerretDB alone: %d %s", got[0], docs[0], got[1], docs[1])
			}
		})
	}
	// Every filter but the last two ($or, $regex) is decided by the
	// proxy: three statements each.
	if n := m.proxy.Narrowed() - before; n < int64(3*(len(filters)-2)) {
		t.Fatalf("%d statements narrowed, want %d at least", n, 3*(len(filters)-2))
	}
}
