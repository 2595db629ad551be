package config

import (
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
