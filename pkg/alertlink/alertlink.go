// Package alertlink is the signed link a notification carries to change
// an alert's state without a token (upstream's acknowledge callback,
// spec/alerts.md §7): monitoring builds it into the message it asks the
// notification service to send, and verifies it when the link is used.
//
// A link is upstream's path with a sealed token in place of upstream's
// cached access key:
//
//	<base>/monitoring/v1/domain/<domain_id>/alert/<alert_id>/<token>/<STATE>
//
// The token is the AES-256-GCM seal (pkg/seal, the services' encryption
// keys) of {expiry, nonce}, bound by associated data to the domain, the
// alert and the state, so a token opens only on the path it was made for:
// it cannot be moved to another alert, domain or action, and nothing in
// it can be changed. Its lifetime is bounded by the expiry inside; its
// nonce lets the verifier spend it once (Nonce). Nothing is stored when a
// link is made, so any replica verifies it with the keys alone.
package alertlink

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nubes-io/nubes/pkg/seal"
)

// Acknowledged is the one state a link sets (upstream has no other link
// in 2.x).
const Acknowledged = "ACKNOWLEDGED"

// PathPrefix starts every link path.
const PathPrefix = "/monitoring/v1/domain/"

// Errors of Open.
var (
	ErrInvalid = errors.New("alertlink: the link is not valid")
	ErrExpired = errors.New("alertlink: the link has expired")
)

type body struct {
	Exp   int64  `json:"e"` // unix seconds
	Nonce string `json:"n"`
}

func ad(domainID, alertID, state string) []byte {
	return seal.AD("monitoring.alertlink", domainID, alertID, state)
}

// Token seals a link token for state on the alert, valid until expires.
func Token(k *seal.Keyring, domainID, alertID, state string, expires time.Time) (string, error) {
	var n [12]byte
	if _, err := rand.Read(n[:]); err != nil {
		return "", err
	}
	plain, err := json.Marshal(body{Exp: expires.Unix(), Nonce: hex.EncodeToString(n[:])})
	if err != nil {
		return "", err
	}
	s, err := k.Seal(plain, ad(domainID, alertID, state))
	if err != nil {
		return "", err
	}
	return seal.EncodeToken(s), nil
}

// Path is the path of a link (no base URL).
func Path(domainID, alertID, token, state string) string {
	return PathPrefix + domainID + "/alert/" + alertID + "/" + token + "/" + state
}

// URL builds a link for state on the alert under base (the suite's public
// base URL), valid for ttl from now.
func URL(k *seal.Keyring, base, domainID, alertID, state string, ttl time.Duration, now time.Time) (string, error) {
	tok, err := Token(k, domainID, alertID, state, now.Add(ttl))
	if err != nil {
		return "", err
	}
	return strings.TrimRight(base, "/") + Path(domainID, alertID, tok, state), nil
}

// Claim is what an opened token says.
type Claim struct {
	Expires time.Time
	// Nonce is unique to the link: spend it once to make the link single use.
	Nonce string
}

// Open verifies token for state on the alert at now: ErrInvalid when it
// was not made for exactly that (or by a key the ring holds), ErrExpired
// past its expiry.
func Open(k *seal.Keyring, domainID, alertID, state, token string, now time.Time) (Claim, error) {
	s, err := seal.DecodeToken(token)
	if err != nil {
		return Claim{}, ErrInvalid
	}
	plain, err := k.Open(s, ad(domainID, alertID, state))
	if err != nil {
		return Claim{}, ErrInvalid
	}
	var b body
	if err := json.Unmarshal(plain, &b); err != nil || b.Nonce == "" {
		return Claim{}, ErrInvalid
	}
	c := Claim{Expires: time.Unix(b.Exp, 0).UTC(), Nonce: b.Nonce}
	if !now.Before(c.Expires) {
		return c, ErrExpired
	}
	return c, nil
}
