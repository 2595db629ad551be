package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Checker confirms that a credential which verified offline is still good:
// its user is enabled, its API key is enabled, not deleted and not
// expired. Only identity knows; other services ask it (RemoteChecker).
type Checker interface {
	Check(ctx context.Context, bearer string, p *Principal) error
}

// CheckTTL is how long an answer of the checker is trusted. A disabled
// user or API key is refused everywhere within this time.
const CheckTTL = 4 * time.Second

// Checked verifies credentials with a and then asks c, caching each
// answer (good or bad) for ttl. SYSTEM tokens have no record to check.
func Checked(a Authenticator, c Checker, ttl time.Duration) Authenticator {
	return &checked{a: a, c: c, ttl: ttl, now: time.Now, cache: map[[32]byte]checkEntry{}}
}

type checked struct {
	a     Authenticator
	c     Checker
	ttl   time.Duration
	now   func() time.Time // time.Now; tests move their own clock
	group singleflight.Group
	mu    sync.Mutex
	cache map[[32]byte]checkEntry
}

type checkEntry struct {
	err     error
	expires time.Time
}

func (k *checked) Authenticate(ctx context.Context, bearer string) (*Principal, error) {
	p, err := k.a.Authenticate(ctx, bearer)
	if err != nil || p.TokenType == SystemToken {
		return p, err
	}
	key := sha256.Sum256([]byte(bearer))
	now := k.now()
	k.mu.Lock()
	e, ok := k.cache[key]
	k.mu.Unlock()
	if ok && now.Before(e.expires) {
		return p, e.err
	}
	v, _, _ := k.group.Do(string(key[:]), func() (any, error) {
		err := k.c.Check(ctx, bearer, p)
		if errs.Is(err, errs.Unavailable) {
			return err, nil // an outage is not cached
		}
		k.mu.Lock()
		if len(k.cache) > 100_000 { // drop expired answers before growing further
			for key, e := range k.cache {
				if now.After(e.expires) {
					delete(k.cache, key)
				}
			}
		}
		k.cache[key] = checkEntry{err: err, expires: k.now().Add(k.ttl)}
		k.mu.Unlock()
		return err, nil
	})
	if err, _ := v.(error); err != nil {
		return nil, err
	}
	return p, nil
}

// RemoteChecker asks identity at baseURL (POST /identity/v2/token/check
// with the credential as bearer) whether a credential is still good.
func RemoteChecker(baseURL string, client *http.Client) Checker {
	if client == nil {
		client = &http.Client{Timeout: 3 * time.Second}
	}
	return &remote{url: strings.TrimRight(baseURL, "/") + "/identity/v2/token/check", client: client}
}

type remote struct {
	url    string
	client *http.Client
}

func (r *remote) Check(ctx context.Context, bearer string, _ *Principal) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, strings.NewReader("{}"))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return errs.Down("The identity service", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var e struct {
		Detail struct{ Code, Message string } `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil && e.Detail.Code != "" && resp.StatusCode < 500 {
		return &errs.Error{Code: e.Detail.Code, Message: e.Detail.Message}
	}
	return errs.Down("The identity service", fmt.Errorf("token check answered %d", resp.StatusCode))
}
