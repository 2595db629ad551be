package devinfra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The tests of MongoDB's single-document promise on the embedded store.
// NUBES_DEVINFRA_POSTGRESQL=<url> runs them on FerretDB over that
// PostgreSQL database instead of SQLite (scripts/postgres.sh starts one).
// NUBES_STORE_UNORDERED=1 runs them against FerretDB itself, without the
// proxy that orders its writes: there they fail (docs/decisions.md,
// "The embedded store keeps MongoDB's single-document promise").

// racers is how many clients race in each test: separate clients, as
// replicas of a service are, each with connections of its own.
const racers = 50

func promiseStore(t *testing.T) []*mongo.Collection {
	t.Helper()
	start := func() (*Mongo, error) { return StartMongo(t.TempDir(), "127.0.0.1:0", nil) }
	if pg := os.Getenv("NUBES_DEVINFRA_POSTGRESQL"); pg != "" {
		start = func() (*Mongo, error) { return StartMongoOnPostgreSQL(pg, "127.0.0.1:0", nil) }
	}
	m, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	uri := m.URI
	if os.Getenv("NUBES_STORE_UNORDERED") == "1" {
		uri = "mongodb://" + m.backend + "/"
	}
	var cs []*mongo.Collection
	for range 5 {
		client, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
		cs = append(cs, client.Database("promise").Collection("docs"))
	}
	ctx := testContext(t)
	if _, err := cs[0].InsertOne(ctx, bson.D{{Key: "_id", Value: "d"}, {Key: "n", Value: 0}, {Key: "version", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	return cs
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// race runs fn(i) for every racer at once, over the clients in turn.
func race(t *testing.T, cs []*mongo.Collection, fn func(c *mongo.Collection, i int) error) {
	t.Helper()
	start := make(chan struct{})
	errc := make(chan error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			errc <- fn(cs[i%len(cs)], i)
		})
	}
	close(start)
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func load(t *testing.T, c *mongo.Collection, id string) bson.M {
	t.Helper()
	var doc bson.M
	if err := c.FindOne(testContext(t), bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestConcurrentIncrementsAllCount(t *testing.T) {
	cs := promiseStore(t)
	ctx := testContext(t)
	race(t, cs, func(c *mongo.Collection, _ int) error {
		_, err := c.UpdateByID(ctx, "d", bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
		return err
	})
	if n := load(t, cs[0], "d")["n"]; n != int32(racers) {
		t.Fatalf("after %d concurrent $inc, n = %v", racers, n)
	}
}

func TestCompareAndSetHasOneWinner(t *testing.T) {
	cs := promiseStore(t)
	ctx := testContext(t)
	var mu sync.Mutex
	var winners []int
	race(t, cs, func(c *mongo.Collection, i int) error {
		res, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "d"}, {Key: "version", Value: 0}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: 1}, {Key: "winner", Value: i}}}})
		if err == nil && res.ModifiedCount == 1 {
			mu.Lock()
			winners = append(winners, i)
			mu.Unlock()
		}
		return err
	})
	if len(winners) != 1 {
		t.Fatalf("%d updates on version 0 won, want exactly one: %v", len(winners), winners)
	}
	if got := load(t, cs[0], "d")["winner"]; got != int32(winners[0]) {
		t.Fatalf("stored winner %v, but %d was told it won", got, winners[0])
	}
}

func TestConcurrentUpsertsMakeOneDocument(t *testing.T) {
	cs := promiseStore(t)
	ctx := testContext(t)
	race(t, cs, func(c *mongo.Collection, i int) error {
		_, err := c.UpdateByID(ctx, "u", bson.D{
			{Key: "$setOnInsert", Value: bson.D{{Key: "first", Value: i}}},
			{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}},
		}, options.UpdateOne().SetUpsert(true))
		if mongo.IsDuplicateKeyError(err) {
			// MongoDB too may refuse one of two upserts racing on _id
			// (its documented retry case); the count then misses it.
			return errors.New("duplicate key on an upsert of _id")
		}
		return err
	})
	n, err := cs[0].CountDocuments(ctx, bson.D{{Key: "_id", Value: "u"}})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d concurrent upserts of one _id made %d documents", racers, n)
	}
	if got := load(t, cs[0], "u")["n"]; got != int32(racers) {
		t.Fatalf("the upserted document counts %v upserts, want %d", got, racers)
	}
}

