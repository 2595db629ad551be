package board_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/board"
	internalboard "github.com/nubes-io/nubes/services/board/internal/board"
	"github.com/nubes-io/nubes/services/board/internal/post"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// callers of the board API in two domains.
type callers struct {
	anon, system, adminA, adminB, memberA, userA *testkit.Client
	db                                           *mongo.Database
	h                                            http.Handler
}

func setup(t *testing.T) *callers { t.Helper(); return setupOn(t, testkit.Get().Database(t)) }

// setupOn serves the board on db: a second call on one db is a second
// replica.
func setupOn(t *testing.T, db *mongo.Database) *callers {
	t.Helper()
	env := testkit.Get()
	svc, err := board.New(context.Background(), app.Deps{DB: db, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Name: "board", Auth: env.Verifier, Logger: slog.New(slog.DiscardHandler)}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.NewClient(t, srv.Handler())
	tok := func(p auth.Principal) *testkit.Client { return c.As(env.Token(t, p)) }
	return &callers{
		anon:    c,
		system:  tok(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-a", UserID: "root", Role: auth.SystemAdmin}),
		adminA:  tok(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin}),
		adminB:  tok(auth.Principal{DomainID: "domain-b", UserID: "bob", Role: auth.DomainAdmin}),
		memberA: tok(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"}),
		userA:   tok(auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User}),
		db:      db,
		h:       srv.Handler(),
	}
}

type boardInfo struct {
	BoardID    string         `json:"board_id"`
	Name       string         `json:"name"`
	Categories []string       `json:"categories"`
	Tags       map[string]any `json:"tags"`
	CreatedAt  string         `json:"created_at"`
}

type postInfo struct {
	BoardID       string          `json:"board_id"`
	BoardType     string          `json:"board_type"`
	PostID        string          `json:"post_id"`
	Category      string          `json:"category"`
	Title         string          `json:"title"`
	Contents      string          `json:"contents"`
	Options       map[string]bool `json:"options"`
	ViewCount     int             `json:"view_count"`
	Writer        string          `json:"writer"`
	Files         []string        `json:"files"`
	ResourceGroup string          `json:"resource_group"`
	Workspaces    []string        `json:"workspaces"`
	DomainID      string          `json:"domain_id"`
	UserID        string          `json:"user_id"`
	CreatedAt     string          `json:"created_at"`
	UpdatedAt     string          `json:"updated_at"`
}

type list[T any] struct {
	Results    []T `json:"results"`
	TotalCount int `json:"total_count"`
}

func (c *callers) board(t *testing.T, name string, categories ...string) boardInfo {
	t.Helper()
	var b boardInfo
	c.system.Call("/board/v1/board/create", map[string]any{"name": name, "categories": categories}).OK(&b)
	return b
}

func (c *callers) post(t *testing.T, as *testkit.Client, boardID, category, title string) postInfo {
	t.Helper()
	var p postInfo
	as.Call("/board/v1/post/create", map[string]any{
		"board_id": boardID, "board_type": "NOTICE", "title": title, "contents": "body of " + title,
		"resource_group": "DOMAIN", "category": category,
	}).OK(&p)
	return p
}

// count is the number of documents stored in a collection: the proof that
// a refused request stored nothing.
func (c *callers) count(t *testing.T, coll string) int64 {
	t.Helper()
	n, err := c.db.Collection(coll).CountDocuments(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (c *callers) stored(t *testing.T, postID string) postInfo {
	t.Helper()
	var p postInfo
	raw, err := c.db.Collection(post.PostsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: postID}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var m bson.M
	_ = bson.Unmarshal(raw, &m)
	p.PostID, _ = m["post_id"].(string)
	p.BoardID, _ = m["board_id"].(string)
	p.DomainID, _ = m["domain_id"].(string)
	p.Title, _ = m["title"].(string)
	p.Category, _ = m["category"].(string)
	switch vc := m["view_count"].(type) { // $inc by an int64 stores an int64
	case int32:
		p.ViewCount = int(vc)
	case int64:
		p.ViewCount = int(vc)
	}
	return p
}

func TestBoardLifecycle(t *testing.T) {
	t.Parallel()
	c := setup(t)
	b := c.board(t, "Notices", "maintenance", "release")
	if !strings.HasPrefix(b.BoardID, "board-") || len(b.BoardID) != 18 || b.Name != "Notices" ||
		len(b.Categories) != 2 || b.Tags == nil || !strings.HasSuffix(b.CreatedAt, "Z") || len(b.CreatedAt) != 24 {
		t.Fatalf("created board: %+v", b)
	}

	var got boardInfo
	c.adminA.Call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).OK(&got)
	if got.BoardID != b.BoardID || got.CreatedAt != b.CreatedAt {
		t.Fatalf("get = %+v, want %+v", got, b)
	}
	raw := c.adminA.Call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).JSON()
	if _, has := raw["domain_id"]; has {
		t.Fatalf("boards are system-wide, BoardInfo has no domain_id: %v", raw)
	}

	c.system.Call("/board/v1/board/update", map[string]any{"board_id": b.BoardID, "name": "News", "tags": map[string]any{"team": "ops"}}).OK(&got)
	if got.Name != "News" || got.Tags["team"] != "ops" || len(got.Categories) != 2 {
		t.Fatalf("update = %+v", got)
	}
	c.system.Call("/board/v1/board/set-categories", map[string]any{"board_id": b.BoardID, "categories": []string{"outage"}}).OK(&got)
	if len(got.Categories) != 1 || got.Categories[0] != "outage" || got.Name != "News" {
		t.Fatalf("set_categories = %+v", got)
	}
	c.system.Call("/board/v1/board/set-categories", map[string]any{"board_id": b.BoardID}).OK(&got)
	if got.Categories == nil || len(got.Categories) != 0 {
		t.Fatalf("set_categories without a list must clear: %+v", got)
	}

	c.board(t, "Archive")
	var l list[boardInfo]
	c.memberA.Call("/board/v1/board/list", map[string]any{"query": map[string]any{"sort": []any{map[string]any{"key": "name"}}}}).OK(&l)
	if l.TotalCount != 2 || l.Results[0].Name != "Archive" || l.Results[1].Name != "News" {
		t.Fatalf("list = %+v", l)
	}
	c.adminA.Call("/board/v1/board/list", map[string]any{"name": "News"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].BoardID != b.BoardID {
		t.Fatalf("list by name = %+v", l)
	}
	st := c.adminA.Call("/board/v1/board/stat", map[string]any{"query": map[string]any{
		"aggregate": []any{map[string]any{"count": map[string]any{"name": "boards"}}}}}).JSON()
	if rows := st["results"].([]any); len(rows) != 1 || rows[0].(map[string]any)["boards"] != float64(2) {
		t.Fatalf("stat = %v", st)
	}

	c.system.Call("/board/v1/board/delete", map[string]any{"board_id": b.BoardID}).OK(nil)
	c.system.Call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.system.Call("/board/v1/board/delete", map[string]any{"board_id": b.BoardID}).Fails(http.StatusNotFound, errs.NotFoundCode)
}

func TestBoardWritesNeedSystem(t *testing.T) {
	t.Parallel()
	c := setup(t)
	b := c.board(t, "Notices", "a")
	writes := []struct {
		path string
		body map[string]any
	}{
		{"/board/v1/board/create", map[string]any{"name": "x"}},
		{"/board/v1/board/update", map[string]any{"board_id": b.BoardID, "name": "changed"}},
		{"/board/v1/board/set-categories", map[string]any{"board_id": b.BoardID, "categories": []string{"z"}}},
		{"/board/v1/board/delete", map[string]any{"board_id": b.BoardID}},
	}
	for _, w := range writes {
		c.anon.Call(w.path, w.body).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
		for _, who := range []*testkit.Client{c.adminA, c.memberA, c.userA} {
			who.Call(w.path, w.body).Fails(http.StatusForbidden, errs.PermissionDenied)
		}
	}
	var got boardInfo
	c.system.Call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).OK(&got)
	if n := c.count(t, internalboard.BoardsCollection); n != 1 || got.Name != "Notices" || len(got.Categories) != 1 || got.Categories[0] != "a" {
		t.Fatalf("a refused write changed the store: %d boards, %+v", n, got)
	}
	c.userA.Call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).Fails(http.StatusForbidden, errs.PermissionDenied)
}

