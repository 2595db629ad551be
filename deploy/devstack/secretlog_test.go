package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestNoSecretInLogs runs the services' flows that handle secrets on the
// whole stack, logging at debug into a buffer, and fails on any secret
// of them in the output: passwords at login, the tokens issued, an
// invitation's link token (read from the mail written), a plugin's
// registry password (through a registry call that fails), a user
// secret's data, a webhook ingest URL's key.
func TestNoSecretInLogs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var logs testkit.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	cfg := Config{HTTPAddr: "127.0.0.1:0", DataDir: dir, MongoDB: "nubes", EmbeddedLogLevel: "warn"}
	go func() {
		done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), func(a string) { addr <- a })
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("devstack did not start: %v", err)
	case <-time.After(startBound):
		t.Fatalf("devstack did not start in %v", startBound)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("devstack stopped with %v", err)
		}
	}()
	boot, _ := loadBootstrap(t, dir)
	secrets := map[string]string{"system token": boot.SystemToken}
	ok := func(what, url, token, body string) map[string]any {
		t.Helper()
		status, b := post(t, url, token, body)
		if status != 200 {
			t.Fatalf("%s: %d %v", what, status, b)
		}
		return b
	}

	// Login: a user with a password, its tokens.
	const password = "Us3r-Passw0rd-xyz!"
	secrets["user password"] = password
	ok("user create", base+"/identity/v2/user/create", boot.SystemToken,
		`{"user_id": "logan", "auth_type": "LOCAL", "password": "`+password+`", "email": "logan@example.com"}`)
	b := ok("login", base+"/identity/token/issue", "",
		`{"credentials": {"user_id": "logan", "password": "`+password+`"}, "auth_type": "LOCAL", "domain_id": "`+boot.DomainID+`"}`)
	secrets["refresh token"] = b["refresh_token"].(string)
	b = ok("grant", base+"/identity/token/grant", "", `{"grant_type": "REFRESH_TOKEN", "token": "`+secrets["refresh token"]+`", "scope": "USER"}`)
	secrets["access token"] = b["access_token"].(string)
	post(t, base+"/identity/token/issue", "", `{"credentials": {"user_id": "logan", "password": "wrong-`+password+`"}, "auth_type": "LOCAL", "domain_id": "`+boot.DomainID+`"}`)
	secrets["wrong password"] = "wrong-" + password

	// A user secret: its data (before the reset below, which ends logan's sessions).
	const secretData = "s3cret-data-value-42"
	secrets["secret data"] = secretData
	b = ok("secret create", base+"/secret/v1/user-secret/create", secrets["access token"],
		`{"name": "mine", "data": {"password": "`+secretData+`"}}`)
	ok("secret get_data", base+"/secret/v1/user-secret/get-data", boot.SystemToken, `{"user_secret_id": "`+b["user_secret_id"].(string)+`", "domain_id": "`+boot.DomainID+`"}`)

	// A general service account's keys (issue 36): stored in the secret
	// service, read by get-data, refused by a schema, probed by a filter.
	const accountKey, badKey = "acc0unt-secret-key-77", "r3fused-secret-key-88"
	secrets["service account key"], secrets["refused key"] = accountKey, badKey
	adminPair := ok("admin login", base+"/identity/token/issue", "", `{"credentials": {"user_id": "`+boot.AdminUserID+`", "password": "`+boot.AdminPassword+`"},
		"auth_type": "LOCAL", "domain_id": "`+boot.DomainID+`"}`)
	domainTok := ok("admin grant", base+"/identity/token/grant", "", `{"grant_type": "REFRESH_TOKEN", "token": "`+adminPair["refresh_token"].(string)+`", "scope": "DOMAIN"}`)["access_token"].(string)
	wsID := ok("workspace", base+"/identity/workspace/create", domainTok, `{"name": "Logs"}`)["workspace_id"].(string)
	wsTok := ok("admin grant ws", base+"/identity/token/grant", "", `{"grant_type": "REFRESH_TOKEN", "token": "`+adminPair["refresh_token"].(string)+`", "scope": "WORKSPACE", "workspace_id": "`+wsID+`"}`)["access_token"].(string)
	prID := ok("project", base+"/identity/project/create", wsTok, `{"name": "Logs", "project_type": "PUBLIC"}`)["project_id"].(string)
	sa := ok("service account", base+"/identity/service-account/create", wsTok, `{"provider": "aws", "name": "Logged", "data": {"account_id": "1"},
		"secret_schema_id": "aws-secret-access-key", "secret_data": {"aws_access_key_id": "AKIALOGS", "aws_secret_access_key": "`+accountKey+`"}, "project_id": "`+prID+`"}`)
	post(t, base+"/identity/service-account/create", wsTok, `{"provider": "aws", "name": "Refused", "data": {"account_id": "1"},
		"secret_schema_id": "aws-secret-access-key", "secret_data": {"aws_access_key_id": "`+badKey+`"}, "project_id": "`+prID+`"}`)
	ok("secret get-data", base+"/secret/secret/get-data", boot.SystemToken, `{"secret_id": "`+sa["secret_id"].(string)+`", "domain_id": "`+boot.DomainID+`"}`)
	post(t, base+"/secret/secret/list", wsTok, `{"query": {"filter": [{"k": "data.aws_secret_access_key", "v": "`+accountKey+`", "o": "eq"}]}}`)

	// Invite and reset: the links' tokens, read from the mails written.
	ok("invite", base+"/identity/v2/user/create", boot.SystemToken,
		`{"user_id": "ivy", "auth_type": "LOCAL", "reset_password": true, "email": "ivy@example.com"}`)
	ok("reset", base+"/identity/v2/user/update", boot.SystemToken, `{"user_id": "logan", "reset_password": true}`)
	tokens := mailedTokens(t, filepath.Join(dir, "mail"), 2)
	for i, tok := range tokens {
		secrets["mailed link token "+string(rune('a'+i))] = tok
	}

	// A plugin with registry credentials, whose registry cannot be
	// reached: the failure is logged, the password must not be.
	const regPassword = "r3gistry-Passw0rd"
	secrets["registry password"] = regPassword
	ok("plugin register", base+"/repository/v1/plugin/register", boot.SystemToken,
		`{"name": "p", "resource_type": "inventory.Collector", "image": "team/p", "registry_type": "PRIVATE_REGISTRY",
		  "registry_url": "http://127.0.0.1:1", "registry_config": {"username": "u", "password": "`+regPassword+`"}}`)
	post(t, base+"/repository/v1/plugin/get-versions", boot.SystemToken, `{"plugin_id": "p"}`)
	post(t, base+"/repository/v1/plugin/list", boot.SystemToken,
		`{"query": {"filter": [{"k": "registry_config.password", "v": "`+regPassword+`", "o": "eq"}]}}`)

	// A webhook ingest URL: its key is in the path.
	const hookKey = "0123456789abcdef0123456789abcdef"
	secrets["webhook key"] = hookKey
	post(t, base+"/monitoring/v1/webhook/webhook-0123456789ab/"+hookKey+"/events", "", `{"alert": 1}`)

	// Every request logs before it answers; the asynchronous lines (the
	// consumers of the events above, the outbox) have no marker that
	// proves they all came: a grace for them, which can only make the test
	// miss a late line, never fail.
	time.Sleep(200 * time.Millisecond)
	out := logs.String()
	if !strings.Contains(out, "request refused") {
		t.Fatalf("the capture saw no request log:\n%.2000s", out)
	}
	for what, s := range secrets {
		if s != "" && strings.Contains(out, s) {
			i := strings.Index(out, s)
			t.Errorf("the %s is in the logs: …%s…", what, out[max(0, i-300):min(len(out), i+len(s)+50)])
		}
	}
}

var linkToken = regexp.MustCompile(`sso_access_token=([A-Za-z0-9._=-]+)`)

// mailedTokens waits for n mails with a link in dir and returns their
// tokens.
func mailedTokens(t *testing.T, dir string, n int) []string {
	t.Helper()
	var out []string
	if testkit.Within(waitBound, func() bool {
		out = nil
		files, _ := filepath.Glob(filepath.Join(dir, "*.eml"))
		for _, f := range files {
			raw, _ := os.ReadFile(f)
			text := strings.ReplaceAll(strings.ReplaceAll(string(raw), "=\r\n", ""), "=\n", "") // quoted-printable soft breaks
			if m := linkToken.FindStringSubmatch(text); m != nil {
				out = append(out, m[1])
			}
		}
		return len(out) >= n
	}) != nil {
		t.Fatalf("%d mails with a link in %s after %v, want %d", len(out), dir, waitBound, n)
	}
	return out
}
