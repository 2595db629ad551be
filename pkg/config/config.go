// Package config loads a service's typed configuration with viper:
// defaults set in one place, then an optional file (NUBES_CONFIG), then
// NUBES_* environment variables. Unknown keys in the file are refused, and
// String prints the result with secrets masked. Any key k may instead be
// read from a file named by k_file (NUBES_K_FILE), so credentials can be
// mounted read-only rather than passed as environment variables.
package config

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// Base is the configuration every Nubes binary shares, declared once
// (declare.go: each field's key, default and bound); services embed it
// with `mapstructure:",squash"`. docs/configuration.md "A service" says
// what each key means (TestConfigurationDoc checks it lists every key
// with its default).
type Base struct {
	HTTPAddr string `mapstructure:"http_addr" default:":8080"`
	// GRPCAddr serves the same operations over gRPC as upstream's clients
	// call them (pkg/grpcapi); empty: no gRPC.
	GRPCAddr      string        `mapstructure:"grpc_addr" default:":50051"`
	MongoURI      string        `mapstructure:"mongo_uri" default:"mongodb://127.0.0.1:27017/" secret:"true"`
	MongoDatabase string        `mapstructure:"mongo_database" default:"nubes"`
	MongoPoolSize uint64        `mapstructure:"mongo_pool_size" default:"64" min:"1"`
	MongoTimeout  time.Duration `mapstructure:"mongo_timeout" default:"10s" min:"1ms"`
	NATSURL       string        `mapstructure:"nats_url" default:"nats://127.0.0.1:4222" secret:"true"`
	NATSReplicas  int           `mapstructure:"nats_stream_replicas" default:"1" min:"1" max:"5"`
	// NATSUser and NATSPassword are this service's NATS user (the Helm
	// chart's NATS authorization gives each its own subjects).
	NATSUser     string `mapstructure:"nats_user"`
	NATSPassword string `mapstructure:"nats_password" secret:"true"`
	JWKSFile     string `mapstructure:"jwks_file"`
	JWKS         string `mapstructure:"jwks"`
	JWKSURL      string `mapstructure:"jwks_url"`
	IdentityURL  string `mapstructure:"identity_url"`
	// ServiceURLs maps a service name of the suite (identity, repository,
	// ...) to its base URL, for calls between services (pkg/call) and
	// identity's endpoint/list. As an environment variable:
	// NUBES_SERVICE_URLS=identity=http://identity:8080,repository=http://repository:8080
	ServiceURLs map[string]string `mapstructure:"service_urls"`
	// ServiceToken is the SYSTEM credential a service presents when it
	// calls another on no caller's behalf (workers, schedules).
	ServiceToken string `mapstructure:"service_token" secret:"true"`
	// PluginEndpoints maps plugin_id or plugin_id@version to a gRPC
	// endpoint (grpc://host:port or grpc+ssl://host:port). As an
	// environment variable: NUBES_PLUGIN_ENDPOINTS=plugin-a=grpc://127.0.0.1:50051,plugin-b@1.2.0=grpc+ssl://host:443
	PluginEndpoints map[string]string `mapstructure:"plugin_endpoints"`
	// LogFormat: text on a terminal when auto, else JSON (any other
	// value is JSON too, as it always was); LogLevel any case.
	LogFormat       string        `mapstructure:"log_format" default:"auto"`
	LogLevel        string        `mapstructure:"log_level" default:"info"`
	DrainDelay      time.Duration `mapstructure:"drain_delay" default:"5s" min:"0s"`
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" default:"20s" min:"0s"`
	// The HTTP server's connection timeouts (pkg/server.Options).
	HTTPReadHeaderTimeout time.Duration `mapstructure:"http_read_header_timeout" default:"10s" min:"0s"`
	HTTPReadTimeout       time.Duration `mapstructure:"http_read_timeout" default:"30s" min:"0s"`
	HTTPWriteTimeout      time.Duration `mapstructure:"http_write_timeout" default:"60s" min:"0s"`
	HTTPIdleTimeout       time.Duration `mapstructure:"http_idle_timeout" default:"2m" min:"0s"`
	// Bounds of list, stat and analyze (pkg/query, pkg/stat).
	MaxPageSize   int `mapstructure:"max_page_size" default:"1000" min:"1"`
	StatMaxGroups int `mapstructure:"stat_max_groups" default:"10000" min:"1"`
	StatMaxPushed int `mapstructure:"stat_max_pushed" default:"100000" min:"1"`
}

// BaseDefaults are the defaults of Base, as Load takes them.
func BaseDefaults() map[string]any { return Defaults(&Base{}) }

// Validate checks Base: its declared bounds, and what needs two keys.
func (b *Base) Validate() error {
	if b.MongoURI == "" || b.MongoDatabase == "" {
		return fmt.Errorf("mongo_uri and mongo_database are required")
	}
	return Check(b)
}

