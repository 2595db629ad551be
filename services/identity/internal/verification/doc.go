// Package verification is how a user proves control of an address or a
// device: the six-digit codes identity mails (MFA, e-mail confirmation,
// the login's second step) and the TOTP of an authenticator app. Codes
// are stored only as hashes, single use, expire, and allow a bounded
// number of tries; every comparison is in constant time. It must not
// return, log or store a code or an OTP secret in clear.
package verification
