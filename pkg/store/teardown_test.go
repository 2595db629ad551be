package store_test

import (
	"context"
	"net/http"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestTeardown: a delete whose second child step fails leaves the record
// marked, out of GetFor, GetToChange, SearchFor, Scope and GetLive, its
// first children gone; the retry finishes (children and record gone);
// another domain's caller reaches neither the marked record nor its
// delete.
func TestTeardown(t *testing.T) {
	ctx := context.Background()
	db := testkit.Get().Database(t)
	parents, pets := db.Collection("parents"), db.Collection("pets")
	insert := func(c string, doc bson.D) {
		if _, err := db.Collection(c).InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	insert("parents", bson.D{{Key: "_id", Value: "p1"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w1"}})
	insert("parents", bson.D{{Key: "_id", Value: "p2"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w1"}})
	for _, c := range []string{"kids", "pets"} {
		insert(c, bson.D{{Key: "_id", Value: c + "1"}, {Key: "parent", Value: "p1"}})
		insert(c, bson.D{{Key: "_id", Value: c + "2"}, {Key: "parent", Value: "p2"}})
	}
	r := query.Resource{Tenancy: tenancy.InWorkspace.WithMarks()}
	admin := &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}
	stranger := &auth.Principal{DomainID: "d2", UserID: "x", Role: auth.DomainAdmin}
	td := store.Teardown[placed]{Records: parents, Resource: r, Key: "parent_id",
		Children: func(ctx context.Context, doc *placed) error {
			for _, c := range []string{"kids", "pets"} {
				if err := store.DeleteChildren(ctx, db.Collection(c), bson.D{{Key: "parent", Value: doc.ID}}); err != nil {
					return err
				}
			}
			return nil
		}}
	count := func(c string, f bson.D) int64 {
		n, err := db.Collection(c).CountDocuments(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	restore := store.FailChildDeletes(pets.Name())
	if _, err := td.Delete(ctx, admin, "p1"); code(err) != http.StatusServiceUnavailable {
		t.Fatalf("delete with a failing child step: %v, want 503", err)
	}
	restore()
	if n := count("kids", bson.D{{Key: "parent", Value: "p1"}}); n != 0 {
		t.Fatalf("kids of p1 after the first step: %d", n)
	}
	if n := count("pets", bson.D{{Key: "parent", Value: "p1"}}); n != 1 {
		t.Fatalf("pets of p1 after the failed step: %d", n)
	}
	if n := count("parents", bson.D{{Key: "_id", Value: "p1"}, {Key: tenancy.MarkField, Value: true}}); n != 1 {
		t.Fatal("p1 is not marked")
	}
	// Hidden from every read and change.
	if _, err := store.GetFor[placed](ctx, parents, r, admin, "parent_id", "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("GetFor of a marked record: %v", err)
	}
	if _, err := store.GetToChange[placed](ctx, parents, r, admin, "parent_id", "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("GetToChange of a marked record: %v", err)
	}
	if _, err := store.GetLive[placed](ctx, parents, "parent_id", "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("GetLive of a marked record: %v", err)
	}
	l, err := store.SearchFor[placed](ctx, parents, nil, r, admin)
	if err != nil || l.TotalCount != 1 || l.Results[0].ID != "p2" {
		t.Fatalf("SearchFor with a marked record: %+v %v", l, err)
	}
	// Another domain neither sees nor finishes it.
	if _, err := td.Delete(ctx, stranger, "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("another domain's delete: %v", err)
	}
	if n := count("pets", bson.D{{Key: "parent", Value: "p1"}}); n != 1 {
		t.Fatal("another domain's delete went on")
	}
	// The retry finishes; then the record is gone (404), p2 untouched.
	if _, err := td.Delete(ctx, admin, "p1"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if count("parents", bson.D{{Key: "_id", Value: "p1"}}) != 0 || count("pets", bson.D{{Key: "parent", Value: "p1"}}) != 0 {
		t.Fatal("the retry left the record or its children")
	}
	if _, err := td.Delete(ctx, admin, "p1"); code(err) != http.StatusNotFound {
		t.Fatalf("delete of a finished record: %v", err)
	}
	if count("parents", bson.D{}) != 1 || count("kids", bson.D{}) != 1 || count("pets", bson.D{}) != 1 {
		t.Fatal("p2 or its children were touched")
	}
	// A resource that declares no marks cannot be torn down.
	if _, err := (store.Teardown[placed]{Records: parents, Resource: query.Resource{Tenancy: tenancy.InWorkspace}, Key: "parent_id"}).Delete(ctx, admin, "p2"); err == nil {
		t.Fatal("a teardown without marks ran")
	}
}

func code(err error) int {
	if e, ok := errs.As(err); ok {
		return e.Status()
	}
	return 0
}
