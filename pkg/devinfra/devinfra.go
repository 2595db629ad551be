// Package devinfra starts the embedded dependencies of the devstack and of
// tests: FerretDB 1.24 on SQLite (a MongoDB wire-protocol server; on a
// given PostgreSQL for the bench) and a NATS server with JetStream, both
// inside the calling process on 127.0.0.1. FerretDB is served behind
// serialwrites, so it keeps MongoDB's single-document promise.
//
// It is for development and tests only; production binaries never import it.
package devinfra

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/nubes-io/nubes/pkg/devinfra/serialwrites"
)

// Mongo is a running embedded FerretDB.
type Mongo struct {
	URI string
	// backend is FerretDB's own address, behind the proxy: only the
	// tests that show what the proxy prevents dial it.
	backend string
	proxy   *serialwrites.Proxy
	stop    context.CancelFunc
	done    chan struct{}
	ids     *idIndexer // SQLite only
}

// StartMongo serves FerretDB on addr (":0" style allowed) with SQLite files
// under dir. The logger may be nil to discard FerretDB's own logs.
func StartMongo(dir, addr string, log *slog.Logger) (*Mongo, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// synchronous(normal): in WAL mode a commit is not flushed to disk
	// (a checkpoint is), so a crash of the process loses nothing and one
	// of the machine at most the last commits; each write's fsync was
	// most of a write's time, and a development store needs no more.
	m, err := startFerretDB(ferretdb.Config{Handler: "sqlite", SQLiteURL: "file:" + abs + "/?_pragma=synchronous(normal)"}, addr, serialwrites.Options{PerDatabase: true}, log)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m.ids = newIDIndexer(abs, log, m.proxy.Exclusive)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); m.ids.run(ctx) }()
	stopFerret := m.stop
	m.stop = func() { cancel(); <-stopped; stopFerret() }
	return m, nil
}

// IndexIDs gives every collection of the embedded SQLite store, now, the
// index its lookups by _id use (it happens every IDIndexInterval anyway).
func (m *Mongo) IndexIDs(ctx context.Context) error {
	if m.ids == nil {
		return nil
	}
	return m.ids.sweep(ctx)
}

// StartMongoOnPostgreSQL serves FerretDB on addr with its data in the
// PostgreSQL database at pgURL: the store FerretDB pushes simple equality
// filters down to, for measurements that SQLite's full scans would drown.
func StartMongoOnPostgreSQL(pgURL, addr string, log *slog.Logger) (*Mongo, error) {
	return startFerretDB(ferretdb.Config{Handler: "postgresql", PostgreSQLURL: pgURL}, addr, serialwrites.Options{}, log)
}

var newMu sync.Mutex

func startFerretDB(c ferretdb.Config, addr string, o serialwrites.Options, log *slog.Logger) (*Mongo, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// FerretDB listens on a port of its own; clients reach it only
	// through the proxy on addr, which orders its writes (serialwrites).
	c.Listener = ferretdb.ListenerConfig{TCP: "127.0.0.1:0"}
	c.Logger = slog.New(demoteWireDumps{log.Handler()})
	// ferretdb.New sets package globals of FerretDB's: two stores started
	// at once in one process (tests side by side) must not race there.
	newMu.Lock()
	f, err := ferretdb.New(&c)
	newMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("start FerretDB: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	backend := strings.TrimSuffix(strings.TrimPrefix(f.MongoDBURI(), "mongodb://"), "/")
	if err := waitTCP(backend, 10*time.Second); err != nil {
		cancel()
		<-done
		return nil, err
	}
	p, err := serialwrites.Listen(addr, backend, o)
	if err != nil {
		cancel()
		<-done
		return nil, fmt.Errorf("start FerretDB's write order: %w", err)
	}
	m := &Mongo{URI: "mongodb://" + p.Addr() + "/", backend: backend, proxy: p, done: done}
	m.stop = func() { _ = p.Close(); cancel() }
	return m, nil
}

// Stop shuts FerretDB down and waits for it.
func (m *Mongo) Stop() {
	m.stop()
	<-m.done
}

// NATS is a running embedded NATS server with JetStream.
type NATS struct {
	URL string
	srv *natsserver.Server
}

// StartNATS serves NATS on host:port (port 0 picks one) with JetStream
// state under dir, logging nothing.
func StartNATS(dir, host string, port int) (*NATS, error) {
	return StartNATSWithLog(dir, host, port, nil)
}

// StartNATSWithLog is StartNATS logging to log (nil: nothing).
func StartNATSWithLog(dir, host string, port int, log *slog.Logger) (*NATS, error) {
	if port == 0 {
		port = natsserver.RANDOM_PORT
	}
	s, err := natsserver.NewServer(&natsserver.Options{
		Host: host, Port: port, JetStream: true, StoreDir: dir,
		NoSigs: true, NoLog: log == nil, MaxPayload: 1 << 20,
		Debug: log != nil && log.Enabled(context.Background(), slog.LevelDebug),
	})
	if err != nil {
		return nil, fmt.Errorf("start NATS: %w", err)
	}
	if log != nil {
		s.SetLoggerV2(natsLog{log}, log.Enabled(context.Background(), slog.LevelDebug), false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("NATS not ready")
	}
	return &NATS{URL: s.ClientURL(), srv: s}, nil
}

// Stop shuts NATS down.
func (n *NATS) Stop() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

func waitTCP(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not reachable: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
