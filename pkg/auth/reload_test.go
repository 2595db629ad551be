package auth

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// jwksSource is a JWK set that a test changes, counting its reads.
type jwksSource struct {
	mu    sync.Mutex
	body  []byte
	fail  bool
	reads atomic.Int32
}

func (s *jwksSource) set(body []byte, fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body, s.fail = body, fail
}

func (s *jwksSource) read(context.Context) ([]byte, error) {
	s.reads.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return nil, errors.New("identity is down")
	}
	return s.body, nil
}

func mustSigner(t *testing.T) *Signer {
	t.Helper()
	s, err := GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tokenOf(t *testing.T, s *Signer) string {
	t.Helper()
	tok, err := s.Issue(Principal{DomainID: "domain-1", UserID: "u", Role: DomainAdmin}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func accepts(v *Verifier, tok string) bool {
	_, err := v.Authenticate(context.Background(), tok)
	return err == nil
}

func TestReloadFollowsRotation(t *testing.T) {
	oldKey, newKey := mustSigner(t), mustSigner(t)
	src := &jwksSource{body: JWKSOf(oldKey)}
	v := verifierFor(t, oldKey)
	v.Reload(src.read, 200*time.Millisecond, time.Hour, nil)
	// The reloader's clock moves only when the test moves it: twenty
	// tokens take longer than minInterval on a stalled machine.
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	v.reload.now = func() time.Time { return time.Unix(0, clock.Load()) }

	if !accepts(v, tokenOf(t, oldKey)) || src.reads.Load() != 0 {
		t.Fatalf("a known key read the set (%d reads)", src.reads.Load())
	}
	// identity starts signing with a new key it does not publish yet: one
	// read, then no more within minInterval however many tokens come.
	newTok := tokenOf(t, newKey)
	for range 20 {
		if accepts(v, newTok) {
			t.Fatal("accepted a key the set does not hold")
		}
	}
	if n := src.reads.Load(); n != 1 {
		t.Fatalf("%d reads for an unknown key within minInterval, want 1", n)
	}
	// Published: after minInterval the next token with it reads and passes.
	src.set(JWKSOf(oldKey, newKey), false)
	clock.Add(int64(250 * time.Millisecond))
	if !accepts(v, newTok) || !accepts(v, tokenOf(t, oldKey)) {
		t.Fatal("after the rotation: the new or the old key is refused")
	}
	if n := src.reads.Load(); n != 2 {
		t.Fatalf("%d reads, want 2", n)
	}
}

func TestReloadConcurrentUnknownKeysReadOnce(t *testing.T) {
	known, unknown := mustSigner(t), mustSigner(t)
	src := &jwksSource{body: JWKSOf(known, unknown)}
	v := verifierFor(t, known)
	v.Reload(src.read, time.Hour, time.Hour, nil)
	tok := tokenOf(t, unknown)
	var wg sync.WaitGroup
	var refused atomic.Int32
	for range 50 {
		wg.Go(func() {
			if !accepts(v, tok) {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	// Callers that came while the read was under way waited for it.
	if n := src.reads.Load(); n != 1 || refused.Load() != 0 {
		t.Fatalf("%d reads and %d refusals, want 1 and 0", n, refused.Load())
	}
}

// A caller that looked the kid up just before another caller's read
// brought it, and takes the reload lock just after that read ended, is
// given the key: the hook orders the steps so that this interleaving
// happens on every run.
func TestReloadReadEndingBeforeLockIsSeen(t *testing.T) {
	known, rotated := mustSigner(t), mustSigner(t)
	src := &jwksSource{body: JWKSOf(known, rotated)}
	v := verifierFor(t, known)
	v.Reload(src.read, time.Hour, time.Hour, nil)
	tok := tokenOf(t, rotated)
	var first atomic.Bool
	otherAccepted := false
	v.reload.beforeLock = func() {
		if first.CompareAndSwap(false, true) {
			// This caller looked the kid up and missed; another caller
			// reads the set in full before this one takes the lock.
			otherAccepted = accepts(v, tok)
		}
	}
	if !accepts(v, tok) {
		t.Fatal("a token whose key a concurrent read just fetched is refused")
	}
	if !otherAccepted || src.reads.Load() != 1 {
		t.Fatalf("the other caller accepted: %v, %d reads, want true and 1", otherAccepted, src.reads.Load())
	}
}

func TestReloadDropsRemovedKeyAfterMaxAge(t *testing.T) {
	leaked, kept := mustSigner(t), mustSigner(t)
	src := &jwksSource{body: JWKSOf(leaked, kept)}
	v := verifierFor(t, leaked, kept)
	v.Reload(src.read, 10*time.Millisecond, 100*time.Millisecond, nil)
	// The reloader's clock moves only when the test moves it, and the test
	// waits for each background read to end rather than for a guess at
	// how long one takes.
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	v.reload.now = func() time.Time { return time.Unix(0, clock.Load()) }
	readEnded := func() {
		v.reload.mu.Lock()
		wait := v.reload.reading
		v.reload.mu.Unlock()
		if wait != nil {
			<-wait
		}
	}
	leakedTok := tokenOf(t, leaked)

	// A failing read keeps the held keys: the set is past maxAge, and each
	// token after minInterval starts one more read in the background.
	src.set(nil, true)
	clock.Add(int64(150 * time.Millisecond))
	for range 4 {
		accepts(v, leakedTok)
		readEnded()
		clock.Add(int64(20 * time.Millisecond))
	}
	if n := src.reads.Load(); n != 4 || !accepts(v, leakedTok) {
		t.Fatalf("after %d failed reads (want 4) the held key is refused", n)
	}
	readEnded()

	// The key is withdrawn from the set: refused once the set is re-read.
	src.set(JWKSOf(kept), false)
	clock.Add(int64(20 * time.Millisecond))
	accepts(v, leakedTok) // the held key still answers while the read runs
	readEnded()
	if accepts(v, leakedTok) {
		t.Fatalf("a key removed from the set still verifies after %d reads", src.reads.Load())
	}
	if !accepts(v, tokenOf(t, kept)) {
		t.Fatal("the kept key is refused")
	}
}
