// Package store is the MongoDB side of the kit: connecting with timeouts,
// indexes created at start, tenant-confined reads, compiled list queries,
// and the mapping of driver failures onto errs codes.
//
// Services keep their own documents and rules; this package knows no
// service and no HTTP.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
)

// Options tune the client. Zero values take the defaults.
type Options struct {
	MaxPoolSize    uint64        // default 64; keep small on SQLite-backed FerretDB
	ConnectTimeout time.Duration // default 5s
	OpTimeout      time.Duration // default 10s, per operation
}

// Connect opens a client and checks that the server answers.
func Connect(ctx context.Context, uri string, o Options) (*mongo.Client, error) {
	if o.MaxPoolSize == 0 {
		o.MaxPoolSize = 64
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = 10 * time.Second
	}
	opts := options.Client().ApplyURI(uri).
		SetMaxPoolSize(o.MaxPoolSize).
		SetConnectTimeout(o.ConnectTimeout).
		SetServerSelectionTimeout(o.ConnectTimeout).
		SetTimeout(o.OpTimeout).
		// Free-form objects (tags, options, metadata) are map[string]any on
		// the wire; nested documents must come back as maps too, not as
		// the driver's default bson.D, which JSON writes as [{Key, Value}].
		SetBSONOptions(&options.BSONOptions{DefaultDocumentM: true})
	c, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("mongo connect: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	if err := c.Ping(pctx, readpref.Primary()); err != nil {
		_ = c.Disconnect(context.Background())
		return nil, fmt.Errorf("mongo ping: %w", err)
	}
	return c, nil
}

// Ping reports whether the store answers within a second (readiness).
func Ping(ctx context.Context, db *mongo.Database) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err()
}

// Get loads a document by _id, with no tenancy check: records of a
// tenant are read with GetFor or GetToChange (pkg/tenancy).
func Get[T any](ctx context.Context, c *mongo.Collection, key, id string) (*T, error) {
	var doc T
	err := c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errs.NotFound(key, id)
	}
	if err != nil {
		return nil, Wrap(err)
	}
	return &doc, nil
}

// ByIDs loads the documents whose _id is one of ids, by _id; an id with
// no document is absent from the map. One id is read by a filter on _id
// alone, which FerretDB serves from its index (it serves no $in from it):
// a get of one record with its side documents stays a lookup.
func ByIDs[T any](ctx context.Context, c *mongo.Collection, ids []string) (map[string]T, error) {
	out := make(map[string]T, len(ids))
	switch len(ids) {
	case 0:
		return out, nil
	case 1:
		var doc T
		err := c.FindOne(ctx, bson.D{{Key: "_id", Value: ids[0]}}).Decode(&doc)
		switch {
		case err == nil:
			out[ids[0]] = doc
		case !errors.Is(err, mongo.ErrNoDocuments):
			return nil, Wrap(err)
		}
		return out, nil
	}
	cur, err := c.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, Wrap(err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		var id struct {
			ID string `bson:"_id"`
		}
		var doc T
		if err := cur.Decode(&id); err != nil {
			return nil, Wrap(err)
		}
		if err := cur.Decode(&doc); err != nil {
			return nil, Wrap(err)
		}
		out[id.ID] = doc
	}
	return out, Wrap(cur.Err())
}

// List runs a compiled plan: one find and one count, both on the same
// filter (resolved first, see Resolve).
func List[T any](ctx context.Context, c *mongo.Collection, p *query.Plan) ([]T, int64, error) {
	filter, err := Resolve(ctx, c, p.Filter)
	if err != nil {
		return nil, 0, err
	}
	total, err := c.CountDocuments(ctx, filter)
	if err != nil {
		return nil, 0, Wrap(err)
	}
	out := []T{}
	if p.CountOnly || total == 0 || p.Skip >= total {
		return out, total, nil
	}
	opts := options.Find().SetSort(p.Sort).SetSkip(p.Skip).SetLimit(p.Limit)
	if p.Projection != nil {
		opts.SetProjection(p.Projection)
	}
	cur, err := c.Find(ctx, filter, opts)
	if err != nil {
		return nil, 0, Wrap(err)
	}
	if p.MaxBytes <= 0 {
		if err := cur.All(ctx, &out); err != nil {
			return nil, 0, Wrap(err)
		}
		return out, total, nil
	}
	defer cur.Close(context.WithoutCancel(ctx))
	size := 0
	for cur.Next(ctx) {
		if size += len(cur.Current); size > p.MaxBytes && len(out) > 0 {
			break
		}
		var row T
		if err := cur.Decode(&row); err != nil {
			return nil, 0, Wrap(err)
		}
		out = append(out, row)
	}
	if err := cur.Err(); err != nil {
		return nil, 0, Wrap(err)
	}
	return out, total, nil
}

// Search compiles q for resource r inside scope and runs it: the whole
// list operation of a service in one call.
func Search[T any](ctx context.Context, c *mongo.Collection, q *query.Query, r query.Resource, scope bson.D) (*api.List[T], error) {
	plan, err := query.Compile(q, r, scope)
	if err != nil {
		return nil, err
	}
	rows, total, err := List[T](ctx, c, plan)
	if err != nil {
		return nil, err
	}
	return &api.List[T]{Results: rows, TotalCount: total, Fields: plan.Fields}, nil
}

