// Package seal encrypts data at rest with AES-256-GCM under a keyring:
// several keys, each with an id, one of them active. The active key seals
// every new write; every key of the ring still opens what it sealed, so keys
// rotate without downtime (Reseal moves old records to the active key).
//
// Each ciphertext is stored with the id of its key and is bound to its
// record by associated data (AD): a ciphertext copied to another record,
// collection or domain does not open.
//
// Keys come from configuration or files (Load), never from the store. This
// package never logs and never puts plaintext in an error; it knows no
// service and no HTTP.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// KeySize is the size of an AES-256 key.
const KeySize = 32

var (
	// ErrUnknownKey: the ciphertext names a key id the keyring does not hold.
	ErrUnknownKey = errors.New("seal: the key that sealed this record is not configured")
	// ErrOpen: the ciphertext does not open (wrong key, wrong associated
	// data, or altered bytes).
	ErrOpen = errors.New("seal: the record does not open with its key and associated data")
)

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Keyring holds the keys; safe for concurrent use (it never changes after
// it is built).
type Keyring struct {
	active string
	keys   map[string]cipher.AEAD
}

// New builds a keyring from raw 32-byte keys by id. active names the key
// that seals; it must be one of keys.
func New(keys map[string][]byte, active string) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("seal: no encryption key configured")
	}
	k := &Keyring{active: active, keys: make(map[string]cipher.AEAD, len(keys))}
	for id, raw := range keys {
		if !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("seal: key id %q: want 1 to 64 of [A-Za-z0-9._-]", id)
		}
		if len(raw) != KeySize {
			return nil, fmt.Errorf("seal: key %q: want %d bytes, got %d", id, KeySize, len(raw))
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", id, err)
		}
		k.keys[id] = aead
	}
	if _, ok := k.keys[active]; !ok {
		return nil, fmt.Errorf("seal: the active key %q is not among the keys %v", active, k.IDs())
	}
	return k, nil
}

// Parse reads "id:base64,id:base64" (standard base64 of 32 bytes each).
// active names the sealing key; when empty, the only key is active, or,
// when every id is a number (the first format identity used, "1:...,2:..."),
// the highest one.
func Parse(spec, active string) (*Keyring, error) {
	keys := map[string][]byte{}
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, b64, ok := strings.Cut(part, ":")
		id = strings.TrimSpace(id)
		if !ok || id == "" {
			return nil, errors.New("seal: an encryption key is not of the form <id>:<base64 of 32 bytes>")
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil || len(raw) != KeySize {
			// Never echo the key material itself.
			return nil, fmt.Errorf("seal: key %q: want %d bytes in standard base64", id, KeySize)
		}
		if _, dup := keys[id]; dup {
			return nil, fmt.Errorf("seal: key %q is given twice", id)
		}
		keys[id] = raw
	}
	if active == "" {
		var err error
		if active, err = defaultActive(keys); err != nil {
			return nil, err
		}
	}
	return New(keys, strings.TrimSpace(active))
}

func defaultActive(keys map[string][]byte) (string, error) {
	if len(keys) == 1 {
		for id := range keys {
			return id, nil
		}
	}
	best, bestN := "", -1
	for id := range keys {
		n, err := strconv.Atoi(id)
		if err != nil || n < 0 {
			return "", errors.New("seal: several keys with non-numeric ids: name the active one (encryption_active_key)")
		}
		if n > bestN {
			best, bestN = id, n
		}
	}
	if best == "" {
		return "", errors.New("seal: no encryption key configured")
	}
	return best, nil
}

// Config is how a binary names its keys: Keys inline ("id:base64,..."),
// or KeysFile holding the same text (a mounted Kubernetes Secret); both may
// be given and are merged. Active is the sealing key's id (see Parse).
type Config struct {
	Keys     string
	KeysFile string
	Active   string
}

