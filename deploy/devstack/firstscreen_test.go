package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestFirstScreen runs the devstack as make run does (info level, text
// logs) and checks what a new user sees: no line of the embedded servers
// below warn, and a banner whose login command works as printed.
func TestFirstScreen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var logs testkit.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	grpcAddr := make(chan string, 1)
	cfg := Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: dir, MongoDB: "nubes", AdminUserID: "admin", EmbeddedLogLevel: "warn",
		GRPCListening: func(a string) { grpcAddr <- a }}
	go func() { done <- Run(ctx, cfg, log, func(a string) { addr <- a }) }()
	var a string
	select {
	case a = <-addr:
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

	g := <-grpcAddr
	banner := Banner(a, g, dir, time.Second)
	for _, want := range []string{"http://" + a, "grpc://" + g, filepath.Join(dir, "bootstrap.json"), "curl -s -d @" + filepath.Join(dir, LoginFile)} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	// The printed command: curl -s -d @<login.json> <url>/identity/token/issue.
	body, err := os.ReadFile(filepath.Join(dir, LoginFile))
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(dir, LoginFile)); st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", LoginFile, st.Mode().Perm())
	}
	resp, err := http.Post("http://"+a+"/identity/token/issue", "application/x-www-form-urlencoded", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"access_token"`) {
		t.Fatalf("the banner's login command answered %d %s", resp.StatusCode, out)
	}

	// Some traffic through the store and the broker, then read the logs.
	for range 5 {
		r, err := http.Post("http://"+a+"/identity/domain/get-auth-info", "application/json", strings.NewReader(`{"name": "root"}`))
		if err == nil {
			r.Body.Close()
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		embedded := strings.Contains(line, "component=ferretdb") || strings.Contains(line, "component=nats")
		if embedded && !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			t.Errorf("an embedded server logged below warn: %s", line)
		}
	}
	if n := strings.Count(logs.String(), "\n"); n > 20 {
		t.Errorf("the first screen has %d log lines, want a short one:\n%s", n, logs.String())
	}
}
