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
	t.Parallel()
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

// TestEncryptOptionsCloudKeys: encrypt_options, as a client's KMS writes
// them, keep keys with dots, slashes, colons and a leading $, on create
// and on update_data, read back unchanged by get_data.
func TestEncryptOptionsCloudKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	opts := map[string]any{"encrypt_algorithm": "AES", "kms.amazonaws.com/key-id": "arn:aws:kms:eu-west-1:1:key/x",
		"aws:createdBy": "alice", "$schema": "urn:kms", "context": map[string]any{"app.kubernetes.io/name": "web"}}
	s := h.create(h.alice, map[string]any{"name": "n", "data": map[string]any{"encrypted_data": "Y2lwaGVy"}, "encrypted": true, "encrypt_options": opts})
	if d := h.getData(s.UserSecretID, "domain-a"); !reflect.DeepEqual(d.EncryptOptions, opts) {
		t.Fatalf("encrypt_options read back as %v", d.EncryptOptions)
	}
	changed := map[string]any{"$ref": "#/kms", "kubernetes.io/cluster/prod": "owned"}
	h.alice.Call(p+"update-data", map[string]any{"user_secret_id": s.UserSecretID, "schema_id": "plain", "data": map[string]any{"encrypted_data": "eA=="},
		"encrypted": true, "encrypt_options": changed}).OK(nil)
	if d := h.getData(s.UserSecretID, "domain-a"); !reflect.DeepEqual(d.EncryptOptions, changed) {
		t.Fatalf("updated encrypt_options read back as %v", d.EncryptOptions)
	}
}
