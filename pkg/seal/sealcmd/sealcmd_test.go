package sealcmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestRunReportsAndFailsOnRecordsItCannotOpen(t *testing.T) {
	env := testkit.Get()
	db := env.Database(t)
	ctx := context.Background()
	oldSpec, newSpec := seal.RandomSpec("1"), seal.RandomSpec("2")
	old, _ := seal.Parse(oldSpec, "")
	ad := func(id string) []byte { return seal.AD("recs", id) }
	for _, id := range []string{"a", "b", "c"} {
		s, _ := old.Seal([]byte(`{"v":1}`), ad(id))
		if _, err := db.Collection("recs").InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "sealed", Value: s}}); err != nil {
			t.Fatal(err)
		}
	}
	targets := func(db *mongo.Database) []seal.Target {
		return []seal.Target{{Coll: db.Collection("recs"), Field: seal.Field{Path: "sealed", AD: func(doc bson.Raw) ([]byte, error) {
			return ad(doc.Lookup("_id").StringValue()), nil
		}}}}
	}
	base := config.Base{MongoURI: env.Mongo.URI, MongoDatabase: db.Name()}

	// Key 1 forgotten too early: nothing opens, the run fails and says so.
	onlyNew, _ := seal.Parse(newSpec, "")
	var out bytes.Buffer
	err := sealcmd.Run(ctx, base, onlyNew, targets, 2, &out)
	if err == nil || !strings.Contains(err.Error(), "3 records") {
		t.Fatalf("run without the old key: %v", err)
	}
	var rep seal.Report
	if json.Unmarshal(out.Bytes(), &rep) != nil || len(rep.Failed) != 3 || rep.Resealed != 0 {
		t.Fatalf("report %s", out.String())
	}

	rotated, _ := seal.Parse(oldSpec+","+newSpec, "2")
	out.Reset()
	if err := sealcmd.Run(ctx, base, rotated, targets, 2, &out); err != nil {
		t.Fatal(err)
	}
	if json.Unmarshal(out.Bytes(), &rep) != nil || rep.Resealed != 3 || len(rep.Failed) != 0 || rep.ActiveKey != "2" || rep.Collection != "recs" {
		t.Fatalf("report %s", out.String())
	}
}

func TestKeysAndRequested(t *testing.T) {
	k, err := sealcmd.Keys{EncryptionKeys: seal.RandomSpec("a") + "," + seal.RandomSpec("b"), EncryptionActiveKey: "b"}.Keyring()
	if err != nil || k.Active() != "b" {
		t.Fatalf("keyring %v %v", k, err)
	}
	if _, err := (sealcmd.Keys{}).Keyring(); err == nil {
		t.Fatal("no keys must fail")
	}
	if !sealcmd.Requested([]string{"secret", "reseal"}) || sealcmd.Requested([]string{"secret"}) || sealcmd.Requested([]string{"secret", "serve"}) {
		t.Fatal("Requested")
	}
}
