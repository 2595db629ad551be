// Package outward is the HTTP client of requests whose target user input
// chose (a plugin's registry_url, the token realm that registry names):
// such a request must not reach inside the deployment (server-side request
// forgery). The dialer checks the address each connection actually goes
// to, after name resolution (so a name that resolves, or re-resolves,
// inward is refused too): loopback, private and link-local addresses are
// refused unless the configuration allows them (the devstack allows
// loopback); unspecified, multicast and broadcast addresses always are. A
// redirect to another host is refused, and no proxy is used (the dialer
// would then check the proxy, not the target).
//
// Errors name the rule, never the resolved address; callers must not put
// what the other side answered in their own errors either.
package outward

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Allow names the inward address kinds a deployment lets outward requests
// reach (config outward_allow_loopback, outward_allow_private,
// outward_allow_link_local; all false by default).
type Allow struct {
	// Loopback: 127.0.0.0/8 and ::1 (a devstack's own registry).
	Loopback bool `mapstructure:"outward_allow_loopback" default:"false" doc:"registry_url may be a loopback address"`
	// Private: 10/8, 172.16/12, 192.168/16, 100.64/10 (shared) and
	// fc00::/7 (a registry inside the cluster or a compose network).
	Private bool `mapstructure:"outward_allow_private" default:"false" doc:"registry_url may be a private address"`
	// LinkLocal: 169.254/16 and fe80::/10, where clouds serve instance
	// metadata and its credentials; rarely what anyone wants.
	LinkLocal bool `mapstructure:"outward_allow_link_local" default:"false" doc:"registry_url may be a link-local address"`
}

// ErrRefused is the error of a connection to an address the rule refuses.
var ErrRefused = errors.New("outward: the target resolves to an address inside the deployment (loopback, private or link-local), which this deployment does not allow")

// ErrRedirect is the error of a redirect to another host.
var ErrRedirect = errors.New("outward: the target redirected to another host")

// maxRedirects bounds redirects on the same host.
const maxRedirects = 5

var shared = netip.MustParsePrefix("100.64.0.0/10")

// Check reports whether a may reach addr.
func (a Allow) Check(addr netip.Addr) error {
	addr = addr.Unmap()
	switch {
	case !addr.IsValid(), addr.IsUnspecified(), addr.IsMulticast(), addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}),
		addr.Is4() && addr.As4()[0] == 0: // 0.0.0.0/8 reaches this host
		return ErrRefused
	case addr.IsLoopback():
		if !a.Loopback {
			return ErrRefused
		}
	case addr.IsPrivate(), shared.Contains(addr):
		if !a.Private {
			return ErrRefused
		}
	case addr.IsLinkLocalUnicast():
		if !a.LinkLocal {
			return ErrRefused
		}
	}
	return nil
}

// control is the dialer's check of the address it connects to.
func (a Allow) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return ErrRefused
	}
	return a.Check(ap.Addr())
}

// Client returns the HTTP client of outward requests under a, each bounded
// by timeout.
func Client(a Allow, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: a.control}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          20,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{Timeout: timeout, Transport: guarded{transport}, CheckRedirect: checkRedirect}
}

// guarded answers a refused dial with ErrRefused alone: the dial error
// would name the address the target resolved to.
type guarded struct{ next http.RoundTripper }

func (g guarded) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(r)
	if errors.Is(err, ErrRefused) {
		return nil, ErrRefused
	}
	return resp, err
}

func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("outward: more than %d redirects", maxRedirects)
	}
	if req.URL.Host != via[0].URL.Host || (req.URL.Scheme != via[0].URL.Scheme && req.URL.Scheme != "https") {
		return ErrRedirect
	}
	return nil
}

// Refused reports whether err is (or wraps) a refusal of this package.
func Refused(err error) bool { return errors.Is(err, ErrRefused) || errors.Is(err, ErrRedirect) }
