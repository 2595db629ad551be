package seal

import (
	"encoding/base64"
	"errors"
)

// ErrToken: a text is not a sealed token.
var ErrToken = errors.New("seal: not a sealed token")

// EncodeToken writes s as one URL path segment: base64url of
// <key id length><key id><nonce><ciphertext>.
func EncodeToken(s Sealed) string {
	raw := append([]byte{byte(len(s.KeyID))}, s.KeyID...)
	raw = append(raw, s.Nonce...)
	raw = append(raw, s.Data...)
	return base64.RawURLEncoding.EncodeToString(raw)
}

// DecodeToken reads a token of EncodeToken (it opens nothing: Open
// does). Strictly: a token has one spelling (loose base64 would take
// other last characters for the same bytes).
func DecodeToken(tok string) (Sealed, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil || len(raw) < 1 {
		return Sealed{}, ErrToken
	}
	n := int(raw[0])
	const nonceSize, tagSize = 12, 16 // AES-GCM's
	if len(raw) < 1+n+nonceSize+tagSize {
		return Sealed{}, ErrToken
	}
	return Sealed{KeyID: string(raw[1 : 1+n]), Nonce: raw[1+n : 1+n+nonceSize], Data: raw[1+n+nonceSize:]}, nil
}
