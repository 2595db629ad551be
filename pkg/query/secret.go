package query

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nubes-io/nubes/pkg/errs"
)

// NoSecret returns the path check of a resource's secret fields
// (Resource.Secret): it refuses a path that is a secret field, lies under
// one ("registry_config.password" under "registry_config"), or lies above
// one (a filter or group on "a" reads "a.b" as part of a document). The
// answer is 400 naming the path and is decided before any value is looked
// at, so it is the same whatever is stored: a filter, sort or count on a
// secret is never an oracle.
func NoSecret(secret []string) func(at string, p *string) error {
	return func(at string, p *string) error {
		if IsSecret(secret, *p) {
			return SecretError(at, *p)
		}
		return nil
	}
}

// SecretError is the answer to a query that names a secret field.
func SecretError(at, path string) error {
	return errs.Invalid(at, fmt.Sprintf("%q holds a secret: no query may read it", path))
}

// IsSecret reports whether path reads one of the secret fields: it is one,
// or one is its ancestor or descendant.
func IsSecret(secret []string, path string) bool {
	for _, s := range secret {
		if path == s || strings.HasPrefix(path, s+".") || strings.HasPrefix(s, path+".") {
			return true
		}
	}
	return false
}

// CheckSecret refuses a query that names a secret field of r anywhere it
// reads a path (stat and analyze check their own queries with NoSecret
// and CheckDeclaration).
func (r Resource) CheckSecret(q *Query) error {
	if err := r.CheckDeclaration(); err != nil {
		return err
	}
	return q.Paths(NoSecret(r.Secret))
}

// CheckDeclaration refuses a resource that searches, sorts or returns by
// default one of its own secret fields: a declaration bug, so a plain
// error (500), never the caller's.
func (r Resource) CheckDeclaration() error {
	for _, f := range slices.Concat(r.KeywordFields, r.MinimalFields, sortKeysOf(r.DefaultSort)) {
		if IsSecret(r.Secret, f) {
			return fmt.Errorf("query: the resource searches, sorts or returns its secret field %q by default", f)
		}
	}
	return nil
}
