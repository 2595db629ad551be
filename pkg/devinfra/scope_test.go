package devinfra

import (
	"context"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// A write to one database's schema (the _id indexer's, a createIndexes)
// holds that database's writes only: a test run's databases, each built
// by a test's setup, do not wait on one another's.
func TestSchemaWriteHoldsItsDatabaseOnly(t *testing.T) {
	m, err := StartMongo(t.TempDir(), "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	ctx := testContext(t)
	for _, db := range []string{"held", "free"} {
		if _, err := client.Database(db).Collection("docs").InsertOne(ctx, bson.D{{Key: "_id", Value: "first"}}); err != nil {
			t.Fatal(err)
		}
	}
	var released atomic.Bool
	heldDone := make(chan bool, 1)
	err = m.proxy.Exclusive("held", func() error {
		go func() {
			_, err := client.Database("held").Collection("docs").InsertOne(ctx, bson.D{{Key: "_id", Value: "second"}})
			heldDone <- err == nil && released.Load()
		}()
		// Answered while "held" is held: it does not wait for the release.
		_, err := client.Database("free").Collection("docs").InsertOne(ctx, bson.D{{Key: "_id", Value: "second"}})
		released.Store(true)
		return err
	})
	if err != nil {
		t.Fatalf("a write to another database while one is held: %v", err)
	}
	if !<-heldDone {
		t.Fatal("a write to the held database was answered before the hold ended, or failed")
	}
}
