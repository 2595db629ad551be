package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/nubes-io/nubes/pkg/api"
)

// LocalParam, as ?local=1 on the reflection path, asks a server for the
// operations it serves itself, never a merged list (the merging server
// asks the others this way, so no two of them ever ask each other).
const LocalParam = "local"

// serveReflection answers GET api.ReflectionPath: the suite's list when
// Options.Reflection is set, else (or with ?local=1) this server's own.
func (s *Server) serveReflection(local api.Reflection) echo.HandlerFunc {
	localJSON, _ := json.Marshal(local)
	return func(c *echo.Context) error {
		if s.opts.Reflection == nil || c.QueryParam(LocalParam) != "" {
			return c.JSONBlob(http.StatusOK, localJSON)
		}
		r, err := s.opts.Reflection(c.Request().Context())
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, r)
	}
}

// SuiteReflection returns an Options.Reflection that lists the whole suite
// in a cluster: the routes served here, merged with the local list of every
// other service in urls (service name -> base URL; self is skipped). The
// result is cached for ttl. A service that does not answer is left out of
// that answer (logged) and asked again on the next call, so the console
// still starts with the operations that are up.
func SuiteReflection(self string, routes []api.Route, urls map[string]string, ttl time.Duration, log *slog.Logger) func(context.Context) (api.Reflection, error) {
	local := api.Reflect(routes)
	client := &http.Client{Timeout: 3 * time.Second}
	var (
		mu      sync.Mutex
		cached  api.Reflection
		expires time.Time
	)
	return func(ctx context.Context) (api.Reflection, error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Now().Before(expires) {
			return cached, nil
		}
		names := slices.Sorted(maps.Keys(urls))
		lists := make([]api.Reflection, len(names)+1)
		lists[0] = local
		failed := make([]bool, len(names))
		var wg sync.WaitGroup
		for i, name := range names {
			if name == self {
				continue
			}
			wg.Go(func() {
				r, err := fetchReflection(ctx, client, urls[name])
				if err != nil {
					log.Warn("reflection: service left out of the list", "service", name, "error", err.Error())
					failed[i] = true
					return
				}
				lists[i+1] = r
			})
		}
		wg.Wait()
		cached = api.MergeReflections(lists...)
		expires = time.Time{}
		if !slices.Contains(failed, true) {
			expires = time.Now().Add(ttl)
		}
		return cached, nil
	}
}

func fetchReflection(ctx context.Context, client *http.Client, base string) (api.Reflection, error) {
	var r api.Reflection
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+api.ReflectionPath+"?"+LocalParam+"=1", nil)
	if err != nil {
		return r, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("status %d", resp.StatusCode)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, MaxBody)).Decode(&r)
	return r, err
}
