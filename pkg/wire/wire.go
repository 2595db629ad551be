// Package wire holds the small value conventions every response shares:
// generated ids and timestamps. It must not depend on HTTP or storage.
package wire

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// NewID returns "<kind>-<12 lowercase hex>" from crypto/rand.
func NewID(kind string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error()) // never happens on a supported OS
	}
	return kind + "-" + hex.EncodeToString(b[:])
}

// DerivedID returns "<kind>-<12 lowercase hex>" derived from parts (the
// first 6 bytes of their SHA-256): the same parts always give the same id,
// so a record a worker makes again (a sync run twice, a redelivery) is
// found by _id instead of by a read of other fields first.
func DerivedID(kind string, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return kind + "-" + hex.EncodeToString(sum[:6])
}

// TimeLayout is ISO 8601 UTC with milliseconds and a trailing Z.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// Now is the current time truncated to what the wire and BSON keep (ms).
func Now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// FormatTime renders t in TimeLayout; the zero time renders as "".
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(TimeLayout)
}

// List returns s, or an empty list for nil: responses send [], never null.
func List[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Object returns m, or an empty object for nil: responses send {}, never null.
func Object(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
