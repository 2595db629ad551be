// Package token serves tokens (/identity/v2/token/): login (issue, with
// MFA), grant of a scope, refresh (rotating, reuse ends every session),
// check and the public keys. It must not issue a token without the
// login throttle and the user's current session, role and domain state.
package token
