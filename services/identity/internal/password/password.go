// Package password is identity's password rules: what a password must
// hold, its bcrypt hash, the comparison and random passwords. It imports
// no package of identity and stores nothing; it must not log, return or
// keep a password anywhere.
package password

import (
	"cmp"
	"crypto/rand"
	"math/big"
	"sync"
	"unicode"

	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Check enforces the password rules: at least 8 characters (at most 72
// bytes, bcrypt's limit), one lowercase letter, one uppercase letter and
// one digit.
func Check(pw string) error {
	var lower, upper, digit bool
	for _, r := range pw {
		lower = lower || unicode.IsLower(r)
		upper = upper || unicode.IsUpper(r)
		digit = digit || unicode.IsDigit(r)
	}
	if len([]rune(pw)) < 8 || len(pw) > 72 || !lower || !upper || !digit {
		return errs.New(errs.IncorrectPasswordFormat,
			"The password must have 8 to 72 bytes with a lowercase letter, an uppercase letter and a digit.")
	}
	return nil
}

// CheckIfSet is Check for an optional password: "" passes.
func CheckIfSet(pw string) error {
	if pw == "" {
		return nil
	}
	return Check(pw)
}

// Hash checks the rules and hashes with bcrypt at cost (0:
// bcrypt.DefaultCost).
func Hash(pw string, cost int) (string, error) {
	if err := Check(pw); err != nil {
		return "", err
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), cmp.Or(cost, bcrypt.DefaultCost))
	return string(h), err
}

// dummies holds one hash per cost, made on first use (not at package
// init: a hash at the default cost takes seconds under the race detector).
var dummies sync.Map // cost → func() []byte

func dummy(cost int) []byte {
	cost = cmp.Or(cost, bcrypt.DefaultCost)
	f, _ := dummies.LoadOrStore(cost, sync.OnceValue(func() []byte {
		h, _ := bcrypt.GenerateFromPassword([]byte("Nubes-dummy-password-1"), cost)
		return h
	}))
	return f.(func() []byte)()
}

// Matches compares in constant time (bcrypt); an empty hash still costs
// one comparison, against a hash of cost (the configured one), so a login
// for an unknown user is as slow as for a known one.
func Matches(hash, pw string, cost int) bool {
	if hash == "" {
		_ = bcrypt.CompareHashAndPassword(dummy(cost), []byte(pw))
		return false
	}
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) == nil
}

// Random makes a password that meets the rules.
func Random() string {
	const alphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
	for {
		b := make([]byte, 16)
		for i := range b {
			n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
			b[i] = alphabet[n.Int64()]
		}
		if Check(string(b)) == nil {
			return string(b)
		}
	}
}