func TestPostLifecycle(t *testing.T) {
	t.Parallel()
	c := setup(t)
	b := c.board(t, "Notices", "maintenance", "release")
	p := c.post(t, c.adminA, b.BoardID, "maintenance", "Upgrade tonight")
	if !strings.HasPrefix(p.PostID, "post-") || p.BoardID != b.BoardID || p.DomainID != "domain-a" || p.UserID != "alice" ||
		p.Writer != "alice" || p.ViewCount != 0 || p.Options["is_pinned"] || p.Files == nil || p.ResourceGroup != "DOMAIN" {
		t.Fatalf("created post: %+v", p)
	}

	var got postInfo
	c.memberA.Call("/board/v1/post/get", map[string]any{"post_id": p.PostID}).OK(&got)
	if got.ViewCount != 1 {
		t.Fatalf("first get: view_count %d, want 1", got.ViewCount)
	}
	c.adminA.Call("/board/v1/post/get", map[string]any{"post_id": p.PostID}).OK(&got)
	if got.ViewCount != 2 || c.stored(t, p.PostID).ViewCount != 2 {
		t.Fatalf("second get: view_count %d, stored %d, want 2", got.ViewCount, c.stored(t, p.PostID).ViewCount)
	}

	c.adminA.Call("/board/v1/post/update", map[string]any{
		"post_id": p.PostID, "title": "Upgrade moved", "category": "release",
		"options": map[string]any{"is_pinned": true}, "files": []string{"file-1"},
		"board_id": b.BoardID, "domain_id": "domain-a", // echoed unchanged: allowed
	}).OK(&got)
	if got.Title != "Upgrade moved" || got.Category != "release" || !got.Options["is_pinned"] || got.Options["is_popup"] ||
		got.Contents != p.Contents || len(got.Files) != 1 || got.ViewCount != 2 || got.UpdatedAt < p.UpdatedAt {
		t.Fatalf("update = %+v", got)
	}
	c.adminA.Call("/board/v1/post/update", map[string]any{"post_id": p.PostID, "options": map[string]any{"is_popup": true}}).OK(&got)
	if !got.Options["is_pinned"] || !got.Options["is_popup"] {
		t.Fatalf("options must merge: %+v", got.Options)
	}

	other := c.board(t, "Other")
	c.post(t, c.adminA, other.BoardID, "", "Elsewhere")
	c.post(t, c.system, b.BoardID, "maintenance", "By system")

	var l list[postInfo]
	c.memberA.Call("/board/v1/post/list", map[string]any{"board_id": b.BoardID}).OK(&l)
	if l.TotalCount != 2 || len(l.Results) != 2 || l.Results[0].Title != "By system" { // newest first
		t.Fatalf("list by board = %+v", l)
	}
	c.memberA.Call("/board/v1/post/list", map[string]any{"is_pinned": true}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].PostID != p.PostID {
		t.Fatalf("list is_pinned = %+v", l)
	}
	c.memberA.Call("/board/v1/post/list", map[string]any{"query": map[string]any{"keyword": "elsewhere", "only": []string{"title"}}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].Title != "Elsewhere" || l.Results[0].PostID != "" {
		t.Fatalf("list keyword+only = %+v", l)
	}
	st := c.memberA.Call("/board/v1/post/stat", map[string]any{"query": map[string]any{
		"filter":    []any{map[string]any{"k": "board_id", "v": b.BoardID, "o": "eq"}},
		"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "category", "name": "category"}}, "fields": []any{map[string]any{"name": "n", "operator": "count"}}}}, map[string]any{"sort": []any{map[string]any{"key": "category"}}}},
	}}).JSON()
	rows := st["results"].([]any)
	if len(rows) != 2 || rows[0].(map[string]any)["category"] != "maintenance" || rows[1].(map[string]any)["n"] != float64(1) {
		t.Fatalf("stat = %v", st)
	}

	c.adminA.Call("/board/v1/post/send-notification", map[string]any{"post_id": p.PostID}).Fails(http.StatusNotImplemented, errs.NotImplemented)

	c.adminA.Call("/board/v1/post/delete", map[string]any{"post_id": p.PostID}).OK(nil)
	c.adminA.Call("/board/v1/post/get", map[string]any{"post_id": p.PostID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := c.count(t, post.PostsCollection); n != 2 {
		t.Fatalf("%d posts stored after delete, want 2", n)
	}
}

func TestPostRules(t *testing.T) {
	t.Parallel()
	c := setup(t)
	b := c.board(t, "Notices", "maintenance")
	p := c.post(t, c.adminA, b.BoardID, "maintenance", "Kept")
	posts := c.count(t, post.PostsCollection)

	create := func(body map[string]any) map[string]any {
		base := map[string]any{"board_id": b.BoardID, "board_type": "NOTICE", "title": "t", "contents": "c", "resource_group": "DOMAIN"}
		for k, v := range body {
			base[k] = v
		}
		return base
	}
	refused := []struct {
		name   string
		as     *testkit.Client
		path   string
		body   map[string]any
		status int
		code   string
	}{
		{"category outside the board", c.adminA, "/board/v1/post/create", create(map[string]any{"category": "gossip"}), 400, errs.InvalidCategory},
		{"unknown board", c.adminA, "/board/v1/post/create", create(map[string]any{"board_id": "board-000000000000"}), 404, errs.NotFoundCode},
		{"option key", c.adminA, "/board/v1/post/create", create(map[string]any{"options": map[string]any{"is_sticky": true}}), 400, errs.InvalidKeyInOptions},
		{"option type", c.adminA, "/board/v1/post/create", create(map[string]any{"options": map[string]any{"is_pinned": "yes"}}), 400, errs.InvalidParameterType},
		{"SYSTEM post by a domain admin", c.adminA, "/board/v1/post/create", create(map[string]any{"resource_group": "SYSTEM"}), 403, errs.PermissionDenied},
		{"member cannot write", c.memberA, "/board/v1/post/create", create(nil), 403, errs.PermissionDenied},
		{"user has no role", c.userA, "/board/v1/post/list", map[string]any{}, 403, errs.PermissionDenied},
		{"update to a category outside the board", c.adminA, "/board/v1/post/update", map[string]any{"post_id": p.PostID, "category": "gossip"}, 400, errs.InvalidCategory},
		{"board_id never changes", c.adminA, "/board/v1/post/update", map[string]any{"post_id": p.PostID, "board_id": "board-111111111111", "title": "x"}, 400, errs.InvalidParameter},
		{"domain_id never changes", c.adminA, "/board/v1/post/update", map[string]any{"post_id": p.PostID, "domain_id": "domain-b", "title": "x"}, 400, errs.InvalidParameter},
		{"post_id is required", c.adminA, "/board/v1/post/update", map[string]any{"title": "x"}, 400, errs.RequiredParameter},
		{"member cannot update", c.memberA, "/board/v1/post/update", map[string]any{"post_id": p.PostID, "title": "x"}, 403, errs.PermissionDenied},
		{"member cannot delete", c.memberA, "/board/v1/post/delete", map[string]any{"post_id": p.PostID}, 403, errs.PermissionDenied},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			r.as.Call(r.path, r.body).Fails(r.status, r.code)
			s := c.stored(t, p.PostID)
			if n := c.count(t, post.PostsCollection); n != posts || s.Title != "Kept" || s.Category != "maintenance" ||
				s.BoardID != b.BoardID || s.DomainID != "domain-a" {
				t.Fatalf("refused request changed the store: %d posts, %+v", n, s)
			}
		})
	}

	// set_categories changes only the board; posts keep their category.
	c.system.Call("/board/v1/board/set-categories", map[string]any{"board_id": b.BoardID, "categories": []string{"release"}}).OK(nil)
	var got postInfo
	c.adminA.Call("/board/v1/post/get", map[string]any{"post_id": p.PostID}).OK(&got)
	if got.Category != "maintenance" {
		t.Fatalf("set_categories changed a post: %+v", got)
	}
	// Updating other fields of a post whose category left the board is fine.
	c.adminA.Call("/board/v1/post/update", map[string]any{"post_id": p.PostID, "title": "Still here"}).OK(&got)
	if got.Category != "maintenance" || got.Title != "Still here" {
		t.Fatalf("update = %+v", got)
	}

	// A board can be deleted while it has posts; the posts stay readable.
	c.system.Call("/board/v1/board/delete", map[string]any{"board_id": b.BoardID}).OK(nil)
	c.adminA.Call("/board/v1/post/get", map[string]any{"post_id": p.PostID}).OK(&got)
	if got.BoardID != b.BoardID {
		t.Fatalf("post lost its board_id: %+v", got)
	}
	// A SYSTEM admin may publish a SYSTEM post.
	var sys postInfo
	c.system.Call("/board/v1/post/create", map[string]any{"board_id": c.board(t, "Global").BoardID, "board_type": "NOTICE",
		"title": "For all", "contents": "x", "resource_group": "SYSTEM"}).OK(&sys)
	if sys.ResourceGroup != "SYSTEM" {
		t.Fatalf("system post = %+v", sys)
	}
}

func TestDomainIsolation(t *testing.T) {
	t.Parallel()
	c := setup(t)
	b := c.board(t, "Notices", "maintenance")
	pa := c.post(t, c.adminA, b.BoardID, "maintenance", "Secret of A")
	pb := c.post(t, c.adminB, b.BoardID, "maintenance", "Post of B")

	id := map[string]any{"post_id": pa.PostID}
	c.adminB.Call("/board/v1/post/get", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.adminB.Call("/board/v1/post/update", map[string]any{"post_id": pa.PostID, "title": "taken"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.adminB.Call("/board/v1/post/delete", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	c.adminB.Call("/board/v1/post/send-notification", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	if s := c.stored(t, pa.PostID); s.Title != "Secret of A" || s.ViewCount != 0 {
		t.Fatalf("domain B changed A's post: %+v", s)
	}

	var l list[postInfo]
	for _, body := range []map[string]any{
		{},
		{"domain_id": "domain-a"},
		{"post_id": pa.PostID},
		{"query": map[string]any{"filter": []any{map[string]any{"k": "domain_id", "v": "domain-a", "o": "eq"}}}},
		{"query": map[string]any{"filter_or": []any{map[string]any{"k": "domain_id", "v": "domain-a", "o": "eq"}, map[string]any{"k": "title", "v": "Secret", "o": "contain"}}}},
	} {
		c.adminB.Call("/board/v1/post/list", body).OK(&l)
		for _, r := range l.Results {
			if r.DomainID != "domain-b" {
				t.Fatalf("list %v leaked %+v", body, r)
			}
		}
		if l.TotalCount > 1 {
			t.Fatalf("list %v counted other domains: %d", body, l.TotalCount)
		}
	}
	st := c.adminB.Call("/board/v1/post/stat", map[string]any{"query": map[string]any{
		"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "domain_id", "name": "d"}}, "fields": []any{map[string]any{"name": "n", "operator": "count"}}}}},
	}}).JSON()
	rows := st["results"].([]any)
	if len(rows) != 1 || rows[0].(map[string]any)["d"] != "domain-b" || rows[0].(map[string]any)["n"] != float64(1) {
		t.Fatalf("stat crossed domains: %v", st)
	}
	var got postInfo
	c.adminB.Call("/board/v1/post/get", map[string]any{"post_id": pb.PostID}).OK(&got)
	if got.Title != "Post of B" {
		t.Fatalf("own post = %+v", got)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	c := setup(t)
	b := c.board(t, "Notices", "maintenance")
	boards, posts := c.count(t, internalboard.BoardsCollection), c.count(t, post.PostsCollection)
	huge := `{"name": "` + strings.Repeat("x", 1<<20) + `"}`
	cases := []struct {
		name   string
		as     *testkit.Client
		path   string
		body   string
		status int
		code   string
	}{
		{"malformed JSON", c.system, "/board/v1/board/create", `{"name": "x"`, 400, errs.JSONFormat},
		{"not an object", c.system, "/board/v1/board/create", `["name"]`, 400, errs.JSONFormat},
		{"two objects", c.system, "/board/v1/board/create", `{"name": "x"} {"name": "y"}`, 400, errs.JSONFormat},
		{"wrong type", c.system, "/board/v1/board/create", `{"name": 5}`, 400, errs.InvalidParameterType},
		{"wrong list type", c.system, "/board/v1/board/create", `{"name": "x", "categories": "a"}`, 400, errs.InvalidParameterType},
		{"unknown field", c.system, "/board/v1/board/create", `{"name": "x", "colour": "red"}`, 400, errs.InvalidParameter},
		{"missing required", c.system, "/board/v1/board/create", `{"categories": ["a"]}`, 400, errs.RequiredParameter},
		{"blank required", c.system, "/board/v1/board/create", `{"name": "   "}`, 400, errs.RequiredParameter},
		{"too long", c.system, "/board/v1/board/create", `{"name": "` + strings.Repeat("n", 256) + `"}`, 400, errs.InvalidParameter},
		{"repeated category", c.system, "/board/v1/board/create", `{"name": "x", "categories": ["a", "a"]}`, 400, errs.InvalidParameter},
		{"oversized body", c.system, "/board/v1/board/create", huge, 413, errs.RequestTooLarge},
		{"post malformed", c.adminA, "/board/v1/post/create", `{"board_id":`, 400, errs.JSONFormat},
		{"post unknown enum", c.adminA, "/board/v1/post/create", `{"board_id": "` + b.BoardID + `", "board_type": "GOSSIP", "title": "t", "contents": "c", "resource_group": "DOMAIN"}`, 400, errs.InvalidParameter},
		{"post unknown resource group", c.adminA, "/board/v1/post/create", `{"board_id": "` + b.BoardID + `", "board_type": "NOTICE", "title": "t", "contents": "c", "resource_group": "GALAXY"}`, 400, errs.InvalidParameter},
		{"post missing title", c.adminA, "/board/v1/post/create", `{"board_id": "` + b.BoardID + `", "board_type": "NOTICE", "contents": "c", "resource_group": "DOMAIN"}`, 400, errs.RequiredParameter},
		{"post wrong type", c.adminA, "/board/v1/post/create", `{"board_id": "` + b.BoardID + `", "board_type": "NOTICE", "title": ["t"], "contents": "c", "resource_group": "DOMAIN"}`, 400, errs.InvalidParameterType},
		{"post unknown field", c.adminA, "/board/v1/post/create", `{"board_id": "` + b.BoardID + `", "board_type": "NOTICE", "title": "t", "contents": "c", "resource_group": "DOMAIN", "domain": "x"}`, 400, errs.InvalidParameter},
		{"post oversized", c.adminA, "/board/v1/post/create", huge, 413, errs.RequestTooLarge},
		{"list unknown query member", c.adminA, "/board/v1/post/list", `{"query": {"filters": []}}`, 400, errs.InvalidParameter},
		{"list unknown operator", c.adminA, "/board/v1/post/list", `{"query": {"filter": [{"k": "title", "v": "x", "o": "like"}]}}`, 400, errs.DBQuery},
		{"list eq with a list", c.adminA, "/board/v1/post/list", `{"query": {"filter": [{"k": "title", "v": ["x"], "o": "eq"}]}}`, 400, errs.OperatorValueType},
		{"list in with a scalar", c.adminA, "/board/v1/post/list", `{"query": {"filter": [{"k": "title", "v": "x", "o": "in"}]}}`, 400, errs.OperatorListType},
		{"list operator injection", c.adminA, "/board/v1/post/list", `{"query": {"filter": [{"k": "$where", "v": "1", "o": "eq"}]}}`, 400, errs.DBQuery},
		{"list bad enum filter", c.adminA, "/board/v1/post/list", `{"board_type": "GOSSIP"}`, 400, errs.InvalidParameter},
		{"list bad value on a field posts do not have", c.adminA, "/board/v1/post/list", `{"query": {"filter": [{"k": "password_hash", "v": [true], "o": "exists"}]}}`, 400, errs.OperatorValueType},
		{"stat on a field posts do not have", c.adminA, "/board/v1/post/stat", `{"query": {"distinct": "secret"}}`, 400, errs.InvalidParameter},
		{"stat without query", c.adminA, "/board/v1/post/stat", `{}`, 400, errs.RequiredParameter},
		{"stat without aggregate", c.adminA, "/board/v1/post/stat", `{"query": {}}`, 400, errs.RequiredParameter},
		{"get wrong type", c.adminA, "/board/v1/post/get", `{"post_id": 12}`, 400, errs.InvalidParameterType},
		{"unsupported path", c.adminA, "/board/v1/post/publish", `{}`, 404, errs.UnsupportedAPI},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.as.Call(tc.path, tc.body).Fails(tc.status, tc.code)
			if nb, np := c.count(t, internalboard.BoardsCollection), c.count(t, post.PostsCollection); nb != boards || np != posts {
				t.Fatalf("bad input stored something: %d boards, %d posts", nb, np)
			}
		})
	}
}

// TestStatShowsOnlyInfoFields: a stat whose stages never build new rows
// returns the resource's Info fields, not the stored document.
func TestStatShowsOnlyInfoFields(t *testing.T) {
	t.Parallel()
	c := setup(t)
	b := c.board(t, "Notices")
	c.post(t, c.adminA, b.BoardID, "", "One")
	st := c.adminA.Call("/board/v1/post/stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"limit": 5}}}}).JSON()
	rows := st["results"].([]any)
	if len(rows) != 1 {
		t.Fatalf("stat = %v", st)
	}
	row := rows[0].(map[string]any)
	if _, has := row["_id"]; has || row["title"] != "One" {
		t.Fatalf("stat row = %v", row)
	}
}

func TestAliasesAndDocs(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var b boardInfo
	c.system.Call("/board/board/create", map[string]any{"name": "Via alias", "categories": []string{"a"}}).OK(&b)
	var got boardInfo
	c.adminA.Call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).OK(&got)
	if got.Name != "Via alias" {
		t.Fatalf("alias create not stored: %+v", got)
	}
	c.adminA.Call("/board/board/create", map[string]any{"name": "x"}).Fails(http.StatusForbidden, errs.PermissionDenied)

	env := testkit.Get()
	db := env.Database(t)
	svc, _ := board.New(context.Background(), app.Deps{DB: db})
	srv, _ := server.New(server.Options{Name: "board", Auth: env.Verifier}, svc.Routes...)
	doc := srv.OpenAPI()
	paths := doc["paths"].(map[string]any)
	if len(paths) != 15 {
		t.Fatalf("OpenAPI lists %d paths, want 15", len(paths))
	}
	op := paths["/board/v1/post/create"].(map[string]any)["post"].(map[string]any)
	if !strings.Contains(op["description"].(string), "/board/post/create") {
		t.Fatalf("alias missing from description: %v", op["description"])
	}
}

// TestConcurrentViewsAllCount: concurrent gets of one post, on two
// replicas, are all counted in the store by the time they answer, and
// each answer includes at least its own view.
func TestConcurrentViewsAllCount(t *testing.T) {
	t.Parallel()
	c := setup(t)
	replica := setupOn(t, c.db)
	b := c.board(t, "Notices")
	p := c.post(t, c.adminA, b.BoardID, "", "Hot")
	const n = 20
	seen := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var got postInfo
			caller := c.memberA
			if i%2 == 1 {
				caller = replica.memberA
			}
			caller.Call("/board/v1/post/get", map[string]any{"post_id": p.PostID}).OK(&got)
			seen <- got.ViewCount
		})
	}
	wg.Wait()
	close(seen)
	for v := range seen {
		if v < 1 || v > n {
			t.Fatalf("an answer's view_count %d is outside 1..%d", v, n)
		}
	}
	if got := c.stored(t, p.PostID).ViewCount; got != n {
		t.Fatalf("stored view_count %d, want %d", got, n)
	}
}

// TestPostTenancy runs the tenancy matrix over a post: no caller outside
// its domain reads or changes it.
func TestPostTenancy(t *testing.T) {
	t.Parallel()
	c := setup(t)
	b := c.board(t, "notices")
	p := c.post(t, c.adminA, b.BoardID, "", "for domain a")
	id := map[string]any{"post_id": p.PostID}
	testkit.Tenancy{
		Handler: c.h, Coll: c.db.Collection(post.PostsCollection), ID: p.PostID, Domain: "domain-a",
		Insider: auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"},
		Get:     testkit.Req{Path: "/board/v1/post/get", Body: id},
		List:    testkit.Req{Path: "/board/v1/post/list", Body: id},
		Stat:    &testkit.Req{Path: "/board/v1/post/stat", Body: map[string]any{"query": map[string]any{"distinct": "post_id"}}},
		Changes: []testkit.Req{
			{Path: "/board/v1/post/update", Body: map[string]any{"post_id": p.PostID, "title": "taken"}},
			{Path: "/board/v1/post/send-notification", Body: id},
			{Path: "/board/v1/post/send", Body: id},
			{Path: "/board/v1/post/delete", Body: id},
		},
	}.Run(t)
}

// TestPost2xShape: the upstream console's notice (board_type NOTICE, no
// board_id, workspaces, options, writer, resource_group) is created,
// updated, listed with its sort on is_pinned, read and deleted on the
// same paths as the 1.x shape, which keeps working beside it.
func TestPost2xShape(t *testing.T) {
	t.Parallel()
	c := setup(t)
	b := c.board(t, "Notices", "maintenance")
	old := c.post(t, c.adminA, b.BoardID, "maintenance", "1.x post")
	if len(old.Workspaces) != 1 || old.Workspaces[0] != "*" {
		t.Fatalf("1.x post: workspaces %v, want [*]", old.Workspaces)
	}

	notice := func(title string, pinned, popup bool) postInfo {
		t.Helper()
		var p postInfo
		c.adminA.Call("/board/post/create", map[string]any{
			"board_type": "NOTICE", "title": title, "contents": "<p>" + title + "</p>", "files": []string{},
			"options": map[string]any{"is_pinned": pinned, "is_popup": popup}, "writer": "Admin",
			"resource_group": "DOMAIN", "workspaces": []string{"*"},
		}).OK(&p)
		return p
	}
	pinned := notice("Pinned", true, false)
	// Distinct created_at (kept to the millisecond): the next post is made
	// once the clock has passed this one's.
	pinnedAt, err := time.Parse(time.RFC3339Nano, pinned.CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Second, "a millisecond after the pinned post", func() bool {
		return time.Now().Truncate(time.Millisecond).After(pinnedAt)
	})
	popup := notice("Popup", false, true)
	if pinned.BoardID != "" || pinned.BoardType != "NOTICE" || pinned.Writer != "Admin" || !pinned.Options["is_pinned"] ||
		len(pinned.Workspaces) != 1 || pinned.Workspaces[0] != "*" || pinned.DomainID != "domain-a" || pinned.ResourceGroup != "DOMAIN" {
		t.Fatalf("2.x create = %+v", pinned)
	}

	// The console's sort: is_pinned (an option) first, then newest.
	var l list[postInfo]
	c.memberA.Call("/board/post/list", map[string]any{"board_type": "NOTICE", "query": map[string]any{
		"page": map[string]any{"start": 1, "limit": 15},
		"sort": []any{map[string]any{"key": "is_pinned", "desc": true}, map[string]any{"key": "created_at", "desc": true}}}}).OK(&l)
	if l.TotalCount != 3 || l.Results[0].PostID != pinned.PostID || l.Results[1].PostID != popup.PostID || l.Results[2].PostID != old.PostID {
		t.Fatalf("sorted on is_pinned: %+v", l.Results)
	}
	c.memberA.Call("/board/post/list", map[string]any{"board_type": "NOTICE", "query": map[string]any{
		"filter": []any{map[string]any{"k": "options.is_popup", "v": true, "o": "eq"}}}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].PostID != popup.PostID {
		t.Fatalf("filter options.is_popup: %+v", l)
	}
	c.memberA.Call("/board/post/list", map[string]any{"board_type": "NOTICE", "query": map[string]any{"only": []string{"post_id"}}}).OK(&l)
	if l.TotalCount != 3 || l.Results[0].PostID == "" || l.Results[0].Title != "" {
		t.Fatalf("only post_id: %+v", l)
	}
	c.memberA.Call("/board/post/list", map[string]any{"board_type": "NOTICE", "query": map[string]any{
		"filter": []any{map[string]any{"k": "created_at", "v": pinned.CreatedAt, "o": "datetime_gt"}},
		"page":   map[string]any{"start": 1, "limit": 1}}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].PostID != popup.PostID {
		t.Fatalf("created_at datetime_gt: %+v", l)
	}

	// update: the changed keys and always workspaces ([] means all).
	var got postInfo
	c.adminA.Call("/board/post/update", map[string]any{"post_id": popup.PostID, "title": "Popup 2", "workspaces": []string{"workspace-1", "workspace-2"}}).OK(&got)
	if got.Title != "Popup 2" || len(got.Workspaces) != 2 || got.Workspaces[1] != "workspace-2" || !got.Options["is_popup"] {
		t.Fatalf("2.x update = %+v", got)
	}
	c.adminA.Call("/board/post/update", map[string]any{"post_id": popup.PostID, "options": map[string]any{"is_pinned": true}, "writer": "Ops", "workspaces": []string{}}).OK(&got)
	if len(got.Workspaces) != 1 || got.Workspaces[0] != "*" || got.Writer != "Ops" || !got.Options["is_pinned"] || !got.Options["is_popup"] {
		t.Fatalf("2.x update with workspaces [] = %+v", got)
	}
	c.memberA.Call("/board/post/get", map[string]any{"post_id": popup.PostID}).OK(&got)
	if got.Title != "Popup 2" || got.ViewCount != 1 {
		t.Fatalf("get = %+v", got)
	}

	// send is send-notification under upstream's name: both 501, after
	// the same checks.
	for _, path := range []string{"/board/post/send", "/board/v1/post/send-notification"} {
		c.adminA.Call(path, map[string]any{"post_id": popup.PostID}).Fails(http.StatusNotImplemented, errs.NotImplemented)
		c.adminB.Call(path, map[string]any{"post_id": popup.PostID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.memberA.Call(path, map[string]any{"post_id": popup.PostID}).Fails(http.StatusForbidden, errs.PermissionDenied)
	}

	// Another domain sees none of it.
	c.adminB.Call("/board/post/list", map[string]any{"board_type": "NOTICE"}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("domain B lists %+v", l)
	}
	c.adminB.Call("/board/post/update", map[string]any{"post_id": pinned.PostID, "title": "taken", "workspaces": []string{}}).Fails(http.StatusNotFound, errs.NotFoundCode)

	c.adminA.Call("/board/post/delete", map[string]any{"post_id": pinned.PostID}).OK(nil)
	c.adminA.Call("/board/post/get", map[string]any{"post_id": pinned.PostID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if s := c.stored(t, popup.PostID); s.Title != "Popup 2" {
		t.Fatalf("domain B changed A's notice: %+v", s)
	}
}

// TestPost2xBadInput: each bad 2.x body is refused with its code, and
// nothing is stored or changed.
func TestPost2xBadInput(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var kept postInfo
	c.adminA.Call("/board/post/create", map[string]any{"board_type": "NOTICE", "title": "Kept", "contents": "c",
		"resource_group": "DOMAIN", "workspaces": []string{"*"}}).OK(&kept)
	posts := c.count(t, post.PostsCollection)
	create := func(body map[string]any) map[string]any {
		base := map[string]any{"board_type": "NOTICE", "title": "t", "contents": "c", "resource_group": "DOMAIN", "workspaces": []string{"*"}}
		for k, v := range body {
			if v == nil {
				delete(base, k)
			} else {
				base[k] = v
			}
		}
		return base
	}
	cases := []struct {
		name   string
		as     *testkit.Client
		path   string
		body   map[string]any
		status int
		code   string
	}{
		{"no board_type", c.adminA, "/board/post/create", create(map[string]any{"board_type": nil}), 400, errs.RequiredParameter},
		{"unknown board_type", c.adminA, "/board/post/create", create(map[string]any{"board_type": "FAQ"}), 400, errs.InvalidParameter},
		{"no resource_group", c.adminA, "/board/post/create", create(map[string]any{"resource_group": nil}), 400, errs.RequiredParameter},
		{"WORKSPACE without workspaces or a workspace", c.adminA, "/board/post/create", create(map[string]any{"resource_group": "WORKSPACE", "workspaces": nil}), 400, errs.InvalidParameter},
		{"* with ids", c.adminA, "/board/post/create", create(map[string]any{"workspaces": []string{"*", "workspace-1"}}), 400, errs.InvalidParameter},
		{"empty workspace id", c.adminA, "/board/post/create", create(map[string]any{"workspaces": []string{""}}), 400, errs.InvalidParameter},
		{"repeated workspace", c.adminA, "/board/post/create", create(map[string]any{"workspaces": []string{"workspace-1", "workspace-1"}}), 400, errs.InvalidParameter},
		{"long workspace id", c.adminA, "/board/post/create", create(map[string]any{"workspaces": []string{strings.Repeat("w", 65)}}), 400, errs.InvalidParameter},
		{"workspaces not a list", c.adminA, "/board/post/create", create(map[string]any{"workspaces": "*"}), 400, errs.InvalidParameterType},
		{"workspace not a string", c.adminA, "/board/post/create", create(map[string]any{"workspaces": []any{1}}), 400, errs.InvalidParameterType},
		{"option key", c.adminA, "/board/post/create", create(map[string]any{"options": map[string]any{"is_sticky": true}}), 400, errs.InvalidKeyInOptions},
		{"member writes", c.memberA, "/board/post/create", create(nil), 403, errs.PermissionDenied},
		{"update * with ids", c.adminA, "/board/post/update", map[string]any{"post_id": kept.PostID, "title": "x", "workspaces": []string{"workspace-1", "*"}}, 400, errs.InvalidParameter},
		{"update workspace not a string", c.adminA, "/board/post/update", map[string]any{"post_id": kept.PostID, "title": "x", "workspaces": []any{true}}, 400, errs.InvalidParameterType},
		{"list unknown board_type", c.adminA, "/board/post/list", map[string]any{"board_type": "FAQ"}, 400, errs.InvalidParameter},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.as.Call(tc.path, tc.body).Fails(tc.status, tc.code)
			s := c.stored(t, kept.PostID)
			if n := c.count(t, post.PostsCollection); n != posts || s.Title != "Kept" {
				t.Fatalf("refused request changed the store: %d posts, %+v", n, s)
			}
		})
	}
	var got postInfo
	c.adminA.Call("/board/post/get", map[string]any{"post_id": kept.PostID}).OK(&got)
	if len(got.Workspaces) != 1 || got.Workspaces[0] != "*" {
		t.Fatalf("workspaces changed: %+v", got)
	}
}

// TestNoticeWorkspaces: a notice's workspaces say who reads it. A caller
// of another workspace reaches it by no path (get, list, stat) and no
// filter, keyword, sort or group reveals it; a domain admin reads every
// notice; "*", [] (stored as "*") and a post stored before workspaces
// existed are read by every workspace. Changing the workspaces moves the
// notice in and out of a workspace's reach.
func TestNoticeWorkspaces(t *testing.T) {
	t.Parallel()
	c := setup(t)
	env := testkit.Get()
	as := func(p auth.Principal) *testkit.Client { return c.anon.As(env.Token(t, p)) }
	w1 := as(auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"})
	w2 := as(auth.Principal{DomainID: "domain-a", UserID: "mark", Role: auth.WorkspaceMember, WorkspaceID: "workspace-2"})
	notice := func(title string, workspaces []string) string {
		t.Helper()
		var p postInfo
		c.adminA.Call("/board/post/create", map[string]any{"board_type": "NOTICE", "title": title, "contents": "secret plan " + title,
			"options": map[string]any{"is_pinned": true}, "resource_group": "DOMAIN", "workspaces": workspaces}).OK(&p)
		return p.PostID
	}
	only1 := notice("only one", []string{"workspace-1"})
	// The console's admin form: resource_group WORKSPACE with the picked ids.
	var picked postInfo
	c.adminA.Call("/board/post/create", map[string]any{"board_type": "NOTICE", "title": "picked", "contents": "c",
		"resource_group": "WORKSPACE", "workspaces": []string{"workspace-1"}}).OK(&picked)
	if picked.ResourceGroup != "WORKSPACE" || len(picked.Workspaces) != 1 || picked.Workspaces[0] != "workspace-1" {
		t.Fatalf("WORKSPACE notice = %+v", picked)
	}
	w1.Call("/board/post/get", map[string]any{"post_id": picked.PostID}).OK(nil)
	c.adminA.Call("/board/post/delete", map[string]any{"post_id": picked.PostID}).OK(nil)
	two := notice("two and three", []string{"workspace-2", "workspace-3"})
	all := notice("all", []string{"*"})
	// A post stored before workspaces existed: no field at all.
	if _, err := c.db.Collection(post.PostsCollection).InsertOne(context.Background(), bson.D{
		{Key: "_id", Value: "post-legacy"}, {Key: "post_id", Value: "post-legacy"}, {Key: "board_type", Value: "NOTICE"},
		{Key: "title", Value: "legacy"}, {Key: "domain_id", Value: "domain-a"}, {Key: "created_at", Value: time.Now().UTC()},
	}); err != nil {
		t.Fatal(err)
	}

	ids := func(as *testkit.Client, q map[string]any) []string {
		t.Helper()
		var l list[postInfo]
		as.Call("/board/post/list", map[string]any{"board_type": "NOTICE", "query": q}).OK(&l)
		out := []string{}
		for _, p := range l.Results {
			out = append(out, p.PostID)
		}
		if l.TotalCount != len(out) {
			t.Fatalf("total_count %d for %d results", l.TotalCount, len(out))
		}
		slices.Sort(out)
		return out
	}
	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }
	for _, tc := range []struct {
		name string
		as   *testkit.Client
		want []string
	}{
		{"domain admin", c.adminA, sorted(only1, two, all, "post-legacy")},
		{"owner of workspace-1", w1, sorted(only1, all, "post-legacy")},
		{"member of workspace-2", w2, sorted(two, all, "post-legacy")},
		{"member of workspace-1", c.memberA, sorted(only1, all, "post-legacy")},
	} {
		if got := ids(tc.as, nil); !slices.Equal(got, tc.want) {
			t.Errorf("%s lists %v, want %v", tc.name, got, tc.want)
		}
	}

	// The attacker: a member of workspace-2 after the workspace-1 notice.
	w2.Call("/board/post/get", map[string]any{"post_id": only1}).Fails(http.StatusNotFound, errs.NotFoundCode)
	for name, q := range map[string]map[string]any{
		"by id":              {"filter": []any{map[string]any{"k": "post_id", "v": only1, "o": "eq"}}},
		"by its workspace":   {"filter": []any{map[string]any{"k": "workspaces", "v": "workspace-1", "o": "eq"}}},
		"by workspaces in":   {"filter": []any{map[string]any{"k": "workspaces", "v": []string{"workspace-1"}, "o": "in"}}},
		"filter_or":          {"filter_or": []any{map[string]any{"k": "post_id", "v": only1, "o": "eq"}, map[string]any{"k": "title", "v": "only", "o": "contain"}}},
		"keyword":            {"keyword": "only"},
		"workspaces exists":  {"filter": []any{map[string]any{"k": "workspaces", "v": false, "o": "exists"}, map[string]any{"k": "title", "v": "only one", "o": "eq"}}},
		"sorted, first page": {"filter": []any{map[string]any{"k": "title", "v": "only one", "o": "eq"}}, "sort": []any{map[string]any{"key": "workspaces"}}, "page": map[string]any{"start": 1, "limit": 1}},
	} {
		if got := ids(w2, q); slices.Contains(got, only1) || (name != "keyword" && name != "sorted, first page" && len(got) > 0) {
			t.Errorf("%s: workspace-2 lists %v", name, got)
		}
	}
	stat := func(as *testkit.Client, q map[string]any) string {
		t.Helper()
		r := as.Call("/board/post/stat", map[string]any{"query": q})
		if r.Status != http.StatusOK {
			t.Fatalf("stat %v: %d %s", q, r.Status, r.Body)
		}
		return string(r.Body)
	}
	for _, q := range []map[string]any{
		{"distinct": "post_id"},
		{"distinct": "workspaces"},
		{"distinct": "title"},
		{"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "title", "name": "title"}},
			"fields": []any{map[string]any{"name": "n", "operator": "count"}}}}}},
		{"aggregate": []any{map[string]any{"unwind": map[string]any{"path": "workspaces"}},
			map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "workspaces", "name": "w"}},
				"fields": []any{map[string]any{"name": "n", "operator": "count"}}}}}},
	} {
		body := stat(w2, q)
		if strings.Contains(body, only1) || strings.Contains(body, "only one") || strings.Contains(body, `"workspace-1"`) {
			t.Errorf("stat %v reveals the workspace-1 notice: %s", q, body)
		}
	}
	if body := stat(c.adminA, map[string]any{"distinct": "title"}); !strings.Contains(body, "only one") {
		t.Fatalf("the admin's stat misses the workspace-1 notice: %s", body)
	}
	if body := stat(w1, map[string]any{"distinct": "title"}); !strings.Contains(body, "only one") || strings.Contains(body, "two and three") {
		t.Fatalf("workspace-1's stat: %s", body)
	}
	w1.Call("/board/post/get", map[string]any{"post_id": two}).Fails(http.StatusNotFound, errs.NotFoundCode)
	var got postInfo
	w2.Call("/board/post/get", map[string]any{"post_id": two}).OK(&got)
	w2.Call("/board/post/get", map[string]any{"post_id": "post-legacy"}).OK(&got)
	if got.Workspaces == nil || len(got.Workspaces) != 0 {
		t.Fatalf("a post without workspaces answers %#v, want []", got.Workspaces)
	}

	// Moving the notices: [] is every workspace; a list leaves the others out.
	c.adminA.Call("/board/post/update", map[string]any{"post_id": only1, "workspaces": []string{}}).OK(nil)
	c.adminA.Call("/board/post/update", map[string]any{"post_id": two, "workspaces": []string{"workspace-3"}}).OK(nil)
	w2.Call("/board/post/get", map[string]any{"post_id": only1}).OK(nil)
	w2.Call("/board/post/get", map[string]any{"post_id": two}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if got := ids(w2, nil); !slices.Equal(got, sorted(only1, all, "post-legacy")) {
		t.Fatalf("after the moves workspace-2 lists %v", got)
	}
}

