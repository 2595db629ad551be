// Package trustedaccount serves trusted accounts
// (/identity/v2/trusted-account/) and runs their sync (the job worker and
// the schedule). Secret data is sealed in its own collection and
// answered only to services (get-secret-data); it must never be
// returned, logged or made queryable otherwise.
package trustedaccount
