// Package workspace serves workspaces (/identity/v2/workspace/). A
// workspace's delete removes its projects and bindings first and the
// workspace last. It must not reach another domain's workspaces.
package workspace
