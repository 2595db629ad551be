package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Claims are the JWT claims of a Nubes token.
type Claims struct {
	jwt.RegisteredClaims
	Type        string   `json:"typ"`
	Owner       string   `json:"own,omitempty"`
	DomainID    string   `json:"did"`
	Role        Role     `json:"rol"`
	WorkspaceID string   `json:"wid,omitempty"`
	Projects    []string `json:"projects,omitempty"`
	Permissions []string `json:"permissions,omitempty"`
	// Session is the session epoch of the user when the token was issued
	// (Principal.Session).
	Session int64  `json:"ses,omitempty"`
	Version string `json:"ver"`
}

const (
	issuer       = "nubes.identity"
	tokenVersion = "2.0"
)

// Signer issues tokens with one RSA key.
type Signer struct {
	KeyID string
	key   *rsa.PrivateKey
}

// GenerateSigner creates a fresh RSA-2048 key.
func GenerateSigner() (*Signer, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return newSigner(k), nil
}

func newSigner(k *rsa.PrivateKey) *Signer {
	sum := sha256.Sum256(k.N.Bytes())
	return &Signer{KeyID: "key-" + hex.EncodeToString(sum[:6]), key: k}
}

// ParseSignerPEM reads a PKCS#8 private key (the first of data).
func ParseSignerPEM(data []byte) (*Signer, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block in signing key")
	}
	return signerOf(b)
}

// ParseSignersPEM reads every PKCS#8 private key of data, in order: a key
// set under rotation, the first signing and every one verifying.
func ParseSignersPEM(data []byte) ([]*Signer, error) {
	var out []*Signer
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			break
		}
		s, err := signerOf(b)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM block in signing key")
	}
	return out, nil
}

func signerOf(b *pem.Block) (*Signer, error) {
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("signing key is not RSA")
	}
	return newSigner(rk), nil
}

// PEM encodes the private key as PKCS#8.
func (s *Signer) PEM() []byte {
	der, err := x509.MarshalPKCS8PrivateKey(s.key)
	if err != nil {
		panic(err) // an RSA key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// Issue signs a token for p. ttl 0 gives a token without expiry, allowed
// only for API keys (revoked by their record); every other token, SYSTEM
// tokens included, expires.
func (s *Signer) Issue(p Principal, ttl time.Duration) (string, error) {
	return s.IssueAt(p, time.Now(), ttl)
}

// IssueAt signs a token as if issued at now (tests use it for expiry).
func (s *Signer) IssueAt(p Principal, now time.Time, ttl time.Duration) (string, error) {
	jti := p.TokenID
	if jti == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		jti = hex.EncodeToString(b[:])
	}
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:   issuer,
			Subject:  p.UserID,
			Audience: jwt.ClaimStrings{p.UserID},
			IssuedAt: jwt.NewNumericDate(now),
			ID:       jti,
		},
		Type: p.TokenType, Owner: "USER", DomainID: p.DomainID, Role: p.Role,
		WorkspaceID: p.WorkspaceID, Projects: p.Projects, Permissions: p.Permissions, Session: p.Session, Version: tokenVersion,
	}
	if c.Type == "" {
		c.Type = AccessToken
	}
	if c.Type == SystemToken {
		c.Owner = "SYSTEM"
	}
	if ttl > 0 {
		c.ExpiresAt = jwt.NewNumericDate(now.Add(ttl))
	} else if c.Type != APIKey {
		return "", errors.New("only API keys may live without expiry")
	}
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	t.Header["kid"] = s.KeyID
	return t.SignedString(s.key)
}

// JWK is one public key of a JWK set.
type JWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// JWKS is a JSON Web Key Set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicJWK returns the public half of the signer's key.
func (s *Signer) PublicJWK() JWK {
	pub := s.key.PublicKey
	return JWK{
		Kty: "RSA", Kid: s.KeyID, Use: "sig", Alg: "RS256",
		N: base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}
}

// JWKSOf is the JWK set (JSON) of the signers' public keys.
func JWKSOf(signers ...*Signer) []byte {
	set := JWKS{Keys: []JWK{}}
	for _, s := range signers {
		set.Keys = append(set.Keys, s.PublicJWK())
	}
	b, err := json.Marshal(set)
	if err != nil {
		panic(err) // a JWKS of strings always marshals
	}
	return b
}

// Verifier checks tokens offline against a JWK set. With Reload it
// follows a set that changes (identity rotating its signing key).
//
// A token that verified is remembered with the key that verified it, so
// the next request with the same token skips the RSA check and the claims'
// decoding (about 100 µs). A remembered token is only taken again while
// the set still holds that very key under its kid (asked as for a full
// check, so Reload's reads happen as before) and its expiry, with the
// leeway, has not passed; otherwise it is checked in full. Only the exact
// token string hits, and a failure is never remembered.
type Verifier struct {
	keys   atomic.Pointer[map[string]*rsa.PublicKey]
	reload *reloader
	now    func() time.Time // time.Now; tests move their own clock (setClock)
	parser *jwt.Parser      // checks exp and nbf against now

	mu       sync.RWMutex
	verified map[string]verifiedToken
}

