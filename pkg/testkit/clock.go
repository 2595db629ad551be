package testkit

import (
	"sync"
	"time"
)

// Clock is time a test moves, handed to code that takes a clock (a
// `func() time.Time` in its config) where the test would otherwise sleep
// through a TTL, a window or a schedule. A stopped clock stands at what
// the test set until the test moves it; a running one goes on with the
// wall clock, shifted by what the test added (for code that also waits
// on real timers between the moves). It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	at      time.Time     // a stopped clock's time
	skew    time.Duration // a running clock's shift
	running bool
}

// StoppedClock is a clock standing at at.
func StoppedClock(at time.Time) *Clock { return &Clock{at: at.UTC()} }

// RunningClock is the wall clock, until the test moves it on.
func RunningClock() *Clock { return &Clock{running: true} }

// Now is the clock's time, in UTC. A running clock's is cut to the
// millisecond, what the store keeps of a time, so a time read back equals
// the one written.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return time.Now().UTC().Add(c.skew).Truncate(time.Millisecond)
	}
	return c.at
}

// Set stops the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.at, c.running, c.skew = t.UTC(), false, 0
	c.mu.Unlock()
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	if c.running {
		c.skew += d
	} else {
		c.at = c.at.Add(d)
	}
	c.mu.Unlock()
}
