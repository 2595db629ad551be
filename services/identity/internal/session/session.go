// Package session is how identity ends sessions: the epoch every access
// and refresh token carries (Check refuses one older than its user's),
// and what a token may reach while a required action is pending. It
// stores nothing itself; it must not issue tokens.
package session

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// NewEpoch is a session epoch no earlier one equals.
func NewEpoch() int64 { return time.Now().UnixNano() }

// End is the $set field that ends every session of a user.
func End() bson.E { return bson.E{Key: "session_epoch", Value: NewEpoch()} }

// ProfileOnly is what a token may reach while UPDATE_PASSWORD (or
// ENFORCE_MFA) is pending.
var ProfileOnly = []string{"/identity/v2/user-profile/"}

// PendingPermissions narrows a token of u to ProfileOnly while u has a
// required action pending; nil is no narrowing.
func PendingPermissions(u *core.User) []string {
	for _, a := range u.RequiredActions {
		if a == core.UpdatePassword || a == core.EnforceMFA {
			return ProfileOnly
		}
	}
	return nil
}
