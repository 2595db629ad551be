// Command registry is the image registry of the e2e suite, which cannot
// pull one: the distribution project's registry (the maintained Go
// implementation of the OCI distribution API) with its filesystem storage
// under /data, configured here rather than by a file so that the image
// FROM scratch needs nothing but this binary.
//
// It serves anonymous pulls and pushes on REGISTRY_ADDR (default :5000),
// storing under REGISTRY_ROOT (default /data/registry). It is a test
// fixture: no authentication, never for production.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/sirupsen/logrus"
)

func main() {
	addr := env("REGISTRY_ADDR", ":5000")
	root := env("REGISTRY_ROOT", "/data/registry")
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"filesystem":  configuration.Parameters{"rootdirectory": root},
			"delete":      configuration.Parameters{"enabled": true},
			"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
		},
	}
	cfg.HTTP.Secret = hex.EncodeToString(secret)
	logrus.SetOutput(io.Discard) // the access lines below are enough
	app := handlers.NewApp(context.Background(), cfg)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(os.Stderr, "%s %s %s\n", time.Now().UTC().Format(time.RFC3339), r.Method, r.URL.Path)
		app.ServeHTTP(w, r)
	}))
	fmt.Fprintf(os.Stderr, "registry on %s, storage %s\n", addr, root)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
