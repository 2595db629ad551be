package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/nubes-io/nubes/pkg/auth"
)

// service is one Nubes binary the suite runs as containers: image
// <prefix><Name>:<tag>, network alias <Name> (shared by its replicas) and
// <Name>-<n> (one replica), HTTP on 8080.
type service struct {
	Name string
	Env  func(s *stack) map[string]string // on top of commonEnv; may be nil
}

// services is every service the suite starts, one replica each. A new
// service joins the suite by a line here (and in the Makefile's SERVICES
// and the chart's values.yaml).
var services = []service{
	// identity first: the others fetch its JWK set when they start.
	// It signs with the suite's key, so tokens the tests mint and tokens
	// identity issues verify alike.
	{Name: "identity", Env: func(s *stack) map[string]string {
		return map[string]string{"NUBES_SIGNING_KEY": string(s.signer.PEM()),
			"NUBES_ENCRYPTION_KEYS": "1:" + base64.StdEncoding.EncodeToString(make([]byte, 32)),
			"NUBES_ADMIN_USER_ID":   adminUserID, "NUBES_ADMIN_PASSWORD": adminPassword,
			"NUBES_ROOT_DOMAIN": "root", "NUBES_CONSOLE_URL": "http://console.example.com"}
	}},
	// The mailer sends to the fixture's SMTP sink. Its retry and take-over
	// delays are shortened so the fault tests finish in seconds, not minutes
	// (a send claim of a killed mailer is taken over after
	// NUBES_MAIL_CLAIM_TIMEOUT, an unacked message redelivered after
	// NUBES_MAIL_ACK_WAIT).
	{Name: "mailer", Env: func(*stack) map[string]string {
		return map[string]string{"NUBES_SMTP_HOST": "smtp", "NUBES_SMTP_PORT": "2525",
			"NUBES_SMTP_TLS": "none", "NUBES_SMTP_FROM": "Nubes <nubes@example.com>",
			"NUBES_SMTP_TIMEOUT": "5s", "NUBES_MAIL_ACK_WAIT": "10s", "NUBES_MAIL_CLAIM_TIMEOUT": "15s",
			"NUBES_MAIL_BACKOFF": "1s", "NUBES_MAIL_MAX_BACKOFF": "5s",
			// identity's key: it opens the link or code a mail carries.
			"NUBES_ENCRYPTION_KEYS": "1:" + base64.StdEncoding.EncodeToString(make([]byte, 32))}
	}},
	{Name: "board"},
	// The config service asks identity about a shared config's project.
	{Name: "config", Env: func(*stack) map[string]string {
		return map[string]string{"NUBES_SERVICE_URLS": "identity=http://identity:8080"}
	}},
	// The dashboard asks identity whether a dashboard's project exists.
	{Name: "dashboard", Env: func(*stack) map[string]string {
		return map[string]string{"NUBES_SERVICE_URLS": "identity=http://identity:8080"}
	}},
	// The secret service seals with a key of its own and reads schemas
	// from the repository.
	{Name: "secret", Env: func(*stack) map[string]string {
		return map[string]string{"NUBES_ENCRYPTION_KEYS": "s1:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("s", 32))),
			"NUBES_SERVICE_URLS": "repository=http://repository:8080"}
	}},
	// The repository reads plugin versions from the registry container
	// TestRepositoryPluginVersions starts (alias registry).
	{Name: "repository", Env: func(*stack) map[string]string {
		// The registry container is on the compose network: a private address.
		return map[string]string{"NUBES_PUBLIC_HUB_URL": "http://registry:5000", "NUBES_OUTWARD_ALLOW_PRIVATE": "true",
			"NUBES_ENCRYPTION_KEYS": "r1:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("r", 32)))}
	}},
	// Monitoring asks identity for projects and the repository for
	// plugins; its webhooks' plugin is the test plugin, which
	// TestMonitoringWebhook starts (alias test-plugin).
	// With the SYSTEM token it asks identity whether a webhook's project
	// still exists before it takes an event (issue 38).
	{Name: "monitoring", Env: func(s *stack) map[string]string {
		return map[string]string{"NUBES_SERVICE_URLS": "identity=http://identity:8080,repository=http://repository:8080",
			"NUBES_SERVICE_TOKEN":         s.serviceToken,
			"NUBES_PLUGIN_ENDPOINTS":      testWebhookPlugin + "=grpc://test-plugin:50051," + alertWebhookPlugin + "=grpc://alert-mon-plugin:50051",
			"NUBES_WEBHOOK_BASE_URL":      "http://monitoring:8080",
			"NUBES_WEBHOOK_PARSE_TIMEOUT": "20s",
			// Acknowledge links are sealed; alerts escalate every 2 s
			// (TestAlertToChannel).
			"NUBES_ENCRYPTION_KEYS": "m1:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("m", 32))),
			"NUBES_ESCALATION_TICK": "2s"}
	}},
	// Notification seals protocols' secret data with a key of its own and
	// asks the repository for plugins; its protocols' plugin is the test
	// plugin TestNotificationDispatch starts (alias noti-plugin). It
	// consumes the notification events the test publishes on NATS.
	{Name: "notification", Env: func(s *stack) map[string]string {
		return map[string]string{"NUBES_ENCRYPTION_KEYS": "n1:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("n", 32))),
			"NUBES_SERVICE_URLS":  "identity=http://identity:8080,repository=http://repository:8080",
			"NUBES_SERVICE_TOKEN": s.serviceToken,
			"NUBES_PLUGIN_ENDPOINTS": testNotificationPlugin + "=grpc://noti-plugin:50051," + reqNotificationPlugin + "=grpc://req-noti-plugin:50051," +
				alertNotificationPlugin + "=grpc://alert-noti-plugin:50051",
			"NUBES_DISPATCH_BACKOFF": "1s", "NUBES_DISPATCH_MAX_BACKOFF": "2s", "NUBES_DISPATCH_TIMEOUT": "20s"}
	}},
	// Cost analysis seals data sources' secret data with a key of its own,
	// asks the repository for plugins and identity for projects and
	// trusted accounts (with the SYSTEM token identity's system-token
	// command printed); its data sources' plugin is the test plugin
	// TestCostSync starts (alias cost-plugin), or the one
	// TestCostTrustedAccounts starts (alias cost-acct-plugin). A task
	// without a sign of life for 5 s (its worker killed) is delivered again.
	{Name: "cost-analysis", Env: func(s *stack) map[string]string {
		return map[string]string{"NUBES_ENCRYPTION_KEYS": "c1:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("c", 32))),
			"NUBES_SERVICE_URLS":     "identity=http://identity:8080,repository=http://repository:8080",
			"NUBES_SERVICE_TOKEN":    s.serviceToken,
			"NUBES_PLUGIN_ENDPOINTS": testCostPlugin + "=grpc://cost-plugin:50051," + testCostAccountsPlugin + "=grpc://cost-acct-plugin:50051",
			"NUBES_TASK_ACK_WAIT":    "5s", "NUBES_TASK_BACKOFF": "1s", "NUBES_JOB_TIMEOUT": "300s"}
	}},
	// Inventory asks the repository for plugins and identity for trusted
	// accounts and their secret data (with the SYSTEM token identity's
	// system-token command printed); its collectors' plugin is the test plugin
	// TestInventoryCollect starts (alias inv-plugin). Each replica runs
	// one task message at a time, and a task of a killed replica goes to
	// another after 5 s.
	{Name: "inventory", Env: func(s *stack) map[string]string {
		return map[string]string{"NUBES_SERVICE_URLS": "identity=http://identity:8080,repository=http://repository:8080",
			"NUBES_SERVICE_TOKEN":     s.serviceToken,
			"NUBES_PLUGIN_ENDPOINTS":  testCollectorPlugin + "=grpc://inv-plugin:50051",
			"NUBES_INVENTORY_WORKERS": "1", "NUBES_INVENTORY_ACK_WAIT": "5s", "NUBES_INVENTORY_SLOT_RETRY": "1s",
			"NUBES_INVENTORY_JOB_TIMEOUT": "300s"}
	}},
}

// The bootstrap admin identity creates on first start (identity's env above).
const (
	adminUserID   = "admin@example.com"
	adminPassword = "E2e-Admin-Password-1"
)

// drainDelay is NUBES_DRAIN_DELAY of every service: long enough for the
// suite's round-robin (polling /readyz every 100 ms) to stop sending.
const drainDelay = 3 * time.Second

// commonEnv is the configuration every service container gets.
func (s *stack) commonEnv() map[string]string {
	return map[string]string{
		"NUBES_HTTP_ADDR":       ":8080",
		"NUBES_MONGO_URI":       "mongodb://mongo:27017/",
		"NUBES_MONGO_DATABASE":  "nubes",
		"NUBES_MONGO_POOL_SIZE": "8", // SQLite serializes writes
		"NUBES_NATS_URL":        "nats://nats:4222",
		// Every service verifies tokens with the JWK set identity serves.
		// NUBES_IDENTITY_URL (revocation checks) is not common: most tests
		// mint tokens for users identity never made, which the check would
		// refuse; TestAPIKeyEverywhere starts a board replica with it.
		"NUBES_JWKS_URL":         "http://identity:8080/.well-known/jwks.json",
		"NUBES_LOG_FORMAT":       "json",
		"NUBES_DRAIN_DELAY":      drainDelay.String(),
		"NUBES_SHUTDOWN_TIMEOUT": "20s",
	}
}

// stack is everything the suite started.
type stack struct {
	run     string // id of this run, in container names
	net     *testcontainers.DockerNetwork
	mongo   testcontainers.Container // FerretDB 1.24 on SQLite, alias mongo
	nats    testcontainers.Container // nats-server with JetStream, alias nats
	fixture testcontainers.Container // SMTP sink and plugin, aliases smtp, plugin, fixture
	control string                   // the fixture's control API, from the host
	signer  *auth.Signer
	jwks    string
	// serviceToken is what `identity system-token` printed in the identity
	// container once it started: the service_token of inventory and cost
	// analysis, obtained as an operator does (docs/operations.md).
	serviceToken string
	mu           sync.Mutex
	replicas     map[string][]*replica
	seq          map[string]int
	all          []named
}

type named struct {
	name string
	c    testcontainers.Container
}

// replica is one running container of a service.
type replica struct {
	svc  string
	name string
	c    testcontainers.Container
	url  string // http://host:port from the test's side
	grpc string // host:port of its gRPC port (50051) from the test's side
}

var st *stack

func TestMain(m *testing.M) {
	if os.Getenv("NUBES_E2E") != "1" {
		fmt.Println("e2e: not run (needs a Docker engine; `make e2e` builds the images and sets NUBES_E2E=1)")
		os.Exit(0)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	s, err := startStack(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start:", err)
		if s != nil {
			s.dumpLogs(os.Stderr)
			s.stop()
		}
		os.Exit(1)
	}
	fmt.Printf("e2e: stack up in %s\n", time.Since(start).Round(time.Millisecond))
	st = s
	code := m.Run()
	if code != 0 {
		s.dumpLogs(os.Stderr)
	}
	s.stop()
	os.Exit(code)
}

func image(name string) string {
	prefix, tag := os.Getenv("NUBES_E2E_IMAGE_PREFIX"), os.Getenv("NUBES_E2E_IMAGE_TAG")
	if prefix == "" {
		prefix = "nubes/"
	}
	if tag == "" {
		tag = "e2e"
	}
	return prefix + name + ":" + tag
}

func startStack(ctx context.Context) (*stack, error) {
	// Nothing can be pulled: refuse early, and say how to build, when an
	// image is missing rather than let the engine try a registry.
	want := []string{"ferretdb", "nats", "e2e-fixture"}
	for _, svc := range services {
		want = append(want, svc.Name)
	}
	for _, n := range want {
		if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", image(n)).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("image %s missing (build it with `make e2e` or scripts/images.sh --e2e): %s", image(n), strings.TrimSpace(string(out)))
		}
	}
	signer, err := auth.GenerateSigner()
	if err != nil {
		return nil, err
	}
	s := &stack{run: randHex(4), signer: signer, jwks: string(auth.JWKSOf(signer)),
		replicas: map[string][]*replica{}, seq: map[string]int{}}
	s.net, err = network.New(ctx, network.WithLabels(map[string]string{"io.nubes.e2e": "1"}))
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}

	// The three dependencies start together; the services after them.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Go(func() {
		s.mongo, errs[0] = s.start(ctx, "ferretdb", "mongo", []string{"mongo"}, testcontainers.ContainerRequest{
			Env: map[string]string{
				"FERRETDB_HANDLER":     "sqlite",
				"FERRETDB_SQLITE_URL":  "file:/data/",
				"FERRETDB_STATE_DIR":   "/data",
				"FERRETDB_LISTEN_ADDR": ":27017",
				"FERRETDB_DEBUG_ADDR":  ":8088",
				"FERRETDB_TELEMETRY":   "disable",
				"FERRETDB_LOG_LEVEL":   "warn",
			},
			ExposedPorts: []string{"8088/tcp"},
			WaitingFor:   wait.ForHTTP("/debug/readyz").WithPort("8088/tcp").WithStartupTimeout(time.Minute),
		})
	})
	wg.Go(func() {
		s.nats, errs[1] = s.start(ctx, "nats", "nats", []string{"nats"}, testcontainers.ContainerRequest{
			Cmd: []string{"--jetstream", "--store_dir", "/data", "--port", "4222", "--http_port", "8222"},
			// 4222 for tests that publish as a producer would (notification).
			ExposedPorts: []string{"8222/tcp", "4222/tcp"},
			WaitingFor:   wait.ForHTTP("/healthz").WithPort("8222/tcp").WithStartupTimeout(time.Minute),
		})
	})
	wg.Go(func() {
		s.fixture, errs[2] = s.start(ctx, "e2e-fixture", "fixture", []string{"fixture", "smtp", "plugin"}, testcontainers.ContainerRequest{
			ExposedPorts: []string{"8025/tcp", "2525/tcp", "8000/tcp"},
			WaitingFor:   wait.ForHTTP("/healthz").WithPort("8025/tcp").WithStartupTimeout(time.Minute),
		})
	})
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return s, err
		}
	}
	if s.control, err = endpoint(ctx, s.fixture, "8025/tcp"); err != nil {
		return s, err
	}
	for _, svc := range services {
		r, err := s.startReplica(ctx, svc.Name)
		if err != nil {
			return s, err
		}
		if svc.Name == "identity" {
			if s.serviceToken, err = systemToken(ctx, r); err != nil {
				return s, err
			}
		}
	}
	return s, nil
}

