// Package freeform stores the free-form objects of plugins and users
// (tags, labels, data, metadata, options, additional_info, ...) with their
// keys as clouds write them: `kubernetes.io/cluster/prod`, `aws:createdBy`,
// `$ref`. MongoDB reads a dot in a key as a path and a leading $ as an
// operator, and FerretDB refuses both, so such keys are stored escaped and
// read back as written. Model fields of type Map, Flat and List do it in
// their BSON methods, at every nesting level, so no service can forget it;
// Path turns a query path into the stored one (pkg/query, pkg/stat and
// pkg/analyze call it).
//
// The encoding (docs/decisions.md "Keys as clouds write them"): a dot
// becomes U+FF0E (．), a leading $ becomes U+FF04 (＄), and those two
// characters, when a key holds them itself, and the escape U+FF3C (＼)
// are prefixed with ＼. Keys without any of these are stored as they are,
// so existing documents and indexes keep working. MongoDB's manual
// suggests the same substitutes for its reserved characters.
package freeform

import (
	"strings"
	"unicode/utf8"
)

const (
	dot    = '\uFF0E' // ．stands for "."
	dollar = '\uFF04' // ＄ stands for a leading "$"
	esc    = '\uFF3C' // ＼ keeps the next character as it is
)

// wide is the UTF-8 prefix the three characters share (U+FF00..U+FF3F):
// a key without it and without "." or a leading "$" needs no work.
const wide = "\xef\xbc"

// needsEscape reports whether EscapeKey would change k.
func needsEscape(k string) bool {
	return strings.IndexByte(k, '.') >= 0 || strings.HasPrefix(k, "$") || strings.Contains(k, wide)
}

// EscapeKey is k as stored: legal keys are unchanged.
func EscapeKey(k string) string {
	if !needsEscape(k) {
		return k
	}
	var b strings.Builder
	b.Grow(len(k) + 8)
	for i := 0; i < len(k); {
		r, size := utf8.DecodeRuneInString(k[i:])
		switch {
		case r == '.':
			b.WriteRune(dot)
		case r == '$' && i == 0:
			b.WriteRune(dollar)
		case r == dot || r == esc || (r == dollar && i == 0):
			b.WriteRune(esc)
			b.WriteString(k[i : i+size])
		default:
			b.WriteString(k[i : i+size]) // as written, even invalid UTF-8
		}
		i += size
	}
	return b.String()
}

// UnescapeKey is the key a stored one was written as (EscapeKey's
// inverse); a key that EscapeKey could not have made comes back as it is.
func UnescapeKey(k string) string {
	if !strings.Contains(k, wide) {
		return k
	}
	var b strings.Builder
	b.Grow(len(k))
	for i := 0; i < len(k); {
		r, size := utf8.DecodeRuneInString(k[i:])
		switch {
		case r == esc && i+size < len(k):
			_, next := utf8.DecodeRuneInString(k[i+size:])
			b.WriteString(k[i+size : i+size+next])
			i += size + next
			continue
		case r == dot:
			b.WriteByte('.')
		case r == dollar && i == 0:
			b.WriteByte('$')
		default:
			b.WriteString(k[i : i+size])
		}
		i += size
	}
	return b.String()
}
