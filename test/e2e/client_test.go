package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/auth"
)

var httpClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
}

// target is where a caller's requests go: one replica, or several behind
// the suite's round-robin.
type target interface {
	send(ctx context.Context, path, token string, body []byte) (status int, resp []byte, err error)
}

// direct is one replica by its base URL.
type direct string

func (d direct) send(ctx context.Context, path, token string, body []byte) (int, []byte, error) {
	return post(ctx, string(d), path, token, body)
}

func post(ctx context.Context, base, path, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// roundRobin spreads requests over replicas the way a Kubernetes Service
// with readiness does: a replica whose /readyz does not answer 200 (polled
// every 100 ms) gets no new request. A connection refused means nothing
// was sent, so the request goes to the next replica; any other error, and
// every HTTP answer, is the caller's result, never retried.
type roundRobin struct {
	backends []*backend
	next     atomic.Uint64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

type backend struct {
	name    string
	url     string
	ready   atomic.Bool
	served  atomic.Int64
	refused atomic.Int64
}

func newRoundRobin(t *testing.T, replicas ...*replica) *roundRobin {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rr := &roundRobin{cancel: cancel}
	for _, r := range replicas {
		b := &backend{name: r.name, url: r.url}
		rr.backends = append(rr.backends, b)
		rr.wg.Go(func() { b.poll(ctx) })
	}
	t.Cleanup(rr.stop)
	deadline := time.Now().Add(30 * time.Second)
	for _, b := range rr.backends {
		for !b.ready.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("replica %s never ready", b.name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return rr
}

func (b *backend) poll(ctx context.Context) {
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		status, _, err := get(pctx, b.url+"/readyz")
		cancel()
		b.ready.Store(err == nil && status == http.StatusOK)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (rr *roundRobin) stop() {
	rr.cancel()
	rr.wg.Wait()
}

func (rr *roundRobin) pick() *backend {
	n := uint64(len(rr.backends))
	start := rr.next.Add(1)
	for i := range n {
		if b := rr.backends[(start+i)%n]; b.ready.Load() {
			return b
		}
	}
	return nil
}

func (rr *roundRobin) send(ctx context.Context, path, token string, body []byte) (int, []byte, error) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b := rr.pick()
		if b == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		status, resp, err := post(ctx, b.url, path, token, body)
		if errors.Is(err, syscall.ECONNREFUSED) {
			b.ready.Store(false)
			b.refused.Add(1)
			continue
		}
		if err == nil {
			b.served.Add(1)
		}
		return status, resp, err
	}
	return 0, nil, errors.New("round-robin: no replica accepted the connection")
}

func (rr *roundRobin) String() string {
	s := ""
	for _, b := range rr.backends {
		s += fmt.Sprintf("%s served %d (refused %d) ", b.name, b.served.Load(), b.refused.Load())
	}
	return s
}

// caller is one API client: a credential and a target.
type caller struct {
	t      *testing.T
	to     target
	token  string
	domain string
	user   string
}

// as mints a token for p the way identity will.
func as(t *testing.T, to target, p auth.Principal, ttl time.Duration) *caller {
	t.Helper()
	tok, err := st.signer.Issue(p, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return &caller{t: t, to: to, token: tok, domain: p.DomainID, user: p.UserID}
}

func systemCaller(t *testing.T, to target) *caller {
	return as(t, to, auth.Principal{TokenType: auth.SystemToken, Role: auth.SystemAdmin,
		DomainID: "domain-" + randHex(6), UserID: "system"}, time.Hour)
}

func domainAdmin(t *testing.T, to target, domain string) *caller {
	return as(t, to, auth.Principal{DomainID: domain, UserID: "admin-" + randHex(3) + "@example.com", Role: auth.DomainAdmin}, time.Hour)
}

func (c *caller) with(to target) *caller {
	cc := *c
	cc.to = to
	return &cc
}

// result is one answer.
type result struct {
	t      *testing.T
	path   string
	status int
	body   []byte
	took   time.Duration
}

func (c *caller) call(path string, body any) result {
	c.t.Helper()
	r, err := c.try(path, body)
	if err != nil {
		c.t.Fatalf("%s: %v", path, err)
	}
	return r
}

// try is call for concurrent use: it returns the transport error.
func (c *caller) try(path string, body any) (result, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	status, resp, err := c.to.send(ctx, path, c.token, b)
	return result{t: c.t, path: path, status: status, body: resp, took: time.Since(start)}, err
}

// OK fails the test unless the answer is 200, and decodes it into out.
func (r result) OK(out any) result {
	r.t.Helper()
	if r.status != http.StatusOK {
		r.t.Fatalf("%s: status %d, want 200: %s", r.path, r.status, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			r.t.Fatalf("%s: decode %s: %v", r.path, r.body, err)
		}
	}
	return r
}

// Fails checks the status and the error code of the body.
func (r result) Fails(status int, code string) result {
	r.t.Helper()
	var e struct {
		Detail struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"detail"`
	}
	_ = json.Unmarshal(r.body, &e)
	if r.status != status || e.Detail.Code != code {
		r.t.Fatalf("%s: got %d %s, want %d %s: %s", r.path, r.status, e.Detail.Code, status, code, r.body)
	}
	return r
}

func (r result) JSON() map[string]any {
	r.t.Helper()
	var m map[string]any
	r.OK(&m)
	return m
}

// The shapes of the board API the suite reads.
type boardInfo struct {
	BoardID    string   `json:"board_id"`
	Name       string   `json:"name"`
	Categories []string `json:"categories"`
}

type postInfo struct {
	PostID    string `json:"post_id"`
	BoardID   string `json:"board_id"`
	Category  string `json:"category"`
	Title     string `json:"title"`
	ViewCount int    `json:"view_count"`
	Writer    string `json:"writer"`
	DomainID  string `json:"domain_id"`
	UserID    string `json:"user_id"`
}

type postList struct {
	Results    []postInfo `json:"results"`
	TotalCount int        `json:"total_count"`
}

func newPost(boardID, title, category string) map[string]any {
	return map[string]any{"board_id": boardID, "board_type": "NOTICE", "resource_group": "DOMAIN",
		"title": title, "contents": "contents of " + title, "category": category}
}
