package config

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type svcConfig struct {
	Base   `mapstructure:",squash"`
	Secret string `mapstructure:"secret" secret:"true"`
}

func defaults() map[string]any {
	d := BaseDefaults()
	d["secret"] = ""
	return d
}

func TestLoadPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("http_addr: \":9000\"\nlog_level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NUBES_CONFIG", file)
	t.Setenv("NUBES_LOG_LEVEL", "warn")
	t.Setenv("NUBES_MONGO_URI", "mongodb://user:pw@db:27017/")
	var c svcConfig
	if err := Load(&c, defaults()); err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":9000" || c.LogLevel != "warn" || c.MongoDatabase != "nubes" {
		t.Fatalf("got %+v", c.Base)
	}
	if s := String(&c); strings.Contains(s, "pw") || !strings.Contains(s, "mongo_uri=mongodb://***@db:27017/") {
		t.Fatalf("secret not masked: %s", s)
	}
}

func TestLoadRejectsUnknownKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("htp_addr: \":9000\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NUBES_CONFIG", file)
	var c svcConfig
	if err := Load(&c, defaults()); err == nil || !strings.Contains(err.Error(), "htp_addr") {
		t.Fatalf("want unknown key error, got %v", err)
	}
}

// TestJWKSReader: a file or a URL is read again on every call (rotation);
// an inline set has no reader.
func TestJWKSReader(t *testing.T) {
	ctx := context.Background()
	if (&Base{JWKS: "{}"}).JWKSReader() != nil {
		t.Fatal("an inline set has a reader")
	}
	if _, err := (&Base{}).JWKSBytes(ctx); (&Base{}).JWKSReader() != nil || err == nil {
		t.Fatal("no JWKS configured, yet a reader or no error")
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	served := `{"keys":["a"]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(served)) }))
	defer srv.Close()
	for name, b := range map[string]*Base{"file": {JWKSFile: path}, "url": {JWKSURL: srv.URL}} {
		if err := os.WriteFile(path, []byte(`{"keys":["a"]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		served = `{"keys":["a"]}`
		first, err := b.JWKSBytes(ctx)
		if err != nil || string(first) != `{"keys":["a"]}` {
			t.Fatalf("%s: first read %q, %v", name, first, err)
		}
		if err := os.WriteFile(path, []byte(`{"keys":["b"]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		served = `{"keys":["b"]}`
		again, err := b.JWKSReader()(ctx)
		if err != nil || string(again) != `{"keys":["b"]}` {
			t.Fatalf("%s: read again %q, %v", name, again, err)
		}
	}
}

func TestParseMap(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{"", map[string]string{}, false},
		{"a=grpc://127.0.0.1:1", map[string]string{"a": "grpc://127.0.0.1:1"}, false},
		{" a=x , b@1.2.0=grpc+ssl://h:443 ,", map[string]string{"a": "x", "b@1.2.0": "grpc+ssl://h:443"}, false},
		{"a", nil, true},
		{"=x", nil, true},
	} {
		got, err := ParseMap(tc.in)
		if (err != nil) != tc.err || (!tc.err && !maps.Equal(got, tc.want)) {
			t.Errorf("ParseMap(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestLoadMapFromEnv(t *testing.T) {
	t.Setenv("NUBES_PLUGIN_ENDPOINTS", "plugin-a=grpc://127.0.0.1:50051,plugin-b@1.2.0=grpc+ssl://host:443")
	t.Setenv("NUBES_SERVICE_URLS", "identity=http://identity:8080")
	var b Base
	if err := Load(&b, BaseDefaults()); err != nil {
		t.Fatal(err)
	}
	if b.PluginEndpoints["plugin-a"] != "grpc://127.0.0.1:50051" || b.PluginEndpoints["plugin-b@1.2.0"] != "grpc+ssl://host:443" || len(b.PluginEndpoints) != 2 {
		t.Errorf("plugin_endpoints = %v", b.PluginEndpoints)
	}
	if b.ServiceURLs["identity"] != "http://identity:8080" {
		t.Errorf("service_urls = %v", b.ServiceURLs)
	}
}

// TestLoadFromFile: k_file (NUBES_K_FILE or a config file key) reads k
// from a file, without its trailing line break; both given is refused;
// keys that are the binary's own (jwks_file) keep their meaning.
func TestLoadFromFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o400); err != nil {
			t.Fatal(err)
		}
		return p
	}
	uri := write("mongo-uri", "mongodb://u:pw@db:27017/\n")
	secret := write("secret", "s3cret\r\n")
	token := write("token", "tok en  ")

	t.Run("env", func(t *testing.T) {
		t.Setenv("NUBES_MONGO_URI_FILE", uri)
		t.Setenv("NUBES_SECRET_FILE", secret)
		t.Setenv("NUBES_SERVICE_TOKEN_FILE", token)
		t.Setenv("NUBES_JWKS_FILE", "/nonexistent/jwks.json")
		var c svcConfig
		if err := Load(&c, defaults()); err != nil {
			t.Fatal(err)
		}
		if c.MongoURI != "mongodb://u:pw@db:27017/" || c.Secret != "s3cret" || c.ServiceToken != "tok en  " {
			t.Fatalf("got mongo_uri %q secret %q service_token %q", c.MongoURI, c.Secret, c.ServiceToken)
		}
		if c.JWKSFile != "/nonexistent/jwks.json" || c.JWKS != "" {
			t.Fatalf("jwks_file is the binary's own key: jwks_file %q jwks %q", c.JWKSFile, c.JWKS)
		}
	})
	t.Run("config file", func(t *testing.T) {
		t.Setenv("NUBES_CONFIG", write("c.yaml", "secret_file: "+secret+"\n"))
		var c svcConfig
		if err := Load(&c, defaults()); err != nil {
			t.Fatal(err)
		}
		if c.Secret != "s3cret" {
			t.Fatalf("secret %q", c.Secret)
		}
	})
	for name, set := range map[string]map[string]string{
		"both in env":           {"NUBES_SECRET_FILE": secret, "NUBES_SECRET": "other"},
		"file missing":          {"NUBES_SECRET_FILE": filepath.Join(dir, "nope")},
		"value in config, file": {"NUBES_SECRET_FILE": secret, "NUBES_CONFIG": write("both.yaml", "secret: other\n")},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range set {
				t.Setenv(k, v)
			}
			var c svcConfig
			if err := Load(&c, defaults()); err == nil {
				t.Fatalf("accepted %v: secret %q", set, c.Secret)
			}
		})
	}
	// A _file key for no known key is still unknown.
	t.Run("unknown _file", func(t *testing.T) {
		t.Setenv("NUBES_CONFIG", write("u.yaml", "nothing_file: /x\n"))
		var c svcConfig
		if err := Load(&c, defaults()); err == nil || !strings.Contains(err.Error(), "nothing_file") {
			t.Fatalf("want unknown key nothing_file, got %v", err)
		}
	})
}
