// Package domain serves domains (/identity/v2/domain/): create, get,
// enable, disable, list, and the two calls made before signing in
// (get-auth-info, get-public-key). It must not let anyone but SYSTEM
// create, list or change domains.
package domain
