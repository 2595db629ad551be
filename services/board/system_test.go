package board_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/board/internal/board"
	"github.com/nubes-io/nubes/services/board/internal/post"
)

// Issue 21: boards and SYSTEM posts are the platform's; a service
// credential writes them, a person's SYSTEM_ADMIN grant is refused (403)
// and changes nothing. In its own domain the grant still posts as §4.4
// lets it.
func TestSystemScopeIsForServices(t *testing.T) {
	t.Parallel()
	c := setup(t)
	sa := c.anon.For(auth.Principal{DomainID: "domain-a", UserID: "sa", Role: auth.SystemAdmin})
	b := c.board(t, "Notices", "a")
	var sys postInfo
	c.system.Call("/board/v1/post/create", map[string]any{"board_id": b.BoardID, "board_type": "NOTICE",
		"title": "For all", "contents": "x", "resource_group": "SYSTEM"}).OK(&sys)

	snapshot := func() [2]any {
		return [2]any{testkit.Docs(t, c.db.Collection(board.BoardsCollection)), testkit.Docs(t, c.db.Collection(post.PostsCollection))}
	}
	before := snapshot()
	refused := []struct {
		name string
		as   *testkit.Client
		path string
		body map[string]any
	}{
		{"grant creates a board", sa, "/board/v1/board/create", map[string]any{"name": "x"}},
		{"grant renames a board", sa, "/board/v1/board/update", map[string]any{"board_id": b.BoardID, "name": "taken"}},
		{"grant sets categories", sa, "/board/v1/board/set-categories", map[string]any{"board_id": b.BoardID, "categories": []string{"z"}}},
		{"grant deletes a board", sa, "/board/v1/board/delete", map[string]any{"board_id": b.BoardID}},
		{"grant posts for the platform", sa, "/board/v1/post/create", map[string]any{"board_id": b.BoardID, "board_type": "NOTICE",
			"title": "t", "contents": "x", "resource_group": "SYSTEM"}},
		{"grant changes a SYSTEM post", sa, "/board/v1/post/update", map[string]any{"post_id": sys.PostID, "title": "taken"}},
		{"grant deletes a SYSTEM post", sa, "/board/v1/post/delete", map[string]any{"post_id": sys.PostID}},
		{"grant sends a SYSTEM post", sa, "/board/v1/post/send", map[string]any{"post_id": sys.PostID}},
		{"domain admin changes a SYSTEM post", c.adminA, "/board/v1/post/update", map[string]any{"post_id": sys.PostID, "title": "taken"}},
		{"domain admin deletes a SYSTEM post", c.adminA, "/board/v1/post/delete", map[string]any{"post_id": sys.PostID}},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			r.as.Call(r.path, r.body).Fails(http.StatusForbidden, errs.PermissionDenied)
			if !reflect.DeepEqual(snapshot(), before) {
				t.Fatal("a refused call changed the store")
			}
		})
	}

	// The grant reads, and posts in its own domain.
	sa.Call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).OK(nil)
	c.post(t, sa, b.BoardID, "a", "a domain notice")
	// The service credential changes the platform's records.
	var got postInfo
	c.system.Call("/board/v1/post/update", map[string]any{"post_id": sys.PostID, "title": "Renamed"}).OK(&got)
	if got.Title != "Renamed" {
		t.Fatalf("service update = %+v", got)
	}
	c.system.Call("/board/v1/board/update", map[string]any{"board_id": b.BoardID, "name": "News"}).OK(nil)
	c.system.Call("/board/v1/post/delete", map[string]any{"post_id": sys.PostID}).OK(nil)
}
