// Package bootstrap makes the root domain and its admin on first start
// and issues the root domain's SYSTEM token. It serves no operation and
// must never change an existing admin (not even its password).
package bootstrap
