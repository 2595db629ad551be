package verification

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"math/big"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// Codes are the short-lived verification codes (MFA, e-mail). A code is
// six digits, stored only as a hash, single use, expires, and allows
// maxCodeAttempts wrong tries before it is void.
type Codes struct {
	C        *mongo.Collection
	Attempts store.Window // wrong tries per code, exact under concurrency
	issued   store.Window // codes per user in the last codeWindow
}

// CodesOf are the codes of d's database (they hold no state of their own).
func CodesOf(d *core.Deps) Codes {
	counters := d.DB.Collection(core.CountersCollection)
	return Codes{C: d.DB.Collection(core.CodesCollection),
		Attempts: store.Window{C: counters, Max: maxCodeAttempts, TTL: 24 * time.Hour},
		issued:   store.Window{C: counters, Max: maxCodesIssued, TTL: codeWindow}}
}

const maxCodeAttempts = 5

// Each code is an e-mail, often to an address the caller just named:
// a user gets at most maxCodesIssued in codeWindow, so no account can
// be used to flood a mailbox.
const (
	maxCodesIssued = 10
	codeWindow     = time.Hour
)

var errTooManyCodes error = errs.New(errs.TooManyRequests, "Too many verification codes were sent to this user; try again later.")

type codeDoc struct {
	ID        string            `bson:"_id"`
	Hash      string            `bson:"hash"`
	ExpiresAt wire.Time         `bson:"expires_at"`
	Data      map[string]string `bson:"data"`
}

func codeID(purpose, domainID, userID string) string {
	return purpose + ":" + domainID + "/" + userID
}

func codeHash(id, code string) string {
	sum := sha256.Sum256([]byte(id + "\x00" + code))
	return hex.EncodeToString(sum[:])
}

// Issue replaces any earlier code of the same purpose for the user. It
// answers errTooManyCodes, storing nothing, past maxCodesIssued.
func (c Codes) Issue(ctx context.Context, purpose, domainID, userID string, ttl time.Duration, data map[string]string) (string, error) {
	if ok, err := c.issued.Take(ctx, "issued:"+domainID+"/"+userID); err != nil || !ok {
		return "", cmp.Or(err, errTooManyCodes)
	}
	n, err := rand.Int(rand.Reader, big.NewInt(900000))
	if err != nil {
		return "", err
	}
	code := strconv.FormatInt(n.Int64()+100000, 10) // first digit 1-9, as upstream
	id := codeID(purpose, domainID, userID)
	doc := codeDoc{ID: id, Hash: codeHash(id, code), ExpiresAt: wire.T(time.Now().Add(ttl)), Data: data}
	if err := c.Attempts.Reset(ctx, id); err != nil {
		return "", err
	}
	_, err = c.C.ReplaceOne(ctx, bson.D{{Key: "_id", Value: id}}, doc, options.Replace().SetUpsert(true))
	return code, store.Wrap(err)
}

var ErrBadCode error = errs.New(errs.InvalidVerifyCode, "The verification code is invalid or expired.")

// ErrTooManyTries answers a try that finds the code's tries used up: it
// was not compared, and the code is void until a new one is asked for.
var ErrTooManyTries error = errs.New(errs.TooManyRequests, "Too many tries at this verification code; ask for a new one.")

// Verify consumes the code: the right code works once, a wrong one counts
// an attempt, and too many attempts or an expired code void it.
func (c Codes) Verify(ctx context.Context, purpose, domainID, userID, code string) (map[string]string, error) {
	id := codeID(purpose, domainID, userID)
	var doc codeDoc
	if err := c.C.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil, ErrBadCode
		}
		return nil, store.Wrap(err)
	}
	if time.Now().After(doc.ExpiresAt.Time) {
		_, _ = c.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
		return nil, ErrBadCode
	}
	// Each try claims a slot before the comparison; with none left the
	// code is void, so however many tries run in parallel, at most
	// maxCodeAttempts are compared.
	if ok, err := c.Attempts.Take(ctx, id); err != nil || !ok {
		return nil, cmp.Or(err, ErrTooManyTries)
	}
	if subtle.ConstantTimeCompare([]byte(codeHash(id, strings.TrimSpace(code))), []byte(doc.Hash)) != 1 {
		return nil, ErrBadCode
	}
	// Single use even under a race: only the request that deletes it wins.
	res, err := c.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount != 1 {
		return nil, ErrBadCode
	}
	return doc.Data, nil
}

// Drop voids u's codes of purposes.
func (c Codes) Drop(ctx context.Context, u *core.User, purposes ...string) error {
	ids := bson.A{}
	for _, p := range purposes {
		ids = append(ids, codeID(p, u.DomainID, u.UserID))
	}
	_, err := c.C.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	return store.Wrap(err)
}
