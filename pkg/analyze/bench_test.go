package analyze

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/testkit"
)

// BenchmarkAnalyze compares an analyze that groups in Go (count, sum,
// push of objects) with the raw driver reading the same rows, and one the
// store groups (a lone count) with the raw $group, over 5,000 jobs.
func BenchmarkAnalyze(b *testing.B) {
	c := testkit.Get().Database(b).Collection("job")
	var docs []any
	for _, j := range jobs("dom-a", 5000, time.Now().UTC()) {
		docs = append(docs, j.doc())
	}
	ctx := context.Background()
	if _, err := c.InsertMany(ctx, docs); err != nil {
		b.Fatal(err)
	}
	query := func(s string) *Query {
		var q Query
		if err := json.Unmarshal([]byte(s), &q); err != nil {
			b.Fatal(err)
		}
		return &q
	}
	raw := func(b *testing.B, pipeline mongo.Pipeline) {
		cur, err := c.Aggregate(ctx, pipeline)
		if err != nil {
			b.Fatal(err)
		}
		var rows []bson.D
		if err := cur.All(ctx, &rows); err != nil {
			b.Fatal(err)
		}
	}
	match := bson.D{{Key: "$match", Value: scope}}
	b.Run("go-group/analyze", func(b *testing.B) {
		q := query(`{"group_by":["collector_id"],"fields":{"n":{"operator":"count"},"t":{"operator":"sum","key":"total_tasks"},
			"jobs":{"operator":"push","fields":{"id":"job_id","status":"status","done":"finished_at"}}}}`)
		for b.Loop() {
			if _, err := Run(ctx, c, scope, resource, q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-group/raw-read", func(b *testing.B) {
		for b.Loop() {
			raw(b, mongo.Pipeline{match, {{Key: "$project", Value: bson.D{{Key: "collector_id", Value: 1},
				{Key: "total_tasks", Value: 1}, {Key: "job_id", Value: 1}, {Key: "status", Value: 1}, {Key: "finished_at", Value: 1}}}}})
		}
	})
	b.Run("store-group/analyze", func(b *testing.B) {
		q := query(`{"group_by":["collector_id"],"fields":{"n":{"operator":"count"}}}`)
		for b.Loop() {
			if _, err := Run(ctx, c, scope, resource, q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store-group/raw", func(b *testing.B) {
		for b.Loop() {
			raw(b, mongo.Pipeline{match, {{Key: "$group", Value: bson.D{{Key: "_id", Value: "$collector_id"},
				{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}}})
		}
	})
}
