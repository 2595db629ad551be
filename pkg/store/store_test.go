package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// thing is a document owned by a domain.
type thing struct {
	ID       string `bson:"_id"`
	DomainID string `bson:"domain_id"`
	Name     string `bson:"name"`
}

// wantCode asserts that err is an *errs.Error with code and status.
func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok {
		t.Fatalf("error %v (%T), want %d %s", err, err, status, code)
	}
	if e.Code != code || e.Status() != status {
		t.Fatalf("got %d %s (%s), want %d %s", e.Status(), e.Code, e.Message, status, code)
	}
}

// things returns a fresh collection holding t1 of d1 and t2 of d2.
func things(t *testing.T) *mongo.Collection {
	t.Helper()
	c := testkit.Get().Database(t).Collection("things")
	_, err := c.InsertMany(context.Background(), []thing{{"t1", "d1", "one"}, {"t2", "d2", "two"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGet(t *testing.T) {
	t.Parallel()
	c := things(t)
	ctx := context.Background()

	got, err := store.Get[thing](ctx, c, "thing_id", "t2")
	if err != nil {
		t.Fatal(err)
	}
	if *got != (thing{"t2", "d2", "two"}) {
		t.Fatalf("got %+v", *got)
	}

	_, err = store.Get[thing](ctx, c, "thing_id", "missing")
	wantCode(t, err, http.StatusNotFound, errs.NotFoundCode)
	if e, _ := errs.As(err); e.Message != "Resource cannot be found or access is denied. (thing_id = missing)" {
		t.Fatalf("message %q", e.Message)
	}
}

func TestWrapDuplicate(t *testing.T) {
	t.Parallel()
	c := things(t)
	ctx := context.Background()
	err := store.EnsureIndexes(ctx, c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}, Unique: true},
		store.Index{Keys: bson.D{{Key: "name", Value: 1}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	// idempotent at every start
	if err := store.EnsureIndexes(ctx, c, store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}, Unique: true}); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		doc  thing
		code string // "" for no error
	}{
		{"same name, other domain", thing{"t3", "d2", "one"}, ""},
		{"same name, same domain", thing{"t4", "d1", "one"}, errs.SaveUniqueValues},
		{"same _id", thing{"t1", "d9", "nine"}, errs.SaveUniqueValues},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.InsertOne(ctx, tc.doc)
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("inserted a duplicate")
			}
			wantCode(t, store.Wrap(err), http.StatusConflict, tc.code)
		})
	}

	// an update that would collide is a duplicate too
	_, err = c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "t3"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: "two"}}}})
	wantCode(t, store.Wrap(err), http.StatusConflict, errs.SaveUniqueValues)
}

func TestWrap(t *testing.T) {
	t.Parallel()
	c := things(t)
	own := errs.NotFound("x", "y")
	plain := errors.New("boom")
	_, refused := c.Find(context.Background(), bson.D{{Key: "name", Value: bson.D{{Key: "$regex", Value: "("}}}})
	if refused == nil {
		t.Fatal("the store took a bad regex")
	}
	// As FerretDB 1.24 answered an insert under load (TestJobTimeout's 500).
	busy := mongo.CommandError{Code: 1, Name: "InternalError",
		Message: "[msg_insert.go:168 handler.(*Handler).MsgInsert] [collection.go:135 sqlite.(*collection).InsertAll.func1] database is locked (517)"}
	cases := []struct {
		name   string
		err    error
		status int    // 0: err comes back unchanged
		code   string // with status
	}{
		{"nil", nil, 0, ""},
		{"already an errs.Error", own, 0, ""},
		{"wrapped errs.Error", fmt.Errorf("ctx: %w", own), 0, ""},
		{"plain error stays internal", plain, 0, ""},
		{"deadline", context.DeadlineExceeded, http.StatusServiceUnavailable, errs.Unavailable},
		{"query refused by the store", refused, http.StatusBadRequest, errs.DBQuery},
		{"SQLite busy under FerretDB", busy, http.StatusServiceUnavailable, errs.Unavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := store.Wrap(tc.err)
			if tc.status == 0 {
				if got != tc.err {
					t.Fatalf("Wrap(%v) = %v, want it unchanged", tc.err, got)
				}
				return
			}
			wantCode(t, got, tc.status, tc.code)
		})
	}
}

