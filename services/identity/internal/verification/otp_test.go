package verification

import (
	"encoding/base32"
	"net/url"
	"testing"
	"time"
)

// RFC 6238, appendix B (SHA1 rows), cut to six digits.
func TestTOTPVectors(t *testing.T) {
	secret := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte("12345678901234567890"))
	for _, c := range []struct {
		unix int64
		want string
	}{{59, "287082"}, {1111111109, "081804"}, {1111111111, "050471"}, {1234567890, "005924"}, {2000000000, "279037"}, {20000000000, "353130"}} {
		got, err := OTPCode(secret, time.Unix(c.unix, 0))
		if err != nil || got != c.want {
			t.Errorf("T=%d: %q, %v; want %q", c.unix, got, err, c.want)
		}
	}
}

func TestOTPStepWindow(t *testing.T) {
	secret, err := NewOTPSecret()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_015, 0) // mid-step
	for _, c := range []struct {
		at time.Duration
		ok bool
	}{{0, true}, {-30 * time.Second, true}, {30 * time.Second, true}, {-60 * time.Second, false}, {60 * time.Second, false}} {
		code, _ := OTPCode(secret, now.Add(c.at))
		if _, ok := otpStepOf(secret, code, now); ok != c.ok {
			t.Errorf("code of now%+v: accepted %v, want %v", c.at, ok, c.ok)
		}
	}
	for _, bad := range []string{"", "12345", "1234567", "abcdef"} {
		if _, ok := otpStepOf(secret, bad, now); ok {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, ok := otpStepOf("not base32!", "123456", now); ok {
		t.Error("a broken secret accepted a code")
	}
}

func TestOTPURI(t *testing.T) {
	u, err := url.Parse(OTPURI("Nubes", "ann lee", "ABCDEF"))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Scheme != "otpauth" || u.Host != "totp" || u.Path != "/Nubes:ann lee" || q.Get("secret") != "ABCDEF" ||
		q.Get("issuer") != "Nubes" || q.Get("digits") != "6" || q.Get("period") != "30" || q.Get("algorithm") != "SHA1" {
		t.Fatalf("uri = %s", u)
	}
}
