// Package user serves users, v2 (/identity/v2/user/, a domain admin on the
// users of its domain) and v1 (/identity/v1/user/, naming domain_id).
// v1's self-service operations (e-mail, MFA, reset) use userprofile's
// rules: user imports userprofile, never the other way. It must not
// return a password hash, a sealed OTP secret or the login failures, nor
// disable or delete the last enabled domain admin.
package user
