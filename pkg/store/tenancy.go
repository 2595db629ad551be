package store

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

// GetFor loads the record id of resource r that p reaches (r.Tenancy);
// another tenant's record answers 404 (key = id), as a missing one does.
// It reads by _id alone (the filter FerretDB serves from its index) and
// checks the tenancy in Go.
func GetFor[T any](ctx context.Context, c *mongo.Collection, r query.Resource, p *auth.Principal, key, id string) (*T, error) {
	doc, _, err := loadFor[T](ctx, c, r, p, key, id, see)
	return doc, err
}

// GetToChange loads the record id of resource r that p may change:
// update, delete and every verb start with it. A record p does not reach
// answers 404; one of the whole domain (or workspace) that only a wider
// caller may change answers 403.
func GetToChange[T any](ctx context.Context, c *mongo.Collection, r query.Resource, p *auth.Principal, key, id string) (*T, error) {
	doc, _, err := loadFor[T](ctx, c, r, p, key, id, change)
	return doc, err
}

// What a load is for.
const (
	see    = iota
	change // a record being deleted is not found
	finish // a record being deleted is found: a delete's retry finishes it
)

// loadFor returns the record's tenancy too: Teardown reads its mark.
func loadFor[T any](ctx context.Context, c *mongo.Collection, r query.Resource, p *auth.Principal, key, id string, mode int) (*T, tenancy.Record, error) {
	rule, err := tenancy.For(p, r.Tenancy)
	if err != nil {
		return nil, tenancy.Record{}, err
	}
	raw, err := c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, tenancy.Record{}, errs.NotFound(key, id)
	}
	if err != nil {
		return nil, tenancy.Record{}, Wrap(err)
	}
	rec := r.Tenancy.Of(raw)
	if mode == finish {
		unmarked := rec
		unmarked.Marked = false
		err = rule.Writable(unmarked, key, id)
	} else if mode == change {
		err = rule.Writable(rec, key, id)
	} else if !rule.Sees(rec) {
		err = errs.NotFound(key, id)
	}
	if err != nil {
		return nil, rec, err
	}
	var doc T
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, rec, err
	}
	return &doc, rec, nil
}

// SearchFor is Search inside what p reaches of resource r.
func SearchFor[T any](ctx context.Context, c *mongo.Collection, q *query.Query, r query.Resource, p *auth.Principal) (*api.List[T], error) {
	scope, err := Scope(p, r)
	if err != nil {
		return nil, err
	}
	return Search[T](ctx, c, q, r, scope)
}

// Scope is the filter confining a read of resource r to what p reaches,
// for the reads SearchFor does not make (a count, a custom pipeline): the
// conditions are ANDed with the service's own.
func Scope(p *auth.Principal, r query.Resource) (bson.D, error) {
	rule, err := tenancy.For(p, r.Tenancy)
	if err != nil {
		return nil, err
	}
	return rule.Filter(), nil
}
