package verification

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// OTP MFA is TOTP (RFC 6238) as authenticator apps do it: HMAC-SHA1, 30 s
// steps, six digits. The secret is stored sealed (Cipher) in fields of the
// user that no Info, query or stat reaches; enable-mfa answers it once, as
// options.otp_qrcode_uri, like upstream.

const (
	otpStep   = 30 * time.Second
	otpDigits = 6
	otpSkew   = 1 // steps accepted on either side of now, for clock drift
)

var otpEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewOTPSecret returns 160 random bits, base32 as apps take them.
func NewOTPSecret() (string, error) {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return otpEncoding.EncodeToString(b), nil
}

// hotp is RFC 4226's HOTP of counter, otpDigits long.
func hotp(key []byte, counter uint64) string {
	m := hmac.New(sha1.New, key)
	_ = binary.Write(m, binary.BigEndian, counter)
	sum := m.Sum(nil)
	off := sum[len(sum)-1] & 0x0f
	v := binary.BigEndian.Uint32(sum[off:off+4]) & 0x7fffffff
	mod := uint32(1)
	for range otpDigits {
		mod *= 10
	}
	return fmt.Sprintf("%0*d", otpDigits, v%mod)
}

// otpStepOf returns the step whose code is code, within otpSkew of now.
// Every candidate is compared, in constant time.
func otpStepOf(secret, code string, now time.Time) (int64, bool) {
	key, err := otpEncoding.DecodeString(secret)
	if err != nil || len(code) != otpDigits {
		return 0, false
	}
	cur := otpCounter(now)
	found, step := 0, int64(0)
	for s := cur - otpSkew; s <= cur+otpSkew; s++ {
		if subtle.ConstantTimeCompare([]byte(hotp(key, uint64(s))), []byte(code)) == 1 {
			found, step = 1, s
		}
	}
	return step, found == 1
}

// OTPURI is the otpauth:// URI an app reads from a QR code.
func OTPURI(issuer, account, secret string) string {
	label := url.PathEscape(issuer + ":" + account)
	q := url.Values{"secret": {secret}, "issuer": {issuer}, "algorithm": {"SHA1"},
		"digits": {strconv.Itoa(otpDigits)}, "period": {strconv.Itoa(int(otpStep / time.Second))}}
	return "otpauth://totp/" + label + "?" + q.Encode()
}

// SealOTP and openOTP keep a secret bound to its user (core.OTPAAD).
func SealOTP(d *core.Deps, u *core.User, secret string) (core.Sealed, error) {
	return d.Cfg.Cipher.SealJSON(secret, []byte(core.OTPAAD(u.ID)))
}

func openOTP(d *core.Deps, u *core.User, sealed *core.Sealed) (string, error) {
	if sealed == nil {
		return "", ErrBadCode
	}
	var secret string
	if err := d.Cfg.Cipher.OpenJSON(*sealed, []byte(core.OTPAAD(u.ID)), &secret); err != nil {
		return "", err
	}
	return secret, nil
}

// CheckOTP accepts code for the sealed secret once: the first request to
// claim a step wins, so a code seen over a shoulder cannot be replayed.
func CheckOTP(ctx context.Context, d *core.Deps, u *core.User, sealed *core.Sealed, code string) error {
	secret, err := openOTP(d, u, sealed)
	if err != nil {
		return ErrBadCode
	}
	step, ok := otpStepOf(secret, code, time.Now())
	if !ok {
		return ErrBadCode
	}
	used := store.Window{C: d.DB.Collection(core.CountersCollection), Max: 1, TTL: (2*otpSkew + 2) * otpStep}
	if ok, err := used.Take(ctx, "otp-step:"+u.ID+":"+strconv.FormatInt(step, 10)); err != nil || !ok {
		return cmp.Or(err, ErrBadCode)
	}
	return nil
}

// OTPCode is the code an authenticator app shows at t for secret (base32),
// for tests and tools.
func OTPCode(secret string, t time.Time) (string, error) {
	key, err := otpEncoding.DecodeString(secret)
	if err != nil {
		return "", err
	}
	return hotp(key, uint64(otpCounter(t))), nil
}

// otpCounter is the step t falls in.
func otpCounter(t time.Time) int64 { return t.Unix() / int64(otpStep/time.Second) }
