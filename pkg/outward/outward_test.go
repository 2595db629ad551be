package outward

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	none, all := Allow{}, Allow{Loopback: true, Private: true, LinkLocal: true}
	for _, tc := range []struct {
		addr         string
		none, onlyLo bool // allowed with nothing allowed; with loopback allowed
		all          bool
	}{
		{"93.184.215.14", true, true, true},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", true, true, true},
		{"127.0.0.1", false, true, true},
		{"127.8.9.1", false, true, true},
		{"::1", false, true, true},
		{"::ffff:127.0.0.1", false, true, true}, // mapped: the same host
		{"10.1.2.3", false, false, true},
		{"172.16.0.9", false, false, true},
		{"192.168.1.1", false, false, true},
		{"100.64.0.1", false, false, true},
		{"fd00::1", false, false, true},
		{"::ffff:10.0.0.1", false, false, true},
		{"169.254.169.254", false, false, true}, // instance metadata
		{"fe80::1", false, false, true},
		{"0.0.0.0", false, false, false},
		{"0.1.2.3", false, false, false},
		{"::", false, false, false},
		{"224.0.0.1", false, false, false},
		{"255.255.255.255", false, false, false},
	} {
		a := netip.MustParseAddr(tc.addr)
		for _, c := range []struct {
			allow Allow
			want  bool
		}{{none, tc.none}, {Allow{Loopback: true}, tc.onlyLo}, {all, tc.all}} {
			if got := c.allow.Check(a) == nil; got != c.want {
				t.Errorf("%s under %+v: allowed %v, want %v", tc.addr, c.allow, got, c.want)
			}
		}
	}
}

// The check runs on the address dialled, after resolution: "localhost"
// is refused as 127.0.0.1 is; a redirect to another host is refused.
func TestClient(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("inside")) }))
	defer target.Close()
	port := target.URL[strings.LastIndex(target.URL, ":"):]
	for _, u := range []string{target.URL, "http://localhost" + port} {
		_, err := Client(Allow{}, time.Second).Get(u)
		if !errors.Is(err, ErrRefused) || !Refused(err) {
			t.Errorf("%s: %v, want ErrRefused", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "127.0.0.1:") && !strings.Contains(u, "127.0.0.1") {
			t.Errorf("%s: the error names the resolved address: %v", u, err)
		}
	}
	lo := Client(Allow{Loopback: true}, time.Second)
	resp, err := lo.Get(target.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("loopback allowed: %v", err)
	}
	resp.Body.Close()

	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/ok":
			_, _ = w.Write([]byte("ok"))
		default:
			http.Redirect(w, r, "http://localhost"+port+"/", http.StatusFound) // another host name
		}
	}))
	defer redirect.Close()
	if resp, err := lo.Get(redirect.URL + "/same"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a redirect on the same host: %v", err)
	} else {
		resp.Body.Close()
	}
	if _, err := lo.Get(redirect.URL + "/away"); !errors.Is(err, ErrRedirect) {
		t.Fatalf("a redirect to another host: %v, want ErrRedirect", err)
	}
}
