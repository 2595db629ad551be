package testkit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
)

// Fake stands in for another service of the suite over real HTTP, as
// pkg/call reaches it: every call must carry a bearer the kit's verifier
// accepts (401 ERROR_AUTHENTICATE_FAILURE otherwise), a path with no
// handler is 404 ERROR_UNSUPPORTED_API, and a handler's *errs.Error is
// answered with its status and code.
type Fake struct {
	URL   string
	srv   *httptest.Server
	calls atomic.Int64

	mu     sync.Mutex
	routes map[string]Handler
}

// Handler answers one path for the verified caller p; req is the JSON
// body decoded. What it returns is sent as JSON; an error as the suite's
// error body.
type Handler func(p *auth.Principal, req map[string]any) (any, error)

// StartFake serves a Fake with no handler until the test ends.
func StartFake(t testing.TB) *Fake {
	f := &Fake{routes: map[string]Handler{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = f.srv.URL
	t.Cleanup(f.srv.Close)
	return f
}

// Handle answers path with h (replacing a handler already there).
func (f *Fake) Handle(path string, h Handler) *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes[path] = h
	return f
}

// Calls counts every request received, answered or refused.
func (f *Fake) Calls() int64 { return f.calls.Load() }

// Close stops serving: calls then fail to connect, as to a service down.
func (f *Fake) Close() { f.srv.Close() }

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	f.mu.Lock()
	h, ok := f.routes[r.URL.Path]
	f.mu.Unlock()
	if !ok {
		WriteError(w, errs.New(errs.UnsupportedAPI, "fake: no %s", r.URL.Path))
		return
	}
	p, err := Get().Verifier.Authenticate(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	if err != nil {
		WriteError(w, errs.New(errs.AuthenticateFailure, "fake: %v", err))
		return
	}
	var req map[string]any
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req)
	out, err := h(p, req)
	if err != nil {
		WriteError(w, err)
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}

// WriteError answers err as the suite does: its status and
// {"detail": {"code", "message"}}; an error that is not an *errs.Error is
// an ERROR_UNKNOWN.
func WriteError(w http.ResponseWriter, err error) {
	e, ok := errs.As(err)
	if !ok {
		e = errs.New(errs.Unknown, "%v", err)
	}
	w.WriteHeader(e.Status())
	_ = json.NewEncoder(w).Encode(map[string]any{"detail": map[string]string{"code": e.Code, "message": e.Message}})
}

// Str is the string member key of a decoded request ("" when absent).
func Str(req map[string]any, key string) string {
	s, _ := req[key].(string)
	return s
}

// ProjectGetPath is identity's project/get.
const ProjectGetPath = "/identity/v2/project/get"

// Project is a project a fake identity knows.
type Project struct{ DomainID, WorkspaceID string }

// FakeIdentity answers identity's project/get as identity does: the
// project when it is in the caller's domain (and workspace, for a
// workspace-scoped caller), 404 otherwise. More paths can be handled.
func FakeIdentity(t testing.TB, projects map[string]Project) *Fake {
	return StartFake(t).Handle(ProjectGetPath, func(p *auth.Principal, req map[string]any) (any, error) {
		id := Str(req, "project_id")
		pr, ok := projects[id]
		domain := p.DomainID
		if d := Str(req, "domain_id"); d != "" && p.IsService() {
			domain = d // a service of the suite asks in any domain
		}
		if !ok || pr.DomainID != domain || (p.WorkspaceID != "" && pr.WorkspaceID != p.WorkspaceID) {
			return nil, errs.New(errs.NotFoundCode, "fake identity: no project %s", id)
		}
		return map[string]any{"project_id": id, "name": "P", "workspace_id": pr.WorkspaceID, "domain_id": pr.DomainID}, nil
	})
}

// Repository paths a FakeRepository answers.
const (
	PluginGetPath      = "/repository/v1/plugin/get"
	PluginVersionsPath = "/repository/v1/plugin/get-versions"
)

// Versions are what a FakeRepository lists of every plugin, newest first.
var Versions = []string{"1.2.0", "1.1.0"}

// RepoPlugin is a plugin a FakeRepository knows.
type RepoPlugin struct {
	ResourceType string
	State        string // ENABLED when empty
	Provider     string
	Capability   map[string]any // {} when nil
	// Offline: get-versions answers 503 ERROR_REGISTRY_UNAVAILABLE, as the
	// repository does when the image's registry is out of reach.
	Offline bool
}

// FakeRepository answers the repository's plugin/get (name = the id) and
// plugin/get-versions (Versions, or 503 for an Offline one) for the
// plugins it knows; an unknown
// plugin is 404 ERROR_NOT_FOUND, as the repository answers.
func FakeRepository(t testing.TB, plugins map[string]RepoPlugin) *Fake {
	known := func(req map[string]any) (string, RepoPlugin, error) {
		id := Str(req, "plugin_id")
		rp, ok := plugins[id]
		if !ok {
			return "", rp, errs.New(errs.NotFoundCode, "fake repository: no plugin %s", id)
		}
		return id, rp, nil
	}
	return StartFake(t).
		Handle(PluginGetPath, func(_ *auth.Principal, req map[string]any) (any, error) {
			id, rp, err := known(req)
			if err != nil {
				return nil, err
			}
			state, capability := rp.State, rp.Capability
			if state == "" {
				state = "ENABLED"
			}
			if capability == nil {
				capability = map[string]any{}
			}
			return map[string]any{"plugin_id": id, "name": id, "resource_type": rp.ResourceType, "provider": rp.Provider,
				"capability": capability, "state": state}, nil
		}).
		Handle(PluginVersionsPath, func(_ *auth.Principal, req map[string]any) (any, error) {
			_, rp, err := known(req)
			if err != nil {
				return nil, err
			}
			if rp.Offline {
				return nil, errs.New(errs.RegistryUnavailable, "fake repository: the registry of %s cannot be reached", Str(req, "plugin_id"))
			}
			return map[string]any{"results": Versions, "total_count": len(Versions)}, nil
		})
}

// RunWorkers runs a service's workers until the test ends (or stop is
// called: a replica's SIGTERM), then stops them; stopped is closed once
// each has returned. The test's end stops them too, and waits.
func RunWorkers(t testing.TB, workers []func(context.Context) error) (stop context.CancelFunc, stopped <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	all := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { _ = w(ctx) })
	}
	go func() { wg.Wait(); close(all) }()
	t.Cleanup(func() {
		cancel()
		<-all
	})
	return cancel, all
}
