// Package post holds the post resource (/board/v1/post): a domain's
// messages on a board (package board), and the view counts they keep.
//
// Decoding, validation, authorization and errors come from pkg; this
// package holds only the post's own rules.
package post

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/board/internal/board"
)

// PostsCollection holds the posts.
const PostsCollection = "board_posts"

var (
	readers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
	writers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)
)

type statQuery struct {
	Query *stat.Query `json:"query" v:"required"`
}

// Routes creates the posts' indexes and returns their operations.
func Routes(ctx context.Context, db *mongo.Database) ([]api.Route, error) {
	p := posts{c: db.Collection(PostsCollection), boards: db.Collection(board.BoardsCollection)}
	// Every post query starts with the tenant, then the usual filters.
	if err := store.EnsureIndexes(ctx, p.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "board_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "category", Value: 1}}},
	); err != nil {
		return nil, err
	}
	return p.routes(), nil
}
