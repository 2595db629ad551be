// Package apikey serves API keys, v1 and v2 (/identity/v{1,2}/api-key/).
// A key's value is shown once and never stored; whether it is still good
// is credential.Checker.Check's. It must not mint or revive a key for an API key
// or SYSTEM caller, nor reach another user's key except as a domain admin.
package apikey
