package testkit

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Count is the number of documents of coll matching filter (all when
// none is given): the proof that a refused request stored nothing.
func Count(t testing.TB, coll *mongo.Collection, filter ...bson.E) int64 {
	t.Helper()
	f := bson.D(filter)
	if f == nil {
		f = bson.D{}
	}
	n, err := coll.CountDocuments(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Raw reads the document of coll whose _id is id; a missing one fails
// the test.
func Raw(t testing.TB, coll *mongo.Collection, id string) bson.M {
	t.Helper()
	m, ok := Find(t, coll, id)
	if !ok {
		t.Fatalf("%s %s: no such document", coll.Name(), id)
	}
	return m
}

// Find reads the document of coll whose _id is id, and whether there is one.
func Find(t testing.TB, coll *mongo.Collection, id string) (bson.M, bool) {
	t.Helper()
	var m bson.M
	err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&m)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, false
	case err != nil:
		t.Fatalf("%s %s: %v", coll.Name(), id, err)
	}
	return m, true
}

// Docs is every document of coll (in the store's order): two equal
// snapshots prove a refused write changed nothing.
func Docs(t testing.TB, coll *mongo.Collection) []bson.M {
	t.Helper()
	cur, err := coll.Find(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var out []bson.M
	if err := cur.All(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}
