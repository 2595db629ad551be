package repository_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/bcrypt"
)

// Credentials of the test registries that need them.
const (
	regUser     = "puller"
	regPassword = "s3cret-pass"
	regToken    = "token-issued-by-the-test-realm"
)

// testRegistry is the distribution project's registry (its HTTP handlers on
// the in-memory storage driver) served in the test process.
type testRegistry struct {
	URL string // what a plugin's registry_url names
	// push reaches the registry itself, past any front.
	push       string
	pushAuth   string
	tokenCalls atomic.Int64
	scopes     chan string
}

func init() { logrus.SetOutput(io.Discard) }

// startRegistry starts a registry. auth is "" (anonymous reads), "basic"
// (htpasswd), or "bearer" (a front answering the distribution token
// challenge with a realm that gives a token for regUser/regPassword).
func startRegistry(t *testing.T, auth string) *testRegistry {
	t.Helper()
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{"inmemory": configuration.Parameters{},
			"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}}},
		Tags: configuration.Tags{MaxTags: 1000},
	}
	cfg.HTTP.Secret = "test-secret"
	r := &testRegistry{scopes: make(chan string, 100)}
	if auth == "basic" {
		hash, err := bcrypt.GenerateFromPassword([]byte(regPassword), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "htpasswd")
		if err := os.WriteFile(path, []byte(regUser+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.Auth = configuration.Auth{"htpasswd": configuration.Parameters{"realm": "test-registry", "path": path}}
		r.pushAuth = "Basic " + basic(regUser, regPassword)
	}
	app := handlers.NewApp(context.Background(), cfg)
	inner := httptest.NewServer(app)
	t.Cleanup(inner.Close)
	r.URL, r.push = inner.URL, inner.URL
	if auth == "bearer" {
		var front *httptest.Server
		front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path == "/token" {
				r.tokenCalls.Add(1)
				r.scopes <- req.URL.Query().Get("scope")
				if u, p, ok := req.BasicAuth(); !ok || u != regUser || p != regPassword {
					http.Error(w, "bad credentials", http.StatusUnauthorized)
					return
				}
				_ = json.NewEncoder(w).Encode(map[string]string{"token": regToken})
				return
			}
			if req.Header.Get("Authorization") != "Bearer "+regToken {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="test-registry",scope="repository:%s:pull"`,
					front.URL, strings.TrimSuffix(strings.TrimPrefix(req.URL.Path, "/v2/"), "/tags/list")))
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			req.Header.Del("Authorization")
			app.ServeHTTP(w, req)
		}))
		t.Cleanup(front.Close)
		r.URL = front.URL
	}
	return r
}

func basic(u, p string) string { return base64.StdEncoding.EncodeToString([]byte(u + ":" + p)) }

// pushTags uploads one small image and tags it with every tag given.
func (r *testRegistry) pushTags(t *testing.T, name string, tags ...string) {
	t.Helper()
	config := r.blob(t, name, []byte(`{"architecture":"amd64","os":"linux"}`))
	layer := r.blob(t, name, []byte("layer of "+name))
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config.digest, "size": config.size},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer.digest, "size": layer.size}},
	})
	for _, tag := range tags {
		r.do(t, http.MethodPut, r.push+"/v2/"+name+"/manifests/"+tag, "application/vnd.oci.image.manifest.v1+json", manifest, http.StatusCreated)
	}
}

type blobRef struct {
	digest string
	size   int
}

// blob uploads content: POST opens an upload, PUT with the digest ends it.
func (r *testRegistry) blob(t *testing.T, name string, content []byte) blobRef {
	t.Helper()
	sum := sha256.Sum256(content)
	d := "sha256:" + hex.EncodeToString(sum[:])
	resp := r.do(t, http.MethodPost, r.push+"/v2/"+name+"/blobs/uploads/", "application/octet-stream", nil, http.StatusAccepted)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(r.push)
	loc = base.ResolveReference(loc)
	q := loc.Query()
	q.Set("digest", d)
	loc.RawQuery = q.Encode()
	r.do(t, http.MethodPut, loc.String(), "application/octet-stream", content, http.StatusCreated)
	return blobRef{digest: d, size: len(content)}
}

func (r *testRegistry) do(t *testing.T, method, target, contentType string, body []byte, want int) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if r.pushAuth != "" {
		req.Header.Set("Authorization", r.pushAuth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %d, want %d: %s", method, target, resp.StatusCode, want, b)
	}
	return resp
}
