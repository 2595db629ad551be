package user

import (
	"context"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"slices"
	"unicode"
)

// AsInfo maps a handler that answers a *core.User to one that answers an Info.
func AsInfo[Req, Info any](to func(*core.User) *Info, h func(context.Context, *auth.Principal, *Req) (*core.User, error)) func(context.Context, *auth.Principal, *Req) (*Info, error) {
	return func(ctx context.Context, p *auth.Principal, r *Req) (*Info, error) {
		u, err := h(ctx, p, r)
		if err != nil {
			return nil, err
		}
		return to(u), nil
	}
}

// CheckUserID keeps a user id to what a path and a key can carry.
func CheckUserID(id string) error {
	for _, r := range id {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return errs.Invalid("user_id", "no spaces or control characters")
		}
	}
	return nil
}

// WithAction is list with a, once.
func WithAction(list []string, a string) []string {
	out := wire.List(slices.Clone(list))
	if !slices.Contains(out, a) {
		out = append(out, a)
	}
	return out
}