// JWKSBytes returns the configured JWK set, fetching it from jwks_url
// (retrying for up to a minute, as identity may be starting too).
func (b *Base) JWKSBytes(ctx context.Context) ([]byte, error) {
	if b.JWKS != "" {
		return []byte(b.JWKS), nil
	}
	read := b.JWKSReader()
	switch {
	case read == nil:
		return nil, fmt.Errorf("one of jwks, jwks_file or jwks_url (NUBES_JWKS, NUBES_JWKS_FILE, NUBES_JWKS_URL) is required")
	case b.JWKSFile != "":
		return read(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		body, err := read(ctx)
		if err == nil {
			return body, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("fetch JWKS from %s: %w", b.JWKSURL, err)
		case <-time.After(time.Second):
		}
	}
}

// JWKSReader reads the JWK set again from where it is configured (nil
// for an inline set), so services follow identity's key rotation.
func (b *Base) JWKSReader() func(context.Context) ([]byte, error) {
	switch {
	case b.JWKS != "":
		return nil
	case b.JWKSFile != "":
		return func(context.Context) ([]byte, error) { return os.ReadFile(b.JWKSFile) }
	case b.JWKSURL != "":
		return func(ctx context.Context) ([]byte, error) { return fetch(ctx, b.JWKSURL) }
	}
	return nil
}

func fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// Load fills out (a pointer to a struct with mapstructure tags) from
// defaults, the file named by NUBES_CONFIG if set, and NUBES_* variables.
// A file key without a default is refused; defaults may hold more keys than
// out (a binary's own keys beside config.Base).
func Load(out any, defaults map[string]any) error {
	v := viper.New()
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	v.SetEnvPrefix("NUBES")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if f := os.Getenv("NUBES_CONFIG"); f != "" {
		v.SetConfigFile(f)
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("read config %s: %w", f, err)
		}
		for _, k := range v.AllKeys() {
			if _, ok := defaults[k]; !ok && fileOf(k, defaults) == "" {
				return fmt.Errorf("config %s: unknown key %q", f, k)
			}
		}
	}
	if err := readFiles(v, defaults); err != nil {
		return err
	}
	return v.Unmarshal(out, func(c *mapstructure.DecoderConfig) {
		c.DecodeHook = mapstructure.ComposeDecodeHookFunc(mapstructure.StringToTimeDurationHookFunc(), stringToMap, mapstructure.StringToSliceHookFunc(","))
	})
}

// FileSuffix names the key that reads key k from a file: k + FileSuffix.
const FileSuffix = "_file"

// fileOf returns the key read from the file that key names (mongo_uri for
// mongo_uri_file), or "" when key is not such a name. A key whose _file
// name is itself a default (jwks_file, signing_key_file) is the binary's
// own: it reads that file itself (again, on rotation), so it has no
// generic one.
func fileOf(key string, defaults map[string]any) string {
	k, ok := strings.CutSuffix(key, FileSuffix)
	if !ok || k == "" {
		return ""
	}
	if _, known := defaults[k]; !known {
		return ""
	}
	if _, own := defaults[key]; own {
		return ""
	}
	return k
}

// readFiles sets every key k whose k_file is given (config file or
// NUBES_K_FILE) to that file's content, without its trailing line break.
// k given as well is refused: which one wins would be a guess.
func readFiles(v *viper.Viper, defaults map[string]any) error {
	for k := range defaults {
		fk := k + FileSuffix
		if fileOf(fk, defaults) == "" {
			continue
		}
		path := v.GetString(fk)
		if path == "" {
			continue
		}
		if _, inEnv := os.LookupEnv("NUBES_" + strings.ToUpper(k)); inEnv || v.InConfig(k) {
			return fmt.Errorf("config: %s and %s are both set; set one", k, fk)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("config: %s: %w", fk, err)
		}
		v.Set(k, strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"))
	}
	return nil
}

// stringToMap reads a map[string]string given as one string,
// "key=value,key=value", as environment variables give it.
func stringToMap(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to != reflect.TypeFor[map[string]string]() {
		return data, nil
	}
	return ParseMap(data.(string))
}

// ParseMap parses "key=value,key=value" (spaces around items ignored).
func ParseMap(s string) (map[string]string, error) {
	out := map[string]string{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key=value", item)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// String renders cfg as key=value pairs with fields tagged secret masked
// (the print at start): every keyed field, embedded ones included.
func String(cfg any) string {
	var b strings.Builder
	v := reflect.Indirect(reflect.ValueOf(cfg))
	walkFields(v.Type(), func(f reflect.StructField, path []int) {
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		val := fmt.Sprint(v.FieldByIndex(path).Interface())
		if f.Tag.Get("secret") == "true" && val != "" {
			val = mask(val)
		}
		fmt.Fprintf(&b, "%s=%s ", name, val)
	})
	return strings.TrimSpace(b.String())
}

// OwnString is String without Base's keys: a service's own settings, for
// the print at start beside Base's.
func OwnString(cfg any) string {
	base := map[string]bool{}
	for _, k := range Describe(&Base{}) {
		base[k.Name] = true
	}
	var out []string
	for kv := range strings.FieldsSeq(String(cfg)) {
		if k, _, _ := strings.Cut(kv, "="); !base[k] {
			out = append(out, kv)
		}
	}
	return strings.Join(out, " ")
}

// mask keeps a URI's scheme and host but hides credentials; other secrets vanish.
func mask(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		rest := s[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			return s[:i+3] + "***@" + rest[at+1:]
		}
		return s
	}
	return "***"
}
