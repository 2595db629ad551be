package apikey_test

import (
	"testing"

	"github.com/nubes-io/nubes/services/identity/internal/apikey"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/user"
	"github.com/nubes-io/nubes/services/identity/internal/userprofile"
)

// The console's user list and form read api_key_count (spec/clients.md
// §9.2): the API keys a user holds, counted in the user's own domain only.
func TestAPIKeyCount(t *testing.T) {
	h := identitytest.New(t, identitytest.Mount(apikey.Routes, user.Routes, userprofile.Routes))
	_, boss := h.NewDomain("keycount-other")
	h.SeedUser(h.Domain, "boss") // the same user id as the other domain's admin
	h.SeedUser(h.Domain, "kit")
	kit := h.As("kit")
	var key struct {
		APIKeyID string `json:"api_key_id"`
	}
	for range 2 {
		kit.Call("/identity/v2/api-key/create", map[string]any{"name": "kit's"}).OK(&key)
	}
	for range 3 {
		boss.Call("/identity/v2/api-key/create", map[string]any{"name": "the other boss's"}).OK(nil)
	}
	type info struct {
		UserID string `json:"user_id"`
		Count  *int   `json:"api_key_count"`
	}
	count := func(i info) int {
		t.Helper()
		if i.Count == nil {
			t.Fatalf("%s: no api_key_count in the answer", i.UserID)
		}
		return *i.Count
	}
	get := func(userID string) int {
		var u info
		h.Admin.Call("/identity/v2/user/get", map[string]any{"user_id": userID}).OK(&u)
		return count(u)
	}
	if n := get("kit"); n != 2 {
		t.Fatalf("user/get: kit holds %d keys, want 2", n)
	}
	if n := get("boss"); n != 0 {
		t.Fatalf("user/get: boss of the root domain holds %d keys, want 0 (the other domain's boss has 3)", n)
	}
	var list struct {
		Results []info `json:"results"`
	}
	h.Admin.Call("/identity/v2/user/list", map[string]any{}).OK(&list)
	want := map[string]int{"kit": 2, "boss": 0, "admin": 0}
	for _, u := range list.Results {
		if w, ok := want[u.UserID]; ok && count(u) != w {
			t.Fatalf("user/list: %s holds %d keys, want %d", u.UserID, count(u), w)
		}
		delete(want, u.UserID)
	}
	if len(want) != 0 {
		t.Fatalf("user/list misses %v", want)
	}
	var self info
	kit.Call("/identity/v2/user-profile/get", nil).OK(&self)
	if count(self) != 2 {
		t.Fatalf("user-profile/get: %d keys, want 2", count(self))
	}
	kit.Call("/identity/v2/api-key/delete", map[string]any{"api_key_id": key.APIKeyID}).OK(nil)
	if n := get("kit"); n != 1 {
		t.Fatalf("after a delete kit holds %d keys, want 1", n)
	}
}