// Load builds the keyring of c.
func Load(c Config) (*Keyring, error) {
	spec := c.Keys
	if c.KeysFile != "" {
		b, err := os.ReadFile(c.KeysFile)
		if err != nil {
			return nil, fmt.Errorf("seal: read encryption keys file: %w", err)
		}
		spec = strings.Join([]string{spec, strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", ",")}, ",")
	}
	if strings.Trim(spec, ", \n") == "" {
		return nil, errors.New("seal: encryption_keys or encryption_keys_file (\"<id>:<base64 of 32 bytes>\") is required")
	}
	return Parse(spec, c.Active)
}

// RandomSpec returns a one-key spec "<id>:<base64>" with a fresh random
// key (the devstack's first start).
func RandomSpec(id string) string {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k)
	return id + ":" + base64.StdEncoding.EncodeToString(k)
}

// Active is the id of the sealing key.
func (k *Keyring) Active() string { return k.active }

// IDs are the ids of every key of the ring, sorted.
func (k *Keyring) IDs() []string {
	ids := make([]string, 0, len(k.keys))
	for id := range k.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Sealed is a ciphertext as stored, beside the id of the key that made it.
type Sealed struct {
	KeyID string `bson:"key_id" json:"key_id"`
	Nonce []byte `bson:"nonce" json:"nonce"`
	Data  []byte `bson:"data" json:"data"`
}

// UnmarshalBSON reads the stored form, and also the first form identity
// stored, where the key id was a number in `key_version`.
func (s *Sealed) UnmarshalBSON(b []byte) error {
	raw := bson.Raw(b)
	if err := raw.Validate(); err != nil {
		return err
	}
	*s = Sealed{}
	if v, err := raw.LookupErr("key_id"); err == nil {
		id, ok := v.StringValueOK()
		if !ok {
			return errors.New("seal: key_id is not a string")
		}
		s.KeyID = id
	} else if v, err := raw.LookupErr("key_version"); err == nil {
		n, ok := v.AsInt64OK()
		if !ok {
			return errors.New("seal: key_version is not a number")
		}
		s.KeyID = strconv.FormatInt(n, 10)
	}
	for name, dst := range map[string]*[]byte{"nonce": &s.Nonce, "data": &s.Data} {
		v, err := raw.LookupErr(name)
		if err != nil {
			return fmt.Errorf("seal: %s is missing", name)
		}
		_, bin, ok := v.BinaryOK()
		if !ok {
			return fmt.Errorf("seal: %s is not binary", name)
		}
		*dst = slices.Clone(bin)
	}
	return nil
}

// AD builds associated data from the parts that identify a record (for
// example collection, record id, domain id). Each part is length-prefixed,
// so ("ab","c") and ("a","bc") differ.
func AD(parts ...string) []byte {
	var out []byte
	for _, p := range parts {
		out = binary.AppendUvarint(out, uint64(len(p)))
		out = append(out, p...)
	}
	return out
}

// Seal encrypts plain with the active key, bound to ad.
func (k *Keyring) Seal(plain, ad []byte) (Sealed, error) {
	aead := k.keys[k.active]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Sealed{}, fmt.Errorf("seal: random nonce: %w", err)
	}
	return Sealed{KeyID: k.active, Nonce: nonce, Data: aead.Seal(nil, nonce, plain, ad)}, nil
}

// Open decrypts s, which must have been sealed with the same ad.
func (k *Keyring) Open(s Sealed, ad []byte) ([]byte, error) {
	aead, ok := k.keys[s.KeyID]
	if !ok {
		return nil, fmt.Errorf("%w (key id %q)", ErrUnknownKey, s.KeyID)
	}
	if len(s.Nonce) != aead.NonceSize() {
		return nil, ErrOpen
	}
	plain, err := aead.Open(nil, s.Nonce, s.Data, ad)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// SealJSON seals the JSON encoding of v.
func (k *Keyring) SealJSON(v any, ad []byte) (Sealed, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		// json errors name types, not values: safe to return.
		return Sealed{}, fmt.Errorf("seal: encode: %w", err)
	}
	return k.Seal(plain, ad)
}

// OpenJSON opens s and decodes its JSON into v.
func (k *Keyring) OpenJSON(s Sealed, ad []byte, v any) error {
	plain, err := k.Open(s, ad)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(plain, v); err != nil {
		return errors.New("seal: the opened record is not the JSON expected")
	}
	return nil
}

// Current reports whether s was sealed with the active key.
func (k *Keyring) Current(s Sealed) bool { return s.KeyID == k.active }

// Reseal opens s and seals its plaintext again with the active key. A
// record already under the active key is returned as it is.
func (k *Keyring) Reseal(s Sealed, ad []byte) (Sealed, bool, error) {
	if k.Current(s) {
		return s, false, nil
	}
	plain, err := k.Open(s, ad)
	if err != nil {
		return Sealed{}, false, err
	}
	defer clear(plain)
	out, err := k.Seal(plain, ad)
	return out, err == nil, err
}
