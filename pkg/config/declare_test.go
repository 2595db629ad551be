package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

type declared struct {
	Base     `mapstructure:",squash"`
	Every    time.Duration     `mapstructure:"sweep_every" default:"30s" min:"1ms" doc:"how often"`
	Rate     float64           `mapstructure:"rate" default:"0.5" min:"0"`
	Tries    int               `mapstructure:"tries" default:"10" min:"1" max:"100"`
	Mode     string            `mapstructure:"mode" default:"fast" enum:"fast|slow"`
	On       bool              `mapstructure:"on" default:"true"`
	Token    string            `mapstructure:"token" secret:"true"`
	Map      map[string]string `mapstructure:"map" default:"a=1,b=2"`
	internal int
}

// One declaration gives the defaults (typed, and as Load takes them),
// the environment names, the bounds and the masked print.
func TestDeclared(t *testing.T) {
	var d declared
	if err := SetDefaults(&d); err != nil {
		t.Fatal(err)
	}
	want := declared{Every: 30 * time.Second, Rate: 0.5, Tries: 10, Mode: "fast", On: true, Map: map[string]string{"a": "1", "b": "2"}}
	want.Base = d.Base
	if !reflect.DeepEqual(d, want) || d.MongoPoolSize != 64 || d.HTTPIdleTimeout != 2*time.Minute || d.LogFormat != "auto" {
		t.Fatalf("defaults %+v", d)
	}
	// Load with nothing set gives the same.
	var loaded declared
	if err := LoadDeclared(&loaded); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(loaded, d) {
		t.Fatalf("loaded %+v, want the defaults %+v", loaded, d)
	}
	keys := Describe(&d)
	byName := map[string]Key{}
	for _, k := range keys {
		byName[k.Name] = k
	}
	if k := byName["sweep_every"]; k.Env != "NUBES_SWEEP_EVERY" || k.Default != "30s" || k.Min != "1ms" || k.Doc != "how often" {
		t.Errorf("sweep_every %+v", k)
	}
	if k := byName["mongo_uri"]; !k.Secret || k.Env != "NUBES_MONGO_URI" {
		t.Errorf("mongo_uri %+v", k)
	}
	if _, ok := byName["internal"]; ok || len(keys) != len(Describe(&Base{}))+7 {
		t.Errorf("%d keys: %v", len(keys), keys)
	}
	// Every key can be set, the ones with a zero default too.
	t.Setenv("NUBES_SWEEP_EVERY", "2m")
	t.Setenv("NUBES_TOKEN", "s3cret")
	t.Setenv("NUBES_TRIES", "3")
	if err := LoadDeclared(&loaded); err != nil {
		t.Fatal(err)
	}
	if loaded.Every != 2*time.Minute || loaded.Token != "s3cret" || loaded.Tries != 3 {
		t.Fatalf("from the environment: %+v", loaded)
	}
	if s := String(&loaded); strings.Contains(s, "s3cret") || !strings.Contains(s, "token=***") || !strings.Contains(s, "sweep_every=2m0s") {
		t.Fatalf("print %s", s)
	}
}

// A value outside its declared bound stops the binary, naming the key.
func TestDeclaredBounds(t *testing.T) {
	for env, want := range map[string]string{
		"NUBES_TRIES=0":                      "tries is 0; it must be at least 1",
		"NUBES_TRIES=101":                    "tries is 101; it must be at most 100",
		"NUBES_SWEEP_EVERY=0s":               "sweep_every is 0s; it must be at least 1ms",
		"NUBES_RATE=-1":                      "rate is -1; it must be at least 0",
		"NUBES_MODE=quick":                   `mode is "quick"; want one of fast, slow`,
		"NUBES_MONGO_POOL_SIZE=0":            "mongo_pool_size is 0",
		"NUBES_NATS_STREAM_REPLICAS=7":       "nats_stream_replicas is 7; it must be at most 5",
		"NUBES_MAX_PAGE_SIZE=0":              "max_page_size is 0; it must be at least 1",
		"NUBES_HTTP_IDLE_TIMEOUT=-1s":        "http_idle_timeout is -1s",
		"NUBES_STAT_MAX_GROUPS=-3":           "stat_max_groups is -3",
		"NUBES_SHUTDOWN_TIMEOUT=-1s":         "shutdown_timeout is -1s",
		"NUBES_MONGO_TIMEOUT=0s":             "mongo_timeout is 0s",
		"NUBES_STAT_MAX_PUSHED=0":            "stat_max_pushed is 0",
		"NUBES_HTTP_WRITE_TIMEOUT=-5s":       "http_write_timeout is -5s",
		"NUBES_DRAIN_DELAY=-1ms":             "drain_delay is -1ms",
		"NUBES_HTTP_READ_TIMEOUT=-1s":        "http_read_timeout is -1s",
		"NUBES_HTTP_READ_HEADER_TIMEOUT=-1s": "http_read_header_timeout is -1s",
	} {
		k, v, _ := strings.Cut(env, "=")
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, v)
			var d declared
			err := LoadDeclared(&d)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %v, want %q", env, err, want)
			}
		})
	}
}

// TestConfigurationDoc: docs/configuration.md lists every key of Base in
// "A service", with its default; and names no key Base does not have.
func TestConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range DocProblems(string(doc), "A service", &Base{}) {
		t.Error(p)
	}
	if p := DocProblems(string(doc), "No such section", &Base{}); len(p) != 1 {
		t.Errorf("a missing section: %v", p)
	}
	// The check fails where the doc drifts: a wrong default, a key not
	// listed, a key listed that is not declared.
	fake := "\n## S\n| key | default | meaning |\n|---|---|---|\n| `rate` (`NUBES_RATE`) | `0.7` | x |\n| `gone` | `1` | x |\n| `name` | empty | x |\n"
	got := DocProblems(fake, "S", &struct {
		Rate  float64 `mapstructure:"rate" default:"0.5"`
		Tries int     `mapstructure:"tries" default:"3"`
		Name  string  `mapstructure:"name"`
	}{})
	if len(got) != 3 || !strings.Contains(strings.Join(got, "\n"), "`rate` defaults to `0.5`") {
		t.Errorf("drift found: %q", got)
	}
}