func TestConcurrentSetsOfDifferentFieldsAllLand(t *testing.T) {
	cs := promiseStore(t)
	ctx := testContext(t)
	race(t, cs, func(c *mongo.Collection, i int) error {
		_, err := c.UpdateByID(ctx, "d", bson.D{{Key: "$set", Value: bson.D{{Key: fmt.Sprintf("f%02d", i), Value: i}}}})
		return err
	})
	doc := load(t, cs[0], "d")
	for i := range racers {
		if doc[fmt.Sprintf("f%02d", i)] != int32(i) {
			t.Fatalf("field f%02d lost among %d concurrent $set: %v", i, racers, doc)
		}
	}
}

func TestFindOneAndUpdateReturnsWhatItWrote(t *testing.T) {
	cs := promiseStore(t)
	ctx := testContext(t)
	var mu sync.Mutex
	seen := map[int32]int{}
	race(t, cs, func(c *mongo.Collection, i int) error {
		var doc struct{ N int32 }
		err := c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "d"}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}},
			options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
		mu.Lock()
		seen[doc.N]++
		mu.Unlock()
		return err
	})
	for n := int32(1); n <= racers; n++ {
		if seen[n] != 1 {
			t.Fatalf("findOneAndUpdate returned %d %d times, want once each of 1..%d: %v", n, seen[n], racers, seen)
		}
	}
	if got := load(t, cs[0], "d")["n"]; got != int32(racers) {
		t.Fatalf("n = %v after %d findOneAndUpdate", got, racers)
	}
}

// A $set of an object field to one holding the same values under other
// keys lands, by _id alone, by a compare-and-set and by findOneAndUpdate
// (FerretDB 1.24 alone keeps the old object: serialwrites clears it
// first).
func TestSetObjectOfSameValues(t *testing.T) {
	c := promiseStore(t)[0]
	ctx := context.Background()
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}, {Key: "tags", Value: bson.D{{Key: "a", Value: "1"}}},
		{Key: "flags", Value: bson.D{{Key: "a", Value: true}}}, {Key: "version", Value: int64(1)}}); err != nil {
		t.Fatal(err)
	}
	type doc struct {
		Tags  map[string]string `bson:"tags"`
		Flags map[string]bool   `bson:"flags"`
	}
	read := func() doc {
		t.Helper()
		var d doc
		if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "x"}}).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "x"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "tags", Value: bson.D{{Key: "b", Value: "1"}}}}}}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(read().Tags); got != "map[b:1]" {
		t.Fatalf("by _id: tags %s, want map[b:1]", got)
	}
	res, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "x"}, {Key: "version", Value: int64(1)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "flags", Value: bson.D{{Key: "b", Value: true}}}}}, {Key: "$inc", Value: bson.D{{Key: "version", Value: 1}}}})
	if err != nil || res.ModifiedCount != 1 {
		t.Fatalf("compare-and-set: %+v %v", res, err)
	}
	if got := fmt.Sprint(read().Flags); got != "map[b:true]" {
		t.Fatalf("compare-and-set: flags %s, want map[b:true]", got)
	}
	var after doc
	err = c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "x"}, {Key: "version", Value: int64(2)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "tags", Value: bson.D{{Key: "c", Value: "1"}}}}}, {Key: "$inc", Value: bson.D{{Key: "version", Value: 1}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&after)
	if err != nil || fmt.Sprint(after.Tags) != "map[c:1]" || fmt.Sprint(read().Tags) != "map[c:1]" {
		t.Fatalf("findOneAndUpdate: answered %v, stored %v (%v)", after.Tags, read().Tags, err)
	}
	// The same keys with their values swapped, two at a time.
	if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "x"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "tags", Value: bson.D{{Key: "c", Value: "1"}, {Key: "d", Value: "2"}}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "x"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "tags", Value: bson.D{{Key: "c", Value: "2"}, {Key: "d", Value: "1"}}}}}}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(read().Tags); got != "map[c:2 d:1]" {
		t.Fatalf("values swapped: tags %s, want map[c:2 d:1]", got)
	}
}
