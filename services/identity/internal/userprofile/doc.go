// Package userprofile serves one's own user (/identity/v2/user-profile/):
// profile, password change, e-mail verification, MFA (EMAIL and OTP),
// the unauthenticated password reset and the workspaces one may enter.
// Its e-mail, MFA and reset rules (Profile) are also user v1's. It must
// not act on any user but the caller, nor let an API key change
// credentials.
package userprofile