// verifiedToken is a token that passed Parse: its claims, the kid of its
// header and the key that verified it.
type verifiedToken struct {
	claims Claims
	kid    string
	key    *rsa.PublicKey
}

// maxVerified bounds the remembered tokens (about 1 KiB each).
const maxVerified = 4096

// NewVerifier parses a JWK set (JSON).
func NewVerifier(jwks []byte) (*Verifier, error) {
	keys, err := parseJWKS(jwks)
	if err != nil {
		return nil, err
	}
	v := &Verifier{verified: map[string]verifiedToken{}, now: time.Now, parser: parser}
	v.keys.Store(&keys)
	return v, nil
}

func parseJWKS(jwks []byte) (map[string]*rsa.PublicKey, error) {
	var set JWKS
	if err := json.Unmarshal(jwks, &set); err != nil {
		return nil, fmt.Errorf("parse JWKS: %w", err)
	}
	keys := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "RSA" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil || k.Kid == "" {
			return nil, fmt.Errorf("JWK %q is malformed", k.Kid)
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	if len(keys) == 0 {
		return nil, errors.New("JWKS holds no RSA key")
	}
	return keys, nil
}

// leeway is the clock skew allowed on exp and nbf.
const leeway = 5 * time.Second

var parser = newParser(time.Now)

func newParser(now func() time.Time) *jwt.Parser {
	return jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(issuer), jwt.WithLeeway(leeway), jwt.WithTimeFunc(now))
}

// setClock makes v judge expiry by now, for a test that moves time past a
// token's exp rather than waiting for it.
func (v *Verifier) setClock(now func() time.Time) {
	v.now, v.parser = now, newParser(now)
}

// Authenticate verifies a bearer credential (access token, system token or
// API key) and returns its principal. Refresh tokens are refused here.
func (v *Verifier) Authenticate(_ context.Context, bearer string) (*Principal, error) {
	c, err := v.Parse(bearer)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case AccessToken, SystemToken, APIKey:
	default:
		return nil, errs.Unauthenticated("invalid token type.")
	}
	return c.Principal(), nil
}

// Parse checks a token's signature, issuer, version and expiry (only API
// keys may have none) and returns its claims.
func (v *Verifier) Parse(token string) (*Claims, error) {
	if c, ok := v.remembered(token); ok {
		return c, nil
	}
	var (
		c    Claims
		kid  string
		used *rsa.PublicKey
	)
	_, err := v.parser.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ = t.Header["kid"].(string)
		if used = v.key(kid); used != nil {
			return used, nil
		}
		return nil, errors.New("unknown key")
	})
	switch {
	case err != nil:
		return nil, errs.Unauthenticated("Token is invalid or expired.")
	case c.Version != tokenVersion:
		return nil, errs.Unauthenticated("invalid token version.")
	case c.DomainID == "":
		return nil, errs.Unauthenticated("empty domain_id provided.")
	case c.ExpiresAt == nil && c.Type != APIKey:
		return nil, errs.Unauthenticated("Token is invalid or expired.")
	}
	v.remember(token, verifiedToken{claims: c, kid: kid, key: used})
	return c.clone(), nil
}

// remembered returns the claims of a token that verified before, when the
// set still holds the key that verified it and it has not expired since
// (nbf, once passed, stays passed; every other check depends on the token
// alone).
func (v *Verifier) remembered(token string) (*Claims, bool) {
	v.mu.RLock()
	e, ok := v.verified[token]
	v.mu.RUnlock()
	if !ok {
		return nil, false
	}
	if e.key != v.key(e.kid) || (e.claims.ExpiresAt != nil && !v.now().Before(e.claims.ExpiresAt.Add(leeway))) {
		v.mu.Lock()
		delete(v.verified, token)
		v.mu.Unlock()
		return nil, false // the full check says why
	}
	return e.claims.clone(), true
}

func (v *Verifier) remember(token string, e verifiedToken) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verified == nil {
		v.verified = map[string]verifiedToken{}
	}
	if len(v.verified) >= maxVerified {
		now := v.now()
		for t, old := range v.verified {
			if old.claims.ExpiresAt != nil && !now.Before(old.claims.ExpiresAt.Add(leeway)) {
				delete(v.verified, t)
			}
		}
		if len(v.verified) >= maxVerified {
			clear(v.verified) // many live tokens: start again rather than pick
		}
	}
	v.verified[token] = e
}

// clone copies c so that a caller changing its claims changes no one
// else's.
func (c *Claims) clone() *Claims {
	out := *c
	out.Audience = slices.Clone(c.Audience)
	out.Projects = slices.Clone(c.Projects)
	out.Permissions = slices.Clone(c.Permissions)
	for _, d := range []**jwt.NumericDate{&out.ExpiresAt, &out.NotBefore, &out.IssuedAt} {
		if *d != nil {
			copied := **d
			*d = &copied
		}
	}
	return &out
}

// Principal is the caller the claims describe.
func (c *Claims) Principal() *Principal {
	return &Principal{
		TokenType: c.Type, TokenID: c.ID, DomainID: c.DomainID, UserID: c.Subject,
		WorkspaceID: c.WorkspaceID, Role: c.Role, Projects: c.Projects, Permissions: c.Permissions, Session: c.Session,
	}
}
