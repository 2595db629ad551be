// Package core is what every resource of identity shares, and nothing
// more: the stored models (domains, users, API keys, workspaces,
// projects, role bindings, trusted service accounts), the collections,
// Config and Deps (the wiring: collections, outbox, verifier), sealing
// (the pkg/seal keyring, the associated data each sealed field is bound
// to, the reseal targets), the tenancy declarations several resources
// read through (query.Resource with pkg/tenancy: UserResource,
// WorkspaceResource, Placement, CallerIn), loading and writing a user
// record, and the workspace teardown.
//
// It must not hold a rule that fewer than several resources use (a rule
// of one resource lives in that resource; a rule of two or three in a
// small package named for its job), must not declare a route, must not
// import any package of identity, and must not return, log or decide on
// a secret: passwords, codes, OTP and links have their own packages.
//
// Imports run one way, each package importing only those before it
// (TestImportOrder holds every package of internal/ to this list):
//
//	password                   the password rules, bcrypt (no identity import)
//	core                       models, Deps, sealing, tenancy
//	session                    session epochs, profile-only tokens
//	login                      the password check of a login and its throttle
//	verification               mailed codes and TOTP
//	credential                 the check every credential passes (auth.Checker)
//	takeover                   who may change a credential, notices, mailed links
//	domainadmin                every domain keeps an enabled admin
//	managed                    the shipped records present in every domain
//	projectgroup               the project tree's groups (a project reads its group)
//	domain, workspace, project, role, rolebinding, token, apikey,
//	trustedserviceaccount, endpoint, userprofile, provider, schema,
//	workspaceuser
//	                           one package per resource (over the above)
//	user                       imports userprofile (v1's self-service rules)
//	serviceaccount             imports schema (the accounts' checks)
//	trustedaccount             imports provider, schema (its checks) and
//	                           serviceaccount (the accounts its sync makes)
//	job                        imports trustedaccount (the sync's job record)
//	bootstrap                  the first start (root domain, admin)
//	identitytest               tests only: one resource on core (internal/identitytest)
//	identity (root)            wires the routes, workers and authenticator
package core
