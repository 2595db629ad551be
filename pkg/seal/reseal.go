package seal

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DefaultBatch is how many records one Reseal step reads at a time.
const DefaultBatch = 100

// Field is one sealed sub-document of a collection's documents.
type Field struct {
	// Path is the (dotted) path of the Sealed sub-document.
	Path string
	// AD returns the associated data of one stored document, the same
	// the service passes to Seal and Open for it.
	AD func(doc bson.Raw) ([]byte, error)
}

// Report is what one Reseal run did.
type Report struct {
	Collection string   `json:"collection"`
	Field      string   `json:"field"`
	ActiveKey  string   `json:"active_key"`
	Resealed   int      `json:"resealed"` // moved to the active key by this run
	Raced      int      `json:"raced"`    // written by someone else meanwhile: left to that write (sealed with the active key)
	Failed     []string `json:"failed"`   // _id of records that do not open (key missing or bytes altered); left unchanged
}

// Reseal seals every record of c whose field f is not under the active key
// again with the active key, batch by batch, while the service keeps
// serving. Each record is replaced only if it still holds the ciphertext
// that was read (a conditional update on its nonce), so a concurrent write
// is never overwritten. It is idempotent and resumable: a run after an
// interruption picks up the records still under an old key. progress, if
// not nil, is called after each batch.
func Reseal(ctx context.Context, k *Keyring, c *mongo.Collection, f Field, batch int, progress func(Report)) (Report, error) {
	if batch <= 0 {
		batch = DefaultBatch
	}
	rep := Report{Collection: c.Name(), Field: f.Path, ActiveKey: k.active, Failed: []string{}}
	var last any
	for {
		filter := bson.D{
			{Key: f.Path, Value: bson.D{{Key: "$exists", Value: true}}},
			{Key: f.Path + ".key_id", Value: bson.D{{Key: "$ne", Value: k.active}}},
		}
		if last != nil {
			filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}})
		}
		cur, err := c.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(batch)))
		if err != nil {
			return rep, fmt.Errorf("reseal %s.%s: %w", c.Name(), f.Path, err)
		}
		var docs []bson.Raw
		err = cur.All(ctx, &docs)
		if err != nil {
			return rep, fmt.Errorf("reseal %s.%s: %w", c.Name(), f.Path, err)
		}
		if len(docs) == 0 {
			return rep, nil
		}
		for _, doc := range docs {
			if err := k.resealOne(ctx, c, f, doc, &rep); err != nil {
				return rep, err
			}
		}
		last = docs[len(docs)-1].Lookup("_id")
		if progress != nil {
			progress(rep)
		}
		if len(docs) < batch {
			return rep, nil
		}
	}
}

// resealOne moves one stored document's field to the active key.
func (k *Keyring) resealOne(ctx context.Context, c *mongo.Collection, f Field, doc bson.Raw, rep *Report) error {
	idv := doc.Lookup("_id")
	id := idv.String()
	if s, ok := idv.StringValueOK(); ok {
		id = s
	}
	fv, err := doc.LookupErr(strings.Split(f.Path, ".")...)
	if err != nil {
		return nil // the field went away between find and read: nothing to do
	}
	sub, ok := fv.DocumentOK()
	if !ok {
		return nil // null: nothing sealed
	}
	var old Sealed
	if err := old.UnmarshalBSON(sub); err != nil {
		rep.Failed = append(rep.Failed, id)
		return nil
	}
	ad, err := f.AD(doc)
	if err != nil {
		rep.Failed = append(rep.Failed, id)
		return nil
	}
	fresh, changed, err := k.Reseal(old, ad)
	if errors.Is(err, ErrUnknownKey) || errors.Is(err, ErrOpen) {
		rep.Failed = append(rep.Failed, id)
		return nil
	}
	if err != nil {
		return err
	}
	if !changed {
		return nil
	}
	res, err := c.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: idv}, {Key: f.Path + ".nonce", Value: old.Nonce}},
		bson.D{{Key: "$set", Value: bson.D{{Key: f.Path, Value: fresh}}}})
	if err != nil {
		return fmt.Errorf("reseal %s.%s %s: %w", c.Name(), f.Path, id, err)
	}
	if res.MatchedCount == 0 {
		rep.Raced++
		return nil
	}
	rep.Resealed++
	return nil
}

// Target is one sealed field of one collection.
type Target struct {
	Coll  *mongo.Collection
	Field Field
}

// ResealAll runs Reseal over every target in turn (a service's whole
// rotation) and returns one report per target. It stops at the first
// store error; running it again resumes.
func ResealAll(ctx context.Context, k *Keyring, targets []Target, batch int, progress func(Report)) ([]Report, error) {
	out := make([]Report, 0, len(targets))
	for _, t := range targets {
		rep, err := Reseal(ctx, k, t.Coll, t.Field, batch, progress)
		out = append(out, rep)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
