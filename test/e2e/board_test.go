package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/auth"
)

// TestBoardAcrossDomains drives the board service as clients of three
// kinds would: SYSTEM runs the boards, the admins of two domains publish
// and read posts, and neither domain ever sees the other's.
func TestBoardAcrossDomains(t *testing.T) {
	board := direct(st.first(t, "board").url)
	domA, domB := "domain-"+randHex(6), "domain-"+randHex(6)
	sys := systemCaller(t, board)
	adminA, adminB := domainAdmin(t, board, domA), domainAdmin(t, board, domB)
	memberA := as(t, board, auth.Principal{DomainID: domA, UserID: "member@example.com", WorkspaceID: "workspace-" + randHex(6), Role: auth.WorkspaceMember}, time.Hour)
	userA := as(t, board, auth.Principal{DomainID: domA, UserID: "nobody@example.com", Role: auth.User}, time.Hour)
	anon := &caller{t: t, to: board}
	other, err := auth.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	forgedToken, _ := other.Issue(auth.Principal{DomainID: domA, UserID: "x", Role: auth.DomainAdmin}, time.Hour)
	forged := &caller{t: t, to: board, token: forgedToken}

	// Boards: SYSTEM writes, the domain roles read, nobody else.
	var b boardInfo
	sys.call("/board/v1/board/create", map[string]any{"name": "Notices", "categories": []string{"maintenance", "release"}}).OK(&b)
	if b.BoardID == "" || !slices.Equal(b.Categories, []string{"maintenance", "release"}) {
		t.Fatalf("board = %+v", b)
	}
	adminA.call("/board/v1/board/create", map[string]any{"name": "Mine"}).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
	anon.call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).Fails(http.StatusUnauthorized, "ERROR_AUTHENTICATE_FAILURE")
	forged.call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).Fails(http.StatusUnauthorized, "ERROR_AUTHENTICATE_FAILURE")
	userA.call("/board/v1/board/get", map[string]any{"board_id": b.BoardID}).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
	var got boardInfo
	adminB.call("/board/board/get", map[string]any{"board_id": b.BoardID}).OK(&got) // the unversioned alias
	if got.Name != "Notices" {
		t.Fatalf("board/get = %+v", got)
	}

	// Posts: each domain publishes on the shared board.
	var postsA []postInfo
	for i, cat := range []string{"maintenance", "maintenance", "release"} {
		var p postInfo
		adminA.call("/board/v1/post/create", newPost(b.BoardID, "A"+string(rune('1'+i)), cat)).OK(&p)
		if p.DomainID != domA || p.Writer != adminA.user || p.BoardID != b.BoardID {
			t.Fatalf("post of A = %+v", p)
		}
		postsA = append(postsA, p)
	}
	var pb postInfo
	for _, title := range []string{"B1", "B2"} {
		adminB.call("/board/v1/post/create", newPost(b.BoardID, title, "release")).OK(&pb)
	}
	adminA.call("/board/v1/post/create", newPost(b.BoardID, "bad", "gossip")).Fails(http.StatusBadRequest, "ERROR_INVALID_CATEGORY")
	memberA.call("/board/v1/post/create", newPost(b.BoardID, "member", "release")).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
	unknown := newPost(b.BoardID, "unknown field", "release")
	unknown["surprise"] = 1
	adminA.call("/board/v1/post/create", unknown).Fails(http.StatusBadRequest, "ERROR_INVALID_PARAMETER")

	// get counts a view; another domain's post does not exist for you.
	var p postInfo
	adminA.call("/board/v1/post/get", map[string]any{"post_id": postsA[0].PostID}).OK(&p)
	memberA.call("/board/v1/post/get", map[string]any{"post_id": postsA[0].PostID}).OK(&p)
	if p.ViewCount != 2 || p.Title != "A1" {
		t.Fatalf("post/get = %+v", p)
	}
	id := map[string]any{"post_id": postsA[0].PostID}
	adminB.call("/board/v1/post/get", id).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	adminB.call("/board/v1/post/update", map[string]any{"post_id": postsA[0].PostID, "title": "taken"}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	adminB.call("/board/v1/post/delete", id).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")

	// list and stat stay inside the caller's domain, whatever the filter.
	byBoard := map[string]any{"board_id": b.BoardID}
	var l postList
	memberA.call("/board/v1/post/list", byBoard).OK(&l)
	if l.TotalCount != 3 || len(l.Results) != 3 {
		t.Fatalf("list of A = %+v", l)
	}
	for _, r := range l.Results {
		if r.DomainID != domA {
			t.Fatalf("list of A shows %+v", r)
		}
	}
	adminB.call("/board/v1/post/list", map[string]any{"query": map[string]any{
		"filter_or": []any{map[string]any{"k": "domain_id", "v": domA, "o": "eq"}, map[string]any{"k": "title", "v": "A", "o": "contain"}},
	}}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatalf("B listed A's posts: %+v", l)
	}
	adminB.call("/board/v1/post/list", byBoard).OK(&l)
	if l.TotalCount != 2 {
		t.Fatalf("list of B = %+v", l)
	}
	stat := map[string]any{"query": map[string]any{
		"filter": []any{map[string]any{"k": "board_id", "v": b.BoardID, "o": "eq"}},
		"aggregate": []any{
			map[string]any{"group": map[string]any{
				"keys":   []any{map[string]any{"key": "domain_id", "name": "domain"}, map[string]any{"key": "category", "name": "category"}},
				"fields": []any{map[string]any{"name": "n", "operator": "count"}},
			}},
			map[string]any{"sort": []any{map[string]any{"key": "category"}}},
		},
	}}
	rows := adminA.call("/board/v1/post/stat", stat).JSON()["results"]
	want := []any{
		map[string]any{"domain": domA, "category": "maintenance", "n": float64(2)},
		map[string]any{"domain": domA, "category": "release", "n": float64(1)},
	}
	if !jsonEqual(rows, want) {
		t.Fatalf("stat of A = %v", rows)
	}
	rows = adminB.call("/board/v1/post/stat", stat).JSON()["results"]
	if !jsonEqual(rows, []any{map[string]any{"domain": domB, "category": "release", "n": float64(2)}}) {
		t.Fatalf("stat of B = %v", rows)
	}

	// Update and delete in one's own domain.
	adminA.call("/board/v1/post/update", map[string]any{"post_id": postsA[1].PostID, "title": "A2 edited"}).OK(&p)
	if p.Title != "A2 edited" {
		t.Fatalf("update = %+v", p)
	}
	adminA.call("/board/v1/post/delete", map[string]any{"post_id": postsA[2].PostID}).OK(nil)
	adminA.call("/board/v1/post/get", map[string]any{"post_id": postsA[2].PostID}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	adminA.call("/board/v1/post/list", byBoard).OK(&l)
	if l.TotalCount != 2 {
		t.Fatalf("list after delete = %+v", l)
	}
	adminA.call("/board/v1/post/send-notification", map[string]any{"post_id": postsA[0].PostID}).Fails(http.StatusNotImplemented, "ERROR_NOT_IMPLEMENTED")

	// What an operator scrapes and a client generator reads.
	base := string(board)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, doc, err := get(ctx, base+"/openapi.json")
	if err != nil || status != http.StatusOK || !strings.Contains(string(doc), "/board/v1/post/create") {
		t.Fatalf("openapi.json: %d %v", status, err)
	}
	status, metrics, err := get(ctx, base+"/metrics")
	if err != nil || status != http.StatusOK || !strings.Contains(string(metrics), `nubes_requests_total{`) {
		t.Fatalf("metrics: %d %v", status, err)
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		if status, _, err := get(ctx, base+probe); err != nil || status != http.StatusOK {
			t.Fatalf("%s: %d %v", probe, status, err)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
