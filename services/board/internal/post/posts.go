package post

import (
	"context"
	"maps"
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
	"github.com/nubes-io/nubes/services/board/internal/board"
)

// Post is a message on a board, owned by one domain.
type Post struct {
	ID            string          `bson:"_id" json:"-"`
	PostID        string          `bson:"post_id" json:"post_id"`
	BoardID       string          `bson:"board_id" json:"board_id"`
	BoardType     string          `bson:"board_type" json:"board_type"`
	Category      string          `bson:"category" json:"category"`
	Title         string          `bson:"title" json:"title"`
	Contents      string          `bson:"contents" json:"contents"`
	Options       map[string]bool `bson:"options" json:"options"`
	ViewCount     int32           `bson:"view_count" json:"view_count"`
	Writer        string          `bson:"writer" json:"writer"`
	Files         []string        `bson:"files" json:"files"`
	ResourceGroup string          `bson:"resource_group" json:"resource_group"`
	Workspaces    []string        `bson:"workspaces" json:"workspaces"` // 2.x: the workspaces a notice is for, "*" all
	DomainID      string          `bson:"domain_id" json:"domain_id"`
	UserID        string          `bson:"user_id" json:"user_id"`
	CreatedAt     wire.Time       `bson:"created_at" json:"created_at"`
	UpdatedAt     wire.Time       `bson:"updated_at" json:"updated_at"`
}

var postResource = query.Resource{
	KeywordFields: []string{"title", "contents", "writer"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"post_id", "board_id", "board_type", "category", "title", "writer", "created_at"},
	Fields:        query.FieldsOf[Post](),
	// A notice is read in its domain, by a workspace role only when its
	// workspaces hold the caller's or "*" (upstream 2.x: workspace_id
	// queries workspaces).
	Tenancy: tenancy.Fields{Domain: "domain_id", Audience: "workspaces"},
	Maps:    freeform.FieldsOf[Post](),
}

// optionKeys are the only keys a post's options may hold.
var optionKeys = []string{"is_pinned", "is_popup"}

type (
	// createPost takes both shapes: 1.x names its board (board_id); 2.x,
	// as the upstream console sends it, names none and gives workspaces.
	createPost struct {
		BoardID       string         `json:"board_id" v:"max=64"`
		BoardType     string         `json:"board_type" v:"required,enum=NOTICE"`
		Title         string         `json:"title" v:"required,max=255"`
		Contents      string         `json:"contents" v:"required,max=100000"`
		ResourceGroup string         `json:"resource_group" v:"required,enum=SYSTEM|DOMAIN|WORKSPACE"`
		Category      string         `json:"category" v:"max=255"`
		Files         []string       `json:"files" v:"max=100"`
		Options       map[string]any `json:"options"`
		Writer        string         `json:"writer" v:"max=255"`
		Workspaces    []string       `json:"workspaces" v:"max=100"`
	}
	updatePost struct {
		PostID   string         `json:"post_id" v:"required"`
		Title    string         `json:"title" v:"max=255"`
		Contents string         `json:"contents" v:"max=100000"`
		Category *string        `json:"category" v:"max=255"`
		Files    []string       `json:"files" v:"max=100"`
		Options  map[string]any `json:"options"`
		Writer   string         `json:"writer" v:"max=255"`
		// Workspaces (2.x) replace the post's; [] means all ("*").
		Workspaces []string `json:"workspaces" v:"max=100"`
		// BoardID and DomainID may be echoed back but never changed.
		BoardID  string `json:"board_id"`
		DomainID string `json:"domain_id"`
	}
	postRequest struct {
		PostID string `json:"post_id" v:"required"`
	}
	postQuery struct {
		Query     *query.Query `json:"query"`
		BoardID   string       `json:"board_id"`
		BoardType string       `json:"board_type" v:"enum=NOTICE"`
		PostID    string       `json:"post_id"`
		Category  string       `json:"category"`
		Writer    string       `json:"writer"`
		IsPinned  *bool        `json:"is_pinned"`
		IsPopup   *bool        `json:"is_popup"`
		DomainID  string       `json:"domain_id"`
	}
)

// Validate checks the options keys and the workspaces.
func (r *createPost) Validate() error {
	if _, err := mergeOptions(nil, r.Options); err != nil {
		return err
	}
	return checkWorkspaces(r.Workspaces)
}

// Validate checks the options keys and the workspaces.
func (r *updatePost) Validate() error {
	if _, err := mergeOptions(nil, r.Options); err != nil {
		return err
	}
	return checkWorkspaces(r.Workspaces)
}

// checkWorkspaces: ids of at most 64 characters, none empty or repeated,
// and "*" (every workspace) only alone.
func checkWorkspaces(ws []string) error {
	for i, w := range ws {
		switch {
		case w == "":
			return errs.Invalid("workspaces", "a workspace id is empty")
		case len(w) > 64:
			return errs.Invalid("workspaces", "a workspace id is longer than 64 characters")
		case slices.Contains(ws[:i], w):
			return errs.Invalid("workspaces", "workspace "+w+" is repeated")
		case w == tenancy.All && len(ws) > 1:
			return errs.Invalid("workspaces", `"*" (every workspace) stands alone`)
		}
	}
	return nil
}

