// Package rolebinding serves role bindings (/identity/v2/role-binding/):
// a user's role in the domain or in a workspace. It must never leave a
// domain without an enabled admin (domainadmin.Keep) nor let a
// workspace owner place a binding outside its workspace.
package rolebinding
