// Package call is how one service of the suite calls another: a POST of
// the callee's public API over HTTP, on the caller's behalf (the bearer of
// the request being served) or, with no caller (workers, schedules), with
// the configured service credential.
//
// The callee's error passes through with its status and code; a callee
// that cannot be reached, or answers 5xx without a code, is a 503. A 401 or
// 403 answered to the service credential is a 503 too: the deployment's
// credential is wrong, which is not the caller's session ending (a console
// logs its user out on 401). It holds
// no business rule and knows no service's types.
package call

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
)

// Timeout bounds one call between services.
const Timeout = 30 * time.Second

// maxResponse bounds what a callee's answer may weigh.
const maxResponse = 32 << 20

// Services are the clients of the suite's services, by name.
type Services struct {
	urls  map[string]string
	token string
	http  *http.Client
}

// NewServices builds the directory from base URLs by service name
// (config service_urls) and the service credential (config service_token).
// client may be nil.
func NewServices(urls map[string]string, serviceToken string, client *http.Client) *Services {
	if client == nil {
		client = &http.Client{Timeout: Timeout}
	}
	m := make(map[string]string, len(urls))
	for k, v := range urls {
		m[k] = strings.TrimRight(v, "/")
	}
	return &Services{urls: m, token: serviceToken, http: client}
}

// URL is the base URL of a service, "" when not configured.
func (s *Services) URL(service string) string {
	if s == nil {
		return ""
	}
	return s.urls[service]
}

// Client returns the client of one service.
func (s *Services) Client(service string) *Client {
	if s == nil {
		return &Client{service: service}
	}
	return &Client{service: service, base: s.urls[service], token: s.token, http: s.http}
}

// Client calls one service.
type Client struct {
	service string
	base    string
	token   string
	http    *http.Client
}

// NewClient is a client of the service at baseURL with a fixed credential
// (another Nubes deployment, such as a remote repository).
func NewClient(service, baseURL, token string, client *http.Client) *Client {
	if client == nil {
		client = &http.Client{Timeout: Timeout}
	}
	return &Client{service: service, base: strings.TrimRight(baseURL, "/"), token: token, http: client}
}

// Call POSTs req (marshalled to JSON; nil sends {}) to path and decodes the
// answer into resp (nil to ignore it). The bearer is the caller's from ctx
// when there is one, else the service credential.
func (c *Client) Call(ctx context.Context, path string, req, resp any) error {
	if bearer := auth.BearerFromContext(ctx); bearer != "" {
		return c.do(ctx, bearer, false, path, req, resp)
	}
	return c.do(ctx, c.token, true, path, req, resp)
}

// CallAsService is Call with the service credential whoever the caller is:
// for operations only a SYSTEM caller may use.
func (c *Client) CallAsService(ctx context.Context, path string, req, resp any) error {
	return c.do(ctx, c.token, true, path, req, resp)
}

// do sends the call; asService says the bearer is the service credential.
func (c *Client) do(ctx context.Context, bearer string, asService bool, path string, req, resp any) error {
	what := "The " + c.service + " service"
	if c.base == "" {
		return errs.Down(what, fmt.Errorf("no URL configured for service %q (service_urls)", c.service))
	}
	body := []byte("{}")
	if req != nil {
		var err error
		if body, err = json.Marshal(req); err != nil {
			return fmt.Errorf("call %s%s: %w", c.service, path, err)
		}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return errs.Down(what, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		hreq.Header.Set("Authorization", "Bearer "+bearer)
	}
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return errs.Down(what, err)
	}
	defer hresp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponse))
	if err != nil {
		return errs.Down(what, err)
	}
	if hresp.StatusCode != http.StatusOK {
		var e struct {
			Detail struct{ Code, Message string } `json:"detail"`
		}
		if asService && (hresp.StatusCode == http.StatusUnauthorized || hresp.StatusCode == http.StatusForbidden) {
			return errs.Down(what, fmt.Errorf("%s refused the service credential (%d): check service_token", path, hresp.StatusCode))
		}
		if json.Unmarshal(raw, &e) == nil && e.Detail.Code != "" && hresp.StatusCode != http.StatusServiceUnavailable && hresp.StatusCode < 500 {
			return errs.Passthrough(hresp.StatusCode, e.Detail.Code, e.Detail.Message)
		}
		return errs.Down(what, fmt.Errorf("%s answered %d: %.200s", path, hresp.StatusCode, raw))
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(raw, resp); err != nil {
		return errs.Down(what, fmt.Errorf("%s: undecodable answer: %w", path, err))
	}
	return nil
}
