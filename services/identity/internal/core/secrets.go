package core

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
	"unicode"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
)

// CheckPassword enforces the password rules: at least 8 characters (at
// most 72 bytes, bcrypt's limit), one lowercase letter, one uppercase
// letter and one digit.
func CheckPassword(pw string) error {
	var lower, upper, digit bool
	for _, r := range pw {
		lower = lower || unicode.IsLower(r)
		upper = upper || unicode.IsUpper(r)
		digit = digit || unicode.IsDigit(r)
	}
	if len([]rune(pw)) < 8 || len(pw) > 72 || !lower || !upper || !digit {
		return errs.New(errs.IncorrectPasswordFormat,
			"The password must have 8 to 72 bytes with a lowercase letter, an uppercase letter and a digit.")
	}
	return nil
}

// HashPassword checks the rules and hashes with bcrypt at cost (0:
// bcrypt.DefaultCost).
func HashPassword(pw string, cost int) (string, error) {
	if err := CheckPassword(pw); err != nil {
		return "", err
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), cmp.Or(cost, bcrypt.DefaultCost))
	return string(h), err
}

// HashPassword hashes at the configured cost (Config.PasswordCost).
func (s *Deps) HashPassword(pw string) (string, error) { return HashPassword(pw, s.Cfg.PasswordCost) }

// PasswordMatches compares in constant time (bcrypt); an empty hash
// still costs one comparison, against a hash of the configured cost, so
// a login for an unknown user is as slow as for a known one.
func (s *Deps) PasswordMatches(hash, pw string) bool {
	if hash == "" {
		_ = bcrypt.CompareHashAndPassword(s.dummyHash(), []byte(pw))
		return false
	}
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) == nil
}

// RandomPassword makes a password that meets the rules.
func RandomPassword() string {
	const alphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
	for {
		b := make([]byte, 16)
		for i := range b {
			n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
			b[i] = alphabet[n.Int64()]
		}
		if CheckPassword(string(b)) == nil {
			return string(b)
		}
	}
}

// codes are the short-lived verification codes (MFA, e-mail). A code is
// six digits, stored only as a hash, single use, expires, and allows
// maxCodeAttempts wrong tries before it is void.
type Codes struct {
	C        *mongo.Collection
	Attempts store.Slots // wrong tries per code, exact under concurrency
	issued   store.Slots // codes per user in the last codeWindow
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

func CodeID(purpose, domainID, userID string) string {
	return purpose + ":" + domainID + "/" + userID
}

func codeHash(id, code string) string {
	sum := sha256.Sum256([]byte(id + "\x00" + code))
	return hex.EncodeToString(sum[:])
}

// issue replaces any earlier code of the same purpose for the user. It
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
	id := CodeID(purpose, domainID, userID)
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

// verify consumes the code: the right code works once, a wrong one counts
// an attempt, and too many attempts or an expired code void it.
func (c Codes) Verify(ctx context.Context, purpose, domainID, userID, code string) (map[string]string, error) {
	id := CodeID(purpose, domainID, userID)
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

// Cipher seals secret data at rest (AES-256-GCM under a keyring of
// pkg/seal: the active key seals, every configured key opens).
type Cipher = seal.Keyring

// Sealed is encrypted data as stored: {key_id, nonce, data}. Records that
// identity stored before pkg/seal carry the key as a number in
// key_version; seal.Sealed still reads them, and the reseal command moves
// them to the stored form of today.
type Sealed = seal.Sealed

// NewCipher parses "1:<base64 32 bytes>,2:<base64 32 bytes>" with the
// highest numeric id active, as identity always did; seal.Load names the
// active key explicitly.
func NewCipher(spec string) (*Cipher, error) { return seal.Parse(spec, "") }

// RandomCipherSpec returns a fresh one-key spec (for the devstack).
func RandomCipherSpec() string { return seal.RandomSpec("1") }

// ResealTargets are every sealed field identity stores, with the
// associated data each was sealed with: what a key rotation re-seals.
func ResealTargets(db *mongo.Database) []seal.Target {
	str := func(doc bson.Raw, key string) string { v, _ := doc.Lookup(key).StringValueOK(); return v }
	otp := func(doc bson.Raw) ([]byte, error) { return []byte(OTPAAD(str(doc, "_id"))), nil }
	return []seal.Target{
		{Coll: db.Collection(TrustedSecretsCollection), Field: seal.Field{Path: "sealed", AD: func(doc bson.Raw) ([]byte, error) {
			return []byte(TrustedSecretAAD(str(doc, "_id"), str(doc, "trusted_account_id"), str(doc, "domain_id"))), nil
		}}},
		{Coll: db.Collection(UsersCollection), Field: seal.Field{Path: "otp_secret", AD: otp}},
		{Coll: db.Collection(UsersCollection), Field: seal.Field{Path: "otp_pending", AD: otp}},
	}
}
