package testkit

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/nubes-io/nubes/pkg/devinfra"
)

// NATS is a test's own embedded NATS server on a fixed port and data
// directory, so the test can stop it and start it again where its clients
// expect it (outages, restarts). Tests that count what is in the streams
// (fixed names) each need one; the shared Env.NATS is for the others.
type NATS struct {
	t    testing.TB
	dir  string
	port int
	srv  *devinfra.NATS
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

// Start starts the server again (a no-op while it runs).
func (n *NATS) Start() {
	n.t.Helper()
	if n.srv != nil {
		return
	}
	s, err := devinfra.StartNATS(n.dir, "127.0.0.1", n.port)
	if err != nil {
		n.t.Fatal(err)
	}
	n.srv = s
}

// Stop stops the server, keeping its data for the next Start.
func (n *NATS) Stop() {
	if n.srv != nil {
		n.srv.Stop()
		n.srv = nil
	}
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
