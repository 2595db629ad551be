package store_test

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// An unordered insert that meets rows stored before is done; one that
// failed otherwise is not.
func TestOnlyDuplicates(t *testing.T) {
	c := testkit.Get().Database(t).Collection("rows")
	ctx := context.Background()
	if _, err := c.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "a"}}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "_id", Value: "b"}}}, options.InsertMany().SetOrdered(false))
	if err == nil || !store.OnlyDuplicates(err) {
		t.Fatalf("a replayed unordered insert: %v, want only duplicates", err)
	}
	if n, _ := c.CountDocuments(ctx, bson.D{}); n != 2 {
		t.Fatalf("%d rows, want the new one stored beside the old", n)
	}
	_, err = c.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}})
	if !store.OnlyDuplicates(err) {
		t.Fatalf("a replayed single insert: %v, want a duplicate", err)
	}

	dup := mongo.BulkWriteError{WriteError: mongo.WriteError{Code: 11000}}
	other := mongo.BulkWriteError{WriteError: mongo.WriteError{Code: 2}}
	for name, tt := range map[string]struct {
		err  error
		want bool
	}{
		"every row a duplicate":   {mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{dup, dup}}, true},
		"one row refused":         {mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{dup, other}}, false},
		"write concern not met":   {mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{dup}, WriteConcernError: &mongo.WriteConcernError{Code: 64}}, false},
		"a bulk failure, no rows": {mongo.BulkWriteException{}, false},
		"not a write error":       {errors.New("connection reset"), false},
		"no error":                {nil, false},
	} {
		if got := store.OnlyDuplicates(tt.err); got != tt.want {
			t.Errorf("%s: OnlyDuplicates = %v, want %v", name, got, tt.want)
		}
	}
}
