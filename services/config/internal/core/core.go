// Package core is what the config service's four resources share: their
// collections, the key that makes a record's name unique where upstream
// makes it unique, the bounds on what a record holds, and the writes
// every resource makes the same way (an insert that answers 409 for a
// taken name, a $set by key, the upsert of `set`).
//
// It holds no operation and imports no package of the service.
package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/store"
)

// The collections of the service, one per resource.
const (
	UserConfigs   = "config_user_configs"
	SharedConfigs = "config_shared_configs"
	DomainConfigs = "config_domain_configs"
	// DeadLettersCollection keeps the messages its consumers gave up on
	// (events.DeadRecords).
	DeadLettersCollection = "config_dead_letters"
	PublicConfigs         = "config_public_configs"
)

// Limits bound what one caller may store; the service runs with
// DefaultLimits, tests with smaller ones.
type Limits struct {
	// MaxDataBytes bounds a record's data, as JSON.
	MaxDataBytes int
	// MaxUserConfigs bounds the user configs of one user.
	MaxUserConfigs int
}

// DefaultLimits: 64 KiB of data (the console's largest, a custom table
// layout, is a few KiB) and 10,000 user configs per user (a recent or a
// favourite is one record each).
func DefaultLimits() Limits { return Limits{MaxDataBytes: 64 << 10, MaxUserConfigs: 10000} }

// OrDefault is l with zero fields taken from DefaultLimits.
func (l Limits) OrDefault() Limits {
	d := DefaultLimits()
	if l.MaxDataBytes <= 0 {
		l.MaxDataBytes = d.MaxDataBytes
	}
	if l.MaxUserConfigs <= 0 {
		l.MaxUserConfigs = d.MaxUserConfigs
	}
	return l
}

// Key is the _id of the record named name inside the scope parts (domain,
// user; or domain, workspace, project): the one key upstream makes unique,
// hashed so that a name of any length and any characters is an _id a
// lookup finds by itself, and an insert of a taken name fails on _id.
func Key(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "config-" + hex.EncodeToString(h.Sum(nil))[:40]
}

// CheckName refuses a name that is empty after trimming (the decoder
// trims) or longer than 255 characters.
func CheckName(name string) error {
	if strings.TrimSpace(name) == "" {
		return errs.Required("name")
	}
	if len([]rune(name)) > 255 {
		return errs.Invalid("name", "longer than 255 characters")
	}
	return nil
}

// CheckData checks a free-form field (data, tags) a store can keep and
// that is at most max bytes as JSON.
func CheckData(field string, v map[string]any, max int) error {
	if v == nil {
		return nil
	}
	if err := freeform.Check(field, v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return errs.Invalid(field, "not JSON")
	}
	if len(b) > max {
		return errs.Invalid(field, fmt.Sprintf("%d bytes as JSON, more than the %d allowed", len(b), max))
	}
	return nil
}

// Insert stores doc; a taken _id (the name in its scope) is 409.
func Insert(ctx context.Context, c *mongo.Collection, doc any) error {
	_, err := c.InsertOne(ctx, doc)
	return store.Wrap(err)
}

// Record is a stored record that Write can replace: it carries the
// revision its compare-and-set reads and bumps.
type Record interface {
	Rev() int64
	SetRev(int64)
}

// writeTries bounds Write's compare-and-set: each lost race means another
// write landed, so a caller losing this many in a row is told to retry.
const writeTries = 16

// Write changes the record id as one whole-document replacement guarded
// by its revision (compare-and-set), or inserts it when absent and upsert
// is set (an insert of the _id, which a concurrent one makes fail and
// retry as an update). change gets the stored record (nil when absent)
// and returns the record to store. A missing record without upsert is
// 404 naming it by name.
//
// Why not $set: FerretDB 1.24 skips a $set of an object field whose new
// value holds the same values under other keys ({a: true} to {b: true}
// reports modified 0 and keeps the old one: measured, December 2026),
// and a config's data is exactly such an object. A replacement writes
// the whole document, on FerretDB and on MongoDB alike.
func Write[T any, P interface {
	*T
	Record
}](ctx context.Context, c *mongo.Collection, id, name string, upsert bool, change func(old P) (P, error)) (P, error) {
	for range writeTries {
		var old P = new(T)
		err := c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(old)
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			if !upsert {
				return nil, errs.NotFound("name", name)
			}
			old = nil
		case err != nil:
			return nil, store.Wrap(err)
		}
		doc, err := change(old)
		if err != nil {
			return nil, err
		}
		if old == nil {
			doc.SetRev(1)
			_, err := c.InsertOne(ctx, doc)
			if mongo.IsDuplicateKeyError(err) {
				continue // a concurrent write created it: change that one
			}
			return doc, store.Wrap(err)
		}
		doc.SetRev(old.Rev() + 1)
		res, err := c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "revision", Value: old.Rev()}}, doc)
		if err != nil {
			return nil, store.Wrap(err)
		}
		if res.MatchedCount == 1 {
			return doc, nil
		}
	}
	return nil, errs.Down("The record", fmt.Errorf("%s: %d writes in a row lost their compare-and-set", id, writeTries))
}

// Delete removes the record id; a missing one is 404 naming it by name.
func Delete(ctx context.Context, c *mongo.Collection, id, name string) error {
	res, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return errs.NotFound("name", name)
	}
	return nil
}
