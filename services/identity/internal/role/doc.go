// Package role serves the managed roles (/identity/v2/role/): fixed,
// present in every domain, read only. It stores nothing.
package role