// workspacesOf is what a post stores: the given workspaces, or, when
// none is given, every workspace ("*") for a SYSTEM or DOMAIN post and the
// caller's own for a WORKSPACE post.
func workspacesOf(given []string, resourceGroup string, p *auth.Principal) []string {
	switch {
	case len(given) > 0:
		return given
	case resourceGroup == "WORKSPACE":
		return []string{p.WorkspaceID}
	}
	return []string{tenancy.All}
}

// mergeOptions merges the given options into current (upstream accepts only
// is_pinned and is_popup, both booleans, default false).
func mergeOptions(current map[string]bool, given map[string]any) (map[string]bool, error) {
	out := map[string]bool{"is_pinned": false, "is_popup": false}
	maps.Copy(out, current)
	for k, v := range given {
		if !slices.Contains(optionKeys, k) {
			return nil, errs.New(errs.InvalidKeyInOptions, "Options can only hold is_pinned and is_popup. (key = %s)", k)
		}
		b, ok := v.(bool)
		if !ok {
			return nil, errs.InvalidType("options."+k, "boolean")
		}
		out[k] = b
	}
	return out, nil
}

type posts struct {
	c      *mongo.Collection
	boards *mongo.Collection
}

func (ps posts) routes() []api.Route {
	return []api.Route{
		api.Op[createPost, Post]{Path: "/board/v1/post/create", Access: writers, Summary: "Create a post on a board.", Handle: ps.create},
		api.Op[updatePost, Post]{Path: "/board/v1/post/update", Access: writers, Summary: "Change a post; board_id, post_id and domain_id never change.", Handle: ps.update},
		api.Op[postRequest, api.Empty]{Path: "/board/v1/post/send-notification", Access: writers, Summary: "Not implemented: answers 501.", Handle: ps.sendNotification},
		// Upstream 2.x names send_notification "send" (the console's post/send).
		api.Op[postRequest, api.Empty]{Path: "/board/v1/post/send", Access: writers, Summary: "send-notification under upstream 2.x's name: answers 501.", Handle: ps.sendNotification},
		api.Op[postRequest, api.Empty]{Path: "/board/v1/post/delete", Access: writers, Summary: "Delete a post.", Handle: ps.delete},
		api.Op[postRequest, Post]{Path: "/board/v1/post/get", Access: readers, Summary: "Get a post; counts one view.", Handle: ps.get},
		api.Op[postQuery, api.List[Post]]{Path: "/board/v1/post/list", Access: readers, Summary: "List the domain's posts.", Handle: ps.list},
		api.Op[statQuery, map[string]any]{Path: "/board/v1/post/stat", Access: readers, Summary: "Statistics over the domain's posts.", Handle: ps.stat},
	}
}

func (ps posts) create(ctx context.Context, p *auth.Principal, r *createPost) (*Post, error) {
	if r.ResourceGroup == "SYSTEM" && !p.IsService() {
		return nil, errs.Forbidden() // the platform's notices are a service's (issue 21)
	}
	// The console's admin sends WORKSPACE with the workspaces it picked
	// (clients.md 10); without them, the token's workspace is the one.
	if r.ResourceGroup == "WORKSPACE" && len(r.Workspaces) == 0 && p.WorkspaceID == "" {
		return nil, errs.Invalid("resource_group", "WORKSPACE needs workspaces or a workspace-scoped token")
	}
	// A 2.x post names no board: it is on none, and its category (free
	// text upstream) is checked against nothing.
	if r.BoardID != "" {
		if err := ps.checkCategory(ctx, r.BoardID, r.Category); err != nil {
			return nil, err
		}
	}
	opts, _ := mergeOptions(nil, r.Options)
	writer := r.Writer
	if writer == "" {
		writer = p.UserID
	}
	rule, err := tenancy.For(p, postResource.Tenancy)
	if err != nil {
		return nil, err
	}
	id, now := wire.NewID("post"), wire.T(wire.Now())
	doc := &Post{
		ID: id, PostID: id, BoardID: r.BoardID, BoardType: r.BoardType, Category: r.Category,
		Title: r.Title, Contents: r.Contents, Options: opts, Writer: writer, Files: wire.List(r.Files),
		ResourceGroup: r.ResourceGroup, Workspaces: workspacesOf(r.Workspaces, r.ResourceGroup, p),
		DomainID: rule.Stamp().Domain, UserID: p.UserID, CreatedAt: now, UpdatedAt: now,
	}
	if _, err := ps.c.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

// checkCategory enforces that a non-empty category is one of the board's.
// The board must exist either way.
func (ps posts) checkCategory(ctx context.Context, boardID, category string) error {
	b, err := store.Get[board.Board](ctx, ps.boards, "board_id", boardID)
	if err != nil {
		return err
	}
	if category != "" && !slices.Contains(b.Categories, category) {
		return errs.New(errs.InvalidCategory, "Category is not one of the board's categories. (category = %s, board_id = %s)", category, boardID)
	}
	return nil
}

func (ps posts) update(ctx context.Context, p *auth.Principal, r *updatePost) (*Post, error) {
	cur, err := ps.toChange(ctx, p, r.PostID)
	if err != nil {
		return nil, err
	}
	if r.BoardID != "" && r.BoardID != cur.BoardID {
		return nil, errs.Invalid("board_id", "a post's board cannot change")
	}
	if r.DomainID != "" && r.DomainID != cur.DomainID {
		return nil, errs.Invalid("domain_id", "a post's domain cannot change")
	}
	set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}}
	add := func(key string, v any) { set = append(set, bson.E{Key: key, Value: v}) }
	if r.Title != "" {
		add("title", r.Title)
	}
	if r.Contents != "" {
		add("contents", r.Contents)
	}
	if r.Writer != "" {
		add("writer", r.Writer)
	}
	if r.Files != nil {
		add("files", r.Files)
	}
	if r.Workspaces != nil {
		add("workspaces", workspacesOf(r.Workspaces, "", p))
	}
	if r.Category != nil && *r.Category != cur.Category {
		if cur.BoardID != "" {
			if err := ps.checkCategory(ctx, cur.BoardID, *r.Category); err != nil {
				return nil, err
			}
		}
		add("category", *r.Category)
	}
	if r.Options != nil {
		opts, _ := mergeOptions(cur.Options, r.Options)
		add("options", opts)
	}
	// The tenancy was checked above and never changes, so the update by
	// _id cannot reach another tenant.
	return store.SetByID[Post](ctx, ps.c, "post_id", r.PostID, set) // 404 if deleted meanwhile
}

