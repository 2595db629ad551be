package secret_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
)

// TestUserSecretCloudKeys: a secret's tags keep keys as users copy them
// from their clouds, are filtered as tags.<key>, and a key no store
// keeps is a 400 with nothing stored.
func TestUserSecretCloudKeys(t *testing.T) {
	h := newHarness(t)
	tags := map[string]any{"kubernetes.io/service-account.name": "ci", "aws:createdBy": "alice", "$env": "prod"}
	s := h.create(h.alice, map[string]any{"name": "kubeconfig", "data": map[string]any{"token": "t"}, "tags": tags})
	var got info
	h.alice.Call(p+"get", map[string]any{"user_secret_id": s.UserSecretID}).OK(&got)
	if !reflect.DeepEqual(got.Tags, tags) {
		t.Fatalf("tags read back as %v", got.Tags)
	}
	var l struct {
		Results    []info `json:"results"`
		TotalCount int    `json:"total_count"`
	}
	h.alice.Call(p+"list", map[string]any{"query": map[string]any{"filter": []any{
		map[string]any{"k": "tags.kubernetes.io/service-account.name", "v": "ci", "o": "eq"}}}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].UserSecretID != s.UserSecretID {
		t.Fatalf("filter on the dotted tag: %+v", l)
	}
	changed := map[string]any{"app.kubernetes.io/name": "deploy"}
	h.alice.Call(p+"update", map[string]any{"user_secret_id": s.UserSecretID, "tags": changed}).OK(&got)
	h.alice.Call(p+"get", map[string]any{"user_secret_id": s.UserSecretID}).OK(&got)
	if !reflect.DeepEqual(got.Tags, changed) {
		t.Fatalf("updated tags: %v", got.Tags)
	}
	before := len(h.docs())
	for _, bad := range []map[string]any{{"": "x"}, {"a\x00b": "x"}} {
		h.alice.Call(p+"create", map[string]any{"name": "bad", "data": map[string]any{"k": "v"}, "tags": bad}).
			Fails(http.StatusBadRequest, errs.InvalidParameter)
	}
	if after := len(h.docs()); after != before {
		t.Fatalf("a refused create stored %d documents", after-before)
	}
}
