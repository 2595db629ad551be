// Command plugin is the test plugin of the container suite: one gRPC server
// serving every plugin kind (inventory collector, monitoring webhook and
// data source, cost-analysis data source, notification protocol) under the
// upstream proto names, with server reflection, as the upstream plugin
// images do. It is pkg/testkit/fakeplugin in a process: answers are
// scripted per method, from a JSON script given at start and replaced at
// run time through a small HTTP control API.
//
//	plugin [-addr :50051] [-control :8080] [-variant upstream|skewed]
//	       [-reflection both|v1alpha] [-script script.json]
//
// Flags default from PLUGIN_ADDR, PLUGIN_CONTROL_ADDR, PLUGIN_VARIANT,
// PLUGIN_REFLECTION and PLUGIN_SCRIPT (a file name, or the JSON itself
// when it starts with "{").
//
// Script: {"<pkg.Service/method>": [reply, ...]}; each call takes the next
// reply, the last repeats; a method without one answers empty. A reply:
//
//	{"result": {...}}                         unary reply by proto field name
//	{"stream": [{...}, ...]}                  messages of a streaming method
//	{"error": {"code": "INVALID_ARGUMENT", "message": "ERROR_X: text"}}
//	                                          failure (after the stream messages)
//	{"delay": "2s", "interval": "100ms"}      wait before answering / between messages
//	{"hang": true}                            never answer (after the messages)
//	{"cut": true}                             close the connections (after the messages)
//
// Control API: GET /healthz; GET /calls[?method=pkg.Service/method] (the
// requests received, by proto field name, with metadata); PUT /script
// (replace the script); POST /reset (forget calls and script).
//
// It is a test double: never deploy it as a plugin.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
)

// Reply is the JSON form of fakeplugin.Reply.
type Reply struct {
	Result   map[string]any   `json:"result"`
	Stream   []map[string]any `json:"stream"`
	Error    *Status          `json:"error"`
	Delay    string           `json:"delay"`
	Interval string           `json:"interval"`
	Hang     bool             `json:"hang"`
	Cut      bool             `json:"cut"`
}

// Status is a gRPC status: code by name ("INVALID_ARGUMENT") and the
// details, "ERROR_X: message" as upstream plugins send them.
type Status struct {
	Code    codes.Code `json:"code"`
	Message string     `json:"message"`
}

// Script maps a method to its replies.
type Script map[string][]Reply

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "plugin:", err)
		os.Exit(1)
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run() error {
	addr := flag.String("addr", env("PLUGIN_ADDR", ":50051"), "gRPC listen address")
	control := flag.String("control", env("PLUGIN_CONTROL_ADDR", ":8080"), "HTTP control listen address (empty: none)")
	variant := flag.String("variant", env("PLUGIN_VARIANT", "upstream"), "proto variant: upstream or skewed")
	refl := flag.String("reflection", env("PLUGIN_REFLECTION", "both"), "reflection served: both or v1alpha")
	script := flag.String("script", env("PLUGIN_SCRIPT", ""), "script file, or the JSON itself")
	flag.Parse()

	opts := fakeplugin.Options{Addr: *addr}
	switch *variant {
	case "upstream":
	case "skewed":
		opts.Variant = fakeplugin.Skewed
	default:
		return fmt.Errorf("-variant %q: upstream or skewed", *variant)
	}
	switch *refl {
	case "both":
	case "v1alpha":
		opts.Reflection = fakeplugin.ReflectV1Alpha
	default:
		return fmt.Errorf("-reflection %q: both or v1alpha", *refl)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	srv, err := fakeplugin.New(opts)
	if err != nil {
		return err
	}
	defer srv.Stop()
	if *script != "" {
		raw := []byte(*script)
		if !strings.HasPrefix(strings.TrimSpace(*script), "{") {
			if raw, err = os.ReadFile(*script); err != nil {
				return err
			}
		}
		if err := load(srv, raw); err != nil {
			return fmt.Errorf("script: %w", err)
		}
	}
	log.Info("plugin serving", "addr", srv.Addr, "variant", *variant, "reflection", *refl)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *control == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", *control)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: handler(srv), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	log.Info("control serving", "addr", ln.Addr().String())
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// load replaces the fake's script with a JSON script.
func load(srv *fakeplugin.Server, raw []byte) error {
	var sc Script
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return err
	}
	plans := map[string][]fakeplugin.Reply{}
	for method, replies := range sc {
		if !strings.Contains(method, "/") {
			return fmt.Errorf("%q is not pkg.Service/method", method)
		}
		for i, r := range replies {
			fr := fakeplugin.Reply{Result: r.Result, Stream: r.Stream, Hang: r.Hang, Cut: r.Cut}
			var err error
			if fr.Delay, err = duration(r.Delay); err != nil {
				return fmt.Errorf("%s[%d].delay: %w", method, i, err)
			}
			if fr.Interval, err = duration(r.Interval); err != nil {
				return fmt.Errorf("%s[%d].interval: %w", method, i, err)
			}
			if r.Error != nil {
				fr.Err = status.Error(r.Error.Code, r.Error.Message)
			}
			plans[method] = append(plans[method], fr)
		}
	}
	srv.Reset()
	for method, replies := range plans {
		srv.Script(method, replies...)
	}
	return nil
}

func duration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

func handler(srv *fakeplugin.Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, r *http.Request) {
		calls := srv.Calls(r.URL.Query().Get("method"))
		if calls == nil {
			calls = []fakeplugin.Call{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(calls)
	})
	mux.HandleFunc("PUT /script", func(w http.ResponseWriter, r *http.Request) {
		var raw json.RawMessage
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20)).Decode(&raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := load(srv, raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, _ *http.Request) {
		srv.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}