// toChange loads a post the caller may change (the tenancy rule); a
// SYSTEM post is a service's alone, never a person's SYSTEM_ADMIN grant's
// (issue 21), as only a service creates one.
func (ps posts) toChange(ctx context.Context, p *auth.Principal, id string) (*Post, error) {
	cur, err := store.GetToChange[Post](ctx, ps.c, postResource, p, "post_id", id)
	if err != nil {
		return nil, err
	}
	if cur.ResourceGroup == "SYSTEM" && !p.IsService() {
		return nil, errs.Forbidden()
	}
	return cur, nil
}

func (ps posts) sendNotification(ctx context.Context, p *auth.Principal, r *postRequest) (*api.Empty, error) {
	if _, err := ps.toChange(ctx, p, r.PostID); err != nil {
		return nil, err
	}
	return nil, errs.New(errs.NotImplemented, "Post.send_notification is not implemented.")
}

func (ps posts) delete(ctx context.Context, p *auth.Principal, r *postRequest) (*api.Empty, error) {
	if _, err := ps.toChange(ctx, p, r.PostID); err != nil {
		return nil, err
	}
	if _, err := ps.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: r.PostID}}); err != nil {
		return nil, store.Wrap(err)
	}
	return &api.Empty{}, nil
}

// get counts a view: the post is read for the caller (the tenancy
// checked), then its count goes up by one atomic $inc, so no view is
// lost whichever replica serves it. The answer counts this view.
func (ps posts) get(ctx context.Context, p *auth.Principal, r *postRequest) (*Post, error) {
	post, err := store.GetFor[Post](ctx, ps.c, postResource, p, "post_id", r.PostID)
	if err != nil {
		return nil, err
	}
	if err := store.Inc(ctx, ps.c, r.PostID, "view_count", 1); err != nil {
		return nil, err
	}
	post.ViewCount++
	post.Workspaces = wire.List(post.Workspaces)
	return post, nil
}

func (ps posts) list(ctx context.Context, p *auth.Principal, r *postQuery) (*api.List[Post], error) {
	// The console sorts and filters on is_pinned and is_popup as if they
	// were top-level (2.x PostSearchQuery has them so); they are options.
	_ = r.Query.Paths(func(_ string, path *string) error {
		if slices.Contains(optionKeys, *path) {
			*path = "options." + *path
		}
		return nil
	})
	q := query.With(r.Query, query.Params(
		"board_id", r.BoardID, "board_type", r.BoardType, "post_id", r.PostID, "category", r.Category,
		"writer", r.Writer, "options.is_pinned", r.IsPinned, "options.is_popup", r.IsPopup, "domain_id", r.DomainID)...)
	l, err := store.SearchFor[Post](ctx, ps.c, q, postResource, p)
	if err == nil {
		for i := range l.Results { // posts stored before workspaces existed
			l.Results[i].Workspaces = wire.List(l.Results[i].Workspaces)
		}
	}
	return l, err
}

func (ps posts) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, ps.c, p, postResource, r.Query)
	return &res, err
}
