package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestMain hands the tests the run's FerretDB and NATS (pkg/testkit),
// outside the race build; TestFirstScreen and TestNoSecretInLogs still
// start the embedded ones, whose logs they check. The stack the tests
// share (sharedStack) stops at the end.
func TestMain(m *testing.M) { testkit.Main(m, stopShared) }

// startBound bounds a stack's start: the tests start stacks side by side
// (t.Parallel), some on embedded servers built with -race, on a machine
// other runs load too.
const startBound = 3 * time.Minute

// waitBound ends a wait for something that must come (a plugin call, a
// mail): only so that one never met fails the test; far above an idle
// run, with stacks side by side on a loaded machine.
const waitBound = time.Minute

// shared is one stack for the tests that read what any stack serves (its
// routes, documents, roles, services) or act only in a domain of their
// own (sharedStack): the ten services start once per test binary, not
// once per test. A test that restarts a stack, reads its data directory
// or logs, or needs plugins or gRPC configured, starts its own.
var shared struct {
	once  sync.Once
	base  string
	boot  Bootstrap // the root domain's
	built []*app.Service
	err   error
	stop  func()
	seq   atomic.Int64
}

// sharedStack is the binary's shared stack and a domain of t's own on it,
// with its own admin (domain/create with the root domain's SYSTEM token):
// boot is that domain's, as bootstrap.json is the root domain's, and its
// SystemToken the root domain's.
func sharedStack(t *testing.T) (string, Bootstrap) {
	t.Helper()
	shared.once.Do(startShared)
	if shared.err != nil {
		t.Fatalf("shared devstack: %v", shared.err)
	}
	n := shared.seq.Add(1)
	// A name of at most 40 characters with room for a test's suffix.
	name := strings.ToLower(strings.TrimPrefix(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()), "Test"))
	boot := Bootstrap{DomainName: fmt.Sprintf("%.20s-%d", name, n), AdminUserID: "admin",
		AdminPassword: fmt.Sprintf("Shared-Passw0rd-%d", n), SystemToken: shared.boot.SystemToken}
	status, b := post(t, shared.base+"/identity/domain/create", shared.boot.SystemToken, `{"name": `+strconv.Quote(boot.DomainName)+
		`, "admin": {"user_id": "admin", "password": `+strconv.Quote(boot.AdminPassword)+`, "email": "admin@`+boot.DomainName+`.example.com"}}`)
	if status != http.StatusOK {
		t.Fatalf("shared devstack: domain/create %s: %d %v", boot.DomainName, status, b)
	}
	boot.DomainID = b["domain_id"].(string)
	return shared.base, boot
}

// startShared starts the shared stack on a database and a NATS account of
// the run's servers held until stopShared.
func startShared() {
	env := testkit.Get()
	dir, err := os.MkdirTemp("", "devstack-shared-")
	if err != nil {
		shared.err = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	natsURL, release, err := env.Account(ctx)
	cancel()
	if err != nil {
		shared.err = err
		_ = os.RemoveAll(dir)
		return
	}
	db := env.Client.Database(fmt.Sprintf("devstack_shared_%d", os.Getpid()))
	cfg := Config{HTTPAddr: "127.0.0.1:0", DataDir: dir, MongoURI: env.Mongo.URI, MongoDB: db.Name(), NATSURL: natsURL,
		Built: func(s []*app.Service) { shared.built = s }}
	runCtx, stop := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, cfg, slog.New(slog.DiscardHandler), func(a string) { addr <- a }) }()
	shared.stop = func() {
		stop()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "shared devstack stopped with", err)
		}
		_ = db.Drop(context.Background())
		release()
		_ = os.RemoveAll(dir)
	}
	select {
	case a := <-addr:
		shared.base = "http://" + a
		shared.boot, shared.err = readBootstrap(filepath.Join(dir, "bootstrap.json"))
	case err := <-done:
		shared.err = fmt.Errorf("did not start: %w", err)
		done <- nil
	case <-time.After(startBound):
		shared.err = fmt.Errorf("did not start in %v", startBound)
	}
}

func stopShared() {
	if shared.stop != nil {
		shared.stop()
	}
}

// stores are the database and NATS account of each data directory a test
// started a stack on, so a stack started again on it (TestDevstack) finds
// its data as the embedded servers under the directory kept it.
var stores = struct {
	sync.Mutex
	of map[string][2]string
}{of: map[string][2]string{}}

// sharedStores points cfg at a database and a NATS account of the run's
// servers for t (its own: the stack's streams have fixed names), the same
// ones for the same data directory.
func sharedStores(t *testing.T, cfg *Config) {
	t.Helper()
	if cfg.MongoURI != "" || cfg.NATSURL != "" {
		return
	}
	stores.Lock()
	defer stores.Unlock()
	s, ok := stores.of[cfg.DataDir]
	if !ok {
		env := testkit.Get()
		s = [2]string{env.Database(t).Name(), env.OwnNATS(t)}
		stores.of[cfg.DataDir] = s
		t.Cleanup(func() { stores.Lock(); delete(stores.of, cfg.DataDir); stores.Unlock() })
	}
	cfg.MongoURI, cfg.MongoDB, cfg.NATSURL = testkit.Get().Mongo.URI, s[0], s[1]
}