// systemToken runs `/service system-token` in an identity container.
func systemToken(ctx context.Context, identity *replica) (string, error) {
	code, out, err := identity.c.Exec(ctx, []string{"/service", "system-token"}, tcexec.Multiplexed())
	if err != nil {
		return "", fmt.Errorf("identity system-token: %w", err)
	}
	b, _ := io.ReadAll(out)
	tok := strings.TrimSpace(string(b))
	if code != 0 || tok == "" || strings.ContainsAny(tok, " \n") {
		return "", fmt.Errorf("identity system-token exited %d: %q", code, b)
	}
	return tok, nil
}

// start runs one container of the suite on its network.
func (s *stack) start(ctx context.Context, img, name string, aliases []string, req testcontainers.ContainerRequest) (testcontainers.Container, error) {
	req.Image = image(img)
	req.Name = "nubes-e2e-" + s.run + "-" + name
	req.Networks = []string{s.net.Name}
	req.NetworkAliases = map[string][]string{s.net.Name: aliases}
	req.Labels = map[string]string{"io.nubes.e2e": "1"}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	if c != nil {
		s.mu.Lock()
		s.all = append(s.all, named{name, c})
		s.mu.Unlock()
	}
	if err != nil {
		return c, fmt.Errorf("start %s: %w", name, err)
	}
	return c, nil
}

