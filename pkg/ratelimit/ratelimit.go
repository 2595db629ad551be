// Package ratelimit is the token buckets of the public URLs: a bucket per
// key (a webhook, a workspace, a source address), in this process, so
// with N replicas behind a load balancer a key may take up to N times its
// rate. The caller passes the time, so tests move it.
//
// It must not know what its keys are; callers decide what to limit.
package ratelimit

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Buckets is a token bucket per key. A zero rate turns it off: every
// take is allowed.
type Buckets struct {
	rate  float64
	burst float64

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	tokens float64 // below 0: a debt (Charge)
	at     time.Time
}

// New makes buckets of rate tokens per second holding at most burst.
func New(rate float64, burst int) *Buckets {
	if burst < 1 {
		burst = 1
	}
	return &Buckets{rate: rate, burst: float64(burst), buckets: map[string]*bucket{}}
}

// Allow takes a token of key and reports whether there was one, and if
// not, how long until there is.
func (b *Buckets) Allow(key string, now time.Time) (bool, time.Duration) {
	return b.take(key, now, 1, false)
}

// Ready reports, without taking one, whether key has a token, and if
// not, how long until it has: a gate that only failures pay (Charge).
func (b *Buckets) Ready(key string, now time.Time) (bool, time.Duration) {
	return b.take(key, now, 0, false)
}

// Charge takes n tokens of key whether it has them or not: work already
// done is paid for after the fact, and a bucket in debt refuses Allow
// until the debt is paid back at the rate.
func (b *Buckets) Charge(key string, n int, now time.Time) {
	if n > 0 {
		b.take(key, now, float64(n), true)
	}
}

func (b *Buckets) take(key string, now time.Time, n float64, force bool) (bool, time.Duration) {
	if b.rate <= 0 {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.swept) > time.Minute {
		// Full buckets carry no state worth keeping.
		for k, bk := range b.buckets {
			if bk.tokens+now.Sub(bk.at).Seconds()*b.rate >= b.burst {
				delete(b.buckets, k)
			}
		}
		b.swept = now
	}
	bk, ok := b.buckets[key]
	if !ok {
		bk = &bucket{tokens: b.burst, at: now}
		b.buckets[key] = bk
	}
	if now.After(bk.at) {
		bk.tokens = min(b.burst, bk.tokens+now.Sub(bk.at).Seconds()*b.rate)
		bk.at = now
	}
	need := max(n, 1) // Ready asks whether one is there
	if bk.tokens >= need || force {
		bk.tokens -= n
		return true, 0
	}
	return false, time.Duration((need - bk.tokens) / b.rate * float64(time.Second))
}

// Refuse answers 429 with a Retry-After of wait (whole seconds, rounded
// up).
func Refuse(w http.ResponseWriter, wait time.Duration, msg string) error {
	w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	return errs.New(errs.TooManyRequests, "%s", msg)
}

// Guard runs fn, a public URL's handling of a call from source, unless
// source has been refused too often: then it answers 429 before fn runs.
// A refusal of fn (404 or 403: a wrong key, token or id) takes a token,
// so a source guessing keys is slowed to the bucket's rate, while its
// successful calls cost nothing.
func (b *Buckets) Guard(w http.ResponseWriter, source string, now time.Time, fn func() error) error {
	if ok, wait := b.Ready(source, now); !ok {
		return Refuse(w, wait, "Too many refused requests from this address; retry later.")
	}
	err := fn()
	if errs.Is(err, errs.NotFoundCode) || errs.Is(err, errs.PermissionDenied) {
		b.Charge(source, 1, now)
	}
	return err
}