// Resolve makes a compiled filter ready for the server: each match
// condition (a query.ElemMatch) becomes {_id: {$in: ids}}, the ids of the
// documents that pass the whole filter and have an element meeting the
// condition, found with one $unwind aggregation per condition. It gives
// the $elemMatch rows on MongoDB and on FerretDB 1.x alike (whose own
// $elemMatch does not look at each element). Only ids of matching rows
// are loaded, never the collection. List calls it; a stat pipeline must
// call it on its $match filter too. A filter without match conditions is
// returned as is.
func Resolve(ctx context.Context, c *mongo.Collection, filter bson.D) (bson.D, error) {
	if len(query.ElemMatches(filter)) == 0 {
		return filter, nil
	}
	// Every match relaxed to "the field is an array": a superset of the
	// rows, still confined to the scope that the filter carries.
	base := query.ReplaceElemMatch(filter, func(m query.ElemMatch) bson.D {
		return bson.D{{Key: m.Path, Value: bson.D{{Key: "$type", Value: "array"}}}}
	})
	var failed error
	out := query.ReplaceElemMatch(filter, func(m query.ElemMatch) bson.D {
		ids, err := elemMatchIDs(ctx, c, base, m)
		if err != nil && failed == nil {
			failed = err
		}
		return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}
	})
	if failed != nil {
		return nil, failed
	}
	return out, nil
}

// elemMatchIDs lists the _id of each document that passes base and has an
// element of the array at m.Path meeting m.Cond.
func elemMatchIDs(ctx context.Context, c *mongo.Collection, base bson.D, m query.ElemMatch) (bson.A, error) {
	isArray := bson.D{{Key: m.Path, Value: bson.D{{Key: "$type", Value: "array"}}}}
	cur, err := c.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: base}},
		{{Key: "$match", Value: isArray}}, // $unwind would take a non-array value as one element
		{{Key: "$project", Value: bson.D{{Key: m.Path, Value: 1}}}},
		{{Key: "$unwind", Value: "$" + m.Path}},
		{{Key: "$match", Value: m.Unwound()}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$_id"}}}},
	})
	if err != nil {
		return nil, Wrap(err)
	}
	var rows []bson.M
	if err := cur.All(ctx, &rows); err != nil {
		return nil, Wrap(err)
	}
	ids := make(bson.A, len(rows))
	for i, r := range rows {
		ids[i] = r["_id"]
	}
	return ids, nil
}

// Wrap maps a driver error onto the errs model: duplicates are 409, an
// unreachable store is 503, a query the server refuses is 400, and the rest
// stays an internal error (logged, never shown).
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errs.As(err); ok {
		return err
	}
	var se mongo.ServerError
	switch {
	case mongo.IsDuplicateKeyError(err), errors.As(err, &se) && isUniqueViolation(se):
		return errs.New(errs.SaveUniqueValues, "Tried to save duplicate unique values.")
	case mongo.IsTimeout(err), mongo.IsNetworkError(err), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, new(topology.ServerSelectionError)):
		return errs.Down("The store", err)
	case Busy(err):
		return errs.Down("The store", err)
	case errors.As(err, &se) && isQueryError(se):
		return errs.New(errs.DBQuery, "Query is invalid. (reason = the store refused it)")
	}
	return err
}

// OnlyDuplicates reports an insert (one or an unordered many) whose every
// failure is a duplicate key: those documents are stored already, by an
// earlier try or a concurrent one, so the insert as a whole did its work.
// A write concern error, or a bulk failure that names no document, is not.
func OnlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) {
		return mongo.IsDuplicateKeyError(err)
	}
	if bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if !mongo.IsDuplicateKeyError(we) && we.Code != 11000 {
			return false
		}
	}
	return true
}

// Busy reports FerretDB over SQLite refusing a write because another
// writer held its database (SQLITE_BUSY and its variants, such as
// BUSY_SNAPSHOT, 517, as an InternalError): the write was not applied
// and may pass when tried again. Wrap answers it 503; pkg/lease takes
// again within its wait.
func Busy(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCodeWithMessage(1, "database is locked")
}

// isUniqueViolation reports a unique index conflict that FerretDB 1.x
// reports as an InternalError instead of DuplicateKey (11000): an update
// that would give a second document the same unique key, on SQLite and on
// PostgreSQL. MongoDB answers 11000 for it, which IsDuplicateKeyError knows.
func isUniqueViolation(se mongo.ServerError) bool {
	return se.HasErrorCodeWithMessage(1, "UNIQUE constraint failed") ||
		se.HasErrorCodeWithMessage(1, "violates unique constraint")
}

// isQueryError reports server codes that mean a malformed query
// (BadValue, FailedToParse, InvalidOptions, Location codes of $regex/$expr).
func isQueryError(se mongo.ServerError) bool {
	for _, code := range []int{2, 9, 72, 51091, 17287, 15998, 16020, 40323, 40324, 40352} {
		if se.HasErrorCode(code) {
			return true
		}
	}
	return false
}

// SetByID applies a $set to the document with _id id and returns it as
// stored afterwards; a missing one is 404 (key = id).
func SetByID[T any](ctx context.Context, c *mongo.Collection, key, id string, set bson.D) (*T, error) {
	var out T
	err := c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&out)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errs.NotFound(key, id)
	}
	if err != nil {
		return nil, Wrap(err)
	}
	return &out, nil
}
