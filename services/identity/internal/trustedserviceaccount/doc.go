// Package trustedserviceaccount serves trusted service accounts
// (/identity/v2/trusted-service-account/): provider accounts known to a
// domain or a workspace, made by hand or by a trusted account's sync
// (trustedaccount). It holds no secret.
package trustedserviceaccount
