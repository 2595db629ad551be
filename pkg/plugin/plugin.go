// Package plugin is Nubes' client of the upstream platform's plugins
// (inventory collectors, monitoring webhooks and data sources, cost-analysis
// data sources, notification protocols): gRPC, name-based like the upstream
// core. It reads each plugin's message descriptors through server reflection
// (v1, falling back to v1alpha), builds requests from Go maps by field name
// and reads replies back into maps with the proto field names, so a plugin
// built from any version of the upstream protos works.
//
// It applies the upstream call policy (ready within 3 s, unary calls 180 s,
// streams bounded only by their context, two retries on UNAVAILABLE or
// DEADLINE_EXCEEDED (Retryable, Policy: the one retry rule of the suite),
// 256 MiB receive limit) and turns every failure into an
// *errs.Error: never a 500, never a hang. Endpoints come from config
// plugin_endpoints (plugin_id or plugin_id@version → grpc://host:port or
// grpc+ssl://host:port).
//
// It holds no business rule of any service: what to send and what a reply
// means belong to the services that use it.
package plugin

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Defaults of the call policy (DESIGN.md "Plugins", plugin-protocols.md §1).
const (
	DefaultReadyTimeout  = 3 * time.Second
	DefaultCallTimeout   = 180 * time.Second
	DefaultRetries       = 2
	DefaultMaxRecvBytes  = 256 << 20
	DefaultDescriptorTTL = 5 * time.Minute
)

// Options tune the call policy; zero values take the defaults.
type Options struct {
	// ReadyTimeout bounds the wait for a connection to be ready.
	ReadyTimeout time.Duration
	// CallTimeout is the deadline of each try of a unary call. Streams
	// have none: their context cancels them.
	CallTimeout time.Duration
	// Retries after the first try on UNAVAILABLE or DEADLINE_EXCEEDED
	// (unary calls, and streams before their first message). Negative
	// means none.
	Retries int
	// RetryDelay is the wait before the first retry (default 100 ms),
	// doubled for the next (DefaultPolicy, jittered).
	RetryDelay time.Duration
	// MaxRecvBytes is the largest reply message accepted.
	MaxRecvBytes int
	// DescriptorTTL is how long a plugin's descriptors are trusted before
	// they are read again (a new image may be served at the same address).
	DescriptorTTL time.Duration
	// TLS is the configuration of grpc+ssl endpoints (default: system
	// roots, TLS 1.2 or later).
	TLS *tls.Config
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
	if o.Retries < 0 {
		o.Retries = 0
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = 100 * time.Millisecond
	}
	if o.MaxRecvBytes <= 0 {
		o.MaxRecvBytes = DefaultMaxRecvBytes
	}
	if o.DescriptorTTL <= 0 {
		o.DescriptorTTL = DefaultDescriptorTTL
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// Client calls plugins. It caches one connection and one descriptor set
// per endpoint; it is safe for concurrent use.
type Client struct {
	opts      Options
	policy    Policy            // DefaultPolicy with opts' Retries and RetryDelay
	endpoints map[string]string // lower-case plugin_id[@version] → endpoint

	mu    sync.Mutex
	conns map[string]*conn
}

// New builds a client from the endpoint map of config plugin_endpoints.
// Keys are plugin_id or plugin_id@version (matched without regard to case,
// as config keys are); every endpoint must be grpc://host:port or
// grpc+ssl://host:port.
func New(endpoints map[string]string, opts Options) (*Client, error) {
	c := &Client{opts: opts.withDefaults(), endpoints: map[string]string{}, conns: map[string]*conn{}}
	c.policy = DefaultPolicy
	c.policy.Attempts, c.policy.Base = 1+c.opts.Retries, c.opts.RetryDelay
	c.policy.Max = max(c.policy.Max, c.opts.RetryDelay)
	keys := make([]string, 0, len(endpoints))
	for k := range endpoints {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ep := strings.TrimSpace(endpoints[k])
		if _, _, err := parseEndpoint(ep); err != nil {
			return nil, fmt.Errorf("plugin_endpoints[%s]: %w", k, err)
		}
		id := strings.ToLower(strings.TrimSpace(k))
		if id == "" || strings.HasPrefix(id, "@") {
			return nil, fmt.Errorf("plugin_endpoints: %q is not plugin_id or plugin_id@version", k)
		}
		c.endpoints[id] = ep
	}
	return c, nil
}

// Endpoint is the endpoint of a plugin version: plugin_id@version when
// configured, else plugin_id. An unknown plugin is a 503
// ERROR_NO_PLUGIN_ENDPOINT naming it: the plugin is not available to this
// deployment until an operator maps it.
func (c *Client) Endpoint(pluginID, version string) (string, error) {
	id := strings.ToLower(pluginID)
	if c != nil {
		if version != "" {
			if ep, ok := c.endpoints[id+"@"+strings.ToLower(version)]; ok {
				return ep, nil
			}
		}
		if ep, ok := c.endpoints[id]; ok && id != "" {
			return ep, nil
		}
	}
	what := pluginID
	if version != "" {
		what += "@" + version
	}
	return "", errs.New(errs.NoPluginEndpoint, "No endpoint is configured for plugin %s (plugin_endpoints).", what)
}

// Plugin is the target of a plugin version found in the endpoint map. An
// unknown plugin fails at the first call.
func (c *Client) Plugin(pluginID, version string) *Target {
	ep, err := c.Endpoint(pluginID, version)
	return &Target{c: c, name: pluginID, endpoint: ep, err: err}
}

// At is the target of a plugin at a given endpoint (a static
// override, or tests).
func (c *Client) At(endpoint string) *Target {
	t := &Target{c: c, name: endpoint, endpoint: endpoint}
	if _, _, err := parseEndpoint(endpoint); err != nil {
		t.err = errs.New(errs.NoPluginEndpoint, "Plugin endpoint %q is not grpc://host:port or grpc+ssl://host:port.", endpoint)
	}
	return t
}

// Close closes every cached connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, cn := range c.conns {
		_ = cn.cc.Close()
		delete(c.conns, k)
	}
	return nil
}

