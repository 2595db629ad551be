// Package board is the board service: system-wide bulletin boards and the
// posts each domain publishes on them (spec part 3, /board/v1).
//
// New is its only public surface; everything else is internal.
package board

import (
	"context"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/services/board/internal/board"
	"github.com/nubes-io/nubes/services/board/internal/post"
)

// Name is the service name.
const Name = "board"

// New builds the board service on d.DB, creating its indexes.
func New(ctx context.Context, d app.Deps) (*app.Service, error) {
	boards, err := board.Routes(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	posts, err := post.Routes(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	return &app.Service{Name: Name, Routes: append(boards, posts...)}, nil
}