func (s *stack) service(name string) (service, bool) {
	for _, svc := range services {
		if svc.Name == name {
			return svc, true
		}
	}
	return service{}, false
}

// startReplica starts one more container of a service and waits until its
// /readyz answers 200.
func (s *stack) startReplica(ctx context.Context, name string) (*replica, error) {
	return s.startReplicaEnv(ctx, name, nil)
}

// startReplicaEnv is startReplica with more environment for this replica.
func (s *stack) startReplicaEnv(ctx context.Context, name string, extra map[string]string) (*replica, error) {
	svc, ok := s.service(name)
	if !ok {
		return nil, fmt.Errorf("no service %s in the suite's list", name)
	}
	s.mu.Lock()
	s.seq[name]++
	rname := fmt.Sprintf("%s-%d", name, s.seq[name])
	s.mu.Unlock()
	env := s.commonEnv()
	if svc.Env != nil {
		maps.Copy(env, svc.Env(s))
	}
	maps.Copy(env, extra)
	c, err := s.start(ctx, name, rname, []string{name, rname}, testcontainers.ContainerRequest{
		Env:          env,
		ExposedPorts: []string{"8080/tcp", "50051/tcp"},
		WaitingFor:   wait.ForHTTP("/readyz").WithPort("8080/tcp").WithStartupTimeout(90 * time.Second),
		// What the Helm chart's security contexts impose.
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.ReadonlyRootfs = true
			hc.CapDrop = []string{"ALL"}
			hc.SecurityOpt = []string{"no-new-privileges:true"}
			hc.Tmpfs = map[string]string{"/tmp": "rw,size=64m"}
		},
	})
	if err != nil {
		return nil, err
	}
	url, err := endpoint(ctx, c, "8080/tcp")
	if err != nil {
		return nil, err
	}
	g, err := endpoint(ctx, c, "50051/tcp")
	if err != nil {
		return nil, err
	}
	r := &replica{svc: name, name: rname, c: c, url: url, grpc: strings.TrimPrefix(g, "http://")}
	s.mu.Lock()
	s.replicas[name] = append(s.replicas[name], r)
	s.mu.Unlock()
	return r, nil
}

