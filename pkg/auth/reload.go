package auth

import (
	"context"
	"crypto/rsa"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Reload makes v follow the JWK set that read returns (a file a Secret
// is mounted at, identity's /.well-known/jwks.json): a token naming a key
// v does not hold reads the set again, at most once per minInterval so
// that made-up key ids cannot turn into a flood of reads, and a set older
// than maxAge is read again in the background, so a key removed from it
// stops verifying within about maxAge. A failed read keeps the keys held.
func (v *Verifier) Reload(read func(context.Context) ([]byte, error), minInterval, maxAge time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v.reload = &reloader{read: read, minInterval: minInterval, maxAge: maxAge, log: log, now: time.Now}
	v.reload.loaded.Store(time.Now().UnixNano())
}

type reloader struct {
	read                func(context.Context) ([]byte, error)
	minInterval, maxAge time.Duration
	log                 *slog.Logger
	now                 func() time.Time // time.Now; tests move their own clock

	loaded atomic.Int64 // when the held set was read, unix ns: the hot path reads it without mu

	mu      sync.Mutex
	tried   time.Time     // last read started, good or bad
	reading chan struct{} // closed when the read under way ends; nil when none

	beforeLock func() // tests: runs between key's first look-up and mu
}

// key returns the public key kid names, reading the set again as Reload
// describes. A caller with an unknown kid waits for the read (at most
// its 5 s timeout); one with a known kid never waits.
func (v *Verifier) key(kid string) *rsa.PublicKey {
	k := (*v.keys.Load())[kid]
	r := v.reload
	if r == nil {
		return k
	}
	now := r.now()
	if k != nil && now.Sub(time.Unix(0, r.loaded.Load())) < r.maxAge {
		return k
	}
	if r.beforeLock != nil {
		r.beforeLock()
	}
	r.mu.Lock()
	// A read that ended between the look-up above and this lock may have
	// brought kid (readKeys stores under mu): look again, or a caller
	// that came just as a rotation's read finished is refused the new key
	// until minInterval has passed.
	if k = (*v.keys.Load())[kid]; k != nil && now.Sub(time.Unix(0, r.loaded.Load())) < r.maxAge {
		r.mu.Unlock()
		return k
	}
	wait := r.reading
	if wait == nil && now.Sub(r.tried) >= r.minInterval {
		wait = make(chan struct{})
		r.reading, r.tried = wait, now
		go v.readKeys(wait)
	}
	r.mu.Unlock()
	if k != nil || wait == nil {
		return k
	}
	<-wait
	return (*v.keys.Load())[kid]
}

func (v *Verifier) readKeys(done chan struct{}) {
	r := v.reload
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body, err := r.read(ctx)
	var keys map[string]*rsa.PublicKey
	if err == nil {
		keys, err = parseJWKS(body)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer close(done)
	r.reading = nil
	if err != nil {
		r.log.Warn("reading the JWK set failed; keeping the keys held", "err", err)
		return
	}
	v.keys.Store(&keys)
	r.loaded.Store(r.now().UnixNano())
}
