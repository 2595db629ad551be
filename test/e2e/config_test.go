package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/auth"
)

// TestConfigAcrossUsers drives the config service's container: a user's
// configs are its own, a set is an upsert, public configs are read with no
// credential, and another domain reaches nothing.
func TestConfigAcrossUsers(t *testing.T) {
	cfg := direct(st.first(t, "config").url)
	domA, domB := "domain-"+randHex(6), "domain-"+randHex(6)
	alice := as(t, cfg, auth.Principal{DomainID: domA, UserID: "alice@example.com", Role: auth.User}, time.Hour)
	bob := as(t, cfg, auth.Principal{DomainID: domA, UserID: "bob@example.com", Role: auth.User}, time.Hour)
	adminA, adminB := domainAdmin(t, cfg, domA), domainAdmin(t, cfg, domB)
	anon := &caller{t: t, to: cfg}

	var got struct {
		Name   string         `json:"name"`
		Data   map[string]any `json:"data"`
		UserID string         `json:"user_id"`
	}
	for _, ws := range []string{"workspace-1", "workspace-2"} {
		alice.call("/config/user-config/set", map[string]any{"name": "console:last-accessed-workspace", "data": map[string]any{"workspace_id": ws}}).OK(&got)
	}
	alice.call("/config/user-config/get", map[string]any{"name": "console:last-accessed-workspace"}).OK(&got)
	if got.Data["workspace_id"] != "workspace-2" || got.UserID != "alice@example.com" {
		t.Fatalf("user-config/get = %+v", got)
	}
	bob.call("/config/user-config/get", map[string]any{"name": "console:last-accessed-workspace"}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	alice.call("/config/user-config/create", map[string]any{"name": "console:last-accessed-workspace", "data": map[string]any{}}).Fails(http.StatusConflict, "ERROR_SAVE_UNIQUE_VALUES")
	anon.call("/config/user-config/list", map[string]any{}).Fails(http.StatusUnauthorized, "ERROR_AUTHENTICATE_FAILURE")

	adminA.call("/config/public-config/set", map[string]any{"name": "console:ext-menu", "data": map[string]any{"anomaly_detection": map[string]any{"enabled": true}}}).OK(nil)
	anon.call("/config/public-config/get", map[string]any{"name": "console:ext-menu", "domain_id": domA}).OK(&got)
	anon.call("/config/public-config/get", map[string]any{"name": "console:ext-menu", "domain_id": domB}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	adminB.call("/config/domain-config/get", map[string]any{"name": "settings"}).Fails(http.StatusNotFound, "ERROR_NOT_FOUND")
	alice.call("/config/domain-config/get", map[string]any{"name": "settings"}).Fails(http.StatusForbidden, "ERROR_PERMISSION_DENIED")
}
