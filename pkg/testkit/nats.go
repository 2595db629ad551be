package testkit

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
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
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// StartNATS starts a NATS server for t, stopped at the end of the test.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	n := &NATS{t: t, dir: filepath.Join(t.TempDir(), "nats"), port: freePort(t)}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// URL is where clients connect, across restarts.
func (n *NATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// Start starts the server again (a no-op while it runs) and waits until
// it takes connections.
func (n *NATS) Start() {
	n.t.Helper()
	if n.cmd != nil {
		return
	}
	cmd := exec.Command(Get().infra.state.NATSBin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", n.dir)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(n.done)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
	for deadline := time.Now().Add(60 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-n.done:
			n.cmd = nil
			n.t.Fatalf("nats-server on %s exited at its start", addr)
		default:
		}
		if time.Now().After(deadline) {
			n.Stop()
			n.t.Fatalf("nats-server on %s not reachable: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