// TestNoticeWorkspacesTenancy runs the tenancy matrix over a notice for
// one workspace: an owner of another workspace is an outsider too.
func TestNoticeWorkspacesTenancy(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var p postInfo
	c.adminA.Call("/board/post/create", map[string]any{"board_type": "NOTICE", "title": "for workspace-1", "contents": "c",
		"resource_group": "DOMAIN", "workspaces": []string{"workspace-1"}}).OK(&p)
	id := map[string]any{"post_id": p.PostID}
	testkit.Tenancy{
		Handler: c.h, Coll: c.db.Collection(post.PostsCollection), ID: p.PostID, Domain: "domain-a", Workspace: "workspace-1",
		Insider: auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"},
		Get:     testkit.Req{Path: "/board/post/get", Body: id},
		List:    testkit.Req{Path: "/board/post/list", Body: id},
		Stat:    &testkit.Req{Path: "/board/post/stat", Body: map[string]any{"query": map[string]any{"distinct": "post_id"}}},
		Changes: []testkit.Req{
			{Path: "/board/post/update", Body: map[string]any{"post_id": p.PostID, "title": "taken", "workspaces": []string{}}},
			{Path: "/board/post/send", Body: id},
			{Path: "/board/post/delete", Body: id},
		},
	}.Run(t)
}