// TestResolve checks that a filter without match conditions is left alone
// and that a match becomes the ids of the scope's matching rows only.
func TestResolve(t *testing.T) {
	t.Parallel()
	c := fixtures(t, time.Now().UTC())
	ctx := context.Background()
	plain := bson.D{{Key: "domain_id", Value: "d1"}}
	got, err := store.Resolve(ctx, c, plain)
	if err != nil || len(got) != 1 || got[0].Key != "domain_id" {
		t.Fatalf("Resolve changed a plain filter: %v, %v", got, err)
	}

	match := query.Condition{Key: "items", Value: map[string]any{"name": "cpu", "qty": map[string]any{"$gte": int64(4)}}, Operator: "match"}
	f, err := query.Filter(plain, []query.Condition{match}, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err = store.Resolve(ctx, c, f)
	if err != nil {
		t.Fatal(err)
	}
	// b1 of domain d2 has {cpu, 8} too
	var ids []string
	for _, id := range got[0].Value.(bson.A)[1].(bson.D)[0].Value.(bson.D)[0].Value.(bson.A) {
		ids = append(ids, id.(string))
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a2", "a5"}) {
		t.Fatalf("resolved to %v, want _id in [a2 a5]", got)
	}
}

// TestEnsureIndexesTwice: a second start finds the indexes in place and
// creates nothing (FerretDB 1.24 drops the connection when asked to create
// an existing index). On a store that reads no plain index (the embedded
// SQLite one) only the unique index is made, a plain one an earlier start
// made is dropped, and the unique one still refuses a second name.
func TestEnsureIndexesTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.Get().Database(t).Collection("idx")
	idx := []store.Index{
		{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		{Keys: bson.D{{Key: "name", Value: 1}}, Unique: true},
	}
	reads := store.ReadsPlainIndexes(ctx, c)
	if !reads {
		// As an earlier version made it.
		if _, err := c.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: idx[0].Keys, Options: options.Index().SetName("domain_id_1_created_at_-1")}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := store.EnsureIndexes(ctx, c, idx...); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := c.Indexes().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []bson.M
	if err := cur.All(ctx, &got); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, g := range got {
		names[g["name"].(string)] = true
	}
	want := map[string]bool{"_id_": true, "name_1": true}
	if reads {
		want["domain_id_1_created_at_-1"] = true
	}
	if !maps.Equal(names, want) {
		t.Fatalf("indexes = %v, want %v (the store reads plain indexes: %v)", got, want, reads)
	}
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "name", Value: "n"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "b"}, {Key: "name", Value: "n"}}); !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("a second document of name n: %v, want a duplicate key error", err)
	}
}

func TestDeclared(t *testing.T) {
	t.Parallel()
	plain := store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}}}
	unique := store.Index{Keys: bson.D{{Key: "name", Value: 1}}, Unique: true}
	for _, tc := range []struct {
		pushdown bool
		want     []store.Index
	}{
		{true, []store.Index{plain, unique}},
		{false, []store.Index{unique}},
	} {
		got := store.Declared([]store.Index{plain, unique}, tc.pushdown)
		if len(got) != len(tc.want) {
			t.Fatalf("pushdown %v: %v, want %v", tc.pushdown, got, tc.want)
		}
		for i := range got {
			if got[i].Unique != tc.want[i].Unique || got[i].Keys[0].Key != tc.want[i].Keys[0].Key {
				t.Fatalf("pushdown %v: %v, want %v", tc.pushdown, got, tc.want)
			}
		}
	}
}

func TestByIDs(t *testing.T) {
	t.Parallel()
	c := things(t)
	// counts has no _id field: the map's keys carry it.
	type counts struct {
		Name string `bson:"name"`
	}
	for _, tc := range []struct {
		name string
		ids  []string
		want map[string]counts
	}{
		{"none", nil, map[string]counts{}},
		{"one", []string{"t2"}, map[string]counts{"t2": {"two"}}},
		{"one missing", []string{"zz"}, map[string]counts{}},
		{"many, some missing", []string{"t1", "zz", "t2"}, map[string]counts{"t1": {"one"}, "t2": {"two"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := store.ByIDs[counts](context.Background(), c, tc.ids)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// Nested free-form objects read back as maps, so they go out as JSON
// objects (the driver's default, bson.D, would be [{"Key":..,"Value":..}]).
func TestNestedObjectsReadBackAsMaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.Get().Database(t).Collection("things")
	doc := bson.M{"_id": "t-1", "tags": bson.M{"icon": bson.M{"url": "x", "size": bson.A{bson.M{"w": 1}}}}}
	if _, err := c.InsertOne(ctx, doc); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Tags map[string]any `bson:"tags"`
	}
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "t-1"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(got.Tags)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"icon":{"size":[{"w":1}],"url":"x"}}`; string(out) != want {
		t.Fatalf("tags went out as %s, want %s", out, want)
	}
}
