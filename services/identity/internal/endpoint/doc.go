// Package endpoint serves /identity/v2/endpoint/list: the services of the
// suite and their base URLs. It reads configuration only, no records.
package endpoint
