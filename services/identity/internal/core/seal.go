package core

import (
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/seal"
)

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

// OTPAAD binds a sealed OTP secret to its user (the user's _id).
func OTPAAD(userKey string) string { return "otp:" + userKey }

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
