// Command testinfra serves the store and the broker of one `go test` run
// as processes of their own, built without -race, for every test binary
// of the run (pkg/testkit starts it and hands its addresses on):
//
//   - the embedded FerretDB of devinfra.StartMongo (SQLite, the
//     serialwrites proxy, the _id indexer), in this process, the store
//     the tests used in-process before;
//   - nats-server (the upstream binary, built from the module cache) as
//     a child, with -accounts JetStream accounts: a test binary claims
//     one (pkg/testkit), so the fixed stream and consumer names of
//     pkg/events never meet another binary's.
//
// It prints one JSON line (State) on stdout when both are ready, and
// stops them and removes its data when the process -watch (the `go test`
// command) is gone (then -dir too), or when no test binary has been
// connected to its control port for -idle.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nubes-io/nubes/pkg/devinfra"
	"github.com/nubes-io/nubes/pkg/devinfra/flock"
)

// State is what a test binary needs; pkg/testkit decodes the same fields.
type State struct {
	PID      int    `json:"pid"`
	MongoURI string `json:"mongo_uri"`
	NATSHost string `json:"nats_host"` // host:port, accounts' users in front
	Accounts int    `json:"accounts"`
	Password string `json:"password"`
	Control  string `json:"control"`
}

func main() {
	dir := flag.String("dir", "", "data directory (its mongo/ and nats/ are removed at exit)")
	natsBin := flag.String("nats", "", "nats-server binary")
	watch := flag.Int("watch", 0, "exit when this process is gone (0: only -idle)")
	idle := flag.Duration("idle", 5*time.Minute, "exit after this long with no test binary connected")
	accounts := flag.Int("accounts", 64, "JetStream accounts of the NATS server")
	flag.Parse()
	runDone, err := run(*dir, *natsBin, *watch, *idle, *accounts)
	if runDone {
		// The run is over: no binary of it will look here again.
		_ = os.RemoveAll(*dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testinfra:", err)
		os.Exit(1)
	}
}

// run serves until the run is over (runDone: the watched process is
// gone) or idle; it returns after stopping both servers.
func run(dir, natsBin string, watch int, idle time.Duration, accounts int) (runDone bool, err error) {
	if dir == "" || natsBin == "" {
		return false, errors.New("-dir and -nats are required")
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	// Data of this process's own: one started after it went idle may
	// start beside its stopping.
	data := filepath.Join(dir, fmt.Sprintf("data-%d", os.Getpid()))
	defer os.RemoveAll(data)
	m, err := devinfra.StartMongo(filepath.Join(data, "mongo"), "127.0.0.1:0", nil)
	if err != nil {
		return false, err
	}
	defer m.Stop()
	nats, natsDone, host, err := startNATS(data, natsBin, accounts)
	if err != nil {
		return false, err
	}
	defer stopProcess(nats, natsDone)

	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return false, err
	}
	defer ctl.Close()
	var (
		mu       sync.Mutex
		clients  int
		lastSeen = time.Now()
	)
	go func() {
		for {
			c, err := ctl.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			clients++
			mu.Unlock()
			go func() {
				// A client says nothing: its connection closing (its
				// process ending) is the news.
				_, _ = c.Read(make([]byte, 1))
				_ = c.Close()
				mu.Lock()
				clients--
				lastSeen = time.Now()
				mu.Unlock()
			}()
		}
	}()
	st := State{PID: os.Getpid(), MongoURI: m.URI, NATSHost: host, Accounts: accounts, Password: password, Control: ctl.Addr().String()}
	if err := json.NewEncoder(os.Stdout).Encode(st); err != nil {
		return false, err
	}
	_ = os.Stdout.Close()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-sigs:
			return true, nil
		case <-natsDone:
			return false, errors.New("nats-server exited")
		case <-tick.C:
		}
		if watch > 0 && !alive(watch) {
			return true, nil
		}
		mu.Lock()
		gone := clients == 0 && time.Since(lastSeen) > idle
		mu.Unlock()
		if !gone {
			continue
		}
		// Idle: under the directory's lock (the one a binary holds while
		// it reads the state and connects) no binary is about to come;
		// the state file goes first, so the next one starts anew.
		unlock, err := flock.Lock(filepath.Join(dir, "lock"))
		if err != nil {
			return false, err
		}
		mu.Lock()
		gone = clients == 0
		mu.Unlock()
		if gone {
			_ = os.Remove(filepath.Join(dir, "state.json"))
			defer unlock()
			return false, nil
		}
		unlock()
	}
}

// password is every account user's: the server listens on loopback for
// tests only; accounts separate names, they guard nothing.
const password = "nubes-test"

// startNATS starts nats-server; done is closed when it has exited.
func startNATS(dir, bin string, accounts int) (cmd *exec.Cmd, done chan struct{}, host string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	var conf strings.Builder
	fmt.Fprintf(&conf, "listen: 127.0.0.1:%d\nmax_payload: 1MB\njetstream { store_dir: %q }\naccounts {\n", port, filepath.Join(dir, "nats"))
	for i := range accounts {
		fmt.Fprintf(&conf, "  A%d: { jetstream: enabled, users: [{user: a%d, password: %q}] }\n", i, i, password)
	}
	conf.WriteString("}\n")
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf.String()), 0o600); err != nil {
		return nil, nil, "", err
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		return nil, nil, "", err
	}
	defer logf.Close()
	cmd = exec.Command(bin, "-c", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, nil, "", err
	}
	done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	host = "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err == nil {
			_ = c.Close()
			return cmd, done, host, nil
		}
		if time.Now().After(deadline) {
			stopProcess(cmd, done)
			return nil, nil, "", fmt.Errorf("nats-server not reachable on %s (see %s): %w", host, logf.Name(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopProcess asks cmd to stop and kills it after a while; done is
// closed when it has exited.
func stopProcess(cmd *exec.Cmd, done chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
