// Package board holds the board resource (/board/v1/board): system-wide
// bulletin boards that only a service may write. Posts, which belong to
// one board and to the caller's domain, are package post's.
//
// Decoding, validation, authorization and errors come from pkg; this
// package holds only the board's own rules.
package board

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Board is a bulletin board, stored and sent in the same shape.
type Board struct {
	ID         string        `bson:"_id" json:"-"`
	BoardID    string        `bson:"board_id" json:"board_id"`
	Name       string        `bson:"name" json:"name"`
	Categories []string      `bson:"categories" json:"categories"`
	Tags       freeform.Flat `bson:"tags" json:"tags"`
	CreatedAt  wire.Time     `bson:"created_at" json:"created_at"`
}

var (
	// Boards are the platform's: a service credential writes them, never a
	// person's SYSTEM_ADMIN grant (issue 21).
	systemOnly = auth.Service()
	readers    = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
	writers    = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)
)

var boardResource = query.Resource{
	KeywordFields: []string{"board_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"board_id", "name"},
	Fields:        query.FieldsOf[Board](),
	Tenancy:       tenancy.OfPlatform, // boards are the platform's; only a service writes them
	Maps:          freeform.FieldsOf[Board](),
}

type (
	createBoard struct {
		Name       string        `json:"name" v:"required,max=255"`
		Categories []string      `json:"categories" v:"max=100"`
		Tags       freeform.Flat `json:"tags"`
	}
	updateBoard struct {
		BoardID string        `json:"board_id" v:"required"`
		Name    string        `json:"name" v:"max=255"`
		Tags    freeform.Flat `json:"tags"`
	}
	setCategories struct {
		BoardID    string   `json:"board_id" v:"required"`
		Categories []string `json:"categories" v:"max=100"`
	}
	boardRequest struct {
		BoardID string `json:"board_id" v:"required"`
	}
	boardQuery struct {
		Query   *query.Query `json:"query"`
		BoardID string       `json:"board_id"`
		Name    string       `json:"name"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Validate refuses empty and repeated category names.
func (r *createBoard) Validate() error { return checkCategories(r.Categories) }

// Validate refuses empty and repeated category names.
func (r *setCategories) Validate() error { return checkCategories(r.Categories) }

func checkCategories(cs []string) error {
	for i, c := range cs {
		if c == "" {
			return errs.Invalid("categories", "a category name is empty")
		}
		if slices.Contains(cs[:i], c) {
			return errs.Invalid("categories", "category "+c+" is repeated")
		}
	}
	return nil
}

// BoardsCollection holds the boards.
const BoardsCollection = "board_boards"

type boards struct{ c *mongo.Collection }

// Routes creates the boards' indexes and returns their operations.
func Routes(ctx context.Context, db *mongo.Database) ([]api.Route, error) {
	b := boards{c: db.Collection(BoardsCollection)}
	if err := store.EnsureIndexes(ctx, b.c,
		store.Index{Keys: bson.D{{Key: "name", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "created_at", Value: -1}}},
	); err != nil {
		return nil, err
	}
	return b.routes(), nil
}

func (b boards) routes() []api.Route {
	return []api.Route{
		api.Op[createBoard, Board]{Path: "/board/v1/board/create", Access: systemOnly, Summary: "Create a board.", Handle: b.create},
		api.Op[updateBoard, Board]{Path: "/board/v1/board/update", Access: systemOnly, Summary: "Change a board's name or tags.", Handle: b.update},
		api.Op[setCategories, Board]{Path: "/board/v1/board/set-categories", Access: systemOnly, Summary: "Replace a board's categories; posts keep theirs.", Handle: b.setCategories},
		api.Op[boardRequest, api.Empty]{Path: "/board/v1/board/delete", Access: systemOnly, Summary: "Delete a board; its posts stay.", Handle: b.delete},
		api.Op[boardRequest, Board]{Path: "/board/v1/board/get", Access: readers, Summary: "Get a board.", Handle: b.get},
		api.Op[boardQuery, api.List[Board]]{Path: "/board/v1/board/list", Access: readers, Summary: "List boards.", Handle: b.list},
		api.Op[statQuery, map[string]any]{Path: "/board/v1/board/stat", Access: readers, Summary: "Statistics over boards.", Handle: b.stat},
	}
}

func (b boards) create(ctx context.Context, _ *auth.Principal, r *createBoard) (*Board, error) {
	id := wire.NewID("board")
	doc := &Board{ID: id, BoardID: id, Name: r.Name, Categories: wire.List(r.Categories), Tags: wire.Object(r.Tags), CreatedAt: wire.T(wire.Now())}
	if _, err := b.c.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

func (b boards) update(ctx context.Context, _ *auth.Principal, r *updateBoard) (*Board, error) {
	set := bson.D{}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	return b.set(ctx, r.BoardID, set)
}

func (b boards) setCategories(ctx context.Context, _ *auth.Principal, r *setCategories) (*Board, error) {
	return b.set(ctx, r.BoardID, bson.D{{Key: "categories", Value: wire.List(r.Categories)}})
}

// set applies a $set by _id and returns the board as stored afterwards.
func (b boards) set(ctx context.Context, id string, set bson.D) (*Board, error) {
	if len(set) == 0 {
		return store.Get[Board](ctx, b.c, "board_id", id)
	}
	return store.SetByID[Board](ctx, b.c, "board_id", id, set)
}

func (b boards) delete(ctx context.Context, _ *auth.Principal, r *boardRequest) (*api.Empty, error) {
	res, err := b.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: r.BoardID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("board_id", r.BoardID)
	}
	return &api.Empty{}, nil
}

func (b boards) get(ctx context.Context, p *auth.Principal, r *boardRequest) (*Board, error) {
	return store.GetFor[Board](ctx, b.c, boardResource, p, "board_id", r.BoardID)
}

func (b boards) list(ctx context.Context, p *auth.Principal, r *boardQuery) (*api.List[Board], error) {
	q := query.With(r.Query, query.Params("board_id", r.BoardID, "name", r.Name)...)
	return store.SearchFor[Board](ctx, b.c, q, boardResource, p)
}

func (b boards) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, b.c, p, boardResource, r.Query)
	return &res, err
}
