package pluginref_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/pluginref"
)

var webhook = pluginref.Kind{ResourceType: "monitoring.Webhook", Name: "webhook"}

// repo is a stand-in repository service: plugins by id (resource_type),
// the versions it lists, and paths that answer 500.
type repo struct {
	plugins  map[string]string
	versions []string
	broken   map[string]bool
	noImage  bool // get-versions: 404 ERROR_NO_IMAGE_IN_REGISTRY, the registry answered without the image
	mu       sync.Mutex
	bearers  []string
}

func (f *repo) start(t *testing.T) *call.Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.bearers = append(f.bearers, r.Header.Get("Authorization"))
		f.mu.Unlock()
		fail := func(status int, code string) {
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]any{"detail": map[string]string{"code": code, "message": "fake " + code}})
		}
		if f.broken[r.URL.Path] {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var req struct {
			PluginID string `json:"plugin_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		rt, ok := f.plugins[req.PluginID]
		if !ok {
			fail(http.StatusNotFound, errs.NotFoundCode)
			return
		}
		switch r.URL.Path {
		case pluginref.GetPath:
			_ = json.NewEncoder(w).Encode(map[string]any{"plugin_id": req.PluginID, "name": "N", "state": "ENABLED", "resource_type": rt,
				"provider": "aws", "capability": map[string]any{"supported_schema": []string{"s"}}, "image": "not read"})
		case pluginref.VersionsPath:
			if f.noImage {
				fail(http.StatusNotFound, errs.NoImageInRegistry)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"results": f.versions, "total_count": len(f.versions)})
		default:
			fail(http.StatusNotFound, errs.UnsupportedAPI)
		}
	}))
	t.Cleanup(srv.Close)
	return call.NewClient("repository", srv.URL, "service-token", nil)
}

func newRepo(versions ...string) *repo {
	return &repo{plugins: map[string]string{"plugin-hook": "monitoring.Webhook", "plugin-coll": "inventory.Collector"},
		versions: versions, broken: map[string]bool{}}
}

func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok || e.Status() != status || e.Code != code {
		t.Fatalf("got %v, want %d %s", err, status, code)
	}
}

func TestGet(t *testing.T) {
	f := newRepo("1.0.0")
	r := pluginref.Repository{Client: f.start(t), Kind: webhook}
	ctx := context.Background()

	p, err := r.Get(ctx, "plugin-hook")
	if err != nil {
		t.Fatal(err)
	}
	want := &pluginref.Plugin{PluginID: "plugin-hook", Name: "N", State: "ENABLED", ResourceType: "monitoring.Webhook", Provider: "aws",
		Capability: map[string]any{"supported_schema": []any{"s"}}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	// The repository's service credential is sent when there is no caller.
	if f.bearers[0] != "Bearer service-token" {
		t.Fatalf("bearer %q", f.bearers[0])
	}

	for _, tc := range []struct {
		name, id     string
		status       int
		code, inText string
	}{
		{"another kind is 404 naming the kind", "plugin-coll", 404, errs.NotFoundCode, "No webhook plugin (resource_type monitoring.Webhook) found. (plugin_id = plugin-coll)"},
		{"unknown: the repository's 404 passes through", "plugin-zz", 404, errs.NotFoundCode, "fake ERROR_NOT_FOUND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Get(ctx, tc.id)
			wantCode(t, err, tc.status, tc.code)
			if !strings.Contains(err.Error(), tc.inText) {
				t.Fatalf("message %q lacks %q", err.Error(), tc.inText)
			}
		})
	}

	f.broken[pluginref.GetPath] = true
	_, err = r.Get(ctx, "plugin-hook")
	wantCode(t, err, http.StatusServiceUnavailable, errs.Unavailable)
}

func TestLatest(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for _, tc := range []struct {
		name     string
		versions []string
		id       string
		broken   bool
		want     string
		logged   bool
	}{
		{"newest first", []string{"1.2.0", "1.1.0"}, "plugin-hook", false, "1.2.0", false},
		{"none listed", nil, "plugin-hook", false, "", false},
		{"a 4xx is not logged", []string{"1.0.0"}, "plugin-zz", false, "", false},
		{"a repository down is logged", []string{"1.0.0"}, "plugin-hook", true, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs.Reset()
			f := newRepo(tc.versions...)
			f.broken[pluginref.VersionsPath] = tc.broken
			r := pluginref.Repository{Client: f.start(t), Kind: webhook, Log: log}
			if got := r.Latest(ctx, tc.id); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if got := strings.Contains(logs.String(), "the webhook keeps no version"); got != tc.logged {
				t.Fatalf("logged %v, want %v: %s", got, tc.logged, logs.String())
			}
		})
	}
}

// initRecorder is an Init that records what it was given and answers md
// (or fails).
type initRecorder struct {
	got  []pluginref.Info
	md   map[string]any
	fail error
}

func (i *initRecorder) init(_ context.Context, info pluginref.Info) (map[string]any, error) {
	i.got = append(i.got, info)
	return i.md, i.fail
}

func TestNew(t *testing.T) {
	ctx := context.Background()
	md := map[string]any{"supported_event_type": []any{"ALERT"}}
	for _, tc := range []struct {
		name     string
		strict   bool
		versions []string
		broken   bool
		ask      pluginref.Ask
		want     pluginref.Info
		code     string // an error's code
	}{
		{"no version: the newest; AUTO; options {}", false, []string{"1.2.0", "1.1.0"}, false, pluginref.Ask{},
			pluginref.Info{PluginID: "plugin-hook", Version: "1.2.0", Options: map[string]any{}, Metadata: md, UpgradeMode: "AUTO"}, ""},
		{"loose: a version kept as asked", false, []string{"1.2.0"}, false, pluginref.Ask{Version: "9.9.9", UpgradeMode: "MANUAL", Options: map[string]any{"a": 1}},
			pluginref.Info{PluginID: "plugin-hook", Version: "9.9.9", Options: map[string]any{"a": 1}, Metadata: md, UpgradeMode: "MANUAL"}, ""},
		{"loose: versions unknown leave none", false, []string{"1.2.0"}, true, pluginref.Ask{UpgradeMode: "NONE"},
			pluginref.Info{PluginID: "plugin-hook", Options: map[string]any{}, Metadata: md, UpgradeMode: "NONE"}, ""},
		{"loose: none listed leave none", false, nil, false, pluginref.Ask{},
			pluginref.Info{PluginID: "plugin-hook", Options: map[string]any{}, Metadata: md, UpgradeMode: "AUTO"}, ""},
		{"strict: a listed version", true, []string{"1.2.0", "1.1.0"}, false, pluginref.Ask{Version: "1.1.0"},
			pluginref.Info{PluginID: "plugin-hook", Version: "1.1.0", Options: map[string]any{}, Metadata: md, UpgradeMode: "AUTO"}, ""},
		{"strict: no version: the newest", true, []string{"1.2.0", "1.1.0"}, false, pluginref.Ask{},
			pluginref.Info{PluginID: "plugin-hook", Version: "1.2.0", Options: map[string]any{}, Metadata: md, UpgradeMode: "AUTO"}, ""},
		{"strict: an unlisted version is 400", true, []string{"1.2.0"}, false, pluginref.Ask{Version: "9.9.9"}, pluginref.Info{}, errs.InvalidParameter},
		{"strict: versions unknown (offline) leave none", true, []string{"1.2.0"}, true, pluginref.Ask{},
			pluginref.Info{PluginID: "plugin-hook", Options: map[string]any{}, Metadata: md, UpgradeMode: "AUTO"}, ""},
		{"strict: versions unknown (offline) keep the version asked", true, []string{"1.2.0"}, true, pluginref.Ask{Version: "9.9.9"},
			pluginref.Info{PluginID: "plugin-hook", Version: "9.9.9", Options: map[string]any{}, Metadata: md, UpgradeMode: "AUTO"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRepo(tc.versions...)
			f.broken[pluginref.VersionsPath] = tc.broken
			r := pluginref.Repository{Client: f.start(t), Kind: webhook, Strict: tc.strict, Log: slog.New(slog.DiscardHandler)}
			rec := &initRecorder{md: md}
			got, err := r.New(ctx, "plugin-hook", tc.ask, "plugin_info.version", rec.init)
			if tc.code != "" {
				if e, ok := errs.As(err); !ok || e.Code != tc.code {
					t.Fatalf("got %v, want %s", err, tc.code)
				}
				if len(rec.got) != 0 {
					t.Fatal("the plugin was initialised after a refusal")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			// init saw the version and options kept, before its metadata.
			if len(rec.got) != 1 || rec.got[0].Version != tc.want.Version || !reflect.DeepEqual(rec.got[0].Options, tc.want.Options) {
				t.Fatalf("init got %+v", rec.got)
			}
		})
	}

	t.Run("the unlisted version is named by the key given", func(t *testing.T) {
		r := pluginref.Repository{Client: newRepo("1.0.0").start(t), Kind: webhook, Strict: true}
		_, err := r.New(ctx, "plugin-hook", pluginref.Ask{Version: "2.0.0"}, "plugin_info.version", (&initRecorder{}).init)
		if err == nil || !strings.Contains(err.Error(), "key = plugin_info.version") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("offline is logged with the version kept unchecked", func(t *testing.T) {
		f := newRepo("1.0.0")
		f.broken[pluginref.VersionsPath] = true
		var buf bytes.Buffer
		r := pluginref.Repository{Client: f.start(t), Kind: webhook, Strict: true, Log: slog.New(slog.NewTextHandler(&buf, nil))}
		if _, err := r.New(ctx, "plugin-hook", pluginref.Ask{Version: "2.0.0"}, "plugin_info.version", (&initRecorder{}).init); err != nil {
			t.Fatal(err)
		}
		if out := buf.String(); !strings.Contains(out, "keeps version 2.0.0 unchecked") || !strings.Contains(out, "plugin_id=plugin-hook") {
			t.Fatalf("log: %q", out)
		}
	})
	t.Run("strict: a registry without the image is its answer", func(t *testing.T) {
		f := newRepo("1.0.0")
		f.noImage = true
		r := pluginref.Repository{Client: f.start(t), Kind: webhook, Strict: true}
		rec := &initRecorder{}
		_, err := r.New(ctx, "plugin-hook", pluginref.Ask{Version: "1.0.0"}, "plugin_info.version", rec.init)
		wantCode(t, err, http.StatusNotFound, errs.NoImageInRegistry)
		if len(rec.got) != 0 {
			t.Fatal("the plugin was initialised after a refusal")
		}
	})
	t.Run("an init error fails it", func(t *testing.T) {
		r := pluginref.Repository{Client: newRepo("1.0.0").start(t), Kind: webhook}
		boom := errs.New(errs.GRPCConnection, "down")
		_, err := r.New(ctx, "plugin-hook", pluginref.Ask{}, "", (&initRecorder{fail: boom}).init)
		if !errors.Is(err, boom) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("nil metadata is {}", func(t *testing.T) {
		r := pluginref.Repository{Client: newRepo("1.0.0").start(t), Kind: webhook}
		got, err := r.New(ctx, "plugin-hook", pluginref.Ask{}, "", (&initRecorder{}).init)
		if err != nil || got.Metadata == nil {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
}

func TestChange(t *testing.T) {
	ctx := context.Background()
	md := map[string]any{"new": true}
	kept := pluginref.Info{PluginID: "plugin-hook", Version: "1.0.0", Options: map[string]any{"old": 1}, Metadata: map[string]any{"old": true}, UpgradeMode: "AUTO"}
	with := func(f func(*pluginref.Info)) pluginref.Info {
		i := kept
		i.Metadata = md
		f(&i)
		return i
	}
	for _, tc := range []struct {
		name   string
		strict bool
		from   pluginref.Info
		ask    pluginref.Ask
		want   pluginref.Info
		code   string
	}{
		{"AUTO: the newest", false, kept, pluginref.Ask{}, with(func(i *pluginref.Info) { i.Version = "1.2.0" }), ""},
		{"AUTO, strict: the newest", true, kept, pluginref.Ask{}, with(func(i *pluginref.Info) { i.Version = "1.2.0" }), ""},
		{"a version asked", false, kept, pluginref.Ask{Version: "0.9.0"}, with(func(i *pluginref.Info) { i.Version = "0.9.0" }), ""},
		{"strict: a listed version asked", true, kept, pluginref.Ask{Version: "1.1.0"}, with(func(i *pluginref.Info) { i.Version = "1.1.0" }), ""},
		{"strict: an unlisted version is 400", true, kept, pluginref.Ask{Version: "0.9.0"}, pluginref.Info{}, errs.InvalidParameter},
		{"options replaced whole", false, kept, pluginref.Ask{Options: map[string]any{"new": 2}},
			with(func(i *pluginref.Info) { i.Version, i.Options = "1.2.0", map[string]any{"new": 2} }), ""},
		{"to MANUAL keeps the version", false, kept, pluginref.Ask{UpgradeMode: "MANUAL"}, with(func(i *pluginref.Info) { i.UpgradeMode = "MANUAL" }), ""},
		{"NONE keeps the version", true, with(func(i *pluginref.Info) { i.UpgradeMode = "NONE" }), pluginref.Ask{},
			with(func(i *pluginref.Info) { i.UpgradeMode = "NONE" }), ""},
		{"MANUAL without any version is 400", false, with(func(i *pluginref.Info) { i.Version = "" }), pluginref.Ask{UpgradeMode: "MANUAL"},
			pluginref.Info{}, errs.RequiredParameter},
		{"MANUAL with a version asked", false, with(func(i *pluginref.Info) { i.Version = "" }), pluginref.Ask{UpgradeMode: "MANUAL", Version: "1.1.0"},
			with(func(i *pluginref.Info) { i.Version, i.UpgradeMode = "1.1.0", "MANUAL" }), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := pluginref.Repository{Client: newRepo("1.2.0", "1.1.0").start(t), Kind: webhook, Strict: tc.strict}
			rec := &initRecorder{md: md}
			got, err := r.Change(ctx, tc.from, tc.ask, rec.init)
			if tc.code != "" {
				if e, ok := errs.As(err); !ok || e.Code != tc.code {
					t.Fatalf("got %v, want %s", err, tc.code)
				}
				if len(rec.got) != 0 {
					t.Fatal("the plugin was initialised after a refusal")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if len(rec.got) != 1 || rec.got[0].Version != tc.want.Version {
				t.Fatalf("init got %+v", rec.got)
			}
		})
	}
	for _, tc := range []struct {
		name string
		ask  pluginref.Ask
		want string
	}{
		{"strict, offline: the version asked, unchecked", pluginref.Ask{Version: "0.9.0"}, "0.9.0"},
		{"strict, offline, AUTO: the version kept", pluginref.Ask{}, "1.0.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRepo("1.2.0")
			f.broken[pluginref.VersionsPath] = true
			r := pluginref.Repository{Client: f.start(t), Kind: webhook, Strict: true}
			got, err := r.Change(ctx, kept, tc.ask, (&initRecorder{md: md}).init)
			if err != nil || got.Version != tc.want {
				t.Fatalf("got %+v, %v; want version %s", got, err, tc.want)
			}
		})
	}
}
