package store_test

import (
	"context"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// DeleteOwned takes every record of an owner, more than a page of them,
// with their children, and nothing of another owner; run again, it does
// nothing; cut short by a failing child delete, the next run finishes.
func TestDeleteOwned(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	ctx := context.Background()
	db := testkit.Get().Database(t)
	parents, kids := db.Collection("owned_parents"), db.Collection("owned_kids")
	var ps, ks []any
	for i := range 1200 {
		owner := "ws-1"
		if i%4 == 0 {
			owner = "ws-2"
		}
		id := fmt.Sprintf("p-%04d", i)
		ps = append(ps, bson.D{{Key: "_id", Value: id}, {Key: "domain_id", Value: "d"}, {Key: "workspace_id", Value: owner}})
		ks = append(ks, bson.D{{Key: "_id", Value: id + "-a"}, {Key: "parent_id", Value: id}}, bson.D{{Key: "_id", Value: id + "-b"}, {Key: "parent_id", Value: id}})
	}
	if _, err := parents.InsertMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err := kids.InsertMany(ctx, ks); err != nil {
		t.Fatal(err)
	}
	owner := bson.D{{Key: "domain_id", Value: "d"}, {Key: "workspace_id", Value: "ws-1"}}
	child := store.Child{Coll: kids, Field: "parent_id"}

	restore := store.FailChildDeletes(kids.Name())
	if err := store.DeleteOwned(ctx, parents, owner, child); err == nil {
		t.Fatal("a failing child delete went unreported")
	}
	restore()
	if n := testkit.Count(t, parents, owner...); n != 900 {
		t.Fatalf("%d parents after the failed run, want all 900 (children first)", n)
	}
	for range 2 {
		if err := store.DeleteOwned(ctx, parents, owner, child); err != nil {
			t.Fatal(err)
		}
	}
	if n := testkit.Count(t, parents, owner...); n != 0 {
		t.Fatalf("%d of ws-1's parents left", n)
	}
	if n := testkit.Count(t, parents); n != 300 {
		t.Fatalf("%d parents left, want ws-2's 300", n)
	}
	if n := testkit.Count(t, kids); n != 600 {
		t.Fatalf("%d children left, want ws-2's 600", n)
	}
}
