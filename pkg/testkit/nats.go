package testkit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// NATS is a test's own NATS server (the run's nats-server binary, a
// process of its own) on a fixed port and data directory, so the test
// can stop it and start it again where its clients expect it (outages,
// restarts). Tests that count what is in the streams (fixed names) each
// need one; the shared Env.NATS is for the others.
type NATS struct {
	t    testing.TB
	dir  string
	name string // the server's name, to know it is this one that answers
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

var natsSeq atomic.Int64

// StartNATS starts a NATS server for t, stopped at the end of the test.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	n := &NATS{t: t, dir: filepath.Join(t.TempDir(), "nats"), name: fmt.Sprintf("testkit-%d-%d", os.Getpid(), natsSeq.Add(1))}
	// A port found free may be taken before the server binds it (by
	// another test's server, side by side): then this one exits and
	// another port is tried.
	for try := 1; ; try++ {
		n.port = freePort(t)
		if n.start() {
			break
		}
		if try == 5 {
			t.Fatalf("nats-server %s: no port it could bind in %d tries", n.name, try)
		}
	}
	t.Cleanup(n.Stop)
	return n
}

// URL is where clients connect, across restarts.
func (n *NATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// Start starts the server again (a no-op while it runs) and waits until
// it takes connections.
func (n *NATS) Start() {
	n.t.Helper()
	if !n.start() {
		n.t.Fatalf("nats-server %s on port %d exited at its start", n.name, n.port)
	}
}

// start starts the server and waits until it answers on its port; false
// when it exits first (its port taken).
func (n *NATS) start() bool {
	n.t.Helper()
	if n.cmd != nil {
		return true
	}
	cmd := exec.Command(Get().infra.state.NATSBin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-n", n.name, "-js", "-sd", n.dir)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(n.done)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
	for deadline := time.Now().Add(60 * time.Second); ; {
		// The server that answers must be this one: another on the port
		// would serve this test's clients until its own test ends.
		if n.answers(addr) {
			return true
		}
		select {
		case <-n.done:
			n.cmd = nil
			return false
		default:
		}
		if time.Now().After(deadline) {
			n.Stop()
			n.t.Fatalf("nats-server %s on %s not reachable", n.name, addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// answers reports whether the server on addr is n: its first line, the
// INFO, carries its name.
func (n *NATS) answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false
	}
	var info struct {
		Name string `json:"server_name"`
	}
	raw, ok := strings.CutPrefix(line, "INFO ")
	return ok && json.Unmarshal([]byte(raw), &info) == nil && info.Name == n.name
}

// Stop stops the server and waits for it, keeping its data for the next
// Start.
func (n *NATS) Stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
	n.cmd = nil
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
