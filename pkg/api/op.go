// Package api declares operations. One Op value (path, request and response
// types, who may call it, the handler) is the single source from which the
// server derives routing and aliases, strict decoding, validation,
// authorization, metrics labels and the OpenAPI document.
//
// It must not know echo, MongoDB or any service: handlers get a context,
// the caller and a decoded, validated request.
package api

import (
	"context"
	"reflect"
	"strings"

	"github.com/nubes-io/nubes/pkg/auth"
)

// Empty is the response of delete-style operations: `{}`.
type Empty struct{}

// Op declares one operation of the spec.
type Op[Req, Resp any] struct {
	Path    string      // versioned path, e.g. /board/v1/board/create
	Access  auth.Access // who may call it
	Summary string      // one line for the OpenAPI document
	// Service is the full gRPC service name where upstream's proto
	// package is not the one the path gives (its user secrets are
	// spaceone.api.user_secret.v1.UserSecret); empty otherwise.
	Service string
	Handle  func(ctx context.Context, p *auth.Principal, req *Req) (*Resp, error)
}

// Route is an Op with its types erased, as the server needs it.
type Route interface {
	Meta() Meta
	// Serve decodes and validates body, then runs the handler.
	Serve(ctx context.Context, p *auth.Principal, body []byte) (any, error)
}

// Meta is what the server and the OpenAPI document read of an Op.
type Meta struct {
	Path      string
	Access    auth.Access
	Summary   string
	Service   string // the gRPC service's full name, when not the path's
	Req, Resp reflect.Type
}

// Meta implements Route.
func (o Op[Req, Resp]) Meta() Meta {
	return Meta{Path: o.Path, Access: o.Access, Summary: o.Summary, Service: o.Service, Req: reflect.TypeFor[Req](), Resp: reflect.TypeFor[Resp]()}
}

// Serve implements Route.
func (o Op[Req, Resp]) Serve(ctx context.Context, p *auth.Principal, body []byte) (any, error) {
	var req Req
	if err := Decode(body, &req); err != nil {
		return nil, err
	}
	return o.Handle(ctx, p, &req)
}

// Alias returns the unversioned path upstream clients send for a versioned
// one (/board/v1/board/create -> /board/board/create), or "" if none.
func Alias(path string) string {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) != 4 || !isVersion(parts[1]) {
		return ""
	}
	return "/" + parts[0] + "/" + parts[2] + "/" + parts[3]
}

// Version returns the number of a path's version segment (v2 -> 2), 0 if none.
func Version(path string) int {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) < 2 || !isVersion(parts[1]) {
		return 0
	}
	n := 0
	for _, c := range parts[1][1:] {
		n = n*10 + int(c-'0')
	}
	return n
}

func isVersion(s string) bool {
	if len(s) < 2 || s[0] != 'v' {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
