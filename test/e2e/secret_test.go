package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/auth"
)

// TestUserSecretReadBackBySystemOnly: the root admin, logged in through
// identity, keeps a secret in the secret container; its data comes back
// only to a service credential's get_data (not a person's SYSTEM grant), never in get or list, never to its
// owner's get_data, never to another user, and never in the service's log.
func TestUserSecretReadBackBySystemOnly(t *testing.T) {
	needs(t, "secret")
	r := st.first(t, "secret")
	sec := direct(r.url)
	owner := rootAdmin(t, identityAt(t)).with(sec)
	// A person's SYSTEM grant is not a service credential (issue 21).
	person := rootSystem(t, identityAt(t)).with(sec)
	system := &caller{t: t, to: sec, token: st.serviceToken}
	const p = "/secret/v1/user-secret/"
	plain := "e2e-secret-" + randHex(8)

	var s struct {
		UserSecretID string `json:"user_secret_id"`
		DomainID     string `json:"domain_id"`
		UserID       string `json:"user_id"`
	}
	created := owner.call(p+"create", map[string]any{"name": "db", "data": map[string]any{"password": plain}, "tags": map[string]any{"env": "e2e"}}).OK(&s)
	if !strings.HasPrefix(s.UserSecretID, "user-secret-") || s.DomainID != owner.domain || s.UserID != adminUserID {
		t.Fatalf("create = %s", created.body)
	}
	for _, res := range []result{
		created,
		owner.call(p+"get", map[string]any{"user_secret_id": s.UserSecretID}).OK(nil),
		owner.call(p+"list", map[string]any{}).OK(nil),
	} {
		if strings.Contains(string(res.body), plain) {
			t.Fatalf("%s answers the data: %s", res.path, res.body)
		}
	}
	ref := map[string]any{"user_secret_id": s.UserSecretID, "domain_id": s.DomainID}
	owner.call(p+"get-data", ref).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
	other := as(t, sec, auth.Principal{DomainID: s.DomainID, UserID: "other-" + randHex(3), Role: auth.DomainAdmin}, time.Hour)
	other.call(p+"get", map[string]any{"user_secret_id": s.UserSecretID}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")

	var d struct {
		Encrypted      bool           `json:"encrypted"`
		EncryptOptions map[string]any `json:"encrypt_options"`
		Data           map[string]any `json:"data"`
	}
	person.call(p+"get-data", ref).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
	system.call(p+"get-data", ref).OK(&d)
	if d.Encrypted || d.EncryptOptions == nil || d.Data["password"] != plain {
		t.Fatalf("get_data = %+v", d)
	}
	// The engine delivers container logs with a delay: wait for the read.
	var log string
	eventually(t, 15*time.Second, "the get_data read in the secret service's log", func() bool {
		log = containerLog(r.c)
		return strings.Contains(log, "user secret data read")
	})
	if strings.Contains(log, plain) {
		t.Fatalf("the secret service's log shows the data: %s", log)
	}
	owner.call(p+"delete", map[string]any{"user_secret_id": s.UserSecretID}).OK(nil)
	system.call(p+"get-data", ref).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
}
