package managed_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/managed"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestSync: missing records are inserted, those of an older version
// replaced (keeping created_at), others left alone; within Interval a
// domain is not read again.
func TestSync(t *testing.T) {
	ctx := context.Background()
	coll := testkit.Get().Database(t).Collection("managed_test")
	version, name := "1", "first"
	records := func(domain string) []managed.Record {
		return []managed.Record{{ID: domain + "/a", Version: version, Doc: bson.M{"name": name, "domain_id": domain}}}
	}
	get := func(id string) bson.M {
		var m bson.M
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	c := &managed.Catalog{Coll: coll, Records: records}
	if err := c.Sync(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	first := get("d1/a")
	if first["name"] != "first" || first["version"] != "1" || first["created_at"] == nil {
		t.Fatalf("inserted %v", first)
	}
	// Within Interval the same catalog does not look again.
	version, name = "2", "second"
	if err := c.Sync(ctx, "d1"); err != nil || get("d1/a")["name"] != "first" {
		t.Fatalf("synced again within the interval: %v", err)
	}
	// A new process (catalog) replaces the older version.
	if err := (&managed.Catalog{Coll: coll, Records: records}).Sync(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	second := get("d1/a")
	if second["name"] != "second" || second["version"] != "2" || second["created_at"] != first["created_at"] {
		t.Fatalf("replaced %v (was %v)", second, first)
	}
	// Each domain has its own; a deleted one comes back.
	if _, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "d1/a"}}); err != nil {
		t.Fatal(err)
	}
	c2 := &managed.Catalog{Coll: coll, Records: records}
	if err := c2.Sync(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	if err := c2.Sync(ctx, "d2"); err != nil {
		t.Fatal(err)
	}
	if get("d1/a")["name"] != "second" || get("d2/a")["domain_id"] != "d2" {
		t.Fatal("not restored per domain")
	}
	if n := testkit.Count(t, coll); n != 2 {
		t.Fatalf("%d records", n)
	}
}