// Target is one plugin to call.
type Target struct {
	c        *Client
	name     string
	endpoint string
	err      error
}

// Name is the plugin id (or endpoint) the target was built from.
func (t *Target) Name() string { return t.name }

// EndpointURI is the endpoint called.
func (t *Target) EndpointURI() string { return t.endpoint }

// parseEndpoint reads grpc://host:port or grpc+ssl://host:port.
func parseEndpoint(ep string) (addr string, useTLS bool, err error) {
	u, err := url.Parse(ep)
	if err != nil {
		return "", false, fmt.Errorf("%q is not a URI: %w", ep, err)
	}
	switch u.Scheme {
	case "grpc":
	case "grpc+ssl":
		useTLS = true
	default:
		return "", false, fmt.Errorf("%q: scheme must be grpc or grpc+ssl", ep)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("%q is not grpc[+ssl]://host:port", ep)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return "", false, fmt.Errorf("%q needs host:port", ep)
	}
	return u.Host, useTLS, nil
}

// conn is a cached connection and the descriptors its plugin serves.
type conn struct {
	cc *grpc.ClientConn

	mu      sync.Mutex
	desc    *descriptors
	descAt  time.Time
	fetchMu sync.Mutex // one reflection read at a time per endpoint
}

func (c *Client) conn(endpoint string) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn, ok := c.conns[endpoint]; ok {
		return cn, nil
	}
	addr, useTLS, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if useTLS {
		cfg := c.opts.TLS
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(cfg)
	}
	bo := backoff.DefaultConfig
	// A plugin restarting must be found again within a few seconds, not
	// after grpc's default backoff of up to two minutes.
	bo.MaxDelay = c.opts.ReadyTimeout
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: c.opts.ReadyTimeout}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.opts.MaxRecvBytes)),
	)
	if err != nil {
		return nil, err
	}
	cn := &conn{cc: cc}
	c.conns[endpoint] = cn
	return cn, nil
}

// forgetDescriptors makes the next call read the plugin's descriptors again.
func (cn *conn) forgetDescriptors() {
	cn.mu.Lock()
	cn.desc = nil
	cn.mu.Unlock()
}