// extraReplica starts one more replica of a service for one test; it is
// removed when the test ends.
func (s *stack) extraReplica(t *testing.T, name string) *replica {
	t.Helper()
	return s.extraReplicaEnv(t, name, nil)
}

// extraReplicaEnv is extraReplica with more environment for the replica.
func (s *stack) extraReplicaEnv(t *testing.T, name string, extra map[string]string) *replica {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := s.startReplicaEnv(ctx, name, extra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.removeReplica(r) })
	return r
}

func (s *stack) removeReplica(r *replica) {
	s.mu.Lock()
	s.replicas[r.svc] = slices.DeleteFunc(s.replicas[r.svc], func(x *replica) bool { return x == r })
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = r.c.Terminate(ctx)
}

// first is the replica every single-replica test talks to.
func (s *stack) first(t *testing.T, name string) *replica {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.replicas[name]) == 0 {
		t.Fatalf("no running replica of %s", name)
	}
	return s.replicas[name][0]
}

// has reports whether the suite runs a service.
func (s *stack) has(name string) bool {
	_, ok := s.service(name)
	return ok
}

// needs skips a test written for services the suite does not run yet.
func needs(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if !st.has(n) {
			t.Skipf("needs %s service", n)
		}
	}
}

func endpoint(ctx context.Context, c testcontainers.Container, port string) (string, error) {
	host, err := c.Host(ctx)
	if err != nil {
		return "", err
	}
	p, err := c.MappedPort(ctx, port)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("http://%s:%s", host, p.Port()), nil
}

// dumpLogs writes the tail of every container's log, for a failed run.
func (s *stack) dumpLogs(w io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.mu.Lock()
	all := slices.Clone(s.all)
	s.mu.Unlock()
	for _, n := range all {
		rc, err := n.c.Logs(ctx)
		if err != nil {
			fmt.Fprintf(w, "--- %s: no logs: %v\n", n.name, err)
			continue
		}
		var lines []string
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		_ = rc.Close()
		fmt.Fprintf(w, "--- %s (last %d of %d lines)\n", n.name, min(80, len(lines)), len(lines))
		for _, l := range lines[max(0, len(lines)-80):] {
			fmt.Fprintln(w, l)
		}
	}
}

func (s *stack) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.mu.Lock()
	all := slices.Clone(s.all)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range all {
		wg.Go(func() { _ = n.c.Terminate(ctx) })
	}
	wg.Wait()
	if s.net != nil {
		_ = s.net.Remove(ctx)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
