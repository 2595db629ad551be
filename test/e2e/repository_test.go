package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// TestRepositoryPluginVersions: the test plugin's image is pushed to a
// registry container (deploy/registry: the distribution project's
// registry, built FROM scratch), registered in the repository container,
// and its versions come back newest first, read by the repository from
// that registry over the suite's network; a registry that goes away is a
// 503, never a 500. Calling the plugin itself is TestMonitoringWebhook's.
func TestRepositoryPluginVersions(t *testing.T) {
	needs(t, "repository")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg := startRegistry(ctx, t, "registry", "1.0.0", "latest", "1.10.0", "1.2.0", "1.2.0-rc.1")
	want := []string{"1.10.0", "1.2.0", "1.2.0-rc.1", "1.0.0", "latest"}

	admin := rootAdmin(t, identityAt(t)).with(direct(st.first(t, "repository").url))
	var p struct {
		PluginID       string `json:"plugin_id"`
		RegistryURL    string `json:"registry_url"`
		RepositoryInfo struct {
			RepositoryID   string `json:"repository_id"`
			RepositoryType string `json:"repository_type"`
		} `json:"repository_info"`
	}
	admin.call("/repository/v1/plugin/register", map[string]any{"name": "E2E test plugin", "service_type": "inventory.Collector",
		"image": "nubes/test-plugin", "registry_type": "PRIVATE_REGISTRY", "registry_url": "http://registry:5000",
		"tags": map[string]any{"description": "the suite's plugin"}}).OK(&p)
	if p.PluginID != "test-plugin" || p.RepositoryInfo.RepositoryType != "local" {
		t.Fatalf("registered: %+v", p)
	}
	var v struct {
		Results    []string `json:"results"`
		TotalCount int      `json:"total_count"`
	}
	admin.call("/repository/plugin/get-versions", map[string]any{"plugin_id": p.PluginID}).OK(&v)
	if !reflect.DeepEqual(v.Results, want) || v.TotalCount != len(want) {
		t.Fatalf("versions = %+v, want %v", v, want)
	}
	// PUBLIC_HUB is the registry of the configuration (NUBES_PUBLIC_HUB_URL).
	admin.call("/repository/v1/plugin/register", map[string]any{"name": "From the hub", "resource_type": "inventory.Collector",
		"image": "nubes/test-plugin", "plugin_id": "test-plugin-hub"}).OK(nil)
	admin.call("/repository/plugin/get-versions", map[string]any{"plugin_id": "test-plugin-hub"}).OK(&v)
	if !reflect.DeepEqual(v.Results, want) {
		t.Fatalf("public hub versions = %v", v.Results)
	}
	// What the console's collector picker sends and reads.
	var l struct {
		Results []struct {
			PluginID       string            `json:"plugin_id"`
			Tags           map[string]string `json:"tags"`
			RepositoryInfo struct {
				RepositoryID string `json:"repository_id"`
			} `json:"repository_info"`
		} `json:"results"`
		TotalCount int `json:"total_count"`
	}
	admin.call("/repository/plugin/list", map[string]any{"repository_id": "", "provider": nil, "resource_type": "inventory.Collector",
		"query": map[string]any{"page": map[string]any{"start": 1, "limit": 15}, "sort": map[string]any{"key": "name"}, "keyword": "e2e"}}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].PluginID != "test-plugin" || l.Results[0].RepositoryInfo.RepositoryID != p.RepositoryInfo.RepositoryID ||
		l.Results[0].Tags["description"] == "" {
		t.Fatalf("plugin/list = %+v", l)
	}

	// The registry goes away: a 503 with its code.
	if err := reg.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	admin.call("/repository/plugin/get-versions", map[string]any{"plugin_id": p.PluginID}).Fails(http.StatusServiceUnavailable, "ERROR_REGISTRY_UNAVAILABLE")
}

// startRegistry starts a registry container (network alias alias, for
// the repository's registry_url http://<alias>:5000) and pushes the test
// plugin's image to it under tags. It returns the container.
func startRegistry(ctx context.Context, t *testing.T, alias string, tags ...string) testcontainers.Container {
	t.Helper()
	reg, err := st.start(ctx, "registry", alias, []string{alias}, testcontainers.ContainerRequest{
		ExposedPorts: []string{"5000/tcp"},
		WaitingFor:   wait.ForHTTP("/healthz").WithPort("5000/tcp").WithStartupTimeout(time.Minute),
	})
	if err != nil {
		t.Fatal(err)
	}
	regURL, err := endpoint(ctx, reg, "5000/tcp")
	if err != nil {
		t.Fatal(err)
	}
	pushImage(t, regURL, "nubes/test-plugin", tags...)
	return reg
}

// startTestPlugin starts the test plugin (gRPC on <alias>:50051) with its
// scripted replies and returns its control API's URL from the host.
func startTestPlugin(ctx context.Context, t *testing.T, alias, script string) string {
	t.Helper()
	pl, err := st.start(ctx, "test-plugin", alias, []string{alias}, testcontainers.ContainerRequest{
		Env:          map[string]string{"PLUGIN_ADDR": ":50051", "PLUGIN_CONTROL_ADDR": ":8080", "PLUGIN_SCRIPT": script},
		ExposedPorts: []string{"50051/tcp", "8080/tcp"},
		WaitingFor:   wait.ForHTTP("/healthz").WithPort("8080/tcp").WithStartupTimeout(time.Minute),
	})
	if err != nil {
		t.Fatal(err)
	}
	control, err := endpoint(ctx, pl, "8080/tcp")
	if err != nil {
		t.Fatal(err)
	}
	return control
}

// pushImage uploads one small image to the registry at base and tags it.
func pushImage(t *testing.T, base, name string, tags ...string) {
	t.Helper()
	blob := func(content []byte) map[string]any {
		sum := sha256.Sum256(content)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		resp := send(t, http.MethodPost, base+"/v2/"+name+"/blobs/uploads/", "", nil, http.StatusAccepted)
		loc, err := url.Parse(resp.Header.Get("Location"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := url.Parse(base)
		loc = b.ResolveReference(loc)
		q := loc.Query()
		q.Set("digest", digest)
		loc.RawQuery = q.Encode()
		// The registry may name its own host in Location; reach it as the test does.
		loc.Scheme, loc.Host = b.Scheme, b.Host
		send(t, http.MethodPut, loc.String(), "application/octet-stream", content, http.StatusCreated)
		return map[string]any{"digest": digest, "size": len(content)}
	}
	config := blob([]byte(`{"architecture":"amd64","os":"linux"}`))
	config["mediaType"] = "application/vnd.oci.image.config.v1+json"
	layer := blob([]byte("layer of " + name))
	layer["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": config, "layers": []any{layer}})
	for _, tag := range tags {
		send(t, http.MethodPut, base+"/v2/"+name+"/manifests/"+tag, "application/vnd.oci.image.manifest.v1+json", manifest, http.StatusCreated)
	}
}

func send(t *testing.T, method, target, contentType string, body []byte, want int) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, target, resp.StatusCode, want, b)
	}
	return resp
}
