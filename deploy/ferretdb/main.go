// Command ferretdb serves FerretDB 1.24 (a MongoDB wire-protocol server)
// on SQLite, built from the pinned Go module as a static binary so the e2e
// suite can run it in an image FROM scratch. It is the embeddable FerretDB
// with the upstream binary's environment names, served behind Nubes'
// write-ordering proxy (pkg/devinfra/serialwrites) so that it keeps
// MongoDB's single-document promise as the embedded store does; operators
// run a real MongoDB replica set instead (see docs/operations.md).
//
//	FERRETDB_LISTEN_ADDR  :27017     MongoDB wire protocol
//	FERRETDB_SQLITE_URL   file:/data/  directory of the SQLite databases
//	FERRETDB_DEBUG_ADDR   :8088      GET /debug/livez, /debug/readyz
//	FERRETDB_LOG_LEVEL    warn
//
// (The upstream cmd/ferretdb cannot be built from another module: its
// version package panics unless it is the main module.)
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"

	"github.com/nubes-io/nubes/pkg/devinfra/serialwrites"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "ferretdb:", err)
		os.Exit(1)
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(env("FERRETDB_LOG_LEVEL", "warn"))); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	addr := env("FERRETDB_LISTEN_ADDR", ":27017")
	backend, err := freeLoopback()
	if err != nil {
		return err
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: backend},
		Handler:   "sqlite",
		SQLiteURL: env("FERRETDB_SQLITE_URL", "file:/data/"),
		Logger:    log,
	})
	if err != nil {
		return err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	// Ready when the wire-protocol port accepts a connection.
	probe := func(w http.ResponseWriter, r *http.Request) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), time.Second)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_ = c.Close()
		_, _ = w.Write([]byte("ok\n"))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /debug/readyz", probe)
	debug := &http.Server{Addr: env("FERRETDB_DEBUG_ADDR", ":8088"), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = debug.ListenAndServe() }()
	defer debug.Close()

	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	if err := waitTCP(ctx, backend); err != nil {
		return err
	}
	proxy, err := serialwrites.Listen(addr, backend, serialwrites.Options{PerDatabase: true})
	if err != nil {
		return err
	}
	defer proxy.Close()
	fmt.Fprintf(os.Stderr, "ferretdb: serving MongoDB wire protocol on %s, SQLite %s\n", addr, env("FERRETDB_SQLITE_URL", "file:/data/"))
	return <-done
}

// freeLoopback is a free 127.0.0.1 port for FerretDB itself, which only
// the proxy dials.
func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitTCP(ctx context.Context, addr string) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
