package alertlink_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/alertlink"
	"github.com/nubes-io/nubes/pkg/seal"
)

func ring(t *testing.T, spec string) *seal.Keyring {
	t.Helper()
	active, _, _ := strings.Cut(spec, ":")
	k, err := seal.Parse(spec, active)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func key(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

func TestLinkOpensOnlyWhereItWasMade(t *testing.T) {
	k := ring(t, "k1:"+key(1))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	url, err := alertlink.URL(k, "https://nubes.example.com/", "domain-a", "alert-0123456789ab", alertlink.Acknowledged, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "https://nubes.example.com/monitoring/v1/domain/domain-a/alert/alert-0123456789ab/"
	if !strings.HasPrefix(url, prefix) || !strings.HasSuffix(url, "/ACKNOWLEDGED") {
		t.Fatalf("url %s", url)
	}
	tok := strings.TrimSuffix(strings.TrimPrefix(url, prefix), "/ACKNOWLEDGED")
	c, err := alertlink.Open(k, "domain-a", "alert-0123456789ab", alertlink.Acknowledged, tok, now.Add(59*time.Minute))
	if err != nil || c.Nonce == "" || !c.Expires.Equal(now.Add(time.Hour)) {
		t.Fatalf("open: %+v %v", c, err)
	}
	for name, try := range map[string]func() error{
		"other alert": func() error {
			_, err := alertlink.Open(k, "domain-a", "alert-0123456789ac", "ACKNOWLEDGED", tok, now)
			return err
		},
		"other domain": func() error {
			_, err := alertlink.Open(k, "domain-b", "alert-0123456789ab", "ACKNOWLEDGED", tok, now)
			return err
		},
		"other state": func() error {
			_, err := alertlink.Open(k, "domain-a", "alert-0123456789ab", "RESOLVED", tok, now)
			return err
		},
		"other key": func() error {
			_, err := alertlink.Open(ring(t, "k1:"+key(2)), "domain-a", "alert-0123456789ab", "ACKNOWLEDGED", tok, now)
			return err
		},
		"altered": func() error {
			b := []byte(tok)
			b[len(b)-3] ^= 1
			_, err := alertlink.Open(k, "domain-a", "alert-0123456789ab", "ACKNOWLEDGED", string(b), now)
			return err
		},
		"garbage": func() error {
			_, err := alertlink.Open(k, "domain-a", "alert-0123456789ab", "ACKNOWLEDGED", "!!", now)
			return err
		},
		"short": func() error {
			_, err := alertlink.Open(k, "domain-a", "alert-0123456789ab", "ACKNOWLEDGED", "AQ", now)
			return err
		},
	} {
		if err := try(); !errors.Is(err, alertlink.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := alertlink.Open(k, "domain-a", "alert-0123456789ab", "ACKNOWLEDGED", tok, now.Add(time.Hour)); !errors.Is(err, alertlink.ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
	// A rotated ring that still holds the key opens it.
	if _, err := alertlink.Open(ring(t, "k2:"+key(3)+",k1:"+key(1)), "domain-a", "alert-0123456789ab", "ACKNOWLEDGED", tok, now); err != nil {
		t.Fatalf("rotated ring: %v", err)
	}
	// Two links of the same alert differ (their nonces spend separately).
	u2, _ := alertlink.URL(k, "https://nubes.example.com", "domain-a", "alert-0123456789ab", alertlink.Acknowledged, time.Hour, now)
	if u2 == url {
		t.Fatal("two links are equal")
	}
}
