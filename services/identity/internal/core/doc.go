// Package core is what identity's resources share: the stored models
// used by more than one resource (domains, users, API keys, workspaces,
// projects, role bindings, trusted service accounts), the configuration
// and wiring (Deps: collections, outbox, verifier), sealing (pkg/seal
// keys, the reseal targets), passwords, verification codes, the login
// throttle, sessions, the takeover rules, the tenancy declarations
// (query.Resource with pkg/tenancy) that several resources read through,
// and the credential check every service relies on (Deps.Check).
//
// Identity is the one issuer of credentials of Nubes. Every rule here is
// one an attacker will try: tenancy always comes from the token, secrets
// are never returned or logged, codes are single use and compared in
// constant time. Decoding, validation and errors come from pkg.
//
// core imports no resource package of identity and declares no route: a
// rule used by one resource lives in that resource's package.
package core