// start runs the devstack on a free port with data in dir and returns its
// base URL and a stop function that waits for a clean shutdown.
func start(t *testing.T, dir string) (string, func()) {
	t.Helper()
	return startWith(t, Config{DataDir: dir})
}

// startWith is start with cfg (its address, database name and data
// directory set when empty).
func startWith(t *testing.T, cfg Config) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	if cfg.MongoDB == "" {
		cfg.MongoDB = "nubes"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	sharedStores(t, &cfg)
	go func() { done <- Run(ctx, cfg, slog.New(slog.DiscardHandler), func(a string) { addr <- a }) }()
	select {
	case a := <-addr:
		return "http://" + a, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("devstack stopped with %v", err)
			}
		}
	case err := <-done:
		t.Fatalf("devstack did not start: %v", err)
	case <-time.After(startBound):
		t.Fatalf("devstack did not start in %v", startBound)
	}
	return "", nil
}

func post(t *testing.T, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func loadBootstrap(t *testing.T, dir string) (Bootstrap, string) {
	t.Helper()
	path := filepath.Join(dir, "bootstrap.json")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("bootstrap.json mode %v, want 0600", st.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	var b Bootstrap
	if err := json.Unmarshal(raw, &b); err != nil || b.DomainID == "" || b.SystemToken == "" || b.DomainName == "" ||
		b.AdminUserID == "" || b.AdminPassword == "" {
		t.Fatalf("bootstrap.json = %s (%v)", raw, err)
	}
	return b, string(raw)
}

// TestDevstack starts the stack twice on the same data: the first start
// bootstraps, serves health, readiness, the merged OpenAPI document and
// every operation of the services it runs; the second changes nothing and
// still has the data.
func TestDevstack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, stop := start(t, dir)
	boot, raw := loadBootstrap(t, dir)

	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(base + p)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi = %q", doc.OpenAPI)
	}

	// Every listed operation of every service the devstack runs is routed
	// and documented; services not built yet are reported, not hidden.
	running := map[string]bool{}
	for _, name := range serviceNames {
		running[name] = true
	}
	missing := map[string]int{}
	for _, path := range listedOperations(t) {
		svc := strings.Split(path, "/")[1]
		if !running[svc] {
			missing[svc]++
			continue
		}
		status, body := post(t, base+path, boot.SystemToken, `{}`)
		if status == http.StatusNotFound && body["detail"].(map[string]any)["code"] == "ERROR_UNSUPPORTED_API" {
			t.Errorf("%s is not routed", path)
		}
		if _, ok := doc.Paths[path]; !ok {
			t.Errorf("%s is missing from /openapi.json", path)
		}
	}
	t.Logf("operations of services not built yet: %v", missing)

	// The admin of bootstrap.json logs in the upstream way and gets a
	// domain-scope token.
	status, b := post(t, base+"/identity/token/issue", "", `{"credentials": {"user_id": "`+boot.AdminUserID+`", "password": "`+boot.AdminPassword+`"}, "auth_type": "LOCAL", "domain_id": "`+boot.DomainID+`"}`)
	if status != http.StatusOK || b["refresh_token"] == nil {
		t.Fatalf("admin login: %d %v", status, b)
	}
	status, b = post(t, base+"/identity/token/grant", "", `{"grant_type": "REFRESH_TOKEN", "token": "`+b["refresh_token"].(string)+`", "scope": "DOMAIN"}`)
	if status != http.StatusOK || b["role_type"] != "DOMAIN_ADMIN" {
		t.Fatalf("admin grant: %d %v", status, b)
	}

	status, b = post(t, base+"/board/v1/board/create", boot.SystemToken, `{"name": "Kept", "categories": ["a"]}`)
	if status != http.StatusOK {
		t.Fatalf("board create: %d %v", status, b)
	}
	boardID := b["board_id"].(string)
	stop()

	base, stop = start(t, dir)
	defer stop()
	if _, again := loadBootstrap(t, dir); again != raw {
		t.Fatalf("second start changed bootstrap.json:\n%s\n%s", raw, again)
	}
	status, b = post(t, base+"/board/board/get", boot.SystemToken, `{"board_id": "`+boardID+`"}`)
	if status != http.StatusOK || b["name"] != "Kept" {
		t.Fatalf("board after restart: %d %v", status, b)
	}
}

// listedOperations reads the paths of docs/spec/operations.tsv.
func listedOperations(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../../docs/spec/operations.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var paths []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		path, _, _ := strings.Cut(sc.Text(), "\t")
		if strings.HasPrefix(path, "/") {
			paths = append(paths, path)
		}
	}
	if len(paths) < 190 {
		t.Fatalf("operations.tsv lists %d operations", len(paths))
	}
	return paths
}
