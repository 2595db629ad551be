package testkit

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nubes-io/nubes/pkg/devinfra/flock"
)

// The store and the broker run outside the test binaries, built without
// -race: one pkg/devinfra/testinfra process (the embedded FerretDB, and
// nats-server as its child) per `go test` run, shared by every test
// binary of the run. The first binary builds it (go build's cache makes
// that a link) and starts it under a lock in a directory named after the
// run (the `go test` process, the binaries' parent); the others find its
// state file there. It stops when that process is gone, or after a while
// without a binary connected (a binary run by hand). Each binary claims
// a JetStream account of its own, emptied first, so the fixed stream and
// consumer names of pkg/events are the binary's alone, as when each had
// its NATS; each test still gets its own database (Env.Database).

// infraState is testinfra's State line.
type infraState struct {
	PID      int    `json:"pid"`
	MongoURI string `json:"mongo_uri"`
	NATSHost string `json:"nats_host"`
	Accounts int    `json:"accounts"`
	Password string `json:"password"`
	Control  string `json:"control"`
	// NATSBin is the nats-server binary (testkit.StartNATS runs it too).
	NATSBin string `json:"nats_bin"`
}

// infra is this binary's view of the shared processes.
type infra struct {
	dir     string
	state   infraState
	control net.Conn // open while this binary lives: testinfra counts it
}

// infraTimeout bounds building and starting testinfra (a cold build of
// FerretDB and nats-server on a loaded machine takes minutes).
const infraTimeout = 10 * time.Minute

// joinInfra finds the run's testinfra, or builds and starts it.
func joinInfra() (*infra, error) {
	dir := filepath.Join(os.TempDir(), "nubes-testinfra-"+runKey())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	unlock, err := flock.Lock(filepath.Join(dir, "lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	in := &infra{dir: dir}
	statePath := filepath.Join(dir, "state.json")
	if raw, err := os.ReadFile(statePath); err == nil && json.Unmarshal(raw, &in.state) == nil {
		if c, err := net.DialTimeout("tcp", in.state.Control, 5*time.Second); err == nil {
			in.control = c
			return in, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), infraTimeout)
	defer cancel()
	bins, err := buildInfra(ctx)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "testinfra.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bins.testinfra, "-dir", dir, "-nats", bins.nats, "-watch", strconv.Itoa(os.Getppid()))
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// Its own session: a test binary's end (or its kill at a timeout)
	// does not take the run's store down with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan []byte, 1)
	go func() {
		b, _ := bufio.NewReader(out).ReadBytes('\n')
		line <- b
	}()
	var raw []byte
	select {
	case raw = <-line:
	case <-ctx.Done():
	}
	var st infraState
	if err := json.Unmarshal(raw, &st); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log, _ := os.ReadFile(logf.Name())
		return nil, fmt.Errorf("testinfra did not start: %s", strings.TrimSpace(string(log)))
	}
	_ = cmd.Process.Release()
	st.NATSBin = bins.nats
	in.state = st
	if in.control, err = net.DialTimeout("tcp", st.Control, 5*time.Second); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(st)
	tmp := statePath + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, err
	}
	return in, os.Rename(tmp, statePath)
}

// runKey names the `go test` run: its process (this binary's parent)
// and, where /proc says, when it started, so a reused pid is another run.
func runKey() string {
	ppid := os.Getppid()
	key := fmt.Sprintf("%d/%d", os.Getuid(), ppid)
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", ppid)); err == nil {
		// Field 22 (starttime), counted after the command's closing ")".
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
			if f := strings.Fields(string(stat)[i+1:]); len(f) > 19 {
				key += "/" + f[19]
			}
		}
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

type infraBins struct{ testinfra, nats string }

// buildInfra builds testinfra and nats-server (without -race) into a
// directory of this checkout's own, under a lock: go build relinks only
// what changed, so a later run pays little.
func buildInfra(ctx context.Context) (infraBins, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/nubes-io/nubes/pkg").Output()
	if err != nil {
		return infraBins{}, fmt.Errorf("locate module github.com/nubes-io/nubes/pkg: %w", err)
	}
	pkgDir := strings.TrimSpace(string(out))
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d/%s", os.Getuid(), pkgDir)))
	binDir := filepath.Join(os.TempDir(), "nubes-testinfra-bin-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(binDir, 0o700); err != nil {
		return infraBins{}, err
	}
	unlock, err := flock.Lock(filepath.Join(binDir, "lock"))
	if err != nil {
		return infraBins{}, err
	}
	defer unlock()
	bins := infraBins{testinfra: filepath.Join(binDir, "testinfra"), nats: filepath.Join(binDir, "nats-server")}
	for path, pkg := range map[string]string{
		bins.testinfra: "github.com/nubes-io/nubes/pkg/devinfra/testinfra",
		bins.nats:      "github.com/nats-io/nats-server/v2",
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", path, pkg)
		cmd.Dir = pkgDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return infraBins{}, fmt.Errorf("go build %s: %v: %s", pkg, err, out)
		}
	}
	return bins, nil
}

// claimAccount locks a free JetStream account of the shared NATS server
// and empties it; release frees it (the lock goes with the process too).
func (in *infra) claimAccount(ctx context.Context) (url string, release func(), err error) {
	for {
		for i := range in.state.Accounts {
			f, err := os.OpenFile(filepath.Join(in.dir, fmt.Sprintf("account-%d.lock", i)), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				return "", nil, err
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				_ = f.Close()
				if errors.Is(err, syscall.EWOULDBLOCK) {
					continue
				}
				return "", nil, err
			}
			url := fmt.Sprintf("nats://a%d:%s@%s", i, in.state.Password, in.state.NATSHost)
			if err := emptyAccount(ctx, url); err != nil {
				_ = f.Close()
				return "", nil, fmt.Errorf("empty NATS account %d: %w", i, err)
			}
			return url, func() { _ = f.Close() }, nil
		}
		select {
		case <-ctx.Done():
			return "", nil, fmt.Errorf("no free NATS account of %d: %w", in.state.Accounts, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// emptyAccount deletes every stream (key-value buckets are streams too)
// an earlier holder of the account left.
func emptyAccount(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.Name("testkit"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	names := js.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return err
	}
	for _, n := range all {
		if err := js.DeleteStream(ctx, n); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
	}
	return nil
}

func (in *infra) close() {
	if in.control != nil {
		_ = in.control.Close()
	}
}
