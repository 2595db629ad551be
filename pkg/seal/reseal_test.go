package seal

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type rec struct {
	ID     string  `bson:"_id"`
	Domain string  `bson:"domain_id"`
	Sealed *Sealed `bson:"sealed,omitempty"`
}

func recAD(id, domain string) []byte { return AD("recs", id, domain) }

var recField = Field{Path: "sealed", AD: func(doc bson.Raw) ([]byte, error) {
	id, _ := doc.Lookup("_id").StringValueOK()
	d, _ := doc.Lookup("domain_id").StringValueOK()
	return recAD(id, d), nil
}}

func testRing(t *testing.T, spec, active string) *Keyring {
	t.Helper()
	k, err := Parse(spec, active)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func k32(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

// fill stores n records sealed by k, plus one without a sealed field.
func fill(t *testing.T, c *mongo.Collection, k *Keyring, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("rec-%03d", i)
		s, err := k.SealJSON(map[string]any{"n": i}, recAD(id, "d"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.InsertOne(ctx, rec{ID: id, Domain: "d", Sealed: &s}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.InsertOne(ctx, rec{ID: "rec-empty", Domain: "d"}); err != nil {
		t.Fatal(err)
	}
}

func keysOf(t *testing.T, c *mongo.Collection) map[string]int {
	t.Helper()
	cur, err := c.Find(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var all []rec
	if err := cur.All(context.Background(), &all); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range all {
		if r.Sealed != nil {
			out[r.Sealed.KeyID]++
		}
	}
	return out
}

func TestResealMovesEveryRecordBatchByBatch(t *testing.T) {
	ctx := context.Background()
	c := testkit.Get().Database(t).Collection("recs")
	fill(t, c, testRing(t, "1:"+k32(1), ""), 23)
	// A legacy record (identity's first stored form) is moved too.
	legacy, _ := testRing(t, "1:"+k32(1), "").Seal([]byte(`{"n":99}`), recAD("rec-legacy", "d"))
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "rec-legacy"}, {Key: "domain_id", Value: "d"},
		{Key: "sealed", Value: bson.D{{Key: "key_version", Value: 1}, {Key: "nonce", Value: legacy.Nonce}, {Key: "data", Value: legacy.Data}}}}); err != nil {
		t.Fatal(err)
	}
	// One record no key of the ring opens: reported, left alone.
	stray, _ := testRing(t, "1:"+k32(5), "").Seal([]byte(`{}`), recAD("rec-stray", "d"))
	if _, err := c.InsertOne(ctx, rec{ID: "rec-stray", Domain: "d", Sealed: &stray}); err != nil {
		t.Fatal(err)
	}

	rotated := testRing(t, "1:"+k32(1)+",2:"+k32(2), "2")
	batches := 0
	rep, err := Reseal(ctx, rotated, c, recField, 10, func(Report) { batches++ })
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resealed != 24 || rep.Raced != 0 || len(rep.Failed) != 1 || rep.Failed[0] != "rec-stray" || batches != 3 {
		t.Fatalf("report %+v after %d batches", rep, batches)
	}
	if got := keysOf(t, c); got["2"] != 24 || got["1"] != 1 {
		t.Fatalf("keys after reseal: %v", got)
	}
	// Every record opens with the new key alone, with its own AD.
	onlyNew := testRing(t, "2:"+k32(2), "")
	var r rec
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "rec-legacy"}}).Decode(&r); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := onlyNew.OpenJSON(*r.Sealed, recAD("rec-legacy", "d"), &m); err != nil || m["n"] != float64(99) {
		t.Fatalf("legacy record after reseal: %v %v", m, err)
	}
	// Idempotent: a second run finds nothing to do but the stray record.
	rep, err = Reseal(ctx, rotated, c, recField, 10, nil)
	if err != nil || rep.Resealed != 0 || len(rep.Failed) != 1 {
		t.Fatalf("second run %+v %v", rep, err)
	}
}

func TestResealNeverOverwritesAConcurrentWrite(t *testing.T) {
	ctx := context.Background()
	c := testkit.Get().Database(t).Collection("recs")
	old := testRing(t, "1:"+k32(1), "")
	fill(t, c, old, 2)
	rotated := testRing(t, "1:"+k32(1)+",2:"+k32(2), "2")

	// Read as Reseal does, then let a service write rec-000 before the update.
	var doc bson.Raw
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "rec-000"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	written, _ := rotated.SealJSON(map[string]any{"n": "written meanwhile"}, recAD("rec-000", "d"))
	if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "rec-000"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "sealed", Value: written}}}}); err != nil {
		t.Fatal(err)
	}
	rep := Report{}
	if err := rotated.resealOne(ctx, c, recField, doc, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Raced != 1 || rep.Resealed != 0 {
		t.Fatalf("report %+v", rep)
	}
	var r rec
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "rec-000"}}).Decode(&r); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := rotated.OpenJSON(*r.Sealed, recAD("rec-000", "d"), &m); err != nil || m["n"] != "written meanwhile" {
		t.Fatalf("the concurrent write was lost: %v %v", m, err)
	}
}

func TestResealResumes(t *testing.T) {
	ctx := context.Background()
	c := testkit.Get().Database(t).Collection("recs")
	fill(t, c, testRing(t, "1:"+k32(1), ""), 12)
	rotated := testRing(t, "1:"+k32(1)+",2:"+k32(2), "2")
	// Interrupted after the first batch.
	cctx, cancel := context.WithCancel(ctx)
	_, err := Reseal(cctx, rotated, c, recField, 5, func(Report) { cancel() })
	if err == nil {
		t.Fatal("a cancelled run must report its interruption")
	}
	if got := keysOf(t, c); got["2"] != 5 || got["1"] != 7 {
		t.Fatalf("after the interruption: %v", got)
	}
	rep, err := Reseal(ctx, rotated, c, recField, 5, nil)
	if err != nil || rep.Resealed != 7 {
		t.Fatalf("resumed run %+v %v", rep, err)
	}
	if got := keysOf(t, c); got["2"] != 12 || got["1"] != 0 {
		t.Fatalf("after the resumed run: %v", got)
	}
}
